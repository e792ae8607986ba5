package dataset

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Fields are the named, typed values a dataset's samples carry beside
// their media and label: a caption, several labels, a JSON document, a
// WebDataset sample's other members (docs/fields.md says what each
// source maps to what). A Dataset without fields has none (Dataset.Fields
// nil): its Samples, digest and wire format are what they were before
// fields existed.
//
// Fields are stored by column, not a map a sample: a scalar column is 8
// bytes a sample, a variable one 8 bytes a sample and its data; a sample
// without a field (a WebDataset sample with no .txt) is marked absent in
// a bitmap. The Schema (name → type) is the dataset's, sorted by name.

// FieldType is a field's type.
type FieldType uint8

const (
	// FieldInt is a signed 64-bit integer.
	FieldInt FieldType = iota + 1
	// FieldFloat is a 64-bit float.
	FieldFloat
	// FieldString is text (UTF-8 by convention; not checked).
	FieldString
	// FieldBytes is a byte string.
	FieldBytes
	// FieldInts is a list of integers.
	FieldInts
	// FieldFloats is a list of floats.
	FieldFloats
	// FieldStrings is a list of strings.
	FieldStrings
)

var fieldTypeNames = [...]string{FieldInt: "int", FieldFloat: "float", FieldString: "string", FieldBytes: "bytes",
	FieldInts: "list<int>", FieldFloats: "list<float>", FieldStrings: "list<string>"}

func (t FieldType) String() string {
	if t >= FieldInt && t <= FieldStrings {
		return fieldTypeNames[t]
	}
	return fmt.Sprintf("FieldType(%d)", int(t))
}

// Valid reports whether t is one of the field types.
func (t FieldType) Valid() bool { return t >= FieldInt && t <= FieldStrings }

// List reports whether t is a list type.
func (t FieldType) List() bool { return t >= FieldInts && t <= FieldStrings }

// ParseFieldType reads a type as String writes it ("int", "float",
// "string", "bytes", "list<int>", "list<float>", "list<string>").
func ParseFieldType(s string) (FieldType, error) {
	for t := FieldInt; t <= FieldStrings; t++ {
		if fieldTypeNames[t] == s {
			return t, nil
		}
	}
	return 0, fmt.Errorf("dataset: unknown field type %q (want int, float, string, bytes, list<int>, list<float> or list<string>)", s)
}

// Field is one column of a Schema.
type Field struct {
	Name string
	Type FieldType
}

// Schema is a dataset's fields, sorted by name, each name once.
type Schema []Field

// Index returns the column of name in s, or -1.
func (s Schema) Index(name string) int {
	i, ok := slices.BinarySearchFunc(s, name, func(f Field, n string) int { return strings.Compare(f.Name, n) })
	if !ok {
		return -1
	}
	return i
}

// Equal reports whether s and t are the same schema.
func (s Schema) Equal(t Schema) bool { return slices.Equal(s, t) }

// String is "name:type,name:type".
func (s Schema) String() string {
	parts := make([]string, len(s))
	for i, f := range s {
		parts[i] = f.Name + ":" + f.Type.String()
	}
	return strings.Join(parts, ",")
}

// reservedFieldNames are what a manifest line means by itself: no field
// may be named so, in any case (a JSON-lines manifest matches its own
// names without regard to case, as encoding/json does: a field "KeY"
// written into a line was read back as the line's key).
var reservedFieldNames = []string{"key", "label", "object", "offset", "size"}

// MaxFieldName bounds a field's name.
const MaxFieldName = 256

// CheckFieldName reports whether name may name a field: 1 to
// MaxFieldName bytes of UTF-8, no control characters, not one of a manifest's own
// names (key, label, object, offset, size) in any case.
func CheckFieldName(name string) error {
	if name == "" || len(name) > MaxFieldName {
		return fmt.Errorf("dataset: field name %q: want 1 to %d bytes", name, MaxFieldName)
	}
	for _, c := range []byte(name) {
		if c < ' ' || c == 0x7f {
			return fmt.Errorf("dataset: field name %q: holds a control character", name)
		}
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("dataset: field name %q: not valid UTF-8", name)
	}
	if slices.ContainsFunc(reservedFieldNames, func(r string) bool { return strings.EqualFold(r, name) }) {
		return fmt.Errorf("dataset: field name %q: reserved (a manifest's own %s)", name, strings.Join(reservedFieldNames, ", "))
	}
	return nil
}

// Value is one field's value for one sample; Type 0 is absent (the
// sample has no such field). Only the member its Type names is set.
type Value struct {
	Type    FieldType
	Int     int64
	Float   float64
	Str     string // FieldString
	Bytes   []byte // FieldBytes
	Ints    []int64
	Floats  []float64
	Strings []string
}

