package decode

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func mustTransform(t testing.TB, name string) Transform {
	t.Helper()
	tr, err := ParseTransform(name)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func inside(r Rect, w, h int) bool {
	return r.W >= 1 && r.H >= 1 && r.X >= 0 && r.Y >= 0 && r.X+r.W <= w && r.Y+r.H <= h
}

func TestParseTransformDefaults(t *testing.T) {
	for _, name := range []string{"train", "eval", "resize"} {
		tr := mustTransform(t, name)
		if tr.Geometry.String() != name {
			t.Errorf("%s: kind %v", name, tr.Geometry)
		}
		want := Transform{Geometry: tr.Geometry, Size: 224, ResizeShort: 256, ScaleMin: 0.08, ScaleMax: 1,
			RatioMin: 3.0 / 4, RatioMax: 4.0 / 3}
		if name == "train" { // the hflip op's; eval and resize have none
			want.FlipProb = 0.5
		}
		if !reflect.DeepEqual(tr, want) {
			t.Errorf("%s: got %+v, want %+v", name, tr, want)
		}
	}
	if _, err := ParseTransform("Train "); err == nil {
		t.Error("unknown transform accepted")
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	if got := DefaultConfig().SampleBytes(); got != 3*224*224 {
		t.Errorf("SampleBytes = %d", got)
	}
	c := DefaultConfig()
	c.Transform.Size = 0
	c.Transform.ScaleMin = 0
	c.Transform.RatioMax = math.NaN()
	c.Transform.FlipProb = 1.5
	c.Layout = 7
	c.MaxPixels = 0
	err := c.Validate()
	if err == nil {
		t.Fatal("bad config accepted")
	}
	// Every problem is reported at once.
	for _, want := range []string{"Size", "ScaleMin", "RatioMin", "FlipProb", "layout", "MaxPixels"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s: %v", want, err)
		}
	}
	e := DefaultConfig()
	e.Transform = mustTransform(t, "eval")
	e.Transform.ResizeShort = 200
	if err := e.Validate(); err == nil || !strings.Contains(err.Error(), "ResizeShort") {
		t.Errorf("eval with ResizeShort < Size: %v", err)
	}
	if _, err := NewDecoder(c); err == nil {
		t.Error("NewDecoder accepted a bad config")
	}
}

func TestSampleSeed(t *testing.T) {
	if SampleSeed(1, 2, 3) != SampleSeed(1, 2, 3) {
		t.Fatal("not deterministic")
	}
	seen := map[uint64]bool{}
	for seed := uint64(0); seed < 3; seed++ {
		for epoch := 0; epoch < 10; epoch++ {
			for idx := int64(0); idx < 1000; idx++ {
				s := SampleSeed(seed, epoch, idx)
				if seen[s] {
					t.Fatalf("collision at seed %d epoch %d index %d", seed, epoch, idx)
				}
				seen[s] = true
			}
		}
	}
	if SampleSeed(0, 1, 2) == SampleSeed(0, 2, 1) {
		t.Error("epoch and index are interchangeable")
	}
}

func TestCropForTrainInvariants(t *testing.T) {
	tr := mustTransform(t, "train")
	sizes := [][2]int{{1, 1}, {2, 3}, {224, 224}, {500, 375}, {375, 500}, {1280, 1024}, {4000, 30}, {30, 4000}, {1, 1000}}
	fallbacks := 0
	for _, sz := range sizes {
		w, h := sz[0], sz[1]
		for i := range 2000 {
			seed := SampleSeed(7, 0, int64(i))
			crop, flip := CropFor(tr, w, h, seed)
			if !inside(crop, w, h) {
				t.Fatalf("%dx%d seed %d: crop %+v outside", w, h, seed, crop)
			}
			if c2, f2 := CropFor(tr, w, h, seed); c2 != crop || f2 != flip {
				t.Fatalf("%dx%d: not deterministic", w, h)
			}
			c3, fb := randomResizedCrop(tr, w, h, &rng{s: seed})
			if c3 != crop {
				t.Fatalf("CropFor and randomResizedCrop disagree")
			}
			if fb {
				fallbacks++
				continue
			}
			// Sides are rounded to whole pixels: the unrounded sides lie
			// within half a pixel of W and H, so the drawn area and ratio
			// lie in these intervals, which must meet the configured ones.
			W, H := float64(crop.W), float64(crop.H)
			area := float64(w) * float64(h)
			if lo, hi := (W-0.5)*(H-0.5)/area, (W+0.5)*(H+0.5)/area; hi < tr.ScaleMin || lo > tr.ScaleMax {
				t.Errorf("%dx%d: crop %+v area fraction in [%.4f, %.4f]", w, h, crop, lo, hi)
			}
			if lo, hi := (W-0.5)/(H+0.5), (W+0.5)/(H-0.5); hi < tr.RatioMin || lo > tr.RatioMax {
				t.Errorf("%dx%d: crop %+v ratio in [%.4f, %.4f]", w, h, crop, lo, hi)
			}
		}
	}
	if fallbacks == 0 {
		t.Error("no fallback seen even on 4000x30 images")
	}
}

func TestCropForTrainFallback(t *testing.T) {
	tr := mustTransform(t, "train")
	// No crop with ratio in [3/4, 4/3] fits 1000x10 at >= 8% of the area:
	// every seed falls back to the center crop with the ratio clamped to
	// 4/3: w = round(10*4/3) = 13.
	for i := range 100 {
		crop, _ := CropFor(tr, 1000, 10, uint64(i))
		if want := (Rect{493, 0, 13, 10}); crop != want {
			t.Fatalf("seed %d: got %+v, want %+v", i, crop, want)
		}
		crop, _ = CropFor(tr, 10, 1000, uint64(i))
		// h = round(10 / (3/4)) = 13
		if want := (Rect{0, 493, 10, 13}); crop != want {
			t.Fatalf("seed %d: got %+v, want %+v", i, crop, want)
		}
	}
}

func TestCropForTrainDistribution(t *testing.T) {
	tr := mustTransform(t, "train")
	const n = 20000
	w, h := 500, 400
	var flips, fallbacks int
	var sumLogRatio, sumCX, sumCY, sumArea float64
	for i := range n {
		seed := SampleSeed(42, 3, int64(i))
		crop, flip := CropFor(tr, w, h, seed)
		if _, fb := randomResizedCrop(tr, w, h, &rng{s: seed}); fb {
			fallbacks++
		}
		if flip {
			flips++
		}
		sumLogRatio += math.Log(float64(crop.W) / float64(crop.H))
		sumCX += float64(crop.X) + float64(crop.W)/2
		sumCY += float64(crop.Y) + float64(crop.H)/2
		sumArea += float64(crop.W*crop.H) / float64(w*h)
	}
	// 4 sigma bounds for a Bernoulli(0.5) over n draws: 0.5 ± 0.014.
	if f := float64(flips) / n; math.Abs(f-0.5) > 0.014 {
		t.Errorf("flip rate %.4f", f)
	}
	// The log ratio is drawn symmetrically; rejection is nearly symmetric
	// on a 5:4 image.
	if m := sumLogRatio / n; math.Abs(m) > 0.03 {
		t.Errorf("mean log ratio %.4f", m)
	}
	// Positions are uniform, so crop centres average at the image centre.
	if m := sumCX / n; math.Abs(m-float64(w)/2) > 3 {
		t.Errorf("mean centre x %.2f", m)
	}
	if m := sumCY / n; math.Abs(m-float64(h)/2) > 3 {
		t.Errorf("mean centre y %.2f", m)
	}
	// Scale is uniform in [0.08, 1] before rejection (mean 0.54); large
	// crops are the ones rejected, so the mean lands a little lower.
	if m := sumArea / n; m < 0.42 || m > 0.56 {
		t.Errorf("mean area fraction %.4f", m)
	}
	if fallbacks > n/100 {
		t.Errorf("%d fallbacks on a 5:4 image", fallbacks)
	}
	// Different seeds give different crops.
	a, _ := CropFor(tr, w, h, 1)
	b, _ := CropFor(tr, w, h, 2)
	if a == b {
		t.Error("seeds 1 and 2 give the same crop")
	}
	tr.FlipProb = 0
	for i := range 1000 {
		if _, flip := CropFor(tr, w, h, uint64(i)); flip {
			t.Fatal("flip with FlipProb 0")
		}
	}
}

func TestCropForEval(t *testing.T) {
	tr := mustTransform(t, "eval")
	// Worked by hand from torchvision: Resize(256) then CenterCrop(224),
	// mapped back to source pixels (see centerCrop).
	cases := []struct {
		w, h int
		want Rect
	}{
		// 500x375 -> 341x256; crop at (round(58.5)=58, 16); x 500/341.
		{500, 375, Rect{85, 23, 328, 328}},
		{375, 500, Rect{23, 85, 328, 328}},
		{256, 256, Rect{16, 16, 224, 224}},
		{512, 512, Rect{32, 32, 448, 448}},
		// Smaller than the output: upscaled, 0.875 of the short side.
		{100, 50, Rect{28, 3, 44, 44}}, // 512x256, crop at (144, 16)
		{1, 1, Rect{0, 0, 1, 1}},
	}
	for _, c := range cases {
		got, flip := CropFor(tr, c.w, c.h, 99)
		if got != c.want || flip {
			t.Errorf("%dx%d: got %+v flip %v, want %+v", c.w, c.h, got, flip, c.want)
		}
		if !inside(got, c.w, c.h) {
			t.Errorf("%dx%d: %+v outside", c.w, c.h, got)
		}
	}
	// Seed-independent.
	a, _ := CropFor(tr, 640, 480, 1)
	b, _ := CropFor(tr, 640, 480, 2)
	if a != b {
		t.Error("eval crop depends on the seed")
	}
}

// Eval's box is torchvision's Resize(256) (long side truncated) then
// CenterCrop(224) (origin rounded half to even), mapped back without
// rounding; the filter may read the whole image.
func TestSamplingForEval(t *testing.T) {
	tr := mustTransform(t, "eval")
	cases := []struct {
		w, h, rw, rh, left, top int
	}{
		{500, 375, 341, 256, 58, 16},  // 341.33 -> 341; round(58.5) = 58
		{500, 281, 455, 256, 116, 16}, // 455.5 -> 455; round(115.5) = 116
		{419, 314, 341, 256, 58, 16},  // 341.6 -> 341 (truncated, not 342)
		{200, 150, 341, 256, 58, 16},  // upscaled
		{105, 70, 384, 256, 80, 16},
		{256, 256, 256, 256, 16, 16},
		{375, 500, 256, 341, 16, 58},
	}
	for _, c := range cases {
		s := SamplingFor(tr, c.w, c.h, 3)
		sx, sy := float64(c.w)/float64(c.rw), float64(c.h)/float64(c.rh)
		want := Box{float64(c.left) * sx, float64(c.top) * sy, 224 * sx, 224 * sy}
		if s.Box != want || s.Clip != (Rect{0, 0, c.w, c.h}) || s.Flip {
			t.Errorf("%dx%d: %+v, want box %+v", c.w, c.h, s, want)
		}
		if crop, _ := CropFor(tr, c.w, c.h, 3); crop != s.Crop || crop != roundBox(want, c.w, c.h) {
			t.Errorf("%dx%d: CropFor %+v, sampling %+v", c.w, c.h, crop, s)
		}
	}
	// Train samples its crop and reads nothing else; Resize the image.
	train := mustTransform(t, "train")
	for i := range 100 {
		s := SamplingFor(train, 500, 375, uint64(i))
		if crop, flip := CropFor(train, 500, 375, uint64(i)); s.Crop != crop || s.Flip != flip || s.Box != boxOf(crop) || s.Clip != crop {
			t.Fatalf("train seed %d: %+v", i, s)
		}
	}
	if s := SamplingFor(mustTransform(t, "resize"), 7, 9, 0); s.Box != (Box{0, 0, 7, 9}) || s.Clip != (Rect{0, 0, 7, 9}) {
		t.Errorf("resize: %+v", s)
	}
}

// readRegion holds every tap (by the float definition of the filter) that
// lies in clip, and nothing outside clip; for a box that is its clip, it
// is the clip.
func TestReadRegion(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	for range 3000 {
		w, h := 1+r.IntN(900), 1+r.IntN(900)
		size := 1 + r.IntN(300)
		clip := Rect{r.IntN(w), r.IntN(h), 0, 0}
		clip.W, clip.H = 1+r.IntN(w-clip.X), 1+r.IntN(h-clip.Y)
		box := Box{float64(clip.X) + r.Float64()*float64(clip.W)/3, float64(clip.Y) + r.Float64()*float64(clip.H)/3, 0, 0}
		box.W = (0.2 + 0.8*r.Float64()) * (float64(clip.X+clip.W) - box.X)
		box.H = (0.2 + 0.8*r.Float64()) * (float64(clip.Y+clip.H) - box.Y)
		if r.IntN(4) == 0 {
			box = boxOf(clip)
		}
		reg := readRegion(box, clip, size)
		if reg.X < clip.X || reg.Y < clip.Y || reg.X+reg.W > clip.X+clip.W || reg.Y+reg.H > clip.Y+clip.H || reg.W < 1 || reg.H < 1 {
			t.Fatalf("box %+v clip %+v size %d: region %+v outside the clip", box, clip, size, reg)
		}
		if box == boxOf(clip) && reg != clip {
			t.Fatalf("box = clip %+v: region %+v", clip, reg)
		}
		for _, ax := range []struct {
			x, w           float64
			lo, n, rlo, rn int
		}{
			{box.X, box.W, clip.X, clip.W, reg.X, reg.W},
			{box.Y, box.H, clip.Y, clip.H, reg.Y, reg.H},
		} {
			for _, i := range []int{0, 1, size / 2, size - 2, size - 1} {
				if i < 0 || i >= size {
					continue
				}
				// Taps over the clip, in clip coordinates.
				first, wts := triangleTaps(ax.n, ax.x-float64(ax.lo), ax.w/float64(size), i)
				if len(wts) > 0 && (ax.lo+first < ax.rlo || ax.lo+first+len(wts) > ax.rlo+ax.rn) {
					t.Fatalf("box %+v clip %+v size %d output %d: taps [%d, %d) outside region %+v",
						box, clip, size, i, ax.lo+first, ax.lo+first+len(wts), reg)
				}
			}
		}
	}
}

func TestCropForResize(t *testing.T) {
	tr := mustTransform(t, "resize")
	if got, flip := CropFor(tr, 640, 480, 5); got != (Rect{0, 0, 640, 480}) || flip {
		t.Errorf("got %+v %v", got, flip)
	}
	if got, _ := CropFor(tr, 0, 10, 5); got != (Rect{}) {
		t.Errorf("empty image: %+v", got)
	}
}

func TestLowresLevel(t *testing.T) {
	cases := []struct {
		crop Rect
		size int
		want int
	}{
		{Rect{0, 0, 470, 390}, 224, 0},
		{Rect{0, 0, 448, 448}, 224, 1},
		{Rect{0, 0, 447, 900}, 224, 0},
		{Rect{0, 0, 1792, 1792}, 224, 3},
		{Rect{0, 0, 4000, 1000}, 224, 2},
		{Rect{0, 0, 10000, 10000}, 224, 3},
	}
	for _, c := range cases {
		if got := lowresLevel(boxOf(c.crop), c.size); got != c.want {
			t.Errorf("lowresLevel(%+v, %d) = %d, want %d", c.crop, c.size, got, c.want)
		}
	}
}

func TestScaleRect(t *testing.T) {
	// Lowres 1 of a 1281x1023 image gives a 641x512 frame.
	r := scaleRect(Rect{101, 51, 1180, 972}, 1281, 1023, 641, 512)
	if !inside(r, 641, 512) || r.X != 50 || r.Y != 25 || r.X+r.W != 641 || r.Y+r.H != 512 {
		t.Errorf("scaleRect = %+v", r)
	}
	if r := scaleRect(Rect{3, 4, 5, 6}, 10, 10, 10, 10); r != (Rect{3, 4, 5, 6}) {
		t.Errorf("identity scaleRect = %+v", r)
	}
}

func TestErrorsAreDistinct(t *testing.T) {
	all := []error{ErrTooLarge, ErrUnsupported, ErrCorrupt}
	for i, a := range all {
		if !strings.HasPrefix(a.Error(), "decode: ") {
			t.Errorf("%v lacks the package prefix", a)
		}
		for j, b := range all {
			if i != j && errors.Is(a, b) {
				t.Errorf("%v is %v", a, b)
			}
		}
	}
}
