package decode

import (
	"bytes"
	"fmt"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

// The presets are op lists, and each gives, field for field, the
// Transform the preset name always gave (so SamplingFor, and the pixels,
// are what they were). One field moved: eval's and resize's FlipProb was
// 0.5 and unread (only Train flipped); now that a flip follows any
// geometry it is the hflip op's, and they have none: 0.
func TestPresetsAreOpLists(t *testing.T) {
	want := func(k Geometry) Transform {
		tr := Transform{Geometry: k, Size: 224, ResizeShort: 256, ScaleMin: 0.08, ScaleMax: 1,
			RatioMin: 3.0 / 4, RatioMax: 4.0 / 3}
		if k == Train {
			tr.FlipProb = 0.5
		}
		return tr
	}
	for name, k := range map[string]Geometry{"train": Train, "eval": Eval, "resize": Resize} {
		byName := mustTransform(t, name)
		byOps := mustTransform(t, Presets[name])
		if !reflect.DeepEqual(byName, want(k)) || !reflect.DeepEqual(byOps, want(k)) {
			t.Errorf("%s: by name %+v, by ops %+v, want %+v", name, byName, byOps, want(k))
		}
		// Ops gives the list back, and it compiles to the same Transform.
		again, err := byName.Ops().Compile()
		if err != nil || !reflect.DeepEqual(again, byName) {
			t.Errorf("%s: Ops %q compiles to %+v, %v", name, byName.Ops(), again, err)
		}
	}
	if got := mustTransform(t, "train").Ops().String(); got != "random_resized_crop(scale=0.08:1,ratio=0.75:1.3333333333333333)|hflip(p=0.5)" {
		t.Errorf("train as ops: %s", got)
	}
}

func TestParseOps(t *testing.T) {
	ops, err := ParseOps(" random_resized_crop( scale = 0.2:1 , ratio=1/2:2 ) | hflip |brightness(factor=0.5:1.5)|grayscale(p=0.25)")
	if err != nil {
		t.Fatal(err)
	}
	if got := ops.String(); got != "random_resized_crop(scale=0.2:1,ratio=1/2:2)|hflip|brightness(factor=0.5:1.5)|grayscale(p=0.25)" {
		t.Errorf("String: %s", got)
	}
	tr, err := ops.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if tr.Geometry != Train || tr.ScaleMin != 0.2 || tr.ScaleMax != 1 || tr.RatioMin != 0.5 || tr.RatioMax != 2 || tr.FlipProb != 0.5 ||
		ops[2].String() != tr.Pixel[0].String() || ops[3].String() != tr.Pixel[1].String() || len(tr.Pixel) != 2 {
		t.Errorf("compiled: %+v", tr)
	}
	// No hflip: no flip (the default 0.5 is the hflip op's).
	if tr := mustTransform(t, "random_resized_crop"); tr.FlipProb != 0 || tr.Geometry != Train {
		t.Errorf("random_resized_crop alone: %+v", tr)
	}
	if tr := mustTransform(t, "resize(short=300)|center_crop|grayscale"); tr.Geometry != Eval || tr.ResizeShort != 300 || len(tr.Pixel) != 1 {
		t.Errorf("eval op list: %+v", tr)
	}
	for _, tc := range []struct{ s, want string }{
		{"", "empty"},
		{"Train ", "want a name"},
		{"hflip", "starts with its geometry"},
		{"brightness(factor=2)", "starts with its geometry"},
		{"resize(short=256)", "followed by center_crop"},
		{"resize|grayscale|hflip", "come first"},
		{"resize|grayscale|random_resized_crop", "come first"},
		{"random_resized_crop(size=224)", "unknown parameter size"},
		{"random_resized_crop(scale=a:1)", "not a number"},
		{"random_resized_crop(scale=0.1:1,scale=0.2:1)", "given twice"},
		{"random_resized_crop(scale=0.1:1", "unbalanced"},
		{"resize(short=256)|center_crop(p=1)", "unknown parameter p"},
		{"resize(short=256,size=256)|center_crop", "give one"},
		{"resize(short=256)|center_crop(size=0)", "positive"},
		{"resize|sharpen", `unknown op "sharpen"`},
		{"resize|brightness", "needs factor"},
		{"resize|brightness(factor=1.5:0.5)", "lo <= hi"},
		{"resize|grayscale(p=2)", "out of [0, 1]"},
		{"resize(short=x)|center_crop", "not a whole number"},
	} {
		_, err := ParseTransform(tc.s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseTransform(%q): %v, want an error with %q", tc.s, err, tc.want)
		}
	}
	c := DefaultConfig()
	c.Transform.Pixel = Ops{{Name: "grayscale", Params: []Param{{"p", "7"}}}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "grayscale") {
		t.Errorf("Validate with a bad pixel op: %v", err)
	}
}

// Spelling a preset out as ops gives the preset's bytes, on every path
// and layout.
func TestPresetOpSpellingsDecodeAlike(t *testing.T) {
	spelled := map[string]string{
		"train":  "random_resized_crop(scale=8/100:1,ratio=0.75:4/3)|hflip(p=1/2)",
		"eval":   "resize(short=256)|center_crop",
		"resize": "resize()",
	}
	for name, ops := range spelled {
		for _, l := range []Layout{NCHW, NHWC} {
			for _, fast := range []bool{true, false} {
				a, c := newDecoderPath(t, name, 48, l, true, fast)
				b, _ := newDecoderPath(t, ops, 48, l, true, fast)
				da, db := make([]byte, c.SampleBytes()), make([]byte, c.SampleBytes())
				for _, f := range []string{"jpeg_420.jpg", "png_rgba.png", "webp_lossy.webp", "large_1280x1024_q90_420.jpg"} {
					data := readFixture(t, f)
					for seed := uint64(1); seed < 5; seed++ {
						ia, ea := a.Decode(data, seed*7919, da)
						ib, eb := b.Decode(data, seed*7919, db)
						if ea != nil || eb != nil || !bytes.Equal(da, db) || ia != ib {
							t.Fatalf("%s as %q, %v fast=%v, %s seed %d: errors %v %v, same bytes %v", name, ops, l, fast, f, seed, ea, eb, bytes.Equal(da, db))
						}
					}
				}
			}
		}
	}
}

// refPixels is the naive reference of the pixel ops: pixel by pixel,
// the formulas of the doc (PIL's), the draws taken as documented.
func refPixels(ops Ops, seed uint64, src []byte, size int, l Layout) []byte {
	out := bytes.Clone(src)
	at := func(x, y, ch int) *byte {
		if l == NHWC {
			return &out[(y*size+x)*3+ch]
		}
		return &out[ch*size*size+y*size+x]
	}
	for i, op := range ops {
		r := pixelRNG(seed, i)
		switch op.Name {
		case "brightness":
			lo, hi := 0.0, 0.0
			fmt.Sscanf(strings.Replace(op.Params[0].Value, ":", " ", 1), "%g %g", &lo, &hi)
			f := lo + (hi-lo)*r.float64()
			for y := 0; y < size; y++ {
				for x := 0; x < size; x++ {
					for ch := 0; ch < 3; ch++ {
						v := float32(f) * float32(*at(x, y, ch))
						*at(x, y, ch) = byte(min(max(v, 0), 255))
					}
				}
			}
		case "grayscale":
			var p float64
			fmt.Sscanf(op.Params[0].Value, "%g", &p)
			if r.float64() >= p {
				continue
			}
			for y := 0; y < size; y++ {
				for x := 0; x < size; x++ {
					rr, gg, bb := int(*at(x, y, 0)), int(*at(x, y, 1)), int(*at(x, y, 2))
					g := byte((rr*19595 + gg*38470 + bb*7471 + 1<<15) >> 16)
					*at(x, y, 0), *at(x, y, 1), *at(x, y, 2) = g, g, g
				}
			}
		}
	}
	return out
}

// The pixel ops on the decoded sample match the naive reference applied
// to the geometry-only sample, with per-sample seeded draws; they move
// neither the crop nor the flip.
func TestPixelOpsMatchReference(t *testing.T) {
	pix := "brightness(factor=0.3:1.9)|grayscale(p=0.5)"
	ops, _ := ParseOps(pix)
	for _, l := range []Layout{NCHW, NHWC} {
		plain, c := newDecoderPath(t, "train", 40, l, true, true)
		withOps, _ := newDecoderPath(t, Presets["train"]+"|"+pix, 40, l, true, true)
		geo, got := make([]byte, c.SampleBytes()), make([]byte, c.SampleBytes())
		grays, factors := 0, map[byte]bool{}
		for _, f := range []string{"jpeg_444.jpg", "png_rgb.png", "webp_lossy.webp"} {
			data := readFixture(t, f)
			for seed := uint64(0); seed < 16; seed++ {
				ig, err1 := plain.Decode(data, seed, geo)
				io, err2 := withOps.Decode(data, seed, got)
				if err1 != nil || err2 != nil {
					t.Fatal(err1, err2)
				}
				if ig != io {
					t.Fatalf("%s seed %d: the pixel ops moved the geometry: %+v, %+v", f, seed, ig, io)
				}
				want := refPixels(Ops(ops), seed, geo, 40, l)
				if !bytes.Equal(got, want) {
					t.Fatalf("%v %s seed %d: pixel ops differ from the reference", l, f, seed)
				}
				if r := pixelRNG(seed, 1); r.float64() < 0.5 {
					grays++
				}
				factors[got[len(got)/2]] = true
			}
		}
		// The draws vary by sample: some grayscale, some not; many factors.
		if grays == 0 || grays == 48 || len(factors) < 10 {
			t.Errorf("%v: %d of 48 grayscale, %d distinct centre values", l, grays, len(factors))
		}
	}
}

// The pixel ops' arithmetic is PIL's, checked against PIL itself
// (/usr/bin/python3 with python3-pil, which the fidelity tests need too):
// ImageEnhance.Brightness over every byte value for a set of factors,
// and convert("L") over a set of colours.
func TestPixelOpsMatchPIL(t *testing.T) {
	factors := []float64{0, 0.1, 0.37, 0.5, 0.8, 0.999, 1, 1.2, 1.5, 2.75, 7}
	script := `
import sys
from PIL import Image, ImageEnhance
vals = bytes(range(256))
img = Image.frombytes("RGB", (256, 1), bytes(v for v in vals for _ in range(3)))
for f in [float(x) for x in sys.argv[1:]]:
    out = ImageEnhance.Brightness(img).enhance(f).tobytes()[::3]
    print(" ".join(str(v) for v in out))
cols = [(r, g, b) for r in range(0, 256, 17) for g in range(0, 256, 15) for b in range(3, 256, 36)]
img = Image.frombytes("RGB", (len(cols), 1), bytes(c for rgb in cols for c in rgb))
print(" ".join(str(v) for v in img.convert("L").tobytes()))
`
	args := []string{"-c", script}
	for _, f := range factors {
		args = append(args, fmt.Sprint(f))
	}
	out, err := exec.Command("/usr/bin/python3", args...).Output()
	if err != nil {
		t.Fatalf("python3 with PIL (scripts/deps.sh python): %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(factors)+1 {
		t.Fatalf("PIL gave %d lines", len(lines))
	}
	var lut [256]byte
	for i, f := range factors {
		brightnessLUT(&lut, f)
		want := strings.Fields(lines[i])
		for v := range lut {
			if fmt.Sprint(lut[v]) != want[v] {
				t.Fatalf("brightness %v of %d: %d, PIL %s", f, v, lut[v], want[v])
			}
		}
	}
	want := strings.Fields(lines[len(factors)])
	i := 0
	for r := 0; r < 256; r += 17 {
		for g := 0; g < 256; g += 15 {
			for b := 3; b < 256; b += 36 {
				if got := luma(byte(r), byte(g), byte(b)); fmt.Sprint(got) != want[i] {
					t.Fatalf("luma(%d,%d,%d) = %d, PIL %s", r, g, b, got, want[i])
				}
				i++
			}
		}
	}
}

// torchvision's Resize(256) + CenterCrop(224), both sizes spelled out, is
// eval at 224, byte for byte; center_crop's size is the output side, and
// one that the spec's Size contradicts is refused.
func TestCenterCropSize(t *testing.T) {
	tr := mustTransform(t, "resize(size=256)|center_crop(size=224)")
	eval := mustTransform(t, "eval")
	if tr.Geometry != Eval || tr.ResizeShort != 256 || tr.Size != 224 || tr.CropSize != 224 {
		t.Fatalf("compiled: %+v", tr)
	}
	if again, err := tr.Ops().Compile(); err != nil || !reflect.DeepEqual(again, tr) || tr.Ops().String() != "resize(short=256)|center_crop(size=224)" {
		t.Errorf("Ops %q compiles to %+v, %v", tr.Ops(), again, err)
	}
	c := DefaultConfig()
	c.Transform = tr
	d, err := NewDecoder(c)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	e, _ := newDecoderPath(t, "eval", 224, NCHW, true, true)
	a, b := make([]byte, c.SampleBytes()), make([]byte, c.SampleBytes())
	for _, f := range []string{"jpeg_420.jpg", "large_1280x1024_q90_420.jpg", "png_rgb.png"} {
		data := readFixture(t, f)
		if _, err := d.Decode(data, 1, a); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Decode(data, 1, b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s: Resize(256)+CenterCrop(224) spelled out differs from eval", f)
		}
	}
	c.Transform.Size = 200
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "center_crop(size=224)") {
		t.Errorf("CropSize 224, Size 200: %v", err)
	}
	c.Transform = eval
	c.Transform.Size = 288
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "resize(short=329)|center_crop") {
		t.Errorf("eval at 288: %v", err)
	}
}
