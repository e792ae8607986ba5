package decode

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/image/draw"
	"golang.org/x/image/math/f64"
	"golang.org/x/image/webp"
)

// Reference pipeline for the tests: Go's own decoders (image/jpeg,
// image/png, golang.org/x/image/webp) and golang.org/x/image/draw's
// bilinear scaler, which like swscale's widens its kernel when
// downscaling (antialiasing).

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// refDecode decodes b with Go's decoders into straight (non-premultiplied)
// 8-bit RGB; alpha is dropped, as the Decoder drops it.
func refDecode(t testing.TB, b []byte) *image.NRGBA {
	t.Helper()
	var (
		img image.Image
		err error
	)
	switch {
	case bytes.HasPrefix(b, []byte{0xFF, 0xD8}):
		img, err = jpeg.Decode(bytes.NewReader(b))
		if yc, ok := img.(*image.YCbCr); ok && err == nil {
			return ycbcrToRGB(yc, false)
		}
	case bytes.HasPrefix(b, pngMagic):
		img, err = png.Decode(bytes.NewReader(b))
	default:
		img, err = webp.Decode(bytes.NewReader(b))
		if err == nil {
			// VP8 is BT.601 limited range; Go's YCbCr colour model is
			// JFIF full range, so convert the planes ourselves.
			return vp8ToRGB(img)
		}
	}
	if err != nil {
		t.Fatalf("reference decode: %v", err)
	}
	return toNRGBA(img)
}

func toNRGBA(img image.Image) *image.NRGBA {
	r := img.Bounds()
	out := image.NewNRGBA(image.Rect(0, 0, r.Dx(), r.Dy()))
	for y := 0; y < r.Dy(); y++ {
		for x := 0; x < r.Dx(); x++ {
			var c color.NRGBA
			switch src := img.(type) {
			case *image.NRGBA:
				c = src.NRGBAAt(r.Min.X+x, r.Min.Y+y)
			case *image.NRGBA64:
				v := src.NRGBA64At(r.Min.X+x, r.Min.Y+y)
				c = color.NRGBA{uint8(v.R >> 8), uint8(v.G >> 8), uint8(v.B >> 8), 255}
			case *image.Gray16:
				v := uint8(src.Gray16At(r.Min.X+x, r.Min.Y+y).Y >> 8)
				c = color.NRGBA{v, v, v, 255}
			default:
				c = color.NRGBAModel.Convert(img.At(r.Min.X+x, r.Min.Y+y)).(color.NRGBA)
			}
			c.A = 255
			out.SetNRGBA(x, y, c)
		}
	}
	return out
}

func clamp8(v float64) uint8 {
	return uint8(min(max(math.Round(v), 0), 255))
}

// vp8ToRGB converts a decoded WebP picture: lossy (VP8) is BT.601 limited
// range, lossless is RGB already.
func vp8ToRGB(img image.Image) *image.NRGBA {
	switch v := img.(type) {
	case *image.YCbCr:
		return ycbcrToRGB(v, true)
	case *image.NYCbCrA:
		return ycbcrToRGB(&v.YCbCr, true)
	}
	return toNRGBA(img)
}

// ycbcrToRGB converts with chroma upsampled bilinearly from centred chroma
// samples (libjpeg's and libwebp's "fancy upsampling"), BT.601 full range
// (JFIF) or limited range (VP8).
func ycbcrToRGB(yc *image.YCbCr, limited bool) *image.NRGBA {
	r := yc.Bounds()
	w, h := r.Dx(), r.Dy()
	sx, sy := 1, 1
	switch yc.SubsampleRatio {
	case image.YCbCrSubsampleRatio420:
		sx, sy = 2, 2
	case image.YCbCrSubsampleRatio422:
		sx = 2
	case image.YCbCrSubsampleRatio440:
		sy = 2
	case image.YCbCrSubsampleRatio411:
		sx = 4
	case image.YCbCrSubsampleRatio410:
		sx, sy = 4, 2
	}
	cw, ch := (w+sx-1)/sx, (h+sy-1)/sy
	chroma := func(plane []uint8, x, y int) float64 {
		// Position of luma sample (x, y) in chroma sample units.
		fx := (float64(x)+0.5)/float64(sx) - 0.5
		fy := (float64(y)+0.5)/float64(sy) - 0.5
		x0, y0 := int(math.Floor(fx)), int(math.Floor(fy))
		ax, ay := fx-float64(x0), fy-float64(y0)
		at := func(i, j int) float64 {
			i = min(max(i, 0), cw-1)
			j = min(max(j, 0), ch-1)
			return float64(plane[j*yc.CStride+i])
		}
		top := at(x0, y0)*(1-ax) + at(x0+1, y0)*ax
		bot := at(x0, y0+1)*(1-ax) + at(x0+1, y0+1)*ax
		return top*(1-ay) + bot*ay
	}
	out := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			Y := float64(yc.Y[y*yc.YStride+x])
			cb := chroma(yc.Cb, x, y) - 128
			cr := chroma(yc.Cr, x, y) - 128
			var c color.NRGBA
			if limited {
				Y = 255.0 / 219 * (Y - 16)
				cb *= 255.0 / 224
				cr *= 255.0 / 224
			}
			c = color.NRGBA{
				clamp8(Y + 1.402*cr),
				clamp8(Y - 0.344136*cb - 0.714136*cr),
				clamp8(Y + 1.772*cb),
				255,
			}
			out.SetNRGBA(x, y, c)
		}
	}
	return out
}

