package decode

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// triangleTaps is the float definition of resize.c's filter (PIL's
// bilinear) for output i of an axis of n pixels sampled at x0 + (i+0.5) ·
// scale: the first source pixel and the normalised weights.
func triangleTaps(n int, x0, scale float64, i int) (first int, w []float64) {
	s := max(scale, 1)
	c := x0 + (float64(i)+0.5)*scale
	sum := 0.0
	for j := 0; j < n; j++ {
		v := 1 - math.Abs(float64(j)+0.5-c)/s
		if v <= 0 {
			if len(w) > 0 {
				break
			}
			continue
		}
		if len(w) == 0 {
			first = j
		}
		w = append(w, v)
		sum += v
	}
	for k := range w {
		w[k] /= sum
	}
	return first, w
}

// refResize is resize.c's filter in float64, rounded once at the end: the
// w×h RGB region at src (stride bytes per row) to size×size placed by m,
// mirrored if flip, as an NCHW sample.
func refResize(src []byte, stride, w, h, size int, flip bool, m sampleMap) []byte {
	out := make([]byte, 3*size*size)
	mid := make([]float64, 3*w)
	fx := make([]int, size)
	wx := make([][]float64, size)
	for p := range size {
		i := p
		if flip {
			i = size - 1 - p
		}
		fx[p], wx[p] = triangleTaps(w, m.X0, m.SX, i)
	}
	for y := range size {
		fy, wy := triangleTaps(h, m.Y0, m.SY, y)
		clear(mid)
		for k, wk := range wy {
			row := src[(fy+k)*stride:]
			for x := range 3 * w {
				mid[x] += wk * float64(row[x])
			}
		}
		for p := range size {
			for ch := range 3 {
				v := 0.0
				for k, wk := range wx[p] {
					v += wk * mid[3*(fx[p]+k)+ch]
				}
				out[ch*size*size+y*size+p] = uint8(min(max(math.Round(v), 0), 255))
			}
		}
	}
	return out
}

// resizeCase is a random region: photo-like (smooth gradients plus noise)
// or pure noise, the hardest case for rounding.
func resizeCase(r *rand.Rand, w, h, stride int, noise bool) []byte {
	src := make([]byte, (h-1)*stride+3*w+resizeSlack)
	for y := range h {
		for x := range w {
			for ch := range 3 {
				var v int
				if noise {
					v = r.IntN(256)
				} else {
					v = (x*(ch+1)*255/max(w, 1)+y*(3-ch)*255/max(h, 1))/3 + r.IntN(9) - 4
				}
				src[y*stride+3*x+ch] = uint8(min(max(v, 0), 255))
			}
		}
	}
	// Garbage in the row padding and the slack: never used.
	for i := range src {
		if x := i % stride; x >= 3*w || i >= (h-1)*stride+3*w {
			src[i] = uint8(r.IntN(256))
		}
	}
	return src
}

// Tolerance of the fixed-point scaler against its float definition: Q14
// weights (error <= 2^-15 each, about 0.01 level over a few taps), the Q7
// intermediate row (<= 1/256 level) and one final rounding, so the result
// is the float value rounded, or one level off where that value lies
// within a few hundredths of a half: at most 1 value in 100 (plus one, for
// tiny samples) is. Measured: max 1, 0.1-0.7% of values off (one value of
// a 5x5 sample).
const (
	resizeMaxTol = 1
	resizeOffPct = 1
)

func resizeKernels(t testing.TB) []resizeImpl {
	impls := []resizeImpl{resizeC}
	switch bestResizeImpl() {
	case resizeAVX2:
		impls = append(impls, resizeSSE2, resizeAVX2)
	case resizeSSE2:
		impls = append(impls, resizeSSE2)
	}
	return impls
}

