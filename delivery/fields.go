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

// batchFields is a session's fields of a batch, read and encoded on its
// writer goroutine: one column read a batch from the catalog
// (dataset.CatalogColumns), into buffers the next batch reuses, so the
// fields cost the writer a few allocations a batch, not a few a row
// (BenchmarkBatchFields).
type batchFields struct {
	cols dataset.Columns
	bf   feed.BatchFields
}

// read looks up the fields of the samples at indices (a batch's rows,
// filled rows included: a filled row carries the index of the row it
// copies) in cat, by schema, as the columns of a fields frame. Bytes
// and strings are not copied: the frame is encoded from them. The
// result is valid until the next read.
func (w *batchFields) read(ctx context.Context, cat dataset.Catalog, schema dataset.Schema, id uint64, indices []int64) (*feed.BatchFields, error) {
	if err := dataset.CatalogColumns(ctx, cat, indices, &w.cols); err != nil {
		return nil, fmt.Errorf("feed: fields of batch %d: %w", id, err)
	}
	if len(w.cols.Cols) != len(schema) {
		return nil, fmt.Errorf("feed: the catalog read %d fields, the schema has %d", len(w.cols.Cols), len(schema))
	}
	f := &w.bf
	f.ID, f.Rows = id, len(indices)
	if cap(f.Columns) < len(schema) {
		f.Columns = make([]feed.FieldColumn, len(schema))
	}
	f.Columns = f.Columns[:len(schema)]
	for k, fld := range schema {
		c := &w.cols.Cols[k]
		if c.Type != fld.Type {
			return nil, fmt.Errorf("feed: field %q read as %s, the schema says %s", fld.Name, c.Type, fld.Type)
		}
		f.Columns[k] = feed.FieldColumn{Name: fld.Name, Type: fld.Type.String(), Present: c.Present,
			Ints: c.Ints, Floats: c.Floats, Bytes: c.Bytes, IntLists: c.IntLists, FloatLists: c.FloatLists, StringLists: c.StringLists}
	}
	return f, nil
}
