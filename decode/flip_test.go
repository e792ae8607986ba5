package decode

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"
)

// vflip(p=P) is torchvision's RandomVerticalFlip(P): it follows
// random_resized_crop (and every geometry: TestFlipsFollowEveryGeometry),
// with or without hflip, in either order; without p
// it is 0.5; and the op list gives it back.
func TestVFlipOp(t *testing.T) {
	for _, tc := range []struct {
		s            string
		hflip, vflip float64
	}{
		{"random_resized_crop|vflip", 0, 0.5},
		{"random_resized_crop|vflip(p=0.25)", 0, 0.25},
		{"random_resized_crop|hflip|vflip(p=1/3)", 0.5, 1.0 / 3},
		{"random_resized_crop|vflip(p=0.1)|hflip(p=0.2)|grayscale", 0.2, 0.1},
		{"train", 0.5, 0},
	} {
		tr := mustTransform(t, tc.s)
		if tr.Geometry != Train || tr.FlipProb != tc.hflip || tr.VFlipProb != tc.vflip {
			t.Errorf("%s: %+v, want hflip %v vflip %v", tc.s, tr, tc.hflip, tc.vflip)
		}
		again, err := tr.Ops().Compile()
		if err != nil || !reflect.DeepEqual(again, tr) {
			t.Errorf("%s: Ops %q compiles to %+v, %v", tc.s, tr.Ops(), again, err)
		}
	}
	for _, tc := range []struct{ s, want string }{
		{"random_resized_crop|vflip(p=2)", "out of [0, 1]"},
		{"random_resized_crop|vflip|vflip", "come first"},
		{"resize|vflip|vflip", "come first"},
		{"random_resized_crop|grayscale|vflip", "come first"},
		{"random_resized_crop|vflip(q=1)", "unknown parameter q"},
	} {
		if _, err := ParseTransform(tc.s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseTransform(%q): %v, want an error with %q", tc.s, err, tc.want)
		}
	}
}

// The vertical flip draws from its own stream: adding it moves neither
// the crop nor the horizontal flip, it flips at its rate, and
// independently of the horizontal flip.
func TestVFlipDrawsAreSeparate(t *testing.T) {
	plain := mustTransform(t, "train")
	both := mustTransform(t, Presets["train"]+"|vflip(p=0.3)")
	const n = 20000
	var v, hv int
	for i := range n {
		seed := SampleSeed(5, 1, int64(i))
		a := SamplingFor(plain, 500, 375, seed)
		b := SamplingFor(both, 500, 375, seed)
		if a.Crop != b.Crop || a.Flip != b.Flip || a.Box != b.Box || a.VFlip {
			t.Fatalf("seed %d: vflip moved the geometry: %+v, %+v", seed, a, b)
		}
		if b.VFlip {
			v++
			if b.Flip {
				hv++
			}
		}
	}
	if z := (float64(v) - 0.3*n) / math.Sqrt(n*0.3*0.7); math.Abs(z) > 4 {
		t.Errorf("vflip rate %.4f: z = %.1f against 0.3", float64(v)/n, z)
	}
	// Given a vertical flip, the horizontal one still comes half the time.
	if z := (float64(hv) - 0.5*float64(v)) / math.Sqrt(float64(v)/4); math.Abs(z) > 4 {
		t.Errorf("hflip given vflip %d of %d: z = %.1f", hv, v, z)
	}
}

// flipRows is s with its rows in reverse order (torchvision's F.vflip).
func flipRows(s []byte, size int, l Layout) []byte {
	out := make([]byte, len(s))
	if l == NHWC {
		row := 3 * size
		for y := range size {
			copy(out[(size-1-y)*row:(size-y)*row], s[y*row:(y+1)*row])
		}
		return out
	}
	for c := range 3 {
		p := s[c*size*size : (c+1)*size*size]
		q := out[c*size*size : (c+1)*size*size]
		for y := range size {
			copy(q[(size-1-y)*size:(size-y)*size], p[y*size:(y+1)*size])
		}
	}
	return out
}

