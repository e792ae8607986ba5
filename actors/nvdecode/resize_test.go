package nvdecode

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"image/jpeg"
	"math"
	"testing"

	"github.com/longshore/longshore/decode"
)

// tolerance is the device path's against the CPU path's, stated before
// the first device run (docs/performance.md, "GPU"): an image's mean
// absolute difference at most 1.0 level, and at most 0.1% of its values
// off by more than 8.
func tolerance(got, want []byte) (mean float64, over8 float64, ok bool) {
	var sum, n8 int
	for i := range got {
		d := int(got[i]) - int(want[i])
		if d < 0 {
			d = -d
		}
		sum += d
		if d > 8 {
			n8++
		}
	}
	mean = float64(sum) / float64(len(got))
	over8 = float64(n8) / float64(len(got))
	return mean, over8, mean <= 1.0 && over8 <= 0.001
}

// fullRGB decodes a square JPEG whole to interleaved RGB (stride 3·w,
// with the slack TransformRGB wants), as the device's decoders do, with
// the CPU path's libjpeg-turbo: the CPU decoder resizing the picture to
// its own size, an identity geometry (decode/testdata/make.sh makes the
// base fixtures square for this). nvJPEG's output equals libjpeg-turbo's
// full decode on 4:4:4 and grayscale and is within 0.35 level on 4:2:0
// (docs/performance.md, "JPEG on the GPU's engines").
func fullRGB(t *testing.T, data []byte) (rgb []byte, w, h int) {
	t.Helper()
	img, err := jpeg.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	w, h = img.Width, img.Height
	if w != h {
		t.Fatalf("fullRGB: a %dx%d picture; the identity geometry needs a square", w, h)
	}
	dc := decode.DefaultConfig()
	dc.Transform = transformOf(t, "resize", w)
	dc.Layout = decode.NHWC
	d, err := decode.NewDecoder(dc)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	rgb = make([]byte, 3*w*h+decode.RGBSlack)
	if _, err := d.Decode(data, 0, rgb[:3*w*h]); err != nil {
		t.Fatal(err)
	}
	return rgb, w, h
}

// pixelFiles: the square fixtures (photographs, decode/testdata/make.sh).
var pixelFiles = []string{"jpeg_444.jpg", "jpeg_420.jpg", "jpeg_422.jpg", "jpeg_gray.jpg", "jpeg_progressive.jpg", "jpeg_rgb.jpg"}

func transformOf(t *testing.T, name string, size int) decode.Transform {
	t.Helper()
	tr, err := decode.ParseTransform(name)
	if err != nil {
		t.Fatal(err)
	}
	tr.Size = size
	if tr.ResizeShort < size {
		tr.ResizeShort = size * 8 / 7
	}
	return tr
}

