package jpegcolour

import "testing"

// The table djpeg (libjpeg-turbo 2.1.5) decoded: each combination of the
// JFIF marker, the Adobe marker's transform and the component ids, on an
// RGB-coded and a YCbCr-coded picture, compared with the picture.
func TestSpaceLibjpegTable(t *testing.T) {
	rgbIDs, numIDs := []byte("RGB"), []byte{1, 2, 3}
	cases := []struct {
		jfif  bool
		adobe int // -1: none
		ids   []byte
		want  Space
	}{
		{false, 0, numIDs, RGB}, {false, 0, rgbIDs, RGB},
		{false, 1, numIDs, YCbCr}, {false, 1, rgbIDs, YCbCr},
		{false, -1, numIDs, YCbCr}, {false, -1, rgbIDs, RGB},
		{true, 0, numIDs, YCbCr}, {true, 0, rgbIDs, YCbCr},
		{true, 1, numIDs, YCbCr}, {true, 1, rgbIDs, YCbCr},
		{true, -1, numIDs, YCbCr}, {true, -1, rgbIDs, YCbCr},
	}
	for _, c := range cases {
		m := Markers{JFIF: c.jfif, Adobe: c.adobe >= 0, AdobeTransform: byte(max(c.adobe, 0)), IDs: c.ids}
		if got := m.Space(); got != c.want {
			t.Errorf("JFIF %v Adobe %d ids %q: %v, want %v", c.jfif, c.adobe, c.ids, got, c.want)
		}
	}
	four := Markers{Adobe: true, AdobeTransform: 2, IDs: []byte{1, 2, 3, 4}}
	if four.Space() != YCCK {
		t.Error("Adobe transform 2, four components: want YCCK")
	}
	four.AdobeTransform = 0
	if four.Space() != CMYK {
		t.Error("Adobe transform 0, four components: want CMYK")
	}
	if (Markers{IDs: []byte{1}}).Space() != Gray || (Markers{IDs: []byte{1, 2}}).Space() != Unknown {
		t.Error("one component: gray; two: unknown")
	}
}

func TestSegment(t *testing.T) {
	var m Markers
	m.Segment(0xE0, []byte("JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00")) // 13 bytes: too short for libjpeg
	if m.JFIF {
		t.Error("a 13-byte JFIF segment counted")
	}
	m.Segment(0xE0, []byte("JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"))
	m.Segment(0xEE, []byte("Adobe\x00\x64\x00\x00\x00\x00\x02"))
	if !m.JFIF || !m.Adobe || m.AdobeTransform != 2 {
		t.Errorf("got %+v", m)
	}
}
