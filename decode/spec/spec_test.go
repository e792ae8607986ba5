package spec

import (
	"encoding"
	"slices"
	"testing"
)

func TestLayoutNames(t *testing.T) {
	for _, name := range []string{"nchw", "NCHW", "Nchw"} {
		if l, err := ParseLayout(name); err != nil || l != NCHW {
			t.Errorf("ParseLayout(%q) = %v, %v", name, l, err)
		}
	}
	if l, err := ParseLayout("nhwc"); err != nil || l != NHWC {
		t.Errorf("ParseLayout(nhwc) = %v, %v", l, err)
	}
	if _, err := ParseLayout("chw"); err == nil {
		t.Error("ParseLayout(chw): no error")
	}
	var l Layout
	var _ encoding.TextUnmarshaler = &l
	if err := l.UnmarshalText([]byte("nhwc")); err != nil || l != NHWC {
		t.Errorf("UnmarshalText(nhwc) = %v, %v", l, err)
	}
	if b, err := Layout(7).MarshalText(); err == nil {
		t.Errorf("MarshalText(7) = %s", b)
	}
}

func TestImageSpec(t *testing.T) {
	s := Image(5, NHWC)
	if s.Kind != KindImage || s.DType() != Uint8 || !slices.Equal(s.SampleDims(), []int{5, 5, 3}) || s.SampleBytes() != 75 {
		t.Errorf("Image(5, NHWC) = %v, %d bytes", s, s.SampleBytes())
	}
	if got := Image(4, NCHW).Dims(2); got != [4]int{2, 3, 4, 4} {
		t.Errorf("Image(4, NCHW).Dims(2) = %v", got)
	}
}
