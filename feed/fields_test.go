package feed

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"
)

var fieldsSchema = []FieldSpec{{"b", FieldBytes}, {"f", FieldFloat}, {"fl", FieldFloats}, {"i", FieldInt}, {"il", FieldInts}, {"s", FieldString}, {"sl", FieldStrings}}

func sampleFields() *BatchFields {
	return &BatchFields{ID: 9, Rows: 3, Columns: []FieldColumn{
		{Name: "b", Type: FieldBytes, Present: []bool{true, false, true}, Bytes: [][]byte{{0, 1}, nil, {}}},
		{Name: "f", Type: FieldFloat, Present: []bool{true, true, true}, Floats: []float64{0.5, -1, 3}},
		{Name: "fl", Type: FieldFloats, Present: []bool{true, true, false}, FloatLists: [][]float64{{1, 2}, {}, nil}},
		{Name: "i", Type: FieldInt, Present: []bool{true, true, true}, Ints: []int64{-1, 0, 1 << 40}},
		{Name: "il", Type: FieldInts, Present: []bool{true, true, true}, IntLists: [][]int64{{}, {7}, {8, 9}}},
		{Name: "s", Type: FieldString, Present: []bool{true, true, false}, Bytes: [][]byte{[]byte("ab"), []byte("ü"), nil}},
		{Name: "sl", Type: FieldStrings, Present: []bool{true, true, true}, StringLists: [][]string{{"x", ""}, {}, {"yz"}}},
	}}
}

func TestFieldsFrameRoundTrip(t *testing.T) {
	f := sampleFields()
	frame, err := AppendFieldsFrame(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	typ, payload, _, err := ReadFrame(bytes.NewReader(frame), MaxFieldsFrame, nil)
	if err != nil || typ != MsgFields {
		t.Fatalf("frame %v %v", typ, err)
	}
	got, err := ParseFields(payload, fieldsSchema)
	if err != nil {
		t.Fatal(err)
	}
	// Absent rows come back as empty values.
	norm := func(f *BatchFields) {
		for i := range f.Columns {
			c := &f.Columns[i]
			for r := range c.Bytes {
				if len(c.Bytes[r]) == 0 {
					c.Bytes[r] = []byte{}
				}
			}
			for r := range c.FloatLists {
				if c.FloatLists[r] == nil {
					c.FloatLists[r] = []float64{}
				}
			}
		}
	}
	norm(f)
	norm(got)
	if !reflect.DeepEqual(got, f) {
		t.Fatalf("got  %+v\nwant %+v", got, f)
	}
	// Bytes are views into the payload, not copies.
	b := got.Get("s").Bytes[0]
	if &b[0] != &payload[bytes.Index(payload, []byte("abü"))] {
		t.Error("string bytes copied out of the frame")
	}
	if _, err := ParseFields(payload, fieldsSchema[1:]); err == nil {
		t.Error("a frame of another schema parsed")
	}
}

func FuzzParseFields(f *testing.F) {
	frame, _ := AppendFieldsFrame(nil, sampleFields())
	f.Add(frame[5:])
	f.Add(frame[5 : len(frame)-3])
	f.Add(binary.LittleEndian.AppendUint32(make([]byte, 12), 0))
	f.Fuzz(func(t *testing.T, payload []byte) {
		got, err := ParseFields(payload, fieldsSchema)
		if err != nil {
			return
		}
		// What parses encodes back to the same bytes.
		again, err := AppendFieldsFrame(nil, got)
		if err != nil {
			t.Fatalf("a parsed frame does not encode: %v", err)
		}
		if !bytes.Equal(again[5:], payload) {
			t.Fatalf("re-encoded differently:\n%x\n%x", again[5:], payload)
		}
	})
}
