package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"unicode/utf8"
)

// parseJSONL reads a JSON-lines manifest into b. A line of the plain kind
// manifest writers write is read where it lies in the scanner's buffer
// (jsonFields.scanPlain); any other goes through encoding/json, which
// defines the format and its errors.
func parseJSONL(r io.Reader, b *manifestBuilder) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxManifestLine)
	var first struct { // the first row
		seen   bool
		line   int
		label  string
		number bool
	}
	var f jsonFields
	var row manifestRow
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if line == 1 && !b.continued {
			text = bytes.TrimPrefix(text, []byte("\ufeff"))
		}
		if len(text) == 0 {
			continue
		}
		if !f.scanPlain(text) {
			if err := f.decode(line, text); err != nil {
				return err
			}
		}
		if !f.hasKey {
			return badLine(line, `no "key"`)
		}
		row = manifestRow{line: line, key: f.key, fields: f.fields}
		switch lab := bytes.TrimSpace(f.label); {
		case len(lab) == 0 || string(lab) == "null":
			return badLine(line, `no "label"`)
		case lab[0] == '"':
			s, err := jsonString(lab)
			if err != nil {
				return badLine(line, "label: %v", err)
			}
			row.label = s
		case lab[0] == '-' || (lab[0] >= '0' && lab[0] <= '9'):
			if _, ok := parseDecimal(lab); !ok {
				return badLine(line, "label %s is not an integer", lab)
			}
			row.label, row.number = lab, true
		default:
			return badLine(line, "label %s: want an integer or a class name string", lab)
		}
		offset, hasOffset, err := jsonInteger(line, "offset", f.offset)
		if err != nil {
			return err
		}
		size, hasSize, err := jsonInteger(line, "size", f.size)
		if err != nil {
			return err
		}
		if err := row.setLocation([3]bool{f.hasObject, hasOffset, hasSize}, f.object, offset, size); err != nil {
			return err
		}
		if first.seen && first.number != row.number {
			return badLine(line, "label %s mixes integer and class-name labels (line %d has %q)", row.label, first.line, first.label)
		}
		if !first.seen {
			first.seen, first.line, first.label, first.number = true, line, string(row.label), row.number
		}
		b.add(&row)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return badLine(b.rows+1, "line longer than %d bytes", maxManifestLine)
		}
		return err
	}
	return nil
}

// jsonFields are the fields of a JSON-lines manifest's line that
// ParseManifest reads.
type jsonFields struct {
	hasKey, hasObject   bool
	key, object         []byte // decoded
	label, offset, size []byte // JSON text; nil: absent
	fields              []NamedValue
}

// decode fills f from text with encoding/json.
func (f *jsonFields) decode(line int, text []byte) error {
	var obj struct {
		Key    *string         `json:"key"`
		Label  json.RawMessage `json:"label"`
		Object *string         `json:"object"`
		Offset json.RawMessage `json:"offset"`
		Size   json.RawMessage `json:"size"`
	}
	if err := json.Unmarshal(text, &obj); err != nil {
		return badLine(line, "not a JSON object: %v", err)
	}
	*f = jsonFields{label: obj.Label, offset: obj.Offset, size: obj.Size}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(text, &all); err != nil {
		return badLine(line, "not a JSON object: %v", err)
	}
	if len(all) > 0 {
		var err error
		if f.fields, err = jsonObjectFields(all, reservedFieldNames, "", nil); err != nil {
			return badLine(line, "%v", err)
		}
	}
	if obj.Key != nil {
		f.hasKey, f.key = true, []byte(*obj.Key)
	}
	if obj.Object != nil {
		f.hasObject, f.object = true, []byte(*obj.Object)
	}
	return nil
}

// scanPlain fills f from text and reports true if text is a plain JSON
// object: members named exactly "key", "object" (strings), "label" (a
// string or an integer), "offset" and "size" (integers), each at most
// once; strings of valid UTF-8 without escapes or control characters,
// integers without fraction or exponent. On such a line encoding/json
// finds what scanPlain does. It reports false, leaving f unspecified,
// for any other line, valid or not, which decode then reads.
func (f *jsonFields) scanPlain(text []byte) bool {
	*f = jsonFields{}
	i := 0
	space := func() {
		for i < len(text) && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n') {
			i++
		}
	}
	if len(text) == 0 || text[0] != '{' {
		return false
	}
	i++
	space()
	if i < len(text) && text[i] == '}' {
		return i+1 == len(text)
	}
	var seen [5]bool
	for {
		// A name.
		if i >= len(text) || text[i] != '"' {
			return false
		}
		j := i + 1
		for j < len(text) && text[j] >= 'a' && text[j] <= 'z' {
			j++
		}
		if j >= len(text) || text[j] != '"' {
			return false
		}
		field := -1
		switch string(text[i+1 : j]) {
		case "key":
			field = 0
		case "label":
			field = 1
		case "object":
			field = 2
		case "offset":
			field = 3
		case "size":
			field = 4
		}
		if field < 0 || seen[field] {
			return false
		}
		seen[field] = true
		i = j + 1
		space()
		if i >= len(text) || text[i] != ':' {
			return false
		}
		i++
		space()
		if i >= len(text) {
			return false
		}

		// Its value.
		start := i
		switch c := text[i]; {
		case c == '"':
			j := i + 1
			for j < len(text) && text[j] != '"' {
				if text[j] < ' ' || text[j] == '\\' {
					return false
				}
				j++
			}
			if j >= len(text) || !utf8.Valid(text[i+1:j]) {
				return false
			}
			i = j + 1
			switch field {
			case 0:
				f.hasKey, f.key = true, text[start+1:j]
			case 1:
				f.label = text[start:i]
			case 2:
				f.hasObject, f.object = true, text[start+1:j]
			default:
				return false
			}
		case c == '-' || (c >= '0' && c <= '9'):
			if c == '-' {
				i++
			}
			switch {
			case i < len(text) && text[i] == '0':
				i++
			case i < len(text) && text[i] >= '1' && text[i] <= '9':
				for i < len(text) && text[i] >= '0' && text[i] <= '9' {
					i++
				}
			default:
				return false
			}
			// A fraction, exponent or stray digit is not a delimiter below.
			switch field {
			case 1:
				f.label = text[start:i]
			case 3:
				f.offset = text[start:i]
			case 4:
				f.size = text[start:i]
			default:
				return false
			}
		default:
			return false
		}

		space()
		switch {
		case i >= len(text):
			return false
		case text[i] == ',':
			i++
			space()
		case text[i] == '}':
			return i+1 == len(text)
		default:
			return false
		}
	}
}

// jsonString decodes the JSON string s, without copying it when it holds
// nothing to decode.
func jsonString(s []byte) ([]byte, error) {
	if len(s) >= 2 && s[len(s)-1] == '"' && utf8.Valid(s) {
		inner := s[1 : len(s)-1]
		if !slices.ContainsFunc(inner, func(c byte) bool { return c < ' ' || c == '\\' || c == '"' }) {
			return inner, nil
		}
	}
	var v string
	if err := json.Unmarshal(s, &v); err != nil {
		return nil, err
	}
	return []byte(v), nil
}

// jsonInteger returns the text of an integer field and whether it is
// there (absent and null are not).
func jsonInteger(line int, name string, raw []byte) ([]byte, bool, error) {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 || string(v) == "null" {
		return nil, false, nil
	}
	if _, ok := parseDecimal(v); !ok {
		return nil, false, badLine(line, "%s %s is not an integer", name, v)
	}
	return v, true, nil
}