// IntValue, FloatValue, ... make a Value of each type.
func IntValue(v int64) Value        { return Value{Type: FieldInt, Int: v} }
func FloatValue(v float64) Value    { return Value{Type: FieldFloat, Float: v} }
func StringValue(v string) Value    { return Value{Type: FieldString, Str: v} }
func BytesValue(v []byte) Value     { return Value{Type: FieldBytes, Bytes: v} }
func IntsValue(v []int64) Value     { return Value{Type: FieldInts, Ints: v} }
func FloatsValue(v []float64) Value { return Value{Type: FieldFloats, Floats: v} }
func StringsValue(v []string) Value { return Value{Type: FieldStrings, Strings: v} }
func (v Value) Present() bool       { return v.Type != 0 }
func (v Value) String() string      { return string(v.AppendText(nil)) }
func (v Value) Equal(w Value) bool {
	return string(v.AppendText(nil)) == string(w.AppendText(nil)) && v.Type == w.Type
}

// AppendText appends v's text for people (and tests): an integer in
// decimal, a float as strconv 'g' writes it, a string quoted, bytes in
// hex, a list in brackets.
func (v Value) AppendText(b []byte) []byte {
	switch v.Type {
	case FieldInt:
		return strconv.AppendInt(b, v.Int, 10)
	case FieldFloat:
		return strconv.AppendFloat(b, v.Float, 'g', -1, 64)
	case FieldString:
		return strconv.AppendQuote(b, v.Str)
	case FieldBytes:
		return fmt.Appendf(b, "0x%x", v.Bytes)
	case FieldInts:
		return appendList(b, v.Ints, func(b []byte, x int64) []byte { return strconv.AppendInt(b, x, 10) })
	case FieldFloats:
		return appendList(b, v.Floats, func(b []byte, x float64) []byte { return strconv.AppendFloat(b, x, 'g', -1, 64) })
	case FieldStrings:
		return appendList(b, v.Strings, func(b []byte, x string) []byte { return strconv.AppendQuote(b, x) })
	}
	return append(b, "absent"...)
}

// as converts v to type t: an int to a float, a list of ints to a list
// of floats; ok false for any other change of type.
func (v Value) as(t FieldType) (Value, bool) {
	switch {
	case v.Type == t || v.Type == 0:
		return v, true
	case v.Type.List() && t.List() && v.listLen() == 0:
		return Value{Type: t}, true
	case v.Type == FieldInt && t == FieldFloat:
		return FloatValue(float64(v.Int)), true
	case v.Type == FieldInts && t == FieldFloats:
		f := make([]float64, len(v.Ints))
		for i, x := range v.Ints {
			f[i] = float64(x)
		}
		return FloatsValue(f), true
	}
	return Value{}, false
}

// widen is the type a column of type a holding a value of type b
// becomes: a if b converts to it, b if a's values convert to b, else 0.
func widen(a, b FieldType) FieldType {
	switch {
	case a == b:
		return a
	case a == FieldInt && b == FieldFloat, a == FieldFloat && b == FieldInt:
		return FieldFloat
	case a == FieldInts && b == FieldFloats, a == FieldFloats && b == FieldInts:
		return FieldFloats
	}
	return 0
}

// Fields are the values of a dataset's fields, by column (see the
// package's fields overview). Build them with a FieldsBuilder; a Fields
// does not change after.
type Fields struct {
	schema Schema
	n      int
	cols   []column
}

// column is one field's values. A scalar's are in nums (an int64's or
// float64's bits); a string's or bytes' in data, sample i's ending at
// ends[i]; a list's elements in nums (strings: their ends in data),
// sample i's ending at ends[i]. present is a bitmap of the samples that
// have the field; nil when all do.
type column struct {
	typ     FieldType
	present []uint64
	nums    []uint64
	ends    []int64
	data    []byte
}

// Len is the number of samples.
func (f *Fields) Len() int {
	if f == nil {
		return 0
	}
	return f.n
}

// Schema is the fields' schema (nil for nil f).
func (f *Fields) Schema() Schema {
	if f == nil {
		return nil
	}
	return f.schema
}

