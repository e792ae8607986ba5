package decode

import (
	"bytes"
	"errors"
	"testing"

	"github.com/longshore/longshore/decode/spec"
)

// A raw row holds the object's bytes behind their length, empty objects
// and objects exactly the row's size included; a longer one fails as
// too_large and leaves the row as it was.
func TestRawRows(t *testing.T) {
	s := spec.Shape{Kind: spec.KindRaw, RawBytes: 16}
	if s.SampleBytes() != 24 || s.LayoutName() != "NB" || s.DType() != spec.Uint8 {
		t.Fatalf("raw spec: %d bytes, %s, %s", s.SampleBytes(), s.LayoutName(), s.DType())
	}
	row := make([]byte, s.SampleBytes())
	for _, data := range [][]byte{[]byte("hello, raw"), {}, bytes.Repeat([]byte{0xff}, 16), {0}} {
		if err := (Raw{}).Decode(data, 7, row); err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		n, err := spec.RawLen(row)
		if err != nil || !bytes.Equal(row[spec.RawHeader:spec.RawHeader+n], data) {
			t.Fatalf("%q read back as %q (%v)", data, row[spec.RawHeader:spec.RawHeader+n], err)
		}
	}
	before := bytes.Clone(row)
	err := (Raw{}).Decode(make([]byte, 17), 0, row)
	var c interface{ FailureClass() string }
	if !errors.Is(err, spec.ErrRawTooLarge) || !errors.As(err, &c) || c.FailureClass() != "too_large" {
		t.Fatalf("17 bytes into a row of 16: %v", err)
	}
	if !bytes.Equal(row, before) {
		t.Fatal("a failed raw sample wrote its row")
	}
	row[0] = 17 // a row that says more than it holds
	if _, err := spec.RawLen(row); err == nil {
		t.Fatal("a row of 16 bytes read as holding 17")
	}
}
