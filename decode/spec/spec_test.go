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

// An image's element type is the spec's: uint8 by default, float16,
// bfloat16 or float32 (normalised samples) when set; it sizes the sample
// and names itself as the feed protocol and torch spell it.
func TestImageDTypes(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    DType
		size int
	}{{"uint8", Uint8, 1}, {"float16", Float16, 2}, {"bfloat16", BFloat16, 2}, {"float32", Float32, 4}} {
		d, err := ParseDType(tc.name)
		if err != nil || d != tc.d || d.String() != tc.name || d.Size() != tc.size {
			t.Errorf("ParseDType(%q) = %v (%d bytes), %v", tc.name, d, d.Size(), err)
		}
		s := Image(6, NCHW)
		s.Elem = tc.d
		if s.DType() != tc.d || s.SampleBytes() != tc.size*3*36 || s.String() != "image "+tc.name+" [3 6 6] NCHW" {
			t.Errorf("%s image: %v, %d bytes", tc.name, s, s.SampleBytes())
		}
	}
	if _, err := ParseDType("float64"); err == nil {
		t.Error("ParseDType(float64): no error")
	}
	// Audio is float32 whatever Elem says; the zero Elem is uint8.
	if a := (Shape{Kind: KindAudio, AudioChannels: 1, AudioSamples: 4}); a.DType() != Float32 || a.SampleBytes() != 16 {
		t.Errorf("audio: %v", a)
	}
}
