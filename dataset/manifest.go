package dataset

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrBadManifest: a manifest could not be parsed. The error is a
// *ManifestError saying which line and why.
var ErrBadManifest = errors.New("dataset: malformed manifest")

// ManifestError locates a problem in a manifest. It matches ErrBadManifest
// under errors.Is.
type ManifestError struct {
	Line int // 1-based; 0 for problems of the whole file
	Msg  string
}

func (e *ManifestError) Error() string {
	if e.Line == 0 {
		return "manifest: " + e.Msg
	}
	return fmt.Sprintf("manifest line %d: %s", e.Line, e.Msg)
}

// Is makes errors.Is(err, ErrBadManifest) true.
func (e *ManifestError) Is(target error) bool { return target == ErrBadManifest }

func badLine(line int, format string, args ...any) error {
	return &ManifestError{Line: line, Msg: fmt.Sprintf(format, args...)}
}

// ManifestFormat is how a manifest is encoded.
type ManifestFormat int

const (
	// ManifestCSV: one "key,label" record per line, RFC 4180 quoting,
	// optionally a header line "key,label" (or path/file/filename for the
	// first column, class/target for the second). A packed sample's
	// record has three more fields, "key,label,object,offset,size" (the
	// header then names them too); in a five-field record the last three
	// are all set or all empty.
	ManifestCSV ManifestFormat = iota + 1
	// ManifestJSONL: one JSON object per line, {"key": "...", "label": 3}
	// or {"key": "...", "label": "cat"}; a packed sample adds "object",
	// "offset" and "size" (all three or none). Other fields are ignored,
	// blank lines skipped.
	ManifestJSONL
)

func (f ManifestFormat) String() string {
	switch f {
	case ManifestCSV:
		return "csv"
	case ManifestJSONL:
		return "jsonl"
	}
	return fmt.Sprintf("ManifestFormat(%d)", int(f))
}

// ManifestFormatOf picks the format from the key's extension: .csv, or
// .jsonl / .ndjson.
func ManifestFormatOf(key string) (ManifestFormat, error) {
	switch strings.ToLower(path.Ext(key)) {
	case ".csv":
		return ManifestCSV, nil
	case ".jsonl", ".ndjson":
		return ManifestJSONL, nil
	}
	return 0, fmt.Errorf("manifest %q: unknown format (want a .csv or .jsonl key)", key)
}

// MaxClasses bounds the class count of a manifest with integer labels,
// whose Classes are the decimal names "0" to the largest label.
const MaxClasses = 1 << 20

// maxManifestLine bounds one JSON line.
const maxManifestLine = 1 << 20

// ParseManifest reads a manifest into a Dataset with the samples in file
// order. Keys are taken as written (relative to the manifest's directory;
// Discover prefixes them) and must pass CheckKey; a key may appear once.
//
// Labels are either all integers or all class names. Integers (in [0,
// MaxClasses)) are the labels themselves, and Classes are "0".."max". Names
// are sorted into Classes and labelled by index, as ImageFolder does. In
// CSV, a column that is all integers is integers; in JSON lines, numbers
// are integers and strings names, and mixing them is an error.
//
// A packed sample (see Sample) names its object, which must pass CheckKey
// like a key, and the byte range of its data there: offset >= 0, size >=
// 0 (an empty member is a sample the decoder counts as failed). The three
// come together or not at all; a manifest may mix packed and plain
// samples. Each object is listed once in Dataset.Objects, in order of
// first use, and its samples hold its ID (at most MaxObjects objects).
//
// An empty manifest is an error wrapping ErrEmptyDataset; a malformed one
// a *ManifestError.
func ParseManifest(r io.Reader, format ManifestFormat) (*Dataset, error) {
	return parseManifest(r, format, "")
}

// parseManifest is ParseManifest with prefix put before every key of the
// Dataset (not of errors); keys are checked without it.
func parseManifest(r io.Reader, format ManifestFormat, prefix string) (*Dataset, error) {
	return parseManifestSized(r, format, newManifestBuilder(prefix, keyBlockSize), csvBufferSize)
}

// parseManifestSized parses into b, reading CSV through a buffer of
// csvBuffer bytes: tests make the buffers small to reach their edges.
func parseManifestSized(r io.Reader, format ManifestFormat, b *manifestBuilder, csvBuffer int) (*Dataset, error) {
	var err error
	switch format {
	case ManifestCSV:
		err = parseCSV(r, b, csvBuffer)
	case ManifestJSONL:
		err = parseJSONL(r, b)
	default:
		return nil, fmt.Errorf("manifest: unknown format %v", format)
	}
	if err != nil {
		return nil, err
	}
	return b.finish()
}