// TestDeviceResizeMatchesCPUPath: the twin of the device resize (the
// kernel's tables and arithmetic) on a whole decoded picture, against
// the CPU path's sample for the same seed, within the tolerance on every
// image; and the same check fails for a wrong geometry (another seed's
// crop, a missing flip) and a wrong filter (bilinear without the
// antialiasing widening).
//
// The CPU path with Lowres (the default) decodes at 1/2-1/8 scale where
// the crop keeps both sides >= Size; the device decodes whole. Such
// samples (here: train at 64 from 160-pixel photographs) are compared
// with the CPU path without Lowres, and their difference from the
// default CPU path is logged, not bounded: it is the decoders', and
// ImageNet's train crops at 224 never take it.
func TestDeviceResizeMatchesCPUPath(t *testing.T) {
	for _, tc := range []struct {
		transform string
		size      int
		layout    decode.Layout
		lowres    bool // the CPU path's Lowres
	}{{"train", 224, decode.NCHW, true}, {"train", 64, decode.NHWC, false}, {"eval", 224, decode.NHWC, true},
		{"resize", 96, decode.NCHW, true}, {"resize(short=256)|center_crop|hflip|vflip", 224, decode.NCHW, true},
		{"resize|vflip(p=0.7)", 96, decode.NHWC, true}} {
		dc := decode.DefaultConfig()
		dc.Transform = transformOf(t, tc.transform, tc.size)
		dc.Layout = tc.layout
		dc.Lowres = tc.lowres
		lowres := dc
		lowres.Lowres = true
		scaled, err := decode.NewDecoder(lowres)
		if err != nil {
			t.Fatal(err)
		}
		var scaledWorst float64
		cpu, err := decode.NewDecoder(dc)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, dc.SampleBytes())
		got := make([]byte, dc.SampleBytes())
		var worst float64
		var wrongSeed, noFlip, noAA int // negative controls out of tolerance
		flips := 0
		for _, file := range pixelFiles {
			data := read(t, file)
			rgb, w, h := fullRGB(t, data)
			for seed := uint64(1); seed <= 6; seed++ {
				if _, err := cpu.Decode(data, seed, want); err != nil {
					t.Fatal(err)
				}
				p := PlanResize(dc.Transform, dc.Layout, w, h, seed)
				p.Resize(rgb, 3*w, got)
				if !tc.lowres {
					ref := make([]byte, len(want))
					if _, err := scaled.Decode(data, seed, ref); err != nil {
						t.Fatal(err)
					}
					m, _, _ := tolerance(got, ref)
					scaledWorst = max(scaledWorst, m)
				}
				mean, over8, ok := tolerance(got, want)
				worst = max(worst, mean)
				if !ok {
					t.Errorf("%s %d %v %s seed %d: mean |Δ| %.3f, %.4f%% off by > 8: out of tolerance", tc.transform, tc.size, tc.layout, file, seed, mean, 100*over8)
				}
				// Wrong geometry: the next seed's crop.
				q := PlanResize(dc.Transform, dc.Layout, w, h, seed+100)
				q.Resize(rgb, 3*w, got)
				if _, _, ok := tolerance(got, want); !ok {
					wrongSeed++
				}
				if p.Flip {
					flips++
					q := p
					q.Flip = false
					q.Resize(rgb, 3*w, got)
					if _, _, ok := tolerance(got, want); !ok {
						noFlip++
					}
				}
				// Wrong filter: plain bilinear (no widening) where the
				// sample downscales.
				s := decode.SamplingFor(dc.Transform, w, h, seed)
				r, x0, sx, y0, sy := s.Region(w, h, tc.size)
				if sx > 2 && sy > 2 {
					q := p
					q.X, q.Y = narrowTable(r.W, tc.size, x0, sx), narrowTable(r.H, tc.size, y0, sy)
					q.Resize(rgb, 3*w, got)
					if _, _, ok := tolerance(got, want); !ok {
						noAA++
					}
				}
			}
		}
		t.Logf("%s %d %v (CPU path's lowres %v): worst image mean |Δ| %.3f (against the default CPU path, lowres: %.3f); out of tolerance: other seed %d/%d, no flip %d/%d, no antialiasing %d",
			tc.transform, tc.size, tc.layout, tc.lowres, worst, scaledWorst, wrongSeed, 6*len(pixelFiles), noFlip, flips, noAA)
		scaled.Close()
		if tc.transform == "train" && (wrongSeed < 6*len(pixelFiles)*3/4 || noFlip < flips*3/4 || flips == 0) {
			t.Errorf("a wrong geometry passes the tolerance: other seed %d/%d, no flip %d/%d", wrongSeed, 6*len(pixelFiles), noFlip, flips)
		}
		if tc.transform == "train" && tc.size == 64 && noAA == 0 {
			t.Error("a filter without antialiasing passes the tolerance on every downscaled sample")
		}
		cpu.Close()
	}
}

// narrowTable is axisTable with the triangle never widened (plain
// bilinear): the wrong filter for a downscale.
func narrowTable(n, size int, x0, scale float64) Axis {
	a := axisTable(n, size, x0, scale)
	for i := range size {
		c := x0 + (float64(i)+0.5)*scale
		lo := max(int(math.Floor(c-1.5))+1, 0)
		lo = min(lo, n-1)
		cnt := min(2, n-lo)
		sum := 0.0
		ws := make([]float64, cnt)
		for j := range cnt {
			ws[j] = max(1-math.Abs(float64(lo+j)+0.5-c), 0)
			sum += ws[j]
		}
		if sum == 0 {
			ws[0], sum = 1, 1
		}
		a.First[i], a.Count[i] = int32(lo), int32(cnt)
		for j := range cnt {
			a.W[i*a.K+j] = float32(ws[j] / sum)
		}
	}
	return a
}

// The tables are what decode/resize.c computes: every output's weights
// sum to 1, its taps lie in the region, and a 1:1 map (no scaling)
// copies pixels exactly.
func TestAxisTable(t *testing.T) {
	for _, c := range []struct {
		n, size int
		x0, sc  float64
	}{{100, 10, 0, 10}, {37, 224, 0, 37.0 / 224}, {500, 224, 3.25, 1.7}, {1, 5, 0, 0.2}} {
		a := axisTable(c.n, c.size, c.x0, c.sc)
		for i := range c.size {
			var s float64
			for j := range int(a.Count[i]) {
				s += float64(a.W[i*a.K+j])
			}
			if math.Abs(s-1) > 1e-5 || a.First[i] < 0 || int(a.First[i]+a.Count[i]) > c.n || a.Count[i] < 1 {
				t.Errorf("%+v output %d: first %d count %d sum %v", c, i, a.First[i], a.Count[i], s)
			}
		}
	}
	p := ResizePlan{W: 4, H: 4, Region: decode.Rect{W: 4, H: 4}, Size: 4, Layout: decode.NHWC,
		X: axisTable(4, 4, 0, 1), Y: axisTable(4, 4, 0, 1)}
	src := make([]byte, 48)
	for i := range src {
		src[i] = byte(i * 5)
	}
	dst := make([]byte, 48)
	p.Resize(src, 12, dst)
	if !bytes.Equal(dst, src) {
		t.Errorf("1:1 resize %v, want %v", dst, src)
	}
	p.Flip = true
	p.Resize(src, 12, dst)
	if fmt.Sprint(dst[:3]) != fmt.Sprint(src[9:12]) {
		t.Errorf("flipped: first pixel %v, want the row's last %v", dst[:3], src[9:12])
	}
}

