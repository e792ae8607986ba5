package decode

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// Fidelity against torchvision on real photographs: the held-out set of
// scripts/dataset.sh (mix holdout), decoded here and by torchvision 0.14 +
// PIL (scripts/torchvision_ref.py) from the same files. It needs
// /usr/bin/python3 with torch, torchvision and PIL (scripts/deps.sh
// python, which `make test` runs first) and fails, not skips, without
// them. Alone:
//
//	go test ./decode/ -run 'Fidelity|RandomResizedCrop' -v
//
// (LONGSHORE_FIDELITY_WORST=1 also lists each configuration's ten worst
// images). docs/fidelity.md has the figures.

// The held-out set: fidelityN photographs made with seed fidelitySeed,
// which nothing was tuned on (development used seed 12).
const (
	fidelityN    = 300
	fidelitySeed = 2
	fidelityJob  = 7 // the job seed of the Train samples compared
)

// Bounds, per configuration and transform: the mean over images of the
// per-image mean |ours - torchvision| (8-bit levels, all channels), the
// 99th-percentile image's, and the share of all values off by more than 8.
const (
	fidelityMeanTol  = 1.0
	fidelityP99Tol   = 3.0
	fidelityShareTol = 0.005
)

// fullScaleMaxTol bounds every value of the fast path at full scale: it
// decodes exactly as PIL does (the same libjpeg-turbo, ISLOW IDCT, fancy
// upsampling; CMYK converted with PIL's rounding), so only the scaler's
// fixed-point rounding differs from PIL's (measured: at most 1 level).
const fullScaleMaxTol = 1

// torchvisionRef is what scripts/torchvision_ref.py wrote for the
// held-out set, read once per test binary.
type torchvisionRef struct {
	files  []string
	data   [][]byte
	sizes  [][2]int // width, height of each file
	train  []trainBox
	eval   []byte // len(files) samples, NCHW
	trainS []byte // one sample per file, NCHW
	kinds  []string
	params refParams
	// trainV: one sample per file of the transform trainVOps, whose
	// crops and horizontal flips are train's (the vertical flip draws
	// from its own stream).
	trainV []byte
	vflips []bool
	// evalFlip, resizeFlip: one sample per file of eval and resize each
	// followed by the flips of flipsAfter (both drawn per file: the same
	// streams whatever the geometry), torchvision's Resize + CenterCrop
	// or Resize((S, S)), then F.hflip and F.vflip as drawn.
	evalFlip, resizeFlip []byte
	flips                [][2]bool
	// evalF16, evalBF16: Eval as ToTensor + Normalize(fidelityMean,
	// fidelityStd), cast by torch, the bits (float16, bfloat16), NCHW.
	evalF16, evalBF16 []byte
}

// trainVOps is train with a vertical flip, the parameterised Train the
// fidelity test compares; fidelityMean and fidelityStd are ImageNet's,
// the normalisation compared.
const trainVOps = "random_resized_crop(scale=0.08:1,ratio=3/4:4/3)|hflip(p=0.5)|vflip(p=0.5)"

// flipsAfter are the flips that follow eval and resize in the fidelity
// test: RandomHorizontalFlip() and RandomVerticalFlip() after Resize(256)
// + CenterCrop(224), and after Resize((224, 224)).
const flipsAfter = "|hflip(p=0.5)|vflip(p=0.5)"

var (
	fidelityMean = [3]float64{0.485, 0.456, 0.406}
	fidelityStd  = [3]float64{0.229, 0.224, 0.225}
)

// trainBox is one Train sample's geometry as CropFor drew it.
type trainBox struct {
	seed uint64
	crop Rect
	flip bool
}

type refParams struct {
	Boxes       [][][4]int `json:"boxes"` // per size: [top, left, h, w]
	Flips       int        `json:"flips"`
	Torchvision string     `json:"torchvision"`
}

// paramSizes are the image sizes whose RandomResizedCrop draws are
// compared: ImageNet's commonest, a square, a small one, and one so
// elongated that many draws fall back to the center crop.
var paramSizes = [][2]int{{500, 375}, {375, 500}, {500, 500}, {120, 90}, {1000, 240}}

const paramDraws = 20000

var fidelityOnce struct {
	sync.Once
	ref *torchvisionRef
	err error
}