// manifestLine is one line of a JSON-lines manifest as WriteManifestJSONL
// writes it; packedManifestLine that of a packed sample.
type manifestLine struct {
	Key   string `json:"key"`
	Label any    `json:"label"` // an integer, or the class name
}

type packedManifestLine struct {
	Key    string `json:"key"`
	Label  any    `json:"label"`
	Object string `json:"object"`
	Offset int64  `json:"offset"`
	Size   int64  `json:"size"`
}

// WriteManifestJSONL writes ds's samples to w as the lines of a
// JSON-lines manifest (ManifestJSONL), in order: {"key","label"}, and for
// a packed sample "object" (its key in ds.Objects), "offset" and "size"
// too, then a member for each of the sample's fields (docs/fields.md:
// what ParseManifest reads back as the same field; a string field holding
// JSON text stays a string). A float that is NaN or infinite, or a
// string that is not valid UTF-8, has no JSON: an error. Labels are integers when ds.Classes are "0", "1", ... in order
// (what ParseManifest makes of integer labels), else the class names.
// Calls with the same classes append to one manifest: a writer of many
// shards writes each shard's samples as it goes, in a Dataset of the
// shard's samples and its one object.
//
// ParseManifest gives back the samples, and the objects they use. It
// gives back classes only if every class has a sample (with integer
// labels, the last class): a manifest lists no class without samples. A
// label outside ds.Classes, an object ID outside ds.Objects, or a key,
// object or class name that is not valid UTF-8, is an error, before
// anything is written.
func WriteManifestJSONL(w io.Writer, ds *Dataset) error {
	classes := ds.Classes
	for i, s := range ds.Samples {
		if s.Label < 0 || int(s.Label) >= len(classes) {
			return fmt.Errorf("dataset: manifest: sample %d (%s): label %d outside the %d classes: give every class of the labels", i, s.Key, s.Label, len(classes))
		}
		if s.Object < 0 || int(s.Object) > len(ds.Objects) {
			return fmt.Errorf("dataset: manifest: sample %d (%s): object ID %d outside the %d objects: add the sample's object to the dataset (Dataset.AddObject)", i, s.Key, s.Object, len(ds.Objects))
		}
		// JSON would replace the invalid bytes, naming another object.
		for _, text := range []string{s.Key, ds.ObjectOf(s), classes[s.Label]} {
			if !utf8.ValidString(text) {
				return fmt.Errorf("dataset: manifest: sample %d: %q is not valid UTF-8, which a JSON manifest cannot carry: rename it", i, text)
			}
		}
	}
	schema := ds.Fields.Schema()
	if ds.Fields != nil && ds.Fields.Len() != len(ds.Samples) {
		return fmt.Errorf("dataset: manifest: fields of %d samples for %d samples", ds.Fields.Len(), len(ds.Samples))
	}
	for c, f := range schema {
		if err := CheckFieldName(f.Name); err != nil {
			return err
		}
		for i := range ds.Samples {
			if err := jsonWritable(ds.Fields.Value(i, c)); err != nil {
				return fmt.Errorf("dataset: manifest: sample %d (%s): field %q: %v", i, ds.Samples[i].Key, f.Name, err)
			}
		}
	}
	integers := integerClasses(classes)
	bw := bufio.NewWriter(w)
	for i, s := range ds.Samples {
		var label any = classes[s.Label]
		if integers {
			label = s.Label
		}
		var line any = manifestLine{Key: s.Key, Label: label}
		if s.Packed() {
			line = packedManifestLine{Key: s.Key, Label: label, Object: ds.ObjectOf(s), Offset: s.Offset, Size: s.Size}
		}
		b, err := json.Marshal(line)
		if err != nil {
			return fmt.Errorf("dataset: manifest: sample %s: %w", s.Key, err)
		}
		if len(schema) > 0 {
			b = b[:len(b)-1] // the closing brace: the fields follow
			for c, f := range schema {
				v := ds.Fields.Value(i, c)
				if !v.Present() {
					continue
				}
				name, _ := json.Marshal(f.Name)
				b = append(append(append(b, ','), name...), ':')
				b = appendJSONValue(b, v)
			}
			b = append(b, '}')
		}
		bw.Write(b)
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// integerClasses reports whether the classes are "0", "1", ...: the
// classes ParseManifest makes of integer labels.
func integerClasses(classes []string) bool {
	for i, c := range classes {
		if c != strconv.Itoa(i) {
			return false
		}
	}
	return true
}