// Value returns column c's value for sample i (absent: Type 0). Strings
// and lists are copies; Bytes point into f (read-only).
func (f *Fields) Value(i, c int) Value {
	col := &f.cols[c]
	if col.present != nil && col.present[i/64]&(1<<(i%64)) == 0 {
		return Value{}
	}
	switch col.typ {
	case FieldInt:
		return IntValue(int64(col.nums[i]))
	case FieldFloat:
		return FloatValue(math.Float64frombits(col.nums[i]))
	}
	lo, hi := col.span(i)
	switch col.typ {
	case FieldString:
		return StringValue(string(col.data[lo:hi]))
	case FieldBytes:
		return BytesValue(col.data[lo:hi:hi])
	case FieldInts:
		v := make([]int64, hi-lo)
		for k := range v {
			v[k] = int64(col.nums[lo+int64(k)])
		}
		return IntsValue(v)
	case FieldFloats:
		v := make([]float64, hi-lo)
		for k := range v {
			v[k] = math.Float64frombits(col.nums[lo+int64(k)])
		}
		return FloatsValue(v)
	case FieldStrings:
		v := make([]string, hi-lo)
		for k := range v {
			e := lo + int64(k)
			start := int64(0)
			if e > 0 {
				start = int64(col.nums[e-1])
			}
			v[k] = string(col.data[start:col.nums[e]])
		}
		return StringsValue(v)
	}
	panic("dataset: bad column type")
}

func (c *column) span(i int) (lo, hi int64) {
	if i > 0 {
		lo = c.ends[i-1]
	}
	return lo, c.ends[i]
}

// Get returns sample i's value of the field name, and whether the
// dataset has that field (the value may still be absent).
func (f *Fields) Get(i int, name string) (Value, bool) {
	c := f.Schema().Index(name)
	if c < 0 {
		return Value{}, false
	}
	return f.Value(i, c), true
}

// Row returns sample i's values, one per column of the schema.
func (f *Fields) Row(i int) []Value {
	if f == nil || len(f.schema) == 0 {
		return nil
	}
	row := make([]Value, len(f.schema))
	for c := range row {
		row[c] = f.Value(i, c)
	}
	return row
}

// RowIn returns sample i's values laid out by schema s (a wider schema
// of the same dataset: an IndexedManifest's, whose pieces each know only
// their own fields): a field f lacks is absent, an int where s has a
// float is converted. A field of f that s lacks, or whose type s cannot
// hold, is an error (the index is stale).
func (f *Fields) RowIn(i int, s Schema) ([]Value, error) {
	if len(s) == 0 {
		if len(f.Schema()) > 0 {
			return nil, fmt.Errorf("fields %s where the schema has none", f.schema)
		}
		return nil, nil
	}
	row := make([]Value, len(s))
	for c, fld := range f.Schema() {
		k := s.Index(fld.Name)
		if k < 0 {
			return nil, fmt.Errorf("field %q (%s) is not in the schema %s", fld.Name, fld.Type, s)
		}
		v, ok := f.Value(i, c).as(s[k].Type)
		if !ok {
			return nil, fmt.Errorf("field %q is %s, the schema says %s", fld.Name, fld.Type, s[k].Type)
		}
		row[k] = v
	}
	return row, nil
}

// Bytes is what f holds, for a cache's accounting.
func (f *Fields) Bytes() int64 {
	if f == nil {
		return 0
	}
	var n int64
	for _, c := range f.cols {
		n += int64(8*cap(c.present) + 8*cap(c.nums) + 8*cap(c.ends) + cap(c.data))
	}
	return n
}

// mergeSchema returns the schema of a dataset two parts of which have
// schemas a and b (sorted): each field of either, an int one part has
// and a float the other a float (lists alike). widened reports that a
// field's type differs from one of the parts'. A field of two types that
// do not widen to one is an error.
func mergeSchema(a, b Schema) (out Schema, widened bool, err error) {
	out = slices.Clone(a)
	for _, f := range b {
		k := out.Index(f.Name)
		if k < 0 {
			out = append(out, f)
			continue
		}
		if out[k].Type == f.Type {
			continue
		}
		w := widen(out[k].Type, f.Type)
		if w == 0 && out[k].Type.List() && f.Type.List() {
			// One part's lists may all be empty: its type says nothing.
			// Which part it is only the values tell: the caller checks.
			w = max(out[k].Type, f.Type)
		}
		if w == 0 {
			return nil, false, fmt.Errorf("field %q is %s in one part and %s in another", f.Name, out[k].Type, f.Type)
		}
		out[k].Type, widened = w, true
	}
	slices.SortFunc(out, func(x, y Field) int { return strings.Compare(x.Name, y.Name) })
	return out, widened, nil
}

