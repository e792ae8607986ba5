package nvjpeg

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"slices"
	"testing"
)

// sof builds a minimal JPEG: SOI, a frame header, a scan header, EOI.
func sof(marker byte, prec, w, h int, sampling ...[2]int) []byte {
	return sofColour(nil, nil, marker, prec, w, h, sampling...)
}

// sofColour is sof with the segments pre (APPn) before the frame header
// and the component ids (nil: 1, 2, 3, ...).
func sofColour(pre, ids []byte, marker byte, prec, w, h int, sampling ...[2]int) []byte {
	b := append([]byte{0xFF, 0xD8}, pre...)
	seg := []byte{byte(prec), byte(h >> 8), byte(h), byte(w >> 8), byte(w), byte(len(sampling))}
	for i, s := range sampling {
		id := byte(i + 1)
		if ids != nil {
			id = ids[i]
		}
		seg = append(seg, id, byte(s[0]<<4|s[1]), 0)
	}
	n := len(seg) + 2
	b = append(b, 0xFF, marker, byte(n>>8), byte(n))
	b = append(b, seg...)
	return append(b, 0xFF, 0xDA, 0x00, 0x02, 0xFF, 0xD9)
}

var (
	jfifAPP0    = []byte{0xFF, 0xE0, 0, 16, 'J', 'F', 'I', 'F', 0, 1, 1, 0, 0, 1, 0, 1, 0, 0}
	adobeRGBAPP = []byte{0xFF, 0xEE, 0, 14, 'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, 0}
)

func TestProbeStdlibJPEG(t *testing.T) {
	img := image.NewYCbCr(image.Rect(0, 0, 33, 17), image.YCbCrSubsampleRatio420)
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, nil); err != nil {
		t.Fatal(err)
	}
	in, err := Probe(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if in.Process != Baseline || in.Precision != 8 || in.Width != 33 || in.Height != 17 || in.Subsampling() != "420" {
		t.Fatalf("%+v (%s)", in, in.Subsampling())
	}
	gray := image.NewGray(image.Rect(0, 0, 8, 8))
	gray.Set(1, 1, color.Gray{200})
	buf.Reset()
	jpeg.Encode(&buf, gray, nil)
	if in, err := Probe(buf.Bytes()); err != nil || in.Subsampling() != "gray" {
		t.Fatalf("%+v %v", in, err)
	}
}

func TestRoute(t *testing.T) {
	c := DefaultCaps()
	s444 := [][2]int{{1, 1}, {1, 1}, {1, 1}}
	s420 := [][2]int{{2, 2}, {1, 1}, {1, 1}}
	s411 := [][2]int{{4, 1}, {1, 1}, {1, 1}}
	for _, tc := range []struct {
		name   string
		data   []byte
		caps   Caps
		path   Path
		reason string
	}{
		{"baseline 420", sof(0xC0, 8, 500, 375, s420...), c, PathHardware, ""},
		{"baseline 444", sof(0xC0, 8, 500, 375, s444...), c, PathHardware, ""},
		{"progressive", sof(0xC2, 8, 500, 375, s420...), c, PathHybrid, ""},
		{"411 not on the engine", sof(0xC0, 8, 500, 375, s411...), c, PathHybrid, ""},
		{"no engine", sof(0xC0, 8, 500, 375, s420...), Caps{MinPixels: 1}, PathHybrid, ""},
		{"cmyk", sof(0xC0, 8, 500, 375, [2]int{1, 1}, [2]int{1, 1}, [2]int{1, 1}, [2]int{1, 1}), c, PathCPU, ReasonCMYK},
		{"12-bit", sof(0xC1, 12, 500, 375, s420...), c, PathCPU, ReasonPrecision},
		{"arithmetic", sof(0xC9, 8, 500, 375, s420...), c, PathCPU, ReasonProcess},
		{"lossless", sof(0xC3, 8, 500, 375, s420...), c, PathCPU, ReasonProcess},
		{"thumbnail", sof(0xC0, 8, 32, 32, s420...), c, PathCPU, ReasonTooSmall},
		{"huge", sof(0xC0, 8, 20000, 100, s420...), c, PathCPU, ReasonTooLarge},
		{"odd sampling", sof(0xC0, 8, 500, 375, [2]int{2, 2}, [2]int{2, 1}, [2]int{1, 1}), c, PathCPU, ReasonSubsampling},
		// RGB components (libjpeg's reading) stay on the CPU: nvJPEG
		// would read them as YCbCr (green and pink).
		{"adobe rgb", sofColour(adobeRGBAPP, nil, 0xC0, 8, 500, 375, s444...), c, PathCPU, ReasonRGB},
		{"rgb ids", sofColour(nil, []byte("RGB"), 0xC0, 8, 500, 375, s444...), c, PathCPU, ReasonRGB},
		{"jfif over adobe rgb", sofColour(append(slices.Clone(jfifAPP0), adobeRGBAPP...), nil, 0xC0, 8, 500, 375, s444...), c, PathHardware, ""},
		{"jfif rgb ids", sofColour(jfifAPP0, []byte("RGB"), 0xC0, 8, 500, 375, s444...), c, PathHardware, ""},
		{"png", []byte("\x89PNG\r\n\x1a\n...."), c, PathCPU, ReasonNotJPEG},
		{"truncated", []byte{0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x40, 8}, c, PathCPU, ReasonBadHeader},
	} {
		in, err := Probe(tc.data)
		p, r := Route(in, err, tc.caps)
		if p != tc.path || r != tc.reason {
			t.Errorf("%s: %v %q (probe %+v, %v); want %v %q", tc.name, p, r, in, err, tc.path, tc.reason)
		}
	}
}

func FuzzProbe(f *testing.F) {
	f.Add(sof(0xC0, 8, 500, 375, [2]int{2, 2}, [2]int{1, 1}, [2]int{1, 1}))
	f.Add([]byte{0xFF, 0xD8, 0xFF, 0xEE, 0x00, 0x07, 'A', 'd', 'o', 'b', 'e'})
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := Probe(data)
		if err == nil && (in.Components < 1 || in.Components > 4 || len(in.Sampling) != in.Components) {
			t.Fatalf("accepted %+v", in)
		}
		if errors.Is(err, ErrNotJPEG) && len(data) >= 4 && data[0] == 0xFF && data[1] == 0xD8 {
			t.Fatal("SOI refused as not a JPEG")
		}
		Route(in, err, DefaultCaps())
	})
}
