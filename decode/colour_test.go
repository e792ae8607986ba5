package decode

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"slices"
	"testing"

	"github.com/longshore/longshore/internal/jpegcolour"
)

// colourVariant rewrites a JPEG's colour markers: its APP0 and APP14
// segments are dropped, a JFIF and/or an Adobe segment (transform
// adobe, -1 for none) put after SOI, and the component ids of the frame
// and scan headers replaced by ids (in component order).
func colourVariant(t *testing.T, b []byte, jfif bool, adobe int, ids []byte) []byte {
	t.Helper()
	out := slices.Clone(b[:2])
	if jfif {
		out = append(out, 0xFF, 0xE0, 0, 16, 'J', 'F', 'I', 'F', 0, 1, 1, 0, 0, 1, 0, 1, 0, 0)
	}
	if adobe >= 0 {
		out = append(out, 0xFF, 0xEE, 0, 14, 'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, byte(adobe))
	}
	var old []byte
	i := 2
	for {
		m, n := b[i+1], int(b[i+2])<<8|int(b[i+3])
		seg := slices.Clone(b[i : i+2+n])
		switch {
		case m == 0xE0 || m == 0xEE:
			i += 2 + n
			continue
		case m == 0xC0 || m == 0xC2:
			for k := range int(seg[9]) {
				old = append(old, seg[10+3*k])
				seg[10+3*k] = ids[k]
			}
		case m == 0xDA:
			rest := slices.Clone(b[i:])
			// Every scan header's selectors (a progressive file has several).
			for j := 0; ; j += 2 {
				k := bytes.Index(rest[j:], []byte{0xFF, 0xDA})
				if k < 0 {
					break
				}
				j += k
				for c := range int(rest[j+4]) {
					rest[j+5+2*c] = ids[bytes.IndexByte(old, rest[j+5+2*c])]
				}
			}
			return append(out, rest...)
		}
		out = append(out, seg...)
		i += 2 + n
	}
}

// rawComponents decodes a JPEG with Go's decoder and returns its three
// components untransformed, interleaved (Go keeps YCbCr planes as they
// are, and stores an RGB-coded file's components as R, G, B).
func rawComponents(t *testing.T, b []byte) (w, h int, comps []byte) {
	t.Helper()
	img, err := jpeg.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	r := img.Bounds()
	w, h = r.Dx(), r.Dy()
	for y := range h {
		for x := range w {
			switch im := img.(type) {
			case *image.YCbCr:
				yi, ci := im.YOffset(x, y), im.COffset(x, y)
				comps = append(comps, im.Y[yi], im.Cb[ci], im.Cr[ci])
			case *image.RGBA:
				c := im.RGBAAt(x, y)
				comps = append(comps, c.R, c.G, c.B)
			default:
				t.Fatalf("Go decoded a %T", img)
			}
		}
	}
	return w, h, comps
}

// TestJPEGColourSpaces decodes every combination of the colour markers
// (JFIF, Adobe transform 0, 1 or none, component ids 1,2,3 or 'R','G',
// 'B') on an RGB-coded and a YCbCr-coded 4:4:4 picture, through the fast
// path and through FFmpeg, and checks each against its components read
// as libjpeg-turbo reads them (jpegcolour.Space): untransformed for RGB,
// through the JFIF matrix for YCbCr. FFmpeg reads JFIF files with an
// Adobe transform 0 or ids 'R','G','B' as RGB: before the fix those came
// out green (RGB data as YCbCr, a mean error of 60-70 levels) or pink.
func TestJPEGColourSpaces(t *testing.T) {
	for _, src := range []string{"jpeg_rgb.jpg", "jpeg_444.jpg"} {
		base := readFixture(t, src)
		w, h, comps := rawComponents(t, base)
		for _, jfif := range []bool{false, true} {
			for _, adobe := range []int{-1, 0, 1} {
				for _, ids := range [][]byte{{1, 2, 3}, []byte("RGB")} {
					b := colourVariant(t, base, jfif, adobe, ids)
					m := jpegcolour.Markers{JFIF: jfif, Adobe: adobe >= 0, AdobeTransform: byte(max(adobe, 0)), IDs: ids}
					space := m.Space()
					hd, err := parseHeader(b)
					if err != nil {
						t.Fatal(err)
					}
					if hd.colour != space {
						t.Errorf("%s JFIF %v Adobe %d ids %q: header reads %v, want %v", src, jfif, adobe, ids, hd.colour, space)
					}
					want := make([]byte, len(comps))
					for i := 0; i < len(comps); i += 3 {
						c0, c1, c2 := comps[i], comps[i+1], comps[i+2]
						if space == jpegcolour.YCbCr {
							c0, c1, c2 = color.YCbCrToRGB(c0, c1, c2)
						}
						want[i], want[i+1], want[i+2] = c0, c1, c2
					}
					for _, fast := range []bool{true, false} {
						name := fmt.Sprintf("%s JFIF %v Adobe %d ids %q fast %v (%v)", src, jfif, adobe, ids, fast, space)
						d, c := newDecoderPath(t, "resize", w, NHWC, false, fast)
						if w != h {
							t.Fatal("the fixture is not square")
						}
						got := make([]byte, c.SampleBytes())
						if _, err := d.Decode(b, 1, got); err != nil {
							t.Errorf("%s: %v", name, err)
							continue
						}
						var sum, over int
						for i := range got {
							dv := int(got[i]) - int(want[i])
							sum += max(dv, -dv)
							if max(dv, -dv) > 4 {
								over++
							}
						}
						mean := float64(sum) / float64(len(got))
						if mean > 1.0 || over > len(got)/1000 {
							t.Errorf("%s: mean |Δ| %.2f levels, %d values off by more than 4", name, mean, over)
						}
					}
				}
			}
		}
	}
}

// TestJPEGColourSubsampled: a 4:2:0 file whose Adobe marker (transform
// 0, no JFIF) says its components are RGB. libjpeg, and so the fast path
// and PIL, read them as RGB; FFmpeg reads them as YCbCr and cannot be
// relabelled (swscale has no subsampled RGB), so the FFmpeg path refuses
// the file instead of decoding it in other colours than the fast path.
func TestJPEGColourSubsampled(t *testing.T) {
	ok := readFixture(t, "jpeg_420.jpg")
	b := colourVariant(t, ok, false, 0, []byte{1, 2, 3})
	fast, c := newDecoderPath(t, "train", 64, NCHW, true, true)
	slow, _ := newDecoderPath(t, "train", 64, NCHW, true, false)
	dst := make([]byte, c.SampleBytes())
	info, err := fast.Decode(b, 1, dst)
	if err != nil || info.Path != PathTurbo {
		t.Errorf("fast path: %v on %v, want libjpeg's RGB reading on the fast path", err, info.Path)
	}
	if _, err := slow.Decode(b, 1, dst); !errors.Is(err, ErrUnsupported) {
		t.Errorf("FFmpeg path: %v, want ErrUnsupported", err)
	}
}