func loadTorchvisionRef(t *testing.T) *torchvisionRef {
	t.Helper()
	fidelityOnce.Do(func() { fidelityOnce.ref, fidelityOnce.err = makeTorchvisionRef() })
	if fidelityOnce.err != nil {
		t.Fatal(fidelityOnce.err)
	}
	return fidelityOnce.ref
}

func makeTorchvisionRef() (*torchvisionRef, error) {
	out, err := exec.Command("../scripts/dataset.sh", fmt.Sprint(fidelityN), fmt.Sprint(fidelitySeed), "holdout").Output()
	if err != nil {
		return nil, fmt.Errorf("scripts/dataset.sh %d %d holdout: %w", fidelityN, fidelitySeed, err)
	}
	dir := strings.TrimSpace(string(out))
	ref := &torchvisionRef{}
	err = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".JPEG") {
			ref.files = append(ref.files, p)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(ref.files)
	if len(ref.files) != fidelityN {
		return nil, fmt.Errorf("%s: %d JPEGs, want %d", dir, len(ref.files), fidelityN)
	}
	tr := mustParse("train")
	type jobT struct {
		Files  []string `json:"files"`
		Size   int      `json:"size"`
		Resize int      `json:"resize"`
		Train  [][5]int `json:"train"`
		TrainV [][6]int `json:"trainv"`
		Flips  [][2]int `json:"flips"`
		Params any      `json:"params"`
		Norm   any      `json:"normalize"`
	}
	job := jobT{Files: ref.files, Size: 224, Resize: 256, Norm: map[string]any{"mean": fidelityMean, "std": fidelityStd}, Params: map[string]any{
		"sizes": paramSizes, "n": paramDraws, "seed": 1, "scale": []float64{tr.ScaleMin, tr.ScaleMax},
		"ratio": []float64{tr.RatioMin, tr.RatioMax},
	}}
	for i, f := range ref.files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		h, err := parseHeader(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		seed := SampleSeed(fidelityJob, 0, int64(i))
		crop, flip := CropFor(tr, h.width, h.height, seed)
		ref.data = append(ref.data, b)
		ref.sizes = append(ref.sizes, [2]int{h.width, h.height})
		ref.train = append(ref.train, trainBox{seed, crop, flip})
		fl := 0
		if flip {
			fl = 1
		}
		job.Train = append(job.Train, [5]int{crop.Y, crop.X, crop.H, crop.W, fl})
		sv := SamplingFor(mustParse(trainVOps), h.width, h.height, seed)
		vf := 0
		if sv.VFlip {
			vf = 1
		}
		ref.vflips = append(ref.vflips, sv.VFlip)
		job.TrainV = append(job.TrainV, [6]int{sv.Crop.Y, sv.Crop.X, sv.Crop.H, sv.Crop.W, fl, vf})
		se := SamplingFor(mustParse(Presets["eval"]+flipsAfter), h.width, h.height, seed)
		ref.flips = append(ref.flips, [2]bool{se.Flip, se.VFlip})
		job.Flips = append(job.Flips, [2]int{b2i(se.Flip), b2i(se.VFlip)})
	}
	tmp, err := os.MkdirTemp("", "longshore-fidelity-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	jb, err := json.Marshal(job)
	if err != nil {
		return nil, err
	}
	jobPath := filepath.Join(tmp, "job.json")
	if err := os.WriteFile(jobPath, jb, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("/usr/bin/python3", "../scripts/torchvision_ref.py", "--job", jobPath, "--out", tmp)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("scripts/torchvision_ref.py (needs python3-torch, python3-torchvision, python3-pil: scripts/deps.sh python): %w\n%s", err, b)
	}
	if ref.eval, err = os.ReadFile(filepath.Join(tmp, "eval.u8")); err != nil {
		return nil, err
	}
	if ref.trainS, err = os.ReadFile(filepath.Join(tmp, "train.u8")); err != nil {
		return nil, err
	}
	const sample = 3 * 224 * 224
	if len(ref.eval) != fidelityN*sample || len(ref.trainS) != fidelityN*sample {
		return nil, fmt.Errorf("torchvision_ref.py wrote %d and %d bytes, want %d each", len(ref.eval), len(ref.trainS), fidelityN*sample)
	}
	if ref.trainV, err = os.ReadFile(filepath.Join(tmp, "trainv.u8")); err != nil {
		return nil, err
	}
	if ref.evalFlip, err = os.ReadFile(filepath.Join(tmp, "evalflip.u8")); err != nil {
		return nil, err
	}
	if ref.resizeFlip, err = os.ReadFile(filepath.Join(tmp, "resizeflip.u8")); err != nil {
		return nil, err
	}
	if len(ref.evalFlip) != fidelityN*sample || len(ref.resizeFlip) != fidelityN*sample {
		return nil, fmt.Errorf("torchvision_ref.py wrote %d and %d bytes of evalflip, resizeflip", len(ref.evalFlip), len(ref.resizeFlip))
	}
	if ref.evalF16, err = os.ReadFile(filepath.Join(tmp, "eval.f16")); err != nil {
		return nil, err
	}
	if ref.evalBF16, err = os.ReadFile(filepath.Join(tmp, "eval.bf16")); err != nil {
		return nil, err
	}
	if len(ref.trainV) != fidelityN*sample || len(ref.evalF16) != 2*fidelityN*sample || len(ref.evalBF16) != 2*fidelityN*sample {
		return nil, fmt.Errorf("torchvision_ref.py wrote %d, %d and %d bytes of trainv, eval.f16, eval.bf16", len(ref.trainV), len(ref.evalF16), len(ref.evalBF16))
	}
	kb, err := os.ReadFile(filepath.Join(tmp, "kinds.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(kb, &ref.kinds); err != nil || len(ref.kinds) != fidelityN {
		return nil, fmt.Errorf("kinds.json: %d kinds, %v", len(ref.kinds), err)
	}
	pb, err := os.ReadFile(filepath.Join(tmp, "params.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(pb, &ref.params); err != nil {
		return nil, fmt.Errorf("params.json: %w", err)
	}
	if len(ref.params.Boxes) != len(paramSizes) {
		return nil, fmt.Errorf("params.json: %d sizes, want %d", len(ref.params.Boxes), len(paramSizes))
	}
	return ref, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func mustParse(name string) Transform {
	t, err := ParseTransform(name)
	if err != nil {
		panic(err)
	}
	return t
}

// fidelity is how far a set of samples is from torchvision's.
type fidelity struct {
	n          int
	mean       float64 // mean over images of the per-image mean |diff|
	p99, worst float64 // the 99th-percentile image's mean, the worst image's
	share      float64 // share of all values off by more than 8
	max        int     // the largest difference of any value
	worstFile  int
	perImage   []float64
}

func (f fidelity) String() string {
	return fmt.Sprintf("mean %.2f, p99 image %.2f, worst %.2f (file %d), off by > 8: %.2f%%, max %d",
		f.mean, f.p99, f.worst, f.worstFile, 100*f.share, f.max)
}

// measure computes the fidelity of per-image samples against want (both
// NCHW, one sample after another).
func measure(got, want []byte, sample int) fidelity {
	n := len(want) / sample
	f := fidelity{n: n, perImage: make([]float64, n)}
	var off int
	for i := range n {
		a, b := got[i*sample:(i+1)*sample], want[i*sample:(i+1)*sample]
		sum := 0
		for k := range a {
			d := int(a[k]) - int(b[k])
			if d < 0 {
				d = -d
			}
			sum += d
			if d > 8 {
				off++
			}
			f.max = max(f.max, d)
		}
		f.perImage[i] = float64(sum) / float64(sample)
		f.mean += f.perImage[i]
		if f.perImage[i] > f.worst {
			f.worst, f.worstFile = f.perImage[i], i
		}
	}
	f.mean /= float64(n)
	f.share = float64(off) / float64(len(want))
	sorted := slices.Clone(f.perImage)
	sort.Float64s(sorted)
	f.p99 = sorted[min(n-1, int(math.Ceil(0.99*float64(n)))-1)]
	return f
}

// fidelityConfigs are the decoder configurations compared: the default
// (the fast path, DCT-scaled where the crop allows), full-scale decoding
// on the fast path, and FFmpeg for every JPEG.
var fidelityConfigs = []struct {
	name         string
	fast, lowres bool
	maxTol       int // bound on any value's difference; 0: none
}{
	{"fast path (default)", true, true, 0},
	{"fast path, full scale", true, false, fullScaleMaxTol},
	{"FFmpeg, full scale", false, false, 0},
	{"FFmpeg, lowres", false, true, 0},
}

// TestFidelityTorchvision: Eval and Train samples of real photographs
// (including small upscaled, odd-sized, large, grayscale and CMYK JPEGs)
// match torchvision's within the bounds above, for every configuration.
func TestFidelityTorchvision(t *testing.T) {
	ref := loadTorchvisionRef(t)
	const sample = 3 * 224 * 224
	got := make([]byte, len(ref.eval))
	for _, kind := range []string{"eval", "train"} {
		want := ref.eval
		if kind == "train" {
			want = ref.trainS
		}
		for _, fc := range fidelityConfigs {
			d, _ := newDecoderPath(t, kind, 224, NCHW, fc.lowres, fc.fast)
			for i, b := range ref.data {
				seed := ref.train[i].seed
				info, err := d.Decode(b, seed, got[i*sample:(i+1)*sample])
				if err != nil {
					t.Fatalf("%s: %v", ref.files[i], err)
				}
				if kind == "train" && (info.Crop != ref.train[i].crop || info.Flip != ref.train[i].flip) {
					t.Fatalf("%s: decoded crop %+v flip %v, CropFor drew %+v %v", ref.files[i], info.Crop, info.Flip, ref.train[i].crop, ref.train[i].flip)
				}
			}
			f := measure(got, want, sample)
			w := ref.sizes[f.worstFile]
			msg := fmt.Sprintf("%-5s %-22s %v; worst %dx%d %s", kind, fc.name, f, w[0], w[1], filepath.Base(ref.files[f.worstFile]))
			if f.mean > fidelityMeanTol || f.p99 > fidelityP99Tol || f.share > fidelityShareTol || (fc.maxTol > 0 && f.max > fc.maxTol) {
				t.Errorf("%s: want mean <= %.1f, p99 image <= %.1f, off by > 8 <= %.1f%% (and max <= %d if not 0)",
					msg, fidelityMeanTol, fidelityP99Tol, 100*fidelityShareTol, fc.maxTol)
			} else {
				t.Log(msg)
			}
			t.Logf("      by kind: %s", byKind(f, ref.kinds))
			if testing.Verbose() && os.Getenv("LONGSHORE_FIDELITY_WORST") != "" { // the ten worst images
				idx := make([]int, f.n)
				for i := range idx {
					idx[i] = i
				}
				sort.Slice(idx, func(a, b int) bool { return f.perImage[idx[a]] > f.perImage[idx[b]] })
				for _, i := range idx[:10] {
					t.Logf("    %6.2f %4dx%-4d %-16s %s", f.perImage[i], ref.sizes[i][0], ref.sizes[i][1], ref.kinds[i], filepath.Base(ref.files[i]))
				}
			}
		}
	}
}

// byKind is the mean per-image difference for each kind of JPEG, and how
// many there are.
func byKind(f fidelity, kinds []string) string {
	sum, n := map[string]float64{}, map[string]int{}
	for i, k := range kinds {
		sum[k] += f.perImage[i]
		n[k]++
	}
	var keys []string
	for k := range n {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %.2f (%d)  ", k, sum[k]/float64(n[k]), n[k])
	}
	return b.String()
}

// ks2 is the two-sample Kolmogorov–Smirnov statistic: the largest
// distance between the empirical distribution functions of a and b.
func ks2(a, b []float64) float64 {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	var d float64
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		x := min(a[i], b[j])
		for i < len(a) && a[i] <= x {
			i++
		}
		for j < len(b) && b[j] <= x {
			j++
		}
		d = max(d, math.Abs(float64(i)/float64(len(a))-float64(j)/float64(len(b))))
	}
	return d
}

// ksCritical is the two-sample KS statistic's critical value at
// significance alpha for samples of n and m (the asymptotic
// c(alpha)·sqrt((n+m)/(n·m)), c = sqrt(-ln(alpha/2)/2)).
func ksCritical(alpha float64, n, m int) float64 {
	return math.Sqrt(-math.Log(alpha/2)/2) * math.Sqrt(float64(n+m)/float64(n*m))
}

// cropStats are the distributions compared for one image size: the area
// fraction, the log aspect ratio and the relative position of each crop.
type cropStats struct{ area, logRatio, posX, posY []float64 }

func (c *cropStats) add(width, height int, r Rect) {
	c.area = append(c.area, float64(r.W*r.H)/float64(width*height))
	c.logRatio = append(c.logRatio, math.Log(float64(r.W)/float64(r.H)))
	// Uniform over the free range (a crop as wide as the image has none).
	if r.W < width {
		c.posX = append(c.posX, float64(r.X)/float64(width-r.W))
	}
	if r.H < height {
		c.posY = append(c.posY, float64(r.Y)/float64(height-r.H))
	}
}

// TestRandomResizedCropMatchesTorchvision: over 20,000 draws per image
// size with fixed seeds, CropFor's RandomResizedCrop has torchvision's
// distributions of area fraction, log aspect ratio and position (two-sample
// KS against RandomResizedCrop.get_params itself, significance 0.001), and
// RandomHorizontalFlip's rate; and a sample's crop changes from one epoch
// to the next.
func TestRandomResizedCropMatchesTorchvision(t *testing.T) {
	ref := loadTorchvisionRef(t)
	tr := mustTransform(t, "train")
	const alpha = 0.001
	flips := 0
	for si, sz := range paramSizes {
		w, h := sz[0], sz[1]
		var ours, theirs cropStats
		for i := range paramDraws {
			crop, flip := CropFor(tr, w, h, SampleSeed(1, 0, int64(i)))
			ours.add(w, h, crop)
			if si == 0 && flip {
				flips++
			}
		}
		for _, b := range ref.params.Boxes[si] {
			theirs.add(w, h, Rect{X: b[1], Y: b[0], W: b[3], H: b[2]})
		}
		for _, c := range []struct {
			name string
			a, b []float64
		}{
			{"area fraction", ours.area, theirs.area},
			{"log aspect ratio", ours.logRatio, theirs.logRatio},
			{"x position", ours.posX, theirs.posX},
			{"y position", ours.posY, theirs.posY},
		} {
			if len(c.a) < paramDraws/2 || len(c.b) < paramDraws/2 {
				// An image that most crops span (1000x240: the
				// fallback, 320 of 240 rows) has no position to test.
				if c.name == "y position" && len(c.a) == 0 && len(c.b) == 0 {
					continue
				}
				if len(c.a) < 1000 || len(c.b) < 1000 {
					t.Errorf("%dx%d %s: %d and %d values", w, h, c.name, len(c.a), len(c.b))
					continue
				}
			}
			d, crit := ks2(c.a, c.b), ksCritical(alpha, len(c.a), len(c.b))
			if d > crit {
				t.Errorf("%dx%d %s: KS D = %.4f > %.4f (alpha %v) against torchvision %s", w, h, c.name, d, crit, alpha, ref.params.Torchvision)
			} else {
				t.Logf("%4dx%-4d %-16s: KS D = %.4f (critical %.4f at %v, n = %d, %d)", w, h, c.name, d, crit, alpha, len(c.a), len(c.b))
			}
		}
	}
	// Flip rate: ours against 1/2 and against torchvision's count (4
	// standard deviations; 1/2 ± 0.014 over 20,000 draws).
	n := float64(paramDraws)
	if z := (float64(flips) - n/2) / math.Sqrt(n/4); math.Abs(z) > 4 {
		t.Errorf("flip rate %.4f: z = %.1f against 1/2", float64(flips)/n, z)
	}
	p := float64(flips+ref.params.Flips) / (2 * n)
	if z := float64(flips-ref.params.Flips) / math.Sqrt(2*n*p*(1-p)); math.Abs(z) > 4 {
		t.Errorf("flip rate %.4f, torchvision's %.4f: z = %.1f", float64(flips)/n, float64(ref.params.Flips)/n, z)
	}
	t.Logf("flip rate %.4f, torchvision's %.4f", float64(flips)/n, float64(ref.params.Flips)/n)

	// The same sample in two epochs: another crop (equal only by chance:
	// a few in 10,000 on a 500x375 image), and other pixels.
	same := 0
	for i := range 10000 {
		a, fa := CropFor(tr, 500, 375, SampleSeed(fidelityJob, 0, int64(i)))
		b, fb := CropFor(tr, 500, 375, SampleSeed(fidelityJob, 1, int64(i)))
		if a == b && fa == fb {
			same++
		}
	}
	if same > 10 {
		t.Errorf("%d of 10000 samples have the same crop and flip in epochs 0 and 1", same)
	}
	t.Logf("%d of 10000 samples have the same crop and flip in epochs 0 and 1", same)
	d, c := newDecoderPath(t, "train", 224, NCHW, true, true)
	s0, s1 := make([]byte, c.SampleBytes()), make([]byte, c.SampleBytes())
	for i, b := range ref.data[:50] {
		if _, err := d.Decode(b, SampleSeed(fidelityJob, 0, int64(i)), s0); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Decode(b, SampleSeed(fidelityJob, 1, int64(i)), s1); err != nil {
			t.Fatal(err)
		}
		if slices.Equal(s0, s1) {
			t.Errorf("%s: the same Train sample in epochs 0 and 1", ref.files[i])
		}
	}
}

// measureFloats is measure for float samples (bits of dt, NCHW or NHWC
// for got, NCHW for want), each value's difference taken in 8-bit levels
// of the uint8 sample it came from: |ours - torchvision| · std · 255.
func measureFloats(got, want []byte, size int, l Layout, dt DType, std [3]float64) (fidelity, float64) {
	read := bf16
	if dt == Float16 {
		read = f16
	}
	sample := 3 * size * size
	n := len(want) / (2 * sample)
	f := fidelity{n: n, perImage: make([]float64, n)}
	var off int
	var worstValue float64
	for i := range n {
		sum := 0.0
		for c := range 3 {
			for y := range size {
				for x := range size {
					k := i*sample + c*size*size + y*size + x
					g := i*sample + c*size*size + y*size + x
					if l == NHWC {
						g = i*sample + (y*size+x)*3 + c
					}
					a := read(binary.NativeEndian.Uint16(got[2*g:]))
					b := read(binary.NativeEndian.Uint16(want[2*k:]))
					d := math.Abs(a-b) * std[c] * 255
					sum += d
					if d > 8 {
						off++
					}
					worstValue = max(worstValue, d)
				}
			}
		}
		f.perImage[i] = sum / float64(sample)
		f.mean += f.perImage[i]
		if f.perImage[i] > f.worst {
			f.worst, f.worstFile = f.perImage[i], i
		}
	}
	f.mean /= float64(n)
	f.share = float64(off) / float64(n*sample)
	sorted := slices.Clone(f.perImage)
	sort.Float64s(sorted)
	f.p99 = sorted[min(n-1, int(math.Ceil(0.99*float64(n)))-1)]
	f.max = int(math.Ceil(worstValue))
	return f, worstValue
}

// TestFidelityTorchvisionParams: the parameterised transforms stay within
// the bounds of TestFidelityTorchvision against torchvision, on the
// default decoder configuration: Train with a vertical flip
// (RandomVerticalFlip after RandomResizedCrop and RandomHorizontalFlip),
// Eval and Resize followed by both flips (also at full scale, every
// value within fullScaleMaxTol), and Eval written as float16 and bfloat16 normalised with ImageNet's
// mean and std (Normalize(ToTensor(img)) cast by torch), both layouts,
// with the difference of each value taken in 8-bit levels (|ours -
// torchvision| · std · 255). On the fast path at full scale every
// value is within fullScaleMaxTol levels and the roundings to the dtype.
func TestFidelityTorchvisionParams(t *testing.T) {
	ref := loadTorchvisionRef(t)
	const size = 224
	const sample = 3 * size * size
	check := func(msg string, f fidelity) {
		if f.mean > fidelityMeanTol || f.p99 > fidelityP99Tol || f.share > fidelityShareTol {
			t.Errorf("%s: %v; want mean <= %.1f, p99 image <= %.1f, off by > 8 <= %.1f%%", msg, f, fidelityMeanTol, fidelityP99Tol, 100*fidelityShareTol)
		} else {
			t.Logf("%s: %v", msg, f)
		}
	}
	got := make([]byte, len(ref.trainV))
	d, _ := newDecoderPath(t, trainVOps, size, NCHW, true, true)
	vflips := 0
	for i, b := range ref.data {
		info, err := d.Decode(b, ref.train[i].seed, got[i*sample:(i+1)*sample])
		if err != nil {
			t.Fatalf("%s: %v", ref.files[i], err)
		}
		if info.Crop != ref.train[i].crop || info.Flip != ref.train[i].flip || info.VFlip != ref.vflips[i] {
			t.Fatalf("%s: decoded %+v, drew %+v vflip %v", ref.files[i], info, ref.train[i], ref.vflips[i])
		}
		if info.VFlip {
			vflips++
		}
	}
	if vflips < fidelityN/4 || vflips > 3*fidelityN/4 {
		t.Errorf("%d of %d vertically flipped", vflips, fidelityN)
	}
	check(fmt.Sprintf("train|vflip  fast path (default), %d vflipped", vflips), measure(got, ref.trainV, sample))

	// The flips after eval and resize: torchvision's Resize(256) +
	// CenterCrop(224), and Resize((224, 224)), then RandomHorizontalFlip
	// and RandomVerticalFlip as drawn, on the default path and at full
	// scale (every value within fullScaleMaxTol).
	var counts [2]int
	for _, f := range ref.flips {
		counts[0] += b2i(f[0])
		counts[1] += b2i(f[1])
	}
	for _, n := range counts {
		if n < fidelityN/4 || n > 3*fidelityN/4 {
			t.Errorf("flips %v of %d", counts, fidelityN)
		}
	}
	for _, g := range []struct {
		base string
		want []byte
	}{{"eval", ref.evalFlip}, {"resize", ref.resizeFlip}} {
		for _, lowres := range []bool{true, false} {
			d, _ := newDecoderPath(t, Presets[g.base]+flipsAfter, size, NCHW, lowres, true)
			for i, b := range ref.data {
				info, err := d.Decode(b, ref.train[i].seed, got[i*sample:(i+1)*sample])
				if err != nil {
					t.Fatalf("%s: %v", ref.files[i], err)
				}
				if [2]bool{info.Flip, info.VFlip} != ref.flips[i] {
					t.Fatalf("%s%s %s: decoded %+v, drew %v", g.base, flipsAfter, ref.files[i], info, ref.flips[i])
				}
			}
			f := measure(got, g.want, sample)
			check(fmt.Sprintf("%s%s fast path lowres=%v, flips %v", g.base, flipsAfter, lowres, counts), f)
			if !lowres && f.max > fullScaleMaxTol {
				t.Errorf("%s%s full scale: a value %d levels off, want <= %d", g.base, flipsAfter, f.max, fullScaleMaxTol)
			}
		}
	}

	norm := fmt.Sprintf("resize(short=256)|center_crop|normalize(mean=[%v,%v,%v],std=[%v,%v,%v])",
		fidelityMean[0], fidelityMean[1], fidelityMean[2], fidelityStd[0], fidelityStd[1], fidelityStd[2])
	got = make([]byte, 2*fidelityN*sample)
	for _, dt := range []DType{Float16, BFloat16} {
		want := ref.evalF16
		if dt == BFloat16 {
			want = ref.evalBF16
		}
		for _, l := range []Layout{NCHW, NHWC} {
			for _, lowres := range []bool{true, false} {
				c := DefaultConfig()
				c.Transform = mustParse(norm)
				c.Layout, c.DType, c.Lowres = l, dt, lowres
				d, err := NewDecoder(c)
				if err != nil {
					t.Fatal(err)
				}
				for i, b := range ref.data {
					if _, err := d.Decode(b, 0, got[2*i*sample:2*(i+1)*sample]); err != nil {
						t.Fatalf("%s: %v", ref.files[i], err)
					}
				}
				d.Close()
				f, worst := measureFloats(got, want, size, l, dt, fidelityStd)
				check(fmt.Sprintf("eval|normalize %v %v lowres=%v (levels; largest value %.3f)", dt, l, lowres, worst), f)
				// Full scale: the uint8 samples are within a level of
				// torchvision's, so each value is within a level and the
				// two roundings to dt, half an ulp each at |x| < 4
				// (float16 2^-10, bfloat16 2^-7), in levels.
				halfULP := 0x1p-10
				if dt == BFloat16 {
					halfULP = 0x1p-7
				}
				bound := fullScaleMaxTol + 2*halfULP*max(fidelityStd[0], fidelityStd[1], fidelityStd[2])*255
				if !lowres && worst > bound {
					t.Errorf("eval|normalize %v %v full scale: a value %.3f levels off, want <= %.3f", dt, l, worst, bound)
				}
			}
		}
	}
}
