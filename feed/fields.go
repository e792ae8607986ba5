package feed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Fields (docs/feed-protocol.md, "Fields"): a trainer that says
// "fields": true in its hello gets the dataset's schema in the welcome
// (Welcome.Fields) and, right before each batch that has fields, a fields
// frame (MsgFields) holding every field's values for the batch's rows, in
// row order, filled rows included (a filled row's fields are those of the
// row it copies). A trainer that does not ask gets neither: older clients
// see what they always saw. A dataset without fields sends no schema and
// no fields frames.

// MsgFields (server -> trainer) carries a batch's fields, before the
// batch's own message. Its payload is binary (EncodeFields), not JSON.
const MsgFields MsgType = 25

// MaxFieldsFrame bounds a fields frame (type byte included): a batch of
// samples with big byte fields (a WebDataset member of up to 256 KiB
// each) is bigger than any descriptor.
const MaxFieldsFrame = 1 << 30

// Field types in a FieldSpec, as the dataset names them.
const (
	FieldInt     = "int"
	FieldFloat   = "float"
	FieldString  = "string"
	FieldBytes   = "bytes"
	FieldInts    = "list<int>"
	FieldFloats  = "list<float>"
	FieldStrings = "list<string>"
)

// fieldCodes are the types' codes in a fields frame.
var fieldCodes = map[string]byte{FieldInt: 1, FieldFloat: 2, FieldString: 3, FieldBytes: 4, FieldInts: 5, FieldFloats: 6, FieldStrings: 7}

// FieldSpec is one field of the welcome's schema.
type FieldSpec struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// FieldColumn is one field's values for a batch's rows. Present says
// which rows have the field (an absent row holds a zero value); exactly
// the member of Type is set, one entry a row: Ints (int), Floats
// (float), Bytes (string and bytes; in a parsed frame, views into the
// frame), IntLists, FloatLists, StringLists.
type FieldColumn struct {
	Name        string
	Type        string
	Present     []bool
	Ints        []int64
	Floats      []float64
	Bytes       [][]byte
	IntLists    [][]int64
	FloatLists  [][]float64
	StringLists [][]string
}

// BatchFields are the fields of batch ID's rows, a column per field of
// the welcome's schema, in its order.
type BatchFields struct {
	ID      uint64
	Rows    int
	Columns []FieldColumn
}

// Get returns the column named name, or nil.
func (f *BatchFields) Get(name string) *FieldColumn {
	if f == nil {
		return nil
	}
	for i := range f.Columns {
		if f.Columns[i].Name == name {
			return &f.Columns[i]
		}
	}
	return nil
}

// ErrBadFields: a fields frame could not be decoded.
var ErrBadFields = errors.New("feed: bad fields frame")