// FieldsBuilder makes a Fields a sample at a time: Set the fields of the
// current sample, then EndSample; samples never given a field have it
// absent. With no fixed schema, each field's type is the one of its first
// value, widened from int to float (list<int> to list<float>) if a float
// comes later; any other change of type is an error. With a fixed schema
// (NewFieldsBuilderFor), a field outside it or a value it cannot hold is
// an error.
type FieldsBuilder struct {
	fixed Schema
	names map[string]int // column by name
	cols  []column       // in order of first use
	byCol []string       // column → name
	n     int            // samples ended
	set   []int          // columns set in the current sample (to find twice)
}

// NewFieldsBuilder returns a builder that infers the schema.
func NewFieldsBuilder() *FieldsBuilder { return &FieldsBuilder{names: map[string]int{}} }

// NewFieldsBuilderFor returns a builder held to schema s.
func NewFieldsBuilderFor(s Schema) *FieldsBuilder {
	b := NewFieldsBuilder()
	b.fixed = s
	for _, f := range s {
		b.addColumn(f.Name, f.Type)
	}
	return b
}

func (b *FieldsBuilder) addColumn(name string, t FieldType) int {
	c := len(b.cols)
	b.names[name] = c
	b.byCol = append(b.byCol, name)
	col := column{typ: t}
	if b.n > 0 {
		col.present = make([]uint64, (b.n+63)/64) // the samples before had none
		col.pad(b.n)
	}
	b.cols = append(b.cols, col)
	return c
}

// pad gives column c n samples' room with the samples it lacks absent.
func (c *column) pad(n int) {
	switch c.typ {
	case FieldInt, FieldFloat:
		for len(c.nums) < n {
			c.nums = append(c.nums, 0)
		}
	default:
		for len(c.ends) < n {
			end := int64(0)
			if len(c.ends) > 0 {
				end = c.ends[len(c.ends)-1]
			}
			c.ends = append(c.ends, end)
		}
	}
}

// Set gives the current sample's field name the value v (absent values
// are ignored). A name set twice in one sample is an error.
func (b *FieldsBuilder) Set(name string, v Value) error {
	if !v.Present() {
		return nil
	}
	if !v.Type.Valid() {
		return fmt.Errorf("dataset: field %q: bad type %d", name, v.Type)
	}
	c, ok := b.names[name]
	if !ok {
		if b.fixed != nil {
			return fmt.Errorf("dataset: field %q is not in the schema %s", name, b.fixed)
		}
		if err := CheckFieldName(name); err != nil {
			return err
		}
		c = b.addColumn(name, v.Type)
	}
	if slices.Contains(b.set, c) {
		return fmt.Errorf("dataset: field %q given twice for one sample", name)
	}
	col := &b.cols[c]
	if col.typ != v.Type && col.typ.List() && v.Type.List() {
		switch {
		case v.listLen() == 0:
			v = Value{Type: col.typ} // an empty list is of any list type
		case len(col.nums) == 0 && b.fixed == nil:
			col.typ = v.Type // only empty lists so far: they are of this type
		}
	}
	if col.typ != v.Type {
		w := widen(col.typ, v.Type)
		if w == 0 || (b.fixed != nil && w != col.typ) {
			return fmt.Errorf("dataset: field %q: a %s value where the field is %s", name, v.Type, col.typ)
		}
		if w != col.typ {
			col.widenTo(w)
		}
		v, _ = v.as(w)
	}
	b.set = append(b.set, c)
	col.put(b.n, v)
	return nil
}

func (v Value) listLen() int { return len(v.Ints) + len(v.Floats) + len(v.Strings) }

// widenTo converts the column's values to type t (int → float).
func (c *column) widenTo(t FieldType) {
	for k, x := range c.nums {
		c.nums[k] = math.Float64bits(float64(int64(x)))
	}
	c.typ = t
}

// put stores v as sample i's value; the column holds i samples.
func (c *column) put(i int, v Value) {
	if c.present != nil {
		for len(c.present) < (i+64)/64 {
			c.present = append(c.present, 0)
		}
		c.present[i/64] |= 1 << (i % 64)
	}
	switch c.typ {
	case FieldInt:
		c.nums = append(c.nums, uint64(v.Int))
		return
	case FieldFloat:
		c.nums = append(c.nums, math.Float64bits(v.Float))
		return
	case FieldString:
		c.data = append(c.data, v.Str...)
		c.ends = append(c.ends, int64(len(c.data)))
	case FieldBytes:
		c.data = append(c.data, v.Bytes...)
		c.ends = append(c.ends, int64(len(c.data)))
	case FieldInts:
		for _, x := range v.Ints {
			c.nums = append(c.nums, uint64(x))
		}
		c.ends = append(c.ends, int64(len(c.nums)))
	case FieldFloats:
		for _, x := range v.Floats {
			c.nums = append(c.nums, math.Float64bits(x))
		}
		c.ends = append(c.ends, int64(len(c.nums)))
	case FieldStrings:
		for _, x := range v.Strings {
			c.data = append(c.data, x...)
			c.nums = append(c.nums, uint64(len(c.data)))
		}
		c.ends = append(c.ends, int64(len(c.nums)))
	}
}