// TestPutTablesLayout: the kernel reads the packed tables
// (PutTables, ResizePTX's layout): a plan rebuilt from them resizes
// exactly as the plan, so the layout the kernel indexes is the plan's.
func TestPutTablesLayout(t *testing.T) {
	dc := stageConfig(t)
	data := read(t, "jpeg_444.jpg")
	rgb, w, h := fullRGB(t, data)
	for seed := uint64(1); seed <= 4; seed++ {
		p := PlanResize(dc.Transform, dc.Layout, w, h, seed)
		tab := make([]byte, p.TableBytes())
		p.PutTables(tab)
		q := tablesPlan(t, p, tab)
		a, b := make([]byte, dc.SampleBytes()), make([]byte, dc.SampleBytes())
		p.Resize(rgb, 3*w, a)
		q.Resize(rgb, 3*w, b)
		if !bytes.Equal(a, b) {
			t.Fatalf("seed %d: the packed tables resize differently", seed)
		}
	}
}

// tablesPlan is p with its tables read back from tab as the kernel reads
// them (PutTables' layout); the flip flags stay p's (kernel arguments).
func tablesPlan(t *testing.T, p ResizePlan, tab []byte) ResizePlan {
	t.Helper()
	n := p.Size
	word := func(i int) uint32 { return binary.LittleEndian.Uint32(tab[4*i:]) }
	q := p
	q.X = Axis{First: make([]int32, n), Count: make([]int32, n), W: make([]float32, n*p.X.K), K: p.X.K}
	q.Y = Axis{First: make([]int32, n), Count: make([]int32, n), W: make([]float32, n*p.Y.K), K: p.Y.K}
	for i := range n { // the kernel's offsets: 0, size, 2·size, 3·size, 4·size, 4·size + size·kx
		q.X.First[i], q.X.Count[i] = int32(word(i)), int32(word(n+i))
		q.Y.First[i], q.Y.Count[i] = int32(word(2*n+i)), int32(word(3*n+i))
	}
	for i := range n * p.X.K {
		q.X.W[i] = math.Float32frombits(word(4*n + i))
	}
	for i := range n * p.Y.K {
		q.Y.W[i] = math.Float32frombits(word(4*n + n*p.X.K + i))
	}
	return q
}

// TestDeviceResizeFlipsMirror: the device resize's sample with hflip(p=1),
// vflip(p=1) or both is its unflipped sample mirrored, bit for bit, after
// every geometry (random_resized_crop, resize|center_crop, resize) and in
// both layouts, through the twin and through the tables the kernel reads
// (PutTables): the batch stage flips as the CPU path does.
func TestDeviceResizeFlipsMirror(t *testing.T) {
	rgb, w, h := fullRGB(t, read(t, "jpeg_444.jpg"))
	const n = 24
	pixel := func(l decode.Layout, s []byte, x, y, c int) byte {
		if l == decode.NHWC {
			return s[3*(y*n+x)+c]
		}
		return s[c*n*n+y*n+x]
	}
	for _, base := range []string{"random_resized_crop(scale=0.2:1)", "resize(short=30)|center_crop", "resize"} {
		for _, l := range []decode.Layout{decode.NCHW, decode.NHWC} {
			plain := transformOf(t, base, n)
			for _, f := range []struct {
				ops    string
				hx, vy bool
			}{{"|hflip(p=1)", true, false}, {"|vflip(p=1)", false, true}, {"|hflip(p=1)|vflip(p=1)", true, true}} {
				flipped := transformOf(t, base+f.ops, n)
				for seed := uint64(1); seed <= 4; seed++ {
					a, b := make([]byte, 3*n*n), make([]byte, 3*n*n)
					pa := PlanResize(plain, l, w, h, seed)
					pa.Resize(rgb, 3*w, a)
					pb := PlanResize(flipped, l, w, h, seed)
					// Through the kernel's tables: a plan rebuilt from them.
					tab := make([]byte, pb.TableBytes())
					pb.PutTables(tab)
					pb = tablesPlan(t, pb, tab)
					pb.Resize(rgb, 3*w, b)
					for y := range n {
						for x := range n {
							sx, sy := x, y
							if f.hx {
								sx = n - 1 - x
							}
							if f.vy {
								sy = n - 1 - y
							}
							for c := range 3 {
								if pixel(l, b, x, y, c) != pixel(l, a, sx, sy, c) {
									t.Fatalf("%s%s %v seed %d: pixel (%d, %d) channel %d is %d, the unflipped sample's (%d, %d) %d", base, f.ops, l, seed, x, y, c, pixel(l, b, x, y, c), sx, sy, pixel(l, a, sx, sy, c))
								}
							}
						}
					}
				}
			}
		}
	}
}