// A vertically flipped sample is the unflipped one with its rows
// reversed, exactly, on every decoder path and layout and through
// TransformRGB: the flip mirrors the vertical filter tables, as hflip
// mirrors the horizontal ones.
func TestVFlipMirrorsRows(t *testing.T) {
	for _, l := range []Layout{NCHW, NHWC} {
		for _, fast := range []bool{true, false} {
			for _, size := range []int{40, 7} {
				plain, c := newDecoderPath(t, "random_resized_crop(scale=0.2:1)|hflip", size, l, true, fast)
				flipped, _ := newDecoderPath(t, "random_resized_crop(scale=0.2:1)|hflip|vflip(p=1)", size, l, true, fast)
				a, b := make([]byte, c.SampleBytes()), make([]byte, c.SampleBytes())
				for _, f := range []string{"jpeg_420.jpg", "jpeg_444.jpg", "png_rgb.png", "webp_lossy.webp", "large_1280x1024_q90_420.jpg"} {
					data := readFixture(t, f)
					for seed := uint64(0); seed < 6; seed++ {
						ia, err1 := plain.Decode(data, seed, a)
						ib, err2 := flipped.Decode(data, seed, b)
						if err1 != nil || err2 != nil {
							t.Fatal(err1, err2)
						}
						if ia.VFlip || !ib.VFlip || ia.Crop != ib.Crop || ia.Flip != ib.Flip {
							t.Fatalf("%s seed %d: infos %+v, %+v", f, seed, ia, ib)
						}
						if !bytes.Equal(b, flipRows(a, size, l)) {
							t.Fatalf("%v fast=%v size %d %s seed %d: the vflipped sample is not the sample's rows reversed", l, fast, size, f, seed)
						}
					}
				}
				// TransformRGB: the GPU path's transform.
				w, h := 61, 47
				rgb := make([]byte, 3*w*h+RGBSlack)
				for i := range rgb[:3*w*h] {
					rgb[i] = byte(i*7 + i/(3*w)*13)
				}
				for seed := uint64(0); seed < 6; seed++ {
					if _, err := plain.TransformRGB(rgb, w, h, 3*w, seed, a); err != nil {
						t.Fatal(err)
					}
					if _, err := flipped.TransformRGB(rgb, w, h, 3*w, seed, b); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(b, flipRows(a, size, l)) {
						t.Fatalf("%v size %d TransformRGB seed %d: not the rows reversed", l, size, seed)
					}
				}
			}
		}
	}
}

// hflip(p=P) and vflip(p=P) follow every geometry, as torchvision's
// RandomHorizontalFlip and RandomVerticalFlip follow RandomResizedCrop,
// Resize + CenterCrop or Resize((S, S)): after center_crop for eval,
// after resize for resize; in either order, each at most once; p 0.5
// when absent; and the op list gives them back. Without them, nothing
// flips.
func TestFlipsFollowEveryGeometry(t *testing.T) {
	for _, tc := range []struct {
		s            string
		g            Geometry
		hflip, vflip float64
	}{
		{"resize(short=256)|center_crop|hflip(p=1)", Eval, 1, 0},
		{"resize(size=256)|center_crop(size=224)|hflip|vflip(p=0.25)", Eval, 0.5, 0.25},
		{"resize(short=300)|center_crop|vflip(p=0.1)|hflip(p=0.2)|grayscale", Eval, 0.2, 0.1},
		{"resize|vflip(p=0.3)", Resize, 0, 0.3},
		{"resize|vflip|hflip(p=1/3)|brightness(factor=0.5:1.5)", Resize, 1.0 / 3, 0.5},
		{"eval", Eval, 0, 0},
		{"resize", Resize, 0, 0},
		{"resize(short=256)|center_crop|grayscale", Eval, 0, 0},
	} {
		tr := mustTransform(t, tc.s)
		if tr.Geometry != tc.g || tr.FlipProb != tc.hflip || tr.VFlipProb != tc.vflip {
			t.Errorf("%s: %+v, want %v hflip %v vflip %v", tc.s, tr, tc.g, tc.hflip, tc.vflip)
		}
		again, err := tr.Ops().Compile()
		if err != nil || !reflect.DeepEqual(again, tr) {
			t.Errorf("%s: Ops %q compiles to %+v, %v", tc.s, tr.Ops(), again, err)
		}
		for seed := range uint64(200) {
			if s := SamplingFor(tr, 500, 375, seed); tc.hflip == 0 && s.Flip || tc.vflip == 0 && s.VFlip {
				t.Fatalf("%s seed %d: flipped without the op: %+v", tc.s, seed, s)
			}
		}
	}
	for _, tc := range []struct{ s, want string }{
		{"resize(short=256)|center_crop|hflip(p=1.5)", "out of [0, 1]"},
		{"resize(short=256)|hflip|center_crop", "followed by center_crop"},
		{"resize|hflip|hflip", "come first"},
		{"resize|grayscale|vflip", "come first"},
		{"resize(short=256)|center_crop|vflip(q=1)", "unknown parameter q"},
	} {
		if _, err := ParseTransform(tc.s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseTransform(%q): %v, want an error with %q", tc.s, err, tc.want)
		}
	}
}

