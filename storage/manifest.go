package storage

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrBadManifest: a manifest could not be parsed. The error is a
// *ManifestError saying which line and why.
var ErrBadManifest = errors.New("storage: malformed manifest")

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
	var rows []manifestRow
	var err error
	switch format {
	case ManifestCSV:
		rows, err = parseCSV(r)
	case ManifestJSONL:
		rows, err = parseJSONL(r)
	default:
		return nil, fmt.Errorf("manifest: unknown format %v", format)
	}
	if err != nil {
		return nil, err
	}
	return buildDataset(rows)
}

type manifestRow struct {
	line   int
	key    string
	label  string
	number bool // the label was written as a number (JSON), or parses as one (CSV)

	// A packed sample's location (packed false: none given).
	packed       bool
	object       string
	offset, size int64
}

// locationFields are the names of a packed sample's extra fields, in their
// CSV column order.
var locationFields = [3]string{"object", "offset", "size"}

func isHeader(rec []string) bool {
	k := strings.ToLower(strings.TrimSpace(rec[0]))
	l := strings.ToLower(strings.TrimSpace(rec[1]))
	if len(rec) == 5 {
		for i, name := range locationFields {
			if strings.ToLower(strings.TrimSpace(rec[2+i])) != name {
				return false
			}
		}
	}
	return (k == "key" || k == "path" || k == "file" || k == "filename") &&
		(l == "label" || l == "class" || l == "target")
}

// setLocation fills row's location from the text of the three fields
// (nil: absent), which must all be present or all absent.
func (row *manifestRow) setLocation(object, offset, size *string) error {
	fields := []*string{object, offset, size}
	var have, missing []string
	for i, f := range fields {
		if f == nil {
			missing = append(missing, locationFields[i])
		} else {
			have = append(have, locationFields[i])
		}
	}
	if len(have) == 0 {
		return nil
	}
	if len(missing) > 0 {
		return badLine(row.line, "%s without %s: a packed sample needs object, offset and size together",
			strings.Join(have, " and "), strings.Join(missing, " and "))
	}
	off, err := strconv.ParseInt(*offset, 10, 64)
	if err != nil {
		return badLine(row.line, "offset %q is not an integer", *offset)
	}
	n, err := strconv.ParseInt(*size, 10, 64)
	if err != nil {
		return badLine(row.line, "size %q is not an integer", *size)
	}
	row.packed, row.object, row.offset, row.size = true, *object, off, n
	return nil
}

func parseCSV(r io.Reader) ([]manifestRow, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	var rows []manifestRow
	for first := true; ; first = false {
		rec, err := cr.Read()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, badLine(pe.Line, "%v", pe.Err)
			}
			return nil, err
		}
		line, _ := cr.FieldPos(0)
		if first {
			rec[0] = strings.TrimPrefix(rec[0], "\ufeff") // a UTF-8 byte order mark
		}
		if len(rec) != 2 && len(rec) != 5 {
			return nil, badLine(line, "want 2 fields (key,label) or 5 (key,label,object,offset,size), got %d", len(rec))
		}
		if first && isHeader(rec) {
			continue
		}
		key, label := strings.TrimSpace(rec[0]), strings.TrimSpace(rec[1])
		_, numErr := strconv.ParseInt(label, 10, 64)
		row := manifestRow{line: line, key: key, label: label, number: numErr == nil}
		if len(rec) == 5 {
			var loc [3]*string
			for i := range loc {
				if v := strings.TrimSpace(rec[2+i]); v != "" {
					loc[i] = &v
				}
			}
			if err := row.setLocation(loc[0], loc[1], loc[2]); err != nil {
				return nil, err
			}
		}
		rows = append(rows, row)
	}
}

func parseJSONL(r io.Reader) ([]manifestRow, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxManifestLine)
	var rows []manifestRow
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if line == 1 {
			text = bytes.TrimPrefix(text, []byte("\ufeff"))
		}
		if len(text) == 0 {
			continue
		}
		var obj struct {
			Key    *string         `json:"key"`
			Label  json.RawMessage `json:"label"`
			Object *string         `json:"object"`
			Offset json.RawMessage `json:"offset"`
			Size   json.RawMessage `json:"size"`
		}
		if err := json.Unmarshal(text, &obj); err != nil {
			return nil, badLine(line, "not a JSON object: %v", err)
		}
		if obj.Key == nil {
			return nil, badLine(line, `no "key"`)
		}
		row := manifestRow{line: line, key: *obj.Key}
		switch lab := bytes.TrimSpace(obj.Label); {
		case len(lab) == 0 || string(lab) == "null":
			return nil, badLine(line, `no "label"`)
		case lab[0] == '"':
			if err := json.Unmarshal(lab, &row.label); err != nil {
				return nil, badLine(line, "label: %v", err)
			}
		case lab[0] == '-' || (lab[0] >= '0' && lab[0] <= '9'):
			if _, err := strconv.ParseInt(string(lab), 10, 64); err != nil {
				return nil, badLine(line, "label %s is not an integer", lab)
			}
			row.label, row.number = string(lab), true
		default:
			return nil, badLine(line, "label %s: want an integer or a class name string", lab)
		}
		offset, err := jsonInteger(line, "offset", obj.Offset)
		if err != nil {
			return nil, err
		}
		size, err := jsonInteger(line, "size", obj.Size)
		if err != nil {
			return nil, err
		}
		if err := row.setLocation(obj.Object, offset, size); err != nil {
			return nil, err
		}
		if len(rows) > 0 && rows[0].number != row.number {
			return nil, badLine(line, "label %s mixes integer and class-name labels (line %d has %q)", row.label, rows[0].line, rows[0].label)
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, badLine(len(rows)+1, "line longer than %d bytes", maxManifestLine)
		}
		return nil, err
	}
	return rows, nil
}