// AppendFieldsFrame appends a MsgFields frame of f to dst. Layout of the
// payload (little endian):
//
//	uint64 batch id, uint32 rows, uint32 columns
//	per column, in the schema's order:
//	  uint8 type code (1 int, 2 float, 3 string, 4 bytes, 5 list<int>,
//	        6 list<float>, 7 list<string>)
//	  ceil(rows/8) bytes: bit r%8 of byte r/8 set if row r has the field
//	  int, float:    rows × 8 bytes (int64, float64)
//	  string, bytes: rows × uint32 ends, then the bytes (row r is
//	                 [end[r-1], end[r]), end[-1] = 0)
//	  list<int>, list<float>: rows × uint32 ends in elements, then the
//	                 elements × 8 bytes
//	  list<string>:  rows × uint32 ends in elements, elements × uint32
//	                 ends in bytes, then the bytes
func AppendFieldsFrame(dst []byte, f *BatchFields) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, byte(MsgFields))
	le := binary.LittleEndian
	dst = le.AppendUint64(dst, f.ID)
	dst = le.AppendUint32(dst, uint32(f.Rows))
	dst = le.AppendUint32(dst, uint32(len(f.Columns)))
	n := f.Rows
	for ci := range f.Columns {
		c := &f.Columns[ci]
		code, ok := fieldCodes[c.Type]
		if !ok {
			return dst[:start], fmt.Errorf("feed: field %q: unknown type %q", c.Name, c.Type)
		}
		if len(c.Present) != n {
			return dst[:start], fmt.Errorf("feed: field %q: %d presence marks for %d rows", c.Name, len(c.Present), n)
		}
		dst = append(dst, code)
		bits := len(dst)
		for range (n + 7) / 8 {
			dst = append(dst, 0)
		}
		for r, p := range c.Present {
			if p {
				dst[bits+r/8] |= 1 << (r % 8)
			}
		}
		var rows int
		switch c.Type {
		case FieldInt:
			rows = len(c.Ints)
			for _, v := range c.Ints {
				dst = le.AppendUint64(dst, uint64(v))
			}
		case FieldFloat:
			rows = len(c.Floats)
			for _, v := range c.Floats {
				dst = le.AppendUint64(dst, math.Float64bits(v))
			}
		case FieldString, FieldBytes:
			rows = len(c.Bytes)
			end := 0
			for _, v := range c.Bytes {
				end += len(v)
				dst = le.AppendUint32(dst, uint32(end))
			}
			for _, v := range c.Bytes {
				dst = append(dst, v...)
			}
		case FieldInts:
			rows = len(c.IntLists)
			dst = appendEnds(dst, len(c.IntLists), func(r int) int { return len(c.IntLists[r]) })
			for _, l := range c.IntLists {
				for _, v := range l {
					dst = le.AppendUint64(dst, uint64(v))
				}
			}
		case FieldFloats:
			rows = len(c.FloatLists)
			dst = appendEnds(dst, len(c.FloatLists), func(r int) int { return len(c.FloatLists[r]) })
			for _, l := range c.FloatLists {
				for _, v := range l {
					dst = le.AppendUint64(dst, math.Float64bits(v))
				}
			}
		case FieldStrings:
			rows = len(c.StringLists)
			dst = appendEnds(dst, len(c.StringLists), func(r int) int { return len(c.StringLists[r]) })
			end := 0
			for _, l := range c.StringLists {
				for _, s := range l {
					end += len(s)
					dst = le.AppendUint32(dst, uint32(end))
				}
			}
			for _, l := range c.StringLists {
				for _, s := range l {
					dst = append(dst, s...)
				}
			}
		}
		if rows != n {
			return dst[:start], fmt.Errorf("feed: field %q: %d values for %d rows", c.Name, rows, n)
		}
	}
	size := len(dst) - start - 4
	if size > MaxFieldsFrame || uint64(size) > math.MaxUint32 {
		return dst[:start], fmt.Errorf("feed: fields of batch %d: %d bytes, limit %d", f.ID, size, MaxFieldsFrame)
	}
	le.PutUint32(dst[start:], uint32(size))
	return dst, nil
}

func appendEnds(dst []byte, rows int, count func(int) int) []byte {
	end := 0
	for r := range rows {
		end += count(r)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(end))
	}
	return dst
}