// The flips after eval and resize draw from the streams they draw from
// after random_resized_crop: a sample's flips are train's for the same
// seed (hflip's stream, vflip's), and adding them moves nothing else.
func TestFlipDrawsEveryGeometry(t *testing.T) {
	train := mustTransform(t, "random_resized_crop|hflip(p=0.5)|vflip(p=0.3)")
	for _, base := range []string{"resize(short=256)|center_crop", "resize"} {
		plain := mustTransform(t, base)
		flips := mustTransform(t, base+"|hflip|vflip(p=0.3)")
		const n = 5000
		var h, v int
		for i := range n {
			seed := SampleSeed(9, 2, int64(i))
			a, b, tr := SamplingFor(plain, 500, 375, seed), SamplingFor(flips, 500, 375, seed), SamplingFor(train, 500, 375, seed)
			if a.Crop != b.Crop || a.Box != b.Box || a.Clip != b.Clip || a.Flip || a.VFlip {
				t.Fatalf("%s seed %d: the flips moved the geometry: %+v, %+v", base, seed, a, b)
			}
			if b.Flip != tr.Flip || b.VFlip != tr.VFlip {
				t.Fatalf("%s seed %d: flips %v %v, train's %v %v", base, seed, b.Flip, b.VFlip, tr.Flip, tr.VFlip)
			}
			if b.Flip {
				h++
			}
			if b.VFlip {
				v++
			}
		}
		if z := (float64(h) - 0.5*n) / math.Sqrt(n*0.25); math.Abs(z) > 4 {
			t.Errorf("%s: hflip rate %.4f", base, float64(h)/n)
		}
		if z := (float64(v) - 0.3*n) / math.Sqrt(n*0.21); math.Abs(z) > 4 {
			t.Errorf("%s: vflip rate %.4f", base, float64(v)/n)
		}
	}
}

// flipCols is s with each row reversed (torchvision's F.hflip).
func flipCols(s []byte, size int, l Layout) []byte {
	out := make([]byte, len(s))
	if l == NHWC {
		for y := range size {
			for x := range size {
				copy(out[3*(y*size+size-1-x):3*(y*size+size-x)], s[3*(y*size+x):3*(y*size+x+1)])
			}
		}
		return out
	}
	for i := 0; i < len(s); i += size {
		for x := range size {
			out[i+size-1-x] = s[i+x]
		}
	}
	return out
}

// A flipped sample is the unflipped one mirrored, bit for bit, after
// every geometry: left to right for hflip(p=1), top to bottom for
// vflip(p=1), both for both, on the libjpeg-turbo and FFmpeg paths, at
// full scale and lowres, in both layouts, and through TransformRGB (the
// GPU JPEG path's per-sample transform).
func TestFlipsMirrorEveryGeometry(t *testing.T) {
	type mirror func([]byte, int, Layout) []byte
	both := func(s []byte, size int, l Layout) []byte { return flipRows(flipCols(s, size, l), size, l) }
	flips := []struct {
		ops string
		m   mirror
	}{{"|hflip(p=1)", flipCols}, {"|vflip(p=1)", flipRows}, {"|vflip(p=1)|hflip(p=1)", both}}
	files := []string{"jpeg_420.jpg", "jpeg_444.jpg", "png_rgb.png", "webp_lossy.webp", "large_1280x1024_q90_420.jpg"}
	for _, base := range []string{"random_resized_crop(scale=0.2:1)", "resize(short=48)|center_crop", "resize(size=300)|center_crop", "resize"} {
		for _, l := range []Layout{NCHW, NHWC} {
			for _, path := range []struct{ lowres, fast bool }{{true, true}, {false, true}, {true, false}, {false, false}} {
				for _, size := range []int{40, 7} {
					plain, c := newDecoderPath(t, base, size, l, path.lowres, path.fast)
					a, b := make([]byte, c.SampleBytes()), make([]byte, c.SampleBytes())
					for _, f := range flips {
						flipped, _ := newDecoderPath(t, base+f.ops, size, l, path.lowres, path.fast)
						for _, name := range files {
							data := readFixture(t, name)
							for seed := uint64(0); seed < 3; seed++ {
								ia, err1 := plain.Decode(data, seed, a)
								ib, err2 := flipped.Decode(data, seed, b)
								if err1 != nil || err2 != nil {
									t.Fatal(err1, err2)
								}
								if ia.Flip || ia.VFlip || ib.Flip != strings.Contains(f.ops, "hflip") || ib.VFlip != strings.Contains(f.ops, "vflip") || ia.Crop != ib.Crop || ia.Region != ib.Region || ia.Lowres != ib.Lowres {
									t.Fatalf("%s%s %s seed %d: infos %+v, %+v", base, f.ops, name, seed, ia, ib)
								}
								if !bytes.Equal(b, f.m(a, size, l)) {
									t.Fatalf("%s%s %v lowres=%v fast=%v size %d %s seed %d: not the unflipped sample mirrored", base, f.ops, l, path.lowres, path.fast, size, name, seed)
								}
							}
						}
						w, h := 61, 47
						rgb := make([]byte, 3*w*h+RGBSlack)
						for i := range rgb[:3*w*h] {
							rgb[i] = byte(i*7 + i/(3*w)*13)
						}
						for seed := uint64(0); seed < 3; seed++ {
							if _, err := plain.TransformRGB(rgb, w, h, 3*w, seed, a); err != nil {
								t.Fatal(err)
							}
							if _, err := flipped.TransformRGB(rgb, w, h, 3*w, seed, b); err != nil {
								t.Fatal(err)
							}
							if !bytes.Equal(b, f.m(a, size, l)) {
								t.Fatalf("%s%s %v size %d TransformRGB seed %d: not the unflipped sample mirrored", base, f.ops, l, size, seed)
							}
						}
					}
				}
			}
		}
	}
}