// Every kernel gives the float definition's output within the tolerance,
// the kernels agree bit for bit, flipping mirrors, and NHWC holds the
// same pixels as NCHW; over upscales, downscales, extreme ratios, tiny
// regions and odd sizes, with the sample spread over the whole region
// (crop, then resize) or on a fractional box inside it (resize, then
// crop: the filter reads past the box's edges).
func TestResizeMatchesFloat(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	geoms := [][3]int{ // w, h, size
		{341, 341, 224}, {470, 390, 224}, {120, 97, 224}, {224, 224, 224}, {225, 223, 224},
		{1, 1, 224}, {1, 300, 224}, {300, 1, 224}, {2, 3, 7}, {1000, 20, 64}, {17, 1500, 33},
		{500, 375, 1}, {448, 448, 224}, {3000, 2, 5},
	}
	for range 12 {
		geoms = append(geoms, [3]int{1 + r.IntN(600), 1 + r.IntN(600), 1 + r.IntN(300)})
	}
	impls := resizeKernels(t)
	var z resizer
	defer z.free()
	for gi, g := range geoms {
		w, h, size := g[0], g[1], g[2]
		stride := 3*w + r.IntN(5)
		src := resizeCase(r, w, h, stride, gi%3 == 2)
		m := fillMap(w, h, size)
		if gi%2 == 1 {
			// A box inside the region, at a fractional offset.
			bx, by := r.Float64()*float64(w)/4, r.Float64()*float64(h)/4
			bw, bh := (0.5+r.Float64()/2)*(float64(w)-bx), (0.5+r.Float64()/2)*(float64(h)-by)
			m = mapOnto(Box{bx, by, bw, bh}, Rect{0, 0, w, h}, size)
		}
		for _, flip := range []bool{false, true} {
			want := refResize(src, stride, w, h, size, flip, m)
			var first []byte
			for _, impl := range impls {
				got := make([]byte, 3*size*size)
				if err := z.scaleRGBBytes(impl, src, stride, w, h, got, size, NCHW, flip, false, m); err != nil {
					t.Fatal(err)
				}
				off, worst := 0, 0
				for i := range got {
					d := abs(int(got[i]) - int(want[i]))
					if d > 0 {
						off++
					}
					worst = max(worst, d)
				}
				pct := 100 * float64(off) / float64(len(got))
				if worst > resizeMaxTol || off > len(got)*resizeOffPct/100+1 {
					t.Errorf("%dx%d -> %d %+v flip %v %v: vs float max %d, %.2f%% off", w, h, size, m, flip, impl, worst, pct)
				} else if testing.Verbose() && impl == resizeC {
					t.Logf("%4dx%-4d -> %3d %+.3v flip %-5v: vs float max %d, %.2f%% off", w, h, size, m, flip, worst, pct)
				}
				if first == nil {
					first = got
				} else if !bytes.Equal(got, first) {
					t.Errorf("%dx%d -> %d flip %v: %v differs from %v", w, h, size, flip, impl, impls[0])
				}
				nhwc := make([]byte, 3*size*size)
				if err := z.scaleRGBBytes(impl, src, stride, w, h, nhwc, size, NHWC, flip, false, m); err != nil {
					t.Fatal(err)
				}
				for y := range size {
					for x := range size {
						for ch := range 3 {
							if a, b := sampleAt(got, size, NCHW, x, y, ch), sampleAt(nhwc, size, NHWC, x, y, ch); a != b {
								t.Fatalf("%dx%d -> %d %v: NHWC (%d,%d,%d) = %d, NCHW %d", w, h, size, impl, x, y, ch, b, a)
							}
						}
					}
				}
			}
		}
	}
}

// Identity and flat colour are exact: weights sum to exactly one.
func TestResizeExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	var z resizer
	defer z.free()
	for _, impl := range resizeKernels(t) {
		for _, size := range []int{1, 7, 224} {
			src := resizeCase(r, size, size, 3*size, true)
			got := make([]byte, 3*size*size)
			if err := z.scaleRGBBytes(impl, src, 3*size, size, size, got, size, NCHW, false, false, fillMap(size, size, size)); err != nil {
				t.Fatal(err)
			}
			for y := range size {
				for x := range size {
					for ch := range 3 {
						if a, b := sampleAt(got, size, NCHW, x, y, ch), src[3*(y*size+x)+ch]; a != b {
							t.Fatalf("%v identity %d: (%d,%d,%d) = %d, want %d", impl, size, x, y, ch, a, b)
						}
					}
				}
			}
		}
		for _, g := range [][2]int{{341, 277}, {50, 3}, {1000, 999}} {
			w, h := g[0], g[1]
			src := make([]byte, 3*w*h+resizeSlack)
			for i := range 3 * w * h {
				src[i] = []byte{0, 255, 129}[i%3]
			}
			got := make([]byte, 3*224*224)
			if err := z.scaleRGBBytes(impl, src, 3*w, w, h, got, 224, NHWC, true, false, mapOnto(Box{0.3, 1.7, float64(w) / 2, float64(h) / 3}, Rect{0, 0, w, h}, 224)); err != nil {
				t.Fatal(err)
			}
			for i, v := range got {
				if v != []byte{0, 255, 129}[i%3] {
					t.Fatalf("%v flat %dx%d: byte %d = %d", impl, w, h, i, v)
				}
			}
		}
	}
}

// BenchmarkResize: one region to 224², NCHW, per kernel and against
// swscale (whose context is rebuilt whenever the source size changes, as
// it does on almost every Train sample: "swscale-new" cycles through more
// sizes than its cache holds, a pixel apart).
func BenchmarkResize(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, g := range [][2]int{{341, 341}, {470, 390}, {150, 120}} {
		w, h := g[0], g[1]
		rgb := resizeCase(r, w, h, 3*w, false)
		dst := make([]byte, 3*224*224)
		for _, impl := range resizeKernels(b) {
			b.Run(fmt.Sprintf("%dx%d/%v", w, h, impl), func(b *testing.B) {
				var z resizer
				defer z.free()
				for b.Loop() {
					if err := z.scaleRGBBytes(impl, rgb, 3*w, w, h, dst, 224, NCHW, false, false, fillMap(w, h, 224)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		for _, fresh := range []bool{false, true} {
			name := "swscale-cached"
			if fresh {
				name = "swscale-new"
			}
			b.Run(fmt.Sprintf("%dx%d/%s", w, h, name), func(b *testing.B) {
				var s scaler
				defer s.free()
				i := 0
				for b.Loop() {
					rw := w
					if fresh {
						rw -= i % 8
					}
					i++
					if _, err := s.scalePacked(unsafe.Pointer(&rgb[0]), 3*w, false, Rect{0, 0, rw, h}, dst, 224, NCHW); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