// refTransform crops src to crop, scales it bilinearly to size×size and
// flips it if asked.
func refTransform(src *image.NRGBA, crop Rect, size int, flip bool) *image.NRGBA {
	dst := image.NewNRGBA(image.Rect(0, 0, size, size))
	sr := image.Rect(crop.X, crop.Y, crop.X+crop.W, crop.Y+crop.H)
	draw.BiLinear.Scale(dst, dst.Bounds(), src, sr, draw.Src, nil)
	if flip {
		for y := 0; y < size; y++ {
			row := dst.Pix[y*dst.Stride : y*dst.Stride+4*size]
			for i, j := 0, size-1; i < j; i, j = i+1, j-1 {
				for k := 0; k < 4; k++ {
					row[4*i+k], row[4*j+k] = row[4*j+k], row[4*i+k]
				}
			}
		}
	}
	return dst
}

// refSample is the reference for a Sampling: box (fractional) scaled
// bilinearly to size×size, reading only clip (x/image/draw's Transform,
// which widens its kernel when downscaling, as PIL does), flipped if
// asked.
func refSample(src *image.NRGBA, box Box, clip Rect, size int, flip bool) *image.NRGBA {
	dst := image.NewNRGBA(image.Rect(0, 0, size, size))
	sx, sy := float64(size)/box.W, float64(size)/box.H
	s2d := f64.Aff3{sx, 0, -box.X * sx, 0, sy, -box.Y * sy}
	sr := image.Rect(clip.X, clip.Y, clip.X+clip.W, clip.Y+clip.H)
	draw.BiLinear.Transform(dst, s2d, src, sr, draw.Src, nil)
	if flip {
		for y := 0; y < size; y++ {
			row := dst.Pix[y*dst.Stride : y*dst.Stride+4*size]
			for i, j := 0, size-1; i < j; i, j = i+1, j-1 {
				for k := 0; k < 4; k++ {
					row[4*i+k], row[4*j+k] = row[4*j+k], row[4*i+k]
				}
			}
		}
	}
	return dst
}

// sampleAt returns channel ch (0 R, 1 G, 2 B) of output pixel (x, y).
func sampleAt(s []byte, size int, layout Layout, x, y, ch int) uint8 {
	if layout == NHWC {
		return s[(y*size+x)*3+ch]
	}
	return s[ch*size*size+y*size+x]
}

// diffStats compares a sample with a reference image: mean absolute error
// per channel, the largest error, and the 99th percentile error.
type diffStats struct {
	mean [3]float64
	max  int
	p99  int
}

func (d diffStats) String() string {
	return fmt.Sprintf("mean abs R %.2f G %.2f B %.2f, p99 %d, max %d", d.mean[0], d.mean[1], d.mean[2], d.p99, d.max)
}

func (d diffStats) worstMean() float64 { return max(d.mean[0], d.mean[1], d.mean[2]) }

func compare(s []byte, size int, layout Layout, ref *image.NRGBA) diffStats {
	var st diffStats
	var hist [256]int
	var sum [3]int
	for y := 0; y < size; y++ {
		for x := 0; x < size; x++ {
			c := ref.NRGBAAt(x, y)
			want := [3]uint8{c.R, c.G, c.B}
			for ch := 0; ch < 3; ch++ {
				d := int(sampleAt(s, size, layout, x, y, ch)) - int(want[ch])
				if d < 0 {
					d = -d
				}
				sum[ch] += d
				hist[d]++
				st.max = max(st.max, d)
			}
		}
	}
	n := size * size
	for ch := range 3 {
		st.mean[ch] = float64(sum[ch]) / float64(n)
	}
	acc := 0
	for v, c := range hist {
		acc += c
		if acc >= 3*n*99/100 {
			st.p99 = v
			break
		}
	}
	return st
}
