package delivery

import (
	"context"
	"fmt"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/feed"
)

// fieldSpecs is the welcome's schema of s.
func fieldSpecs(s dataset.Schema) []feed.FieldSpec {
	out := make([]feed.FieldSpec, len(s))
	for i, f := range s {
		out[i] = feed.FieldSpec{Name: f.Name, Type: f.Type.String()}
	}
	return out
}

// batchFields looks up the fields of the samples at indices (a batch's
// rows, filled rows included: a filled row carries the index of the row
// it copies) in cat, by schema, as the columns of a fields frame. Bytes
// and strings are not copied: the frame is encoded from them.
func batchFields(ctx context.Context, cat dataset.Catalog, schema dataset.Schema, id uint64, indices []int64) (*feed.BatchFields, error) {
	n := len(indices)
	f := &feed.BatchFields{ID: id, Rows: n, Columns: make([]feed.FieldColumn, len(schema))}
	for c, fld := range schema {
		col := &f.Columns[c]
		col.Name, col.Type, col.Present = fld.Name, fld.Type.String(), make([]bool, n)
		switch fld.Type {
		case dataset.FieldInt:
			col.Ints = make([]int64, n)
		case dataset.FieldFloat:
			col.Floats = make([]float64, n)
		case dataset.FieldString, dataset.FieldBytes:
			col.Bytes = make([][]byte, n)
		case dataset.FieldInts:
			col.IntLists = make([][]int64, n)
		case dataset.FieldFloats:
			col.FloatLists = make([][]float64, n)
		case dataset.FieldStrings:
			col.StringLists = make([][]string, n)
		}
	}
	for r, i := range indices {
		row, err := dataset.CatalogFields(ctx, cat, i)
		if err != nil {
			return nil, fmt.Errorf("feed: fields of sample %d: %w", i, err)
		}
		if len(row) != len(schema) {
			return nil, fmt.Errorf("feed: sample %d has %d fields, the schema %d", i, len(row), len(schema))
		}
		for c, v := range row {
			if !v.Present() {
				continue
			}
			col := &f.Columns[c]
			if v.Type != schema[c].Type {
				return nil, fmt.Errorf("feed: sample %d: field %q is %s, the schema says %s", i, schema[c].Name, v.Type, schema[c].Type)
			}
			col.Present[r] = true
			switch v.Type {
			case dataset.FieldInt:
				col.Ints[r] = v.Int
			case dataset.FieldFloat:
				col.Floats[r] = v.Float
			case dataset.FieldString:
				col.Bytes[r] = []byte(v.Str)
			case dataset.FieldBytes:
				col.Bytes[r] = v.Bytes
			case dataset.FieldInts:
				col.IntLists[r] = v.Ints
			case dataset.FieldFloats:
				col.FloatLists[r] = v.Floats
			case dataset.FieldStrings:
				col.StringLists[r] = v.Strings
			}
		}
	}
	return f, nil
}