// EndSample ends the current sample: the fields not Set are absent.
func (b *FieldsBuilder) EndSample() {
	b.n++
	if len(b.set) < len(b.cols) {
		for c := range b.cols {
			if slices.Contains(b.set, c) {
				continue
			}
			col := &b.cols[c]
			if col.present == nil {
				col.present = make([]uint64, (b.n+63)/64)
				for k := 0; k < b.n-1; k++ {
					col.present[k/64] |= 1 << (k % 64)
				}
			}
			for len(col.present) < (b.n+63)/64 {
				col.present = append(col.present, 0)
			}
			col.pad(b.n)
		}
	}
	b.set = b.set[:0]
}

// Samples is the number of samples ended.
func (b *FieldsBuilder) Samples() int { return b.n }

// Finish returns the Fields of the samples ended; nil when no sample has
// a field and the builder has no fixed schema. The builder is spent.
func (b *FieldsBuilder) Finish() *Fields {
	if len(b.cols) == 0 {
		return nil
	}
	order := make([]int, len(b.cols))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(x, y int) int { return strings.Compare(b.byCol[x], b.byCol[y]) })
	f := &Fields{n: b.n, schema: make(Schema, len(order)), cols: make([]column, len(order))}
	for k, c := range order {
		f.schema[k] = Field{Name: b.byCol[c], Type: b.cols[c].typ}
		col := b.cols[c]
		if col.present != nil {
			col.present = col.present[:(b.n+63)/64]
			all := true
			for i := 0; i < b.n && all; i++ {
				all = col.present[i/64]&(1<<(i%64)) != 0
			}
			if all {
				col.present = nil
			}
		}
		f.cols[k] = col
	}
	*b = FieldsBuilder{}
	return f
}

// appendFieldsDigest hashes sample i's present fields into buf for the
// Digester: a marker, then each field's name, type and value.
func appendFieldsDigest(buf []byte, schema Schema, row []Value) []byte {
	any := false
	for c, v := range row {
		if !v.Present() {
			continue
		}
		if !any {
			buf = append(buf, 2)
			any = true
		}
		buf = append(buf, schema[c].Name...)
		buf = append(buf, 0, byte(v.Type))
		switch v.Type {
		case FieldString:
			buf = binary.AppendUvarint(buf, uint64(len(v.Str)))
			buf = append(buf, v.Str...)
		case FieldBytes:
			buf = binary.AppendUvarint(buf, uint64(len(v.Bytes)))
			buf = append(buf, v.Bytes...)
		case FieldStrings:
			buf = binary.AppendUvarint(buf, uint64(len(v.Strings)))
			for _, s := range v.Strings {
				buf = binary.AppendUvarint(buf, uint64(len(s)))
				buf = append(buf, s...)
			}
		default:
			buf = v.AppendText(buf)
		}
		buf = append(buf, 0)
	}
	return buf
}

// FieldCatalog is a Catalog whose samples have fields: both of this
// package's catalogs are. CatalogSchema and CatalogFields reach them
// through any Catalog.
type FieldCatalog interface {
	Catalog
	// Schema is the dataset's fields; nil when it has none.
	Schema() Schema
	// Fields returns sample i's values, one per column of Schema (nil
	// when Schema is).
	Fields(ctx context.Context, i int64) ([]Value, error)
}

// CatalogSchema returns c's schema; nil when c has no fields or is not
// a FieldCatalog.
func CatalogSchema(c Catalog) Schema {
	if fc, ok := c.(FieldCatalog); ok {
		return fc.Schema()
	}
	return nil
}

// CatalogFields returns sample i's fields from c (nil, nil when c has
// none).
func CatalogFields(ctx context.Context, c Catalog, i int64) ([]Value, error) {
	if fc, ok := c.(FieldCatalog); ok && len(fc.Schema()) > 0 {
		return fc.Fields(ctx, i)
	}
	return nil, nil
}

// appendList appends xs as a bracketed, comma-separated list, each
// element written by elem: the list form of the text and JSON writers.
func appendList[T any](b []byte, xs []T, elem func([]byte, T) []byte) []byte {
	b = append(b, '[')
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = elem(b, x)
	}
	return append(b, ']')
}
