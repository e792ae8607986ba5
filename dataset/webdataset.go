package dataset

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// A WebDataset sample is the members of a tar that share a basename
// ("n01/x.jpg", "n01/x.cls", "n01/x.txt", "n01/x.json"): one media
// member is the sample's data, ".cls" its integer label, and every other
// member a field (docs/fields.md, docs/packed-datasets.md):
//
//	.txt          string field "txt" (UTF-8)
//	.json         an object: each member a field "json.<name>", typed as
//	              a manifest's JSON members are; any other JSON value:
//	              field "json" of that value's type
//	other (.npy, .seg.png, ...)
//	              bytes field named by the extension ("npy", "seg.png")
//
// A member's extension is what follows the first dot of its base name,
// in lower case. Members over MaxMemberField bytes are refused: fields
// travel in the manifest (one line of at most 1 MiB a sample) and with
// every batch.

// MaxMemberField bounds a WebDataset member read as a field.
const MaxMemberField = 256 << 10

// WebDatasetLabelExt is the extension of the member that holds a
// sample's integer label.
const WebDatasetLabelExt = "cls"

// WebDatasetMemberFields returns the fields of a WebDataset sample's
// member whose extension is ext (lower case, no leading dot) and whose
// contents are data. Not for the media member nor ".cls".
func WebDatasetMemberFields(ext string, data []byte) ([]NamedValue, error) {
	if len(data) > MaxMemberField {
		return nil, fmt.Errorf("a .%s member of %d bytes: more than the %d a field may hold", ext, len(data), MaxMemberField)
	}
	switch ext {
	case "txt":
		if !utf8.Valid(data) {
			return nil, fmt.Errorf("a .txt member that is not UTF-8 text")
		}
		return []NamedValue{{Name: "txt", Value: StringValue(string(data))}}, nil
	case "json":
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(data, &obj); err == nil && obj != nil {
			return jsonObjectFields(obj, nil, "json.", nil)
		}
		if !json.Valid(data) {
			return nil, fmt.Errorf("a .json member that is not JSON")
		}
		v, err := jsonFieldValue(data)
		if err != nil || !v.Present() {
			return nil, err
		}
		return []NamedValue{{Name: "json", Value: v}}, nil
	}
	if err := CheckFieldName(ext); err != nil || strings.HasPrefix(ext, "json.") {
		return nil, fmt.Errorf("a .%s member: not a field's name", ext)
	}
	return []NamedValue{{Name: ext, Value: BytesValue(data)}}, nil
}
