package dataset

import (
	"context"
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// Columns are the fields of a batch of samples by column, as the feed
// sends them: read with CatalogColumns, one call a batch, into buffers
// that the next batch reuses (a session's writer keeps one Columns). The
// values of bytes, strings and list<string> point into the catalog's
// fields (read-only; they stay valid while the caller holds them, the
// collector keeping them, and never change: a Fields is immutable);
// lists are slices of flat per-column buffers that the next read
// overwrites.
type Columns struct {
	Rows int
	Cols []ColumnValues

	at []int // a Fields' column k is Cols[at[k]] (scratch)
}

// ColumnValues is one field's values for a batch's rows: Present says
// which rows have the field (an absent row holds a zero value, empty or
// nil); the member of Type holds a value a row: Ints (int), Floats
// (float), Bytes (string and bytes), IntLists, FloatLists, StringLists.
type ColumnValues struct {
	Type        FieldType
	Present     []bool
	Ints        []int64
	Floats      []float64
	Bytes       [][]byte
	IntLists    [][]int64
	FloatLists  [][]float64
	StringLists [][]string

	// flat backing of the lists, reused: a row's list is a slice of
	// them (of an older backing array, if one grew while the batch was
	// read: still holding what it was given)
	ints   []int64
	floats []float64
	strs   []string
}

// ColumnCatalog is a FieldCatalog that reads a batch's fields at once
// (both of this package's catalogs are): CatalogColumns uses it.
type ColumnCatalog interface {
	FieldCatalog
	// ReadColumns reads the fields of the samples at indices into dst,
	// a column per field of Schema, rows in the order of indices.
	ReadColumns(ctx context.Context, indices []int64, dst *Columns) error
}

var (
	_ ColumnCatalog = (*datasetCatalog)(nil)
	_ ColumnCatalog = (*IndexedManifest)(nil)
)

// CatalogColumns reads the fields of the samples at indices from c into
// dst, by c's schema (dst.Cols empty when c has no fields): at once
// where c is a ColumnCatalog, else a row at a time.
func CatalogColumns(ctx context.Context, c Catalog, indices []int64, dst *Columns) error {
	fc, ok := c.(FieldCatalog)
	if !ok || len(fc.Schema()) == 0 {
		dst.reset(nil, len(indices))
		return nil
	}
	if cc, ok := c.(ColumnCatalog); ok {
		return cc.ReadColumns(ctx, indices, dst)
	}
	schema := fc.Schema()
	dst.reset(schema, len(indices))
	for r, i := range indices {
		row, err := fc.Fields(ctx, i)
		if err != nil {
			return err
		}
		if len(row) != len(schema) {
			return fmt.Errorf("dataset: sample %d has %d fields, the schema %d", i, len(row), len(schema))
		}
		for k, v := range row {
			if !v.Present() {
				continue
			}
			if v.Type != schema[k].Type {
				return fmt.Errorf("dataset: sample %d: field %q is %s, the schema says %s", i, schema[k].Name, v.Type, schema[k].Type)
			}
			dst.Cols[k].putValue(r, v)
		}
	}
	return nil
}

// reset makes dst rows × schema's columns, every row absent, reusing its
// buffers.
func (dst *Columns) reset(schema Schema, rows int) {
	dst.Rows = rows
	if cap(dst.Cols) < len(schema) {
		dst.Cols = append(dst.Cols[:cap(dst.Cols)], make([]ColumnValues, len(schema)-cap(dst.Cols))...)
	}
	dst.Cols = dst.Cols[:len(schema)]
	for k, f := range schema {
		c := &dst.Cols[k]
		c.Type = f.Type
		c.Present = resize(c.Present, rows)
		clear(c.Present)
		c.Ints, c.Floats, c.Bytes, c.IntLists, c.FloatLists, c.StringLists = c.Ints[:0], c.Floats[:0], c.Bytes[:0], c.IntLists[:0], c.FloatLists[:0], c.StringLists[:0]
		c.ints, c.floats, c.strs = c.ints[:0], c.floats[:0], c.strs[:0]
		switch f.Type {
		case FieldInt:
			c.Ints = resize(c.Ints, rows)
			clear(c.Ints)
		case FieldFloat:
			c.Floats = resize(c.Floats, rows)
			clear(c.Floats)
		case FieldString, FieldBytes:
			c.Bytes = resize(c.Bytes, rows)
			clear(c.Bytes)
		case FieldInts:
			c.IntLists = resize(c.IntLists, rows)
			clear(c.IntLists)
		case FieldFloats:
			c.FloatLists = resize(c.FloatLists, rows)
			clear(c.FloatLists)
		case FieldStrings:
			c.StringLists = resize(c.StringLists, rows)
			clear(c.StringLists)
		}
	}
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// putValue sets row r to v (of c's type; present).
func (c *ColumnValues) putValue(r int, v Value) {
	c.Present[r] = true
	switch v.Type {
	case FieldInt:
		c.Ints[r] = v.Int
	case FieldFloat:
		c.Floats[r] = v.Float
	case FieldString:
		c.Bytes[r] = unsafe.Slice(unsafe.StringData(v.Str), len(v.Str)) // read only
	case FieldBytes:
		c.Bytes[r] = v.Bytes
	case FieldInts:
		c.IntLists[r] = v.Ints
	case FieldFloats:
		c.FloatLists[r] = v.Floats
	case FieldStrings:
		c.StringLists[r] = v.Strings
	}
}

// ReadColumns implements ColumnCatalog.
func (c *datasetCatalog) ReadColumns(_ context.Context, indices []int64, dst *Columns) error {
	f := c.ds.Fields
	dst.reset(f.Schema(), len(indices))
	if f == nil {
		return nil
	}
	at := dst.identity(len(f.schema))
	for r, i := range indices {
		if i < 0 || i >= int64(len(c.ds.Samples)) {
			return fmt.Errorf("dataset: catalog: sample %d outside [0, %d)", i, len(c.ds.Samples))
		}
		if err := f.putRow(int(i), at, dst, r); err != nil {
			return err
		}
	}
	return nil
}

// ReadColumns implements ColumnCatalog: each sample's fields from its
// piece (read as Sample reads it), laid out by the index's schema.
func (m *IndexedManifest) ReadColumns(ctx context.Context, indices []int64, dst *Columns) error {
	dst.reset(m.x.Schema, len(indices))
	if len(m.x.Schema) == 0 {
		return nil
	}
	var last *Fields // the piece whose columns dst.at maps
	for r, i := range indices {
		err := m.withPiece(ctx, i, func(p *compactPiece, j int) error {
			f := p.fields
			if f == nil {
				return nil // every field absent
			}
			if f != last {
				if err := dst.mapColumns(f.schema, m.x.Schema); err != nil {
					return err
				}
				last = f
			}
			return f.putRow(j, dst.at, dst, r)
		})
		if err != nil {
			if errors.Is(err, errColumnType) {
				return fmt.Errorf("manifest %s: sample %d: %w: %w", m.x.Manifest, i, ErrStaleIndex, err)
			}
			return err
		}
	}
	return nil
}

// errColumnType: a piece's field that the index's schema does not hold.
var errColumnType = errors.New("a field the schema does not hold")

// identity is dst's column map of a Fields with dst's own schema.
func (dst *Columns) identity(n int) []int {
	dst.at = resize(dst.at, n)
	for k := range dst.at {
		dst.at[k] = k
	}
	return dst.at
}

// mapColumns sets dst.at to where each field of from (a piece's schema)
// is in to (the catalog's), checking that to's type can hold it.
func (dst *Columns) mapColumns(from, to Schema) error {
	dst.at = resize(dst.at, len(from))
	for k, fld := range from {
		at := to.Index(fld.Name)
		if at < 0 {
			return fmt.Errorf("%w: field %q (%s) is not in the schema %s", errColumnType, fld.Name, fld.Type, to)
		}
		if t := to[at].Type; t != fld.Type && widen(fld.Type, t) != t && !(fld.Type.List() && t.List()) {
			return fmt.Errorf("%w: field %q is %s, the schema says %s", errColumnType, fld.Name, fld.Type, t)
		}
		dst.at[k] = at
	}
	return nil
}

// putRow sets row r of dst to sample i's fields, f's column k going to
// dst's column at[k] (whose type holds it: the same, or an int where dst
// has a float, a list of ints where it has floats, any empty list where
// it has a list). Bytes and strings are views of f, list<string>
// elements too; other lists are copied into dst's flat buffers.
func (f *Fields) putRow(i int, at []int, dst *Columns, r int) error {
	for k := range f.cols {
		col := &f.cols[k]
		if col.present != nil && col.present[i/64]&(1<<(i%64)) == 0 {
			continue
		}
		c := &dst.Cols[at[k]]
		c.Present[r] = true
		switch col.typ {
		case FieldInt:
			if c.Type == FieldFloat {
				c.Floats[r] = float64(int64(col.nums[i]))
			} else {
				c.Ints[r] = int64(col.nums[i])
			}
			continue
		case FieldFloat:
			c.Floats[r] = math.Float64frombits(col.nums[i])
			continue
		}
		lo, hi := col.span(i)
		switch col.typ {
		case FieldString, FieldBytes:
			c.Bytes[r] = col.data[lo:hi:hi]
			continue
		}
		if c.Type != col.typ && hi > lo && !(col.typ == FieldInts && c.Type == FieldFloats) {
			return fmt.Errorf("%w: field %s holds %s, the schema says %s", errColumnType, f.schema[k].Name, col.typ, c.Type)
		}
		switch c.Type {
		case FieldInts:
			start := len(c.ints)
			for e := lo; e < hi; e++ {
				c.ints = append(c.ints, int64(col.nums[e]))
			}
			c.IntLists[r] = c.ints[start:len(c.ints):len(c.ints)]
		case FieldFloats:
			start := len(c.floats)
			for e := lo; e < hi; e++ {
				if col.typ == FieldInts {
					c.floats = append(c.floats, float64(int64(col.nums[e])))
				} else {
					c.floats = append(c.floats, math.Float64frombits(col.nums[e]))
				}
			}
			c.FloatLists[r] = c.floats[start:len(c.floats):len(c.floats)]
		case FieldStrings:
			start := len(c.strs)
			for e := lo; e < hi; e++ {
				s := int64(0)
				if e > 0 {
					s = int64(col.nums[e-1])
				}
				c.strs = append(c.strs, stringView(col.data[s:col.nums[e]]))
			}
			c.StringLists[r] = c.strs[start:len(c.strs):len(c.strs)]
		}
	}
	return nil
}

// stringView is b as a string without a copy: b is a Fields' data, which never
// changes.
func stringView(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
