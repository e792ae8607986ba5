package dataset

// The manifest parser as it was before it streamed (rows first, then the
// Dataset): the reference that FuzzManifestReference holds the streaming
// parser to, error for error.

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/longshore/longshore/storage"
)

// refParseManifest is ParseManifest as it was.
func refParseManifest(r io.Reader, format ManifestFormat) (*Dataset, error) {
	var rows []refRow
	var err error
	switch format {
	case ManifestCSV:
		rows, err = refParseCSV(r)
	case ManifestJSONL:
		rows, err = refParseJSONL(r)
	default:
		return nil, fmt.Errorf("manifest: unknown format %v", format)
	}
	if err != nil {
		return nil, err
	}
	return refBuildDataset(rows)
}

type refRow struct {
	line   int
	key    string
	label  string
	number bool // the label was written as a number (JSON), or parses as one (CSV)

	// A packed sample's location (packed false: none given).
	packed       bool
	object       string
	offset, size int64

	fields []NamedValue
}

// refSetLocation fills row's location from the text of the three fields
// (nil: absent), which must all be present or all absent.
func (row *refRow) refSetLocation(object, offset, size *string) error {
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

func refParseCSV(r io.Reader) ([]refRow, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	var rows []refRow
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
		row := refRow{line: line, key: key, label: label, number: numErr == nil}
		if len(rec) == 5 {
			var loc [3]*string
			for i := range loc {
				if v := strings.TrimSpace(rec[2+i]); v != "" {
					loc[i] = &v
				}
			}
			if err := row.refSetLocation(loc[0], loc[1], loc[2]); err != nil {
				return nil, err
			}
		}
		rows = append(rows, row)
	}
}

func refParseJSONL(r io.Reader) ([]refRow, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxManifestLine)
	var rows []refRow
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
		// Every other member is a field (fields_json.go gives a JSON
		// value's field; that is not what this reference checks).
		var all map[string]json.RawMessage
		json.Unmarshal(text, &all)
		fields, err := jsonObjectFields(all, reservedFieldNames, "", nil)
		if err != nil {
			return nil, badLine(line, "%v", err)
		}
		if obj.Key == nil {
			return nil, badLine(line, `no "key"`)
		}
		row := refRow{line: line, key: *obj.Key, fields: fields}
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
		offset, err := refJSONInteger(line, "offset", obj.Offset)
		if err != nil {
			return nil, err
		}
		size, err := refJSONInteger(line, "size", obj.Size)
		if err != nil {
			return nil, err
		}
		if err := row.refSetLocation(obj.Object, offset, size); err != nil {
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

// refJSONInteger returns the text of an integer field, nil if it is absent or
// null.
func refJSONInteger(line int, name string, raw json.RawMessage) (*string, error) {
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

func refBuildDataset(rows []refRow) (*Dataset, error) {
	if len(rows) == 0 {
		return nil, fmt.Errorf("manifest has no samples: %w", ErrEmptyDataset)
	}
	seen := make(map[string]int, len(rows))
	fb := NewFieldsBuilder()
	for _, r := range rows {
		if r.key == "" {
			return nil, badLine(r.line, "empty key")
		}
		if err := storage.CheckKey(r.key); err != nil {
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
			if err := storage.CheckKey(r.object); err != nil {
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
		for _, f := range r.fields {
			if err := fb.Set(f.Name, f.Value); err != nil {
				return nil, badLine(r.line, "%v", err)
			}
		}
		fb.EndSample()
	}
	ds := &Dataset{Samples: make([]Sample, len(rows)), Fields: fb.Finish()}
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
	integers := !slices.ContainsFunc(rows, func(r refRow) bool { return !r.number })
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