// ParseFields decodes a MsgFields payload against the welcome's schema.
// String and bytes values are views into payload (no copy): keep payload
// while they are used.
func ParseFields(payload []byte, schema []FieldSpec) (*BatchFields, error) {
	p := fieldReader{b: payload}
	id, rows, cols := p.u64(), int(p.u32()), int(p.u32())
	if p.err != nil {
		return nil, p.err
	}
	if cols != len(schema) {
		return nil, fmt.Errorf("%w: %d columns, the welcome's schema has %d", ErrBadFields, cols, len(schema))
	}
	if rows > len(payload) { // each row takes at least a bit of every column... bound the allocations
		if cols > 0 {
			return nil, fmt.Errorf("%w: %d rows in %d bytes", ErrBadFields, rows, len(payload))
		}
	}
	f := &BatchFields{ID: id, Rows: rows, Columns: make([]FieldColumn, cols)}
	for ci, spec := range schema {
		c := &f.Columns[ci]
		c.Name, c.Type = spec.Name, spec.Type
		code := p.u8()
		if want, ok := fieldCodes[spec.Type]; !ok || code != want {
			if p.err == nil {
				p.err = fmt.Errorf("%w: column %d (%q) has type code %d, the schema says %s", ErrBadFields, ci, spec.Name, code, spec.Type)
			}
			return nil, p.err
		}
		bits := p.bytes((rows + 7) / 8)
		if p.err != nil {
			return nil, p.err
		}
		if rows%8 != 0 && bits[len(bits)-1]>>(rows%8) != 0 {
			return nil, fmt.Errorf("%w: column %d (%q): presence bits past the last row", ErrBadFields, ci, spec.Name)
		}
		c.Present = make([]bool, rows)
		for r := range c.Present {
			c.Present[r] = bits[r/8]&(1<<(r%8)) != 0
		}
		switch spec.Type {
		case FieldInt:
			c.Ints = make([]int64, 0, rows)
			for range rows {
				c.Ints = append(c.Ints, int64(p.u64()))
			}
		case FieldFloat:
			c.Floats = make([]float64, 0, rows)
			for range rows {
				c.Floats = append(c.Floats, math.Float64frombits(p.u64()))
			}
		case FieldString, FieldBytes:
			ends := p.ends(rows)
			data := p.bytes(last(ends))
			c.Bytes = make([][]byte, 0, rows)
			for r := range ends {
				if p.err == nil {
					lo := at(ends, r-1)
					c.Bytes = append(c.Bytes, data[lo:ends[r]:ends[r]])
				}
			}
		case FieldInts, FieldFloats:
			ends := p.ends(rows)
			if p.err == nil && last(ends) > len(p.b)/8 {
				p.err = fmt.Errorf("%w: %d elements past the frame's end", ErrBadFields, last(ends))
			}
			for r := range ends {
				if p.err != nil {
					break
				}
				k := ends[r] - at(ends, r-1)
				if spec.Type == FieldInts {
					l := make([]int64, k)
					for i := range l {
						l[i] = int64(p.u64())
					}
					c.IntLists = append(c.IntLists, l)
				} else {
					l := make([]float64, k)
					for i := range l {
						l[i] = math.Float64frombits(p.u64())
					}
					c.FloatLists = append(c.FloatLists, l)
				}
			}
		case FieldStrings:
			ends := p.ends(rows)
			if p.err == nil && last(ends) > len(p.b)/4 {
				p.err = fmt.Errorf("%w: %d elements past the frame's end", ErrBadFields, last(ends))
			}
			var sends []int
			if p.err == nil {
				sends = p.ends(last(ends))
			}
			data := p.bytes(last(sends))
			for r := range ends {
				if p.err != nil {
					break
				}
				l := make([]string, 0, ends[r]-at(ends, r-1))
				for e := at(ends, r-1); e < ends[r]; e++ {
					l = append(l, string(data[at(sends, e-1):sends[e]]))
				}
				c.StringLists = append(c.StringLists, l)
			}
		}
		if p.err != nil {
			return nil, p.err
		}
	}
	if len(p.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last column", ErrBadFields, len(p.b))
	}
	return f, nil
}

func last(ends []int) int { return at(ends, len(ends)-1) }

func at(ends []int, i int) int {
	if i < 0 {
		return 0
	}
	return ends[i]
}

// fieldReader reads a fields payload; the first problem sticks in err.
type fieldReader struct {
	b   []byte
	err error
}

func (p *fieldReader) bytes(n int) []byte {
	if p.err != nil {
		return nil
	}
	if n < 0 || n > len(p.b) {
		p.err = fmt.Errorf("%w: %d bytes wanted, %d left", ErrBadFields, n, len(p.b))
		return nil
	}
	out := p.b[:n:n]
	p.b = p.b[n:]
	return out
}

func (p *fieldReader) u8() byte {
	if b := p.bytes(1); b != nil {
		return b[0]
	}
	return 0
}

func (p *fieldReader) u32() uint32 {
	if b := p.bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (p *fieldReader) u64() uint64 {
	if b := p.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// ends reads n ascending uint32 ends.
func (p *fieldReader) ends(n int) []int {
	if p.err == nil && n > len(p.b)/4 {
		p.err = fmt.Errorf("%w: %d ends in %d bytes", ErrBadFields, n, len(p.b))
	}
	if p.err != nil {
		return nil
	}
	out := make([]int, n)
	prev := 0
	for i := range out {
		out[i] = int(p.u32())
		if out[i] < prev {
			p.err = fmt.Errorf("%w: ends out of order", ErrBadFields)
			return nil
		}
		prev = out[i]
	}
	return out
}