// jsonInteger returns the text of an integer field, nil if it is absent or
// null.
func jsonInteger(line int, name string, raw json.RawMessage) (*string, error) {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 || string(v) == "null" {
		return nil, nil
	}
	if _, err := strconv.ParseInt(string(v), 10, 64); err != nil {
		return nil, badLine(line, "%s %s is not an integer", name, v)
	}
	s := string(v)
	return &s, nil
}

func buildDataset(rows []manifestRow) (*Dataset, error) {
	if len(rows) == 0 {
		return nil, fmt.Errorf("manifest has no samples: %w", ErrEmptyDataset)
	}
	seen := make(map[string]int, len(rows))
	for _, r := range rows {
		if r.key == "" {
			return nil, badLine(r.line, "empty key")
		}
		if err := CheckKey(r.key); err != nil {
			return nil, badLine(r.line, "%v", err)
		}
		if prev, dup := seen[r.key]; dup {
			return nil, badLine(r.line, "key %q already on line %d", r.key, prev)
		}
		seen[r.key] = r.line
		if r.label == "" {
			return nil, badLine(r.line, "empty label")
		}
		if !utf8.ValidString(r.label) {
			return nil, badLine(r.line, "label %q is not valid UTF-8", r.label)
		}
		if r.packed {
			if err := CheckKey(r.object); err != nil {
				return nil, badLine(r.line, "object: %v", err)
			}
			if r.offset < 0 {
				return nil, badLine(r.line, "offset %d is negative", r.offset)
			}
			if r.size < 0 {
				// 0 is an empty member: a bad sample to the decoder, counted
				// like any other, not a bad manifest.
				return nil, badLine(r.line, "size %d is negative", r.size)
			}
			if r.offset > math.MaxInt64-r.size {
				return nil, badLine(r.line, "offset %d + size %d overflows", r.offset, r.size)
			}
		}
	}
	ds := &Dataset{Samples: make([]Sample, len(rows))}
	// Each object once, in order of first use; its samples hold its ID.
	objects := map[string]ObjectID{}
	for i, r := range rows {
		if !r.packed {
			continue
		}
		id, ok := objects[r.object]
		if !ok {
			if len(ds.Objects) >= MaxObjects {
				return nil, badLine(r.line, "object %q: more than %d objects in one manifest: split the dataset", r.object, MaxObjects)
			}
			id = ds.AddObject(r.object)
			objects[r.object] = id
		}
		ds.Samples[i] = Sample{Key: r.key, Object: id, Offset: r.offset, Size: r.size}
	}
	integers := !slices.ContainsFunc(rows, func(r manifestRow) bool { return !r.number })
	if integers {
		maxLabel := int64(-1)
		for i, r := range rows {
			v, _ := strconv.ParseInt(r.label, 10, 64)
			if v < 0 || v >= MaxClasses || v > math.MaxInt32 {
				return nil, badLine(r.line, "label %d outside [0, %d)", v, MaxClasses)
			}
			ds.Samples[i].Key, ds.Samples[i].Label = r.key, int32(v)
			maxLabel = max(maxLabel, v)
		}
		ds.Classes = make([]string, maxLabel+1)
		for i := range ds.Classes {
			ds.Classes[i] = strconv.Itoa(i)
		}
		return ds, nil
	}
	index := make(map[string]int32)
	for _, r := range rows {
		index[r.label] = 0
	}
	ds.Classes = make([]string, 0, len(index))
	for name := range index {
		ds.Classes = append(ds.Classes, name)
	}
	slices.Sort(ds.Classes)
	for i, name := range ds.Classes {
		index[name] = int32(i)
	}
	for i, r := range rows {
		ds.Samples[i].Key, ds.Samples[i].Label = r.key, index[r.label]
	}
	return ds, nil
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
// too. Labels are integers when ds.Classes are "0", "1", ... in order
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
			return fmt.Errorf("storage: manifest: sample %d (%s): label %d outside the %d classes: give every class of the labels", i, s.Key, s.Label, len(classes))
		}
		if s.Object < 0 || int(s.Object) > len(ds.Objects) {
			return fmt.Errorf("storage: manifest: sample %d (%s): object ID %d outside the %d objects: add the sample's object to the dataset (Dataset.AddObject)", i, s.Key, s.Object, len(ds.Objects))
		}
		// JSON would replace the invalid bytes, naming another object.
		for _, text := range []string{s.Key, ds.ObjectOf(s), classes[s.Label]} {
			if !utf8.ValidString(text) {
				return fmt.Errorf("storage: manifest: sample %d: %q is not valid UTF-8, which a JSON manifest cannot carry: rename it", i, text)
			}
		}
	}
	integers := integerClasses(classes)
	bw := bufio.NewWriter(w)
	for _, s := range ds.Samples {
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
			return fmt.Errorf("storage: manifest: sample %s: %w", s.Key, err)
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
