package decode

import (
	"bytes"
	"image"
	"image/jpeg"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sampleDiff is the mean and the 99th percentile absolute difference
// between two samples of the same layout (8-bit levels, all channels).
func sampleDiff(a, b []byte) (mean float64, p99 int) {
	var hist [256]int
	sum := 0
	for i := range a {
		d := abs(int(a[i]) - int(b[i]))
		sum += d
		hist[d]++
	}
	acc := 0
	for v, c := range hist {
		acc += c
		if acc >= len(a)*99/100 {
			p99 = v
			break
		}
	}
	return float64(sum) / float64(len(a)), p99
}

// reencode returns the bench fixture re-encoded by Go's encoder, which
// writes baseline 4:2:0 for colour and single-component grayscale.
func reencode(t testing.TB, gray bool) []byte {
	t.Helper()
	img, err := jpeg.Decode(bytes.NewReader(readFixture(t, "bench_470x390_q96_444.jpg")))
	if err != nil {
		t.Fatal(err)
	}
	if gray {
		g := image.NewGray(img.Bounds())
		for y := range img.Bounds().Dy() {
			for x := range img.Bounds().Dx() {
				g.Set(x, y, img.At(x, y))
			}
		}
		img = g
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 96}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Tolerances of the fast path (8-bit levels, over all channels). Against
// the FFmpeg path on the same sampling (Lowres off, so no DCT scaling;
// both paths scale with resize.c) they differ in the IDCT (libjpeg's
// ISLOW against FFmpeg's) and in where YCbCr->RGB happens (libjpeg,
// swscale): measured 0.02-0.05 mean, p99 1, for 4:4:4 and gray.
// With chroma subsampling the FFmpeg path is the less exact one: swscale
// misregisters the chroma of a region that starts between chroma samples
// (see TestTrainMatchesCropThenResize), which shows on small upscaled
// Train crops (up to 2.3 mean, p99 16, in R and B), while libjpeg
// upsamples the chroma at full size before the region is cut. So
// subsampled JPEGs are held tight against the Go reference (decode all,
// sample the same box) instead: measured 0.4-0.5 mean, p99 <= 2.
const (
	turboMeanTol = 0.15 // fast vs FFmpeg, 4:4:4 and gray
	turboP99Tol  = 1
	turboSubTol  = 3.5 // fast vs FFmpeg, 4:2:0 and 4:2:2: FFmpeg's own error
	turboRefTol  = 0.7 // fast vs the Go reference, all chroma layouts
	turboRefP99  = 4
)

// The fast path gives the FFmpeg path's output, within the tolerances
// above, for every transform, layout and chroma layout, with exactly
// SamplingFor's geometry; with Lowres it DCT-scales and stays close.
func TestTurboMatchesFFmpeg(t *testing.T) {
	cases := []struct {
		name       string
		data       []byte
		subsampled bool
	}{
		{"bench_470x390_q96_444.jpg", nil, false},
		{"jpeg_444.jpg", nil, false},
		{"jpeg_gray.jpg", nil, false},
		{"bench q96 gray (Go encoder)", reencode(t, true), false},
		{"jpeg_420.jpg", nil, true},
		{"jpeg_420_odd.jpg", nil, true},
		{"jpeg_422.jpg", nil, true},
		{"jpeg_progressive.jpg", nil, true},
		{"bench q96 4:2:0 (Go encoder)", reencode(t, false), true},
		{"large_1280x1024_q90_420.jpg", nil, true},
	}
	for _, tc := range cases {
		b := tc.data
		if b == nil {
			b = readFixture(t, tc.name)
		}
		ref := refDecode(t, b)
		for _, kind := range []string{"train", "eval", "resize"} {
			for _, layout := range []Layout{NCHW, NHWC} {
				fast, c := newDecoderPath(t, kind, 224, layout, false, true)
				slow, _ := newDecoderPath(t, kind, 224, layout, false, false)
				s1 := make([]byte, c.SampleBytes())
				s2 := make([]byte, c.SampleBytes())
				var worstMean, worstRef float64
				var worstP99, worstRefP99 int
				for seed := range uint64(6) {
					i1, err := fast.Decode(b, seed, s1)
					if err != nil {
						t.Fatalf("%s: %v", tc.name, err)
					}
					i2, err := slow.Decode(b, seed, s2)
					if err != nil {
						t.Fatalf("%s: %v", tc.name, err)
					}
					s := SamplingFor(c.Transform, i1.Width, i1.Height, seed)
					region := readRegion(s.Box, s.Clip, 224)
					if i1.Path != PathTurbo || i1.DCTScale != 8 || i1.Crop != s.Crop || i1.Flip != s.Flip ||
						i1.Region != region || i2.Path != PathFFmpeg || i2.Crop != s.Crop || i2.Region != region ||
						(kind != "eval" && region != s.Crop) {
						t.Fatalf("%s %s seed %d: fast %+v slow %+v", tc.name, kind, seed, i1, i2)
					}
					mean, p99 := sampleDiff(s1, s2)
					worstMean, worstP99 = max(worstMean, mean), max(worstP99, p99)
					if layout == NCHW && tc.name != "large_1280x1024_q90_420.jpg" { // grass: scaler differences dominate
						st := compare(s1, 224, layout, refSample(ref, s.Box, s.Clip, 224, s.Flip))
						worstRef, worstRefP99 = max(worstRef, st.worstMean()), max(worstRefP99, st.p99)
					}
				}
				meanTol, p99Tol := turboMeanTol, turboP99Tol
				if tc.subsampled {
					meanTol, p99Tol = turboSubTol, 20
				}
				if worstMean > meanTol || worstP99 > p99Tol || worstRef > turboRefTol || worstRefP99 > turboRefP99 {
					t.Errorf("%s %s %v: fast vs FFmpeg worst mean %.2f p99 %d; fast vs Go reference worst mean %.2f p99 %d",
						tc.name, kind, layout, worstMean, worstP99, worstRef, worstRefP99)
				} else if layout == NCHW {
					t.Logf("%-30s %-6s: fast vs FFmpeg worst mean %.2f p99 %d; fast vs Go reference worst mean %.2f p99 %d",
						tc.name, kind, worstMean, worstP99, worstRef, worstRefP99)
				}
			}
		}
	}

	// With Lowres, crops with both sides >= 2*Size are DCT-scaled by 4/8
	// (or 2/8, 1/8): the region is CropFor's crop mapped into the scaled
	// image (scaleRect), and the output stays near the full decode, as
	// FFmpeg's lowres does (a scaled IDCT is a sharper low-pass than
	// antialiased bilinear; this grass photo is the worst case).
	b := readFixture(t, "large_1280x1024_q90_420.jpg")
	for _, kind := range []string{"train", "eval", "resize"} {
		fast, c := newDecoderPath(t, kind, 224, NCHW, true, true)
		full, _ := newDecoderPath(t, kind, 224, NCHW, false, false)
		s1 := make([]byte, c.SampleBytes())
		s2 := make([]byte, c.SampleBytes())
		scales := map[int]int{}
		var worst float64
		for seed := range uint64(12) {
			i1, err := fast.Decode(b, seed, s1)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := full.Decode(b, seed, s2); err != nil {
				t.Fatal(err)
			}
			p := planTurbo(SamplingFor(c.Transform, i1.Width, i1.Height, seed), i1.Width, i1.Height, 224, true)
			if i1.DCTScale != p.m || i1.Region != p.region || (p.m < 8) != (p.region.W >= 224 && p.region.H >= 224 && (i1.Crop.W >= 448 && i1.Crop.H >= 448)) {
				t.Errorf("%s seed %d: %+v; want scale %d region %+v of %dx%d", kind, seed, i1, p.m, p.region, p.ow, p.oh)
			}
			scales[p.m]++
			mean, _ := sampleDiff(s1, s2)
			worst = max(worst, mean)
		}
		if worst > 4 { // FFmpeg's lowres: up to 2.4 on this photo, worst sample 4.9
			t.Errorf("%s: DCT-scaled vs full decode: worst mean %.2f", kind, worst)
		}
		t.Logf("large %s: DCT scales used %v; worst mean |scaled - FFmpeg full| %.2f", kind, scales, worst)
	}
}

// JPEGs the fast path does not take go to FFmpeg, counted by reason; the
// set of samples that decode, and their errors, do not depend on FastJPEG.
func TestTurboFallback(t *testing.T) {
	ok := readFixture(t, "jpeg_420.jpg")
	// Sampling factors 0x0 for the first component: libjpeg raises an
	// error (longjmp, not exit) while reading the header.
	badSampling := slices.Clone(ok)
	sofAt := bytes.Index(badSampling, []byte{0xFF, 0xC0})
	if sofAt < 0 {
		t.Fatal("no SOF0 in jpeg_420.jpg")
	}
	badSampling[sofAt+2+2+6+1] = 0x00
	// A Huffman table with more than 256 codes.
	badDHT := slices.Clone(ok)
	dhtAt := bytes.Index(badDHT, []byte{0xFF, 0xC4})
	for i := range 16 {
		badDHT[dhtAt+5+i] = 0xFF
	}
	cases := []struct {
		name string
		data []byte
		want Fallback
	}{
		{"bad sampling", badSampling, FallbackError},
		{"bad DHT", badDHT, FallbackError},
	}
	fast, c := newDecoderPath(t, "train", 64, NCHW, true, true)
	slow, _ := newDecoderPath(t, "train", 64, NCHW, true, false)
	s1 := make([]byte, c.SampleBytes())
	s2 := make([]byte, c.SampleBytes())
	var want Stats
	for _, tc := range cases {
		i1, err1 := fast.Decode(tc.data, 1, s1)
		_, err2 := slow.Decode(tc.data, 1, s2)
		want.FFmpeg++
		want.Fallbacks[tc.want]++
		if i1.Path != PathFFmpeg || i1.Fallback != tc.want {
			t.Errorf("%s: path %v fallback %v, want ffmpeg/%v", tc.name, i1.Path, i1.Fallback, tc.want)
		}
		if (err1 == nil) != (err2 == nil) || err1 != nil && !isDataError(err1) {
			t.Errorf("%s: fast %v, FFmpeg %v", tc.name, err1, err2)
		}
		if err1 == nil && !bytes.Equal(s1, s2) {
			t.Errorf("%s: fallback output differs from the FFmpeg path's", tc.name)
		}
		t.Logf("%s: fallback %v, result %v", tc.name, i1.Fallback, err1)
	}
	if _, err := fast.Decode(ok, 1, s1); err != nil {
		t.Fatalf("after fallbacks: %v", err)
	}
	want.Turbo++
	if got := fast.Stats(); got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
	// Damaged entropy-coded data: libjpeg conceals it (as FFmpeg does),
	// or fails and FFmpeg decides; never a crash, never an unclassified
	// error.
	for i := range 200 {
		m := slices.Clone(ok)
		for k := range 1 + i%5 {
			m[len(m)/4+(i*7919+k*104729)%(len(m)*3/4-2)] ^= byte(1 + (i+k)%255)
		}
		if _, err := fast.Decode(m, uint64(i), s1); err != nil && !isDataError(err) {
			t.Fatalf("damaged %d: %v", i, err)
		}
	}
	t.Logf("damaged inputs: %+v", fast.Stats())
	// A stray RST marker a third of the way down: libjpeg warns
	// ("premature end of data segment"), conceals, and the warning is
	// counted.
	stray := slices.Clone(ok)
	stray[len(stray)/3], stray[len(stray)/3+1] = 0xFF, 0xD5
	whole, _ := newDecoderPath(t, "resize", 64, NCHW, false, true)
	info, err := whole.Decode(stray, 0, s1)
	if err != nil || info.Path != PathTurbo || whole.Stats().Warnings == 0 {
		t.Errorf("stray marker: %+v %v, stats %+v", info, err, whole.Stats())
	}
}

// threadCPU is the calling thread's CPU time (lock the goroutine to its
// thread): on a shared machine it counts only this thread's work.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	const rusageThread = 1 // RUSAGE_THREAD
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestTurboDataset decodes every JPEG of an ImageFolder dataset with both
// paths and reports CPU ms/image and the mean difference (a measurement,
// not a timed assertion; the difference is asserted). It runs when
// LONGSHORE_DECODE_DATASET names the folder, e.g.
//
//	LONGSHORE_DECODE_DATASET=~/.cache/longshore/datasets/imagenet-like-n512-s1 \
//	    go test ./decode/ -run TurboDataset -v
func TestTurboDataset(t *testing.T) {
	dir := os.Getenv("LONGSHORE_DECODE_DATASET")
	if dir == "" {
		t.Skip("LONGSHORE_DECODE_DATASET not set")
	}
	var files [][]byte
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ext := strings.ToLower(filepath.Ext(p)); ext == ".jpeg" || ext == ".jpg" {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			files = append(files, b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no JPEGs under %s", dir)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, kind := range []string{"train", "eval"} {
		fast, c := newDecoderPath(t, kind, 224, NCHW, true, true)
		slow, _ := newDecoderPath(t, kind, 224, NCHW, true, false)
		s1 := make([]byte, c.SampleBytes())
		s2 := make([]byte, c.SampleBytes())
		var tFast, tSlow time.Duration
		var sum, worst float64
		var n, failed int
		for rep := range 2 { // alternate, so that load on the machine hits both
			for i, b := range files {
				seed := SampleSeed(1, rep, int64(i))
				t0 := threadCPU()
				_, e1 := fast.Decode(b, seed, s1)
				t1 := threadCPU()
				_, e2 := slow.Decode(b, seed, s2)
				t2 := threadCPU()
				tFast += t1 - t0
				tSlow += t2 - t1
				if (e1 == nil) != (e2 == nil) {
					t.Errorf("file %d: fast %v, FFmpeg %v", i, e1, e2)
				}
				if e1 != nil {
					failed++
					continue
				}
				mean, _ := sampleDiff(s1, s2)
				sum += mean
				worst = max(worst, mean)
				n++
			}
		}
		st := fast.Stats()
		perImage := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(2*len(files)) }
		t.Logf("%s, %d JPEGs x2: fast %.3f ms/image, FFmpeg %.3f ms/image (%.2fx); |fast - FFmpeg| mean %.3f, worst image %.2f; %d failed; stats %+v",
			kind, len(files), perImage(tFast), perImage(tSlow), float64(tSlow)/float64(tFast), sum/float64(n), worst, failed, st)
		// Mostly 4:4:4 (about 0.2) with some 4:2:0 (where FFmpeg's
		// chroma registration adds its own error): 0.28 measured.
		if sum/float64(n) > 0.5 {
			t.Errorf("%s: mean difference %.3f above 0.5", kind, sum/float64(n))
		}
	}
}
