package decode

import (
	"bytes"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

// TestTransformRGBMatchesDecode: a lossless picture decoded by Go and
// handed to TransformRGB gives the bytes Decode gives from the file (the
// same geometry, filter and layout), for every kind, layout and a spread
// of seeds.
func TestTransformRGBMatchesDecode(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "png_rgb.png"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	stride := 3*w + 5 // not packed: the stride is honoured
	rgb := make([]byte, (h-1)*stride+3*w+RGBSlack)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			r, g, bl, _ := img.At(b.Min.X+x, b.Min.Y+y).RGBA()
			copy(rgb[y*stride+3*x:], []byte{byte(r >> 8), byte(g >> 8), byte(bl >> 8)})
		}
	}
	if _, ok := img.(*image.NRGBA); ok {
		t.Fatal("png_rgb.png has alpha: the test wants opaque RGB")
	}
	for _, kind := range []string{"train", "eval", "resize"} {
		for _, layout := range []Layout{NCHW, NHWC} {
			d, c := newDecoderPath(t, kind, 64, layout, false, false)
			want := make([]byte, c.SampleBytes())
			got := make([]byte, c.SampleBytes())
			for seed := uint64(0); seed < 20; seed++ {
				wi, err := d.Decode(data, seed, want)
				if err != nil {
					t.Fatal(err)
				}
				gi, err := d.TransformRGB(rgb, w, h, stride, seed, got)
				if err != nil {
					t.Fatal(err)
				}
				if gi.Crop != wi.Crop || gi.Flip != wi.Flip || gi.Region != wi.Region {
					t.Fatalf("%s %v seed %d: geometry %+v, Decode's %+v", kind, layout, seed, gi, wi)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s %v seed %d: TransformRGB's bytes differ from Decode's", kind, layout, seed)
				}
			}
		}
	}
}

func TestTransformRGBRefusesShortInput(t *testing.T) {
	d, c := newDecoderPath(t, "train", 32, NCHW, false, false)
	dst := make([]byte, c.SampleBytes())
	for _, tc := range []struct {
		n, w, h, stride int
	}{
		{10*30 - 1 + RGBSlack, 10, 10, 30}, // one byte short
		{10 * 30, 10, 10, 30},              // no slack
		{1000, 10, 10, 29},                 // stride under a row
		{1000, 0, 10, 30},
	} {
		if _, err := d.TransformRGB(make([]byte, tc.n), tc.w, tc.h, tc.stride, 1, dst); err == nil {
			t.Errorf("TransformRGB(%d bytes, %dx%d, stride %d): no error", tc.n, tc.w, tc.h, tc.stride)
		}
	}
	if _, err := d.TransformRGB(make([]byte, 10*30+RGBSlack), 10, 10, 30, 1, dst[1:]); err == nil {
		t.Error("TransformRGB into a short dst: no error")
	}
}
