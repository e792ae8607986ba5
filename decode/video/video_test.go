package video

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const media = "../../testdata/media"

func TestMain(m *testing.M) {
	quietLogs()
	os.Exit(m.Run())
}

func read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(media, name))
	if err != nil {
		t.Fatalf("%v (scripts/mkmedia.sh makes it)", err)
	}
	return b
}

// framePTS are the stream's frames' timestamps in presentation order, as
// ffprobe reports them.
func framePTS(t testing.TB, name string) []int64 {
	t.Helper()
	out, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v", "-show_entries", "frame=best_effort_timestamp",
		"-of", "csv=p=0", filepath.Join(media, name)).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", name, err)
	}
	var pts []int64
	for _, l := range strings.Fields(string(out)) {
		v, err := strconv.ParseInt(strings.Trim(l, ","), 10, 64)
		if err != nil {
			t.Fatalf("ffprobe %s: %q", name, l)
		}
		pts = append(pts, v)
	}
	slices.Sort(pts)
	return pts
}

// counter reads frame k's drawn index (scripts/mkmedia.sh: 8 blocks in the
// top 16 source rows, x in [40, 120) of 160) from an NHWC clip of side s
// made from 160x128 frames: scaled by s/128, cropped at ox.
func counter(clip []byte, k, s, ox int) int {
	scale := float64(s) / 128
	frame := clip[k*s*s*3 : (k+1)*s*s*3]
	y := int(4 * scale)
	n := 0
	for b := 0; b < 8; b++ {
		x := int((40+10*float64(b)+5)*scale) - ox
		p := frame[(y*s+x)*3:]
		if (int(p[0])+int(p[1])+int(p[2]))/3 > 128 {
			n |= 1 << b
		}
	}
	return n
}

// targets are the timestamps the package promises for cfg on a clip, in
// the stream's time base (the doc's formulas, computed here on their
// own).
func targets(cfg Config, c Clip, seed uint64) []int64 {
	cfg = cfg.WithDefaults()
	out := make([]int64, cfg.Frames)
	tb := float64(c.TimeBaseNum) / float64(c.TimeBaseDen)
	if cfg.Sampling == Uniform {
		for k := range out {
			out[k] = c.StartPTS + (2*int64(k)+1)*c.Duration/(2*int64(cfg.Frames))
		}
		return out
	}
	u, _, _ := Draws(seed, cfg.Train)
	room := float64(c.Duration)*tb - float64(cfg.Frames)/cfg.FPS
	s := 0.0
	if room > 0 {
		s = u * room
	}
	for k := range out {
		out[k] = c.StartPTS + int64(math.Floor((s+float64(k)/cfg.FPS)/tb+1e-6))
	}
	return out
}

// shown is the index of the frame displayed at ts: the last with pts <= ts
// (the first, before it).
func shown(pts []int64, ts int64) int {
	n := 0
	for i, p := range pts {
		if p <= ts {
			n = i
		}
	}
	return n
}

// TestFrameExact: for constant and variable frame rate, every codec, both
// samplings, training and evaluation, each output frame's drawn counter
// is the frame displayed at its promised timestamp.
func TestFrameExact(t *testing.T) {
	cases := []struct {
		file string
		cfg  Config
	}{
		{"cfr_h264.mp4", Config{Frames: 8, Sampling: Uniform}},
		{"cfr_h264.mp4", Config{Frames: 6, Sampling: Random, FPS: 5}},
		{"cfr_h264.mp4", Config{Frames: 6, Sampling: Random, FPS: 12.5, Train: true}},
		{"vfr_h264.mkv", Config{Frames: 10, Sampling: Uniform}},
		{"vfr_h264.mkv", Config{Frames: 8, Sampling: Random, FPS: 6, Train: true}},
		{"vfr_h264.mkv", Config{Frames: 8, Sampling: Random, FPS: 20}},
		{"hevc.mp4", Config{Frames: 8, Sampling: Random, FPS: 10, Train: true}},
		{"vp9.webm", Config{Frames: 8, Sampling: Random, FPS: 10, Train: true}},
		{"av1.mkv", Config{Frames: 8, Sampling: Random, FPS: 10, Train: true}},
		{"av1.mkv", Config{Frames: 5, Sampling: Uniform}},
	}
	for _, tc := range cases {
		pts := framePTS(t, tc.file)
		data := read(t, tc.file)
		tc.cfg.Size, tc.cfg.NHWC = 64, true
		d, err := NewDecoder(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, d.Config().SampleBytes())
		seeds := []uint64{1}
		if tc.cfg.Train {
			seeds = []uint64{1, 2, 3, 4, 5}
		}
		for _, seed := range seeds {
			c, err := d.Decode(data, seed, dst)
			if err != nil {
				t.Fatalf("%s: %v", tc.file, err)
			}
			_, ux, _ := Draws(seed, tc.cfg.Train)
			sw := int(math.Round(160 * 64.0 / 128))
			ox := int(math.Floor(ux*float64(sw-64) + 0.5))
			want := targets(tc.cfg, c, seed)
			var got, exp []int
			for k := range want {
				got = append(got, counter(dst, k, 64, ox))
				exp = append(exp, shown(pts, want[k]))
			}
			if !slices.Equal(got, exp) {
				t.Errorf("%s %+v seed %d: drawn frames %v, want %v (targets %v)", tc.file, tc.cfg, seed, got, exp, want)
			}
			if c.Short {
				t.Errorf("%s: a window inside the clip reported short", tc.file)
			}
			if tc.cfg.Sampling == Random && c.Decoded >= len(pts) && want[0] > pts[len(pts)/2] {
				t.Errorf("%s: decoded %d frames for a window in the second half: the seek did not happen", tc.file, c.Decoded)
			}
		}
	}
}

// TestPixelsAgainstFFmpeg: evaluation frames are ffmpeg's own decode,
// bilinear scale and center crop of the same frames (to PNG) within a
// mean absolute difference of 1 and a maximum of 8 per channel.
func TestPixelsAgainstFFmpeg(t *testing.T) {
	for _, file := range []string{"cfr_h264.mp4", "vfr_h264.mkv", "hevc.mp4", "vp9.webm", "av1.mkv"} {
		pts := framePTS(t, file)
		cfg := Config{Frames: 4, Size: 64, NHWC: true}
		d, _ := NewDecoder(cfg)
		dst := make([]byte, d.Config().SampleBytes())
		c, err := d.Decode(read(t, file), 0, dst)
		if err != nil {
			t.Fatal(err)
		}
		for k, p := range c.PTS {
			n := slices.Index(pts, p)
			png := filepath.Join(t.TempDir(), "f.png")
			out, err := exec.Command("ffmpeg", "-v", "error", "-nostdin", "-i", filepath.Join(media, file), "-vf",
				fmt.Sprintf("select=eq(n\\,%d),scale=80:64:flags=bilinear,crop=64:64:8:0", n), "-frames:v", "1", "-y", png).CombinedOutput()
			if err != nil {
				t.Fatalf("ffmpeg: %v %s", err, out)
			}
			ref := readPNG(t, png)
			var sum, maxd float64
			frame := dst[k*64*64*3 : (k+1)*64*64*3]
			for i := range frame {
				dd := math.Abs(float64(frame[i]) - float64(ref[i]))
				sum += dd
				maxd = max(maxd, dd)
			}
			mean := sum / float64(len(frame))
			t.Logf("%s frame %d (pts %d): mean |diff| %.3f, max %.0f", file, n, p, mean, maxd)
			if mean > 1 || maxd > 8 {
				t.Errorf("%s frame %d: mean difference %.3f, max %.0f from ffmpeg", file, n, mean, maxd)
			}
		}
	}
}

func readPNG(t *testing.T, path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	out := make([]byte, 0, b.Dx()*b.Dy()*3)
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bb, _ := img.At(x, y).RGBA()
			out = append(out, byte(r>>8), byte(g>>8), byte(bb>>8))
		}
	}
	return out
}

// TestShortClipAndLayout: a 6-frame clip in a 1 s window at 8 fps is short,
// its tail the last frame repeated; NCHW is NHWC transposed.
func TestShortClipAndLayout(t *testing.T) {
	data := read(t, "short_h264.mp4")
	cfg := Config{Frames: 8, FPS: 8, Sampling: Random, Size: 32, NHWC: true}
	d, _ := NewDecoder(cfg)
	hwc := make([]byte, d.Config().SampleBytes())
	c, err := d.Decode(data, 3, hwc)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Short {
		t.Fatal("a 0.24 s clip in a 1 s window is not short")
	}
	var got []int
	for k := 0; k < 8; k++ {
		got = append(got, counter(hwc, k, 32, 4))
	}
	if !slices.Equal(got, []int{0, 3, 5, 5, 5, 5, 5, 5}) {
		t.Errorf("frames %v, want 0 3 5 then the last repeated", got)
	}
	cfg.NHWC = false
	d2, _ := NewDecoder(cfg)
	chw := make([]byte, len(hwc))
	if _, err := d2.Decode(data, 3, chw); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 8; k++ {
		for i := 0; i < 32*32; i++ {
			for ch := 0; ch < 3; ch++ {
				if chw[k*3*1024+ch*1024+i] != hwc[(k*1024+i)*3+ch] {
					t.Fatalf("frame %d pixel %d channel %d: NCHW differs from NHWC", k, i, ch)
				}
			}
		}
	}
}

// TestSeeds: the same seed samples the same clip; other seeds other
// windows and crops; evaluation ignores the seed.
func TestSeeds(t *testing.T) {
	data := read(t, "vfr_h264.mkv")
	train, _ := NewDecoder(Config{Frames: 4, FPS: 8, Sampling: Random, Size: 48, Train: true})
	eval, _ := NewDecoder(Config{Frames: 4, FPS: 8, Sampling: Random, Size: 48})
	clip := func(d *Decoder, seed uint64) []byte {
		dst := make([]byte, d.Config().SampleBytes())
		if _, err := d.Decode(data, seed, dst); err != nil {
			t.Fatal(err)
		}
		return dst
	}
	if !bytes.Equal(clip(train, 9), clip(train, 9)) {
		t.Fatal("the same seed gave two clips")
	}
	distinct := map[string]bool{}
	for s := uint64(0); s < 8; s++ {
		distinct[string(clip(train, s))] = true
	}
	if len(distinct) < 7 {
		t.Fatalf("8 seeds gave %d distinct clips", len(distinct))
	}
	if !bytes.Equal(clip(eval, 1), clip(eval, 2)) {
		t.Fatal("evaluation clips depend on the seed")
	}
}

// TestBadMedia: garbage, audio only, and every clip cut at many offsets are
// classified per-sample errors (or decode what is left), never a crash.
func TestBadMedia(t *testing.T) {
	d, _ := NewDecoder(Config{Frames: 4, Size: 32})
	dst := make([]byte, d.Config().SampleBytes())
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrCorrupt},
		{"garbage", bytes.Repeat([]byte("not a video "), 400), ErrCorrupt},
		{"audio only", read(t, "speech.ogg"), ErrUnsupported},
	} {
		if _, err := d.Decode(tc.data, 1, dst); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	small, _ := NewDecoder(Config{Frames: 4, Size: 32, MaxPixels: 100 * 100})
	if _, err := small.Decode(read(t, "cfr_h264.mp4"), 1, dst); !errors.Is(err, ErrTooLarge) {
		t.Errorf("160x128 with MaxPixels 10000: %v", err)
	}
	for _, f := range []string{"cfr_h264.mp4", "vfr_h264.mkv", "hevc.mp4", "vp9.webm", "av1.mkv"} {
		data := read(t, f)
		fails := 0
		for cut := 0; cut < len(data); cut += len(data)/29 + 1 {
			_, err := d.Decode(data[:cut], 1, dst)
			if err != nil {
				fails++
				if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
					t.Fatalf("%s cut at %d: unclassified %v", f, cut, err)
				}
			}
		}
		// and damaged in the middle
		bad := slices.Clone(data)
		for i := len(bad) / 3; i < len(bad)/3+2000 && i < len(bad); i++ {
			bad[i] ^= 0x5a
		}
		if _, err := d.Decode(bad, 1, dst); err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
			t.Fatalf("%s damaged: unclassified %v", f, err)
		}
		if fails == 0 {
			t.Errorf("%s: no cut failed", f)
		}
	}
}

type memRange struct{ data []byte }

func (m memRange) GetRange(_ context.Context, _ string, off, n int64, dst []byte) ([]byte, error) {
	if off < 0 || off > int64(len(m.data)) {
		return dst[:0], errors.New("range")
	}
	return append(dst[:0], m.data[off:min(off+n, int64(len(m.data)))]...), nil
}

// TestRangeReader: a clip read by ranges is the clip read from memory,
// fetched in read-ahead pieces, and a failing store is ErrRead.
func TestRangeReader(t *testing.T) {
	data := read(t, "vfr_h264.mkv")
	d, _ := NewDecoder(Config{Frames: 4, FPS: 8, Sampling: Random, Size: 32, Train: true})
	a, b := make([]byte, d.Config().SampleBytes()), make([]byte, d.Config().SampleBytes())
	if _, err := d.Decode(data, 5, a); err != nil {
		t.Fatal(err)
	}
	rr := NewRangeReader(context.Background(), memRange{data}, "k", int64(len(data)), 4096)
	if _, err := d.DecodeReader(rr, int64(len(data)), 5, b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("ranged and in-memory decodes differ")
	}
	t.Logf("%d ranged gets, %d of %d bytes fetched", rr.Gets, rr.Fetched, len(data))
	if rr.Gets < 2 || rr.Fetched > 2*int64(len(data)) {
		t.Fatalf("%d gets of 4 KiB, %d bytes, for a %d-byte object", rr.Gets, rr.Fetched, len(data))
	}
	if _, err := d.DecodeReader(NewRangeReader(context.Background(), memRange{data[:100]}, "k", int64(len(data)), 4096), int64(len(data)), 5, b); err == nil {
		t.Fatal("a store that cannot serve the ranges: no error")
	}
}

// TestNoMemoryGrowth: thousands of clips through DecodeReader (the custom
// IO path, a cgo.Handle per clip) and Decode leave resident memory flat:
// no read callback, reader or FFmpeg context outlives its clip.
func TestNoMemoryGrowth(t *testing.T) {
	data := read(t, "short_h264.mp4")
	d, _ := NewDecoder(Config{Frames: 2, Size: 16, Threads: 1})
	dst := make([]byte, d.Config().SampleBytes())
	run := func(n int) {
		for i := 0; i < n; i++ {
			r := NewRangeReader(context.Background(), memRange{data}, "k", int64(len(data)), 16<<10)
			if _, err := d.DecodeReader(r, int64(len(data)), uint64(i), dst); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(300)
	runtime.GC()
	r0 := rss(t)
	run(1000)
	runtime.GC()
	r1 := rss(t)
	run(1000)
	runtime.GC()
	r2 := rss(t)
	t.Logf("resident memory %d -> %d -> %d KiB over 2 x 1000 clips", r0>>10, r1>>10, r2>>10)
	// A leak of the reader and its buffers (16 KiB and more a clip) would
	// be 16 MB a thousand clips, 32 MB over the two. The allocator's (and
	// under -race the detector's) noise moves a measurement by 4 MB either
	// way (seen: -3.5 then +4.2 MB): allow 10 MB a thousand, 12 over both.
	if r2-r1 > 10<<20 || r2-r0 > 12<<20 {
		t.Fatalf("resident memory grew %d then %d KiB per 1000 clips", (r1-r0)>>10, (r2-r1)>>10)
	}
}

func rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	pages, _ := strconv.ParseInt(string(bytes.Fields(b)[1]), 10, 64)
	return pages * int64(os.Getpagesize())
}

// TestRangedReadsPartOfLongFile: a 2 s window of a 120 s clip read by
// ranges fetches a small part of the file (the header, the index, the
// GOPs around the window), not the whole object; and the frames are the
// in-memory decode's.
func TestRangedReadsPartOfLongFile(t *testing.T) {
	for _, ext := range []string{"mp4", "mkv"} {
		path := filepath.Join(t.TempDir(), "long."+ext)
		out, err := exec.Command("ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-f", "lavfi", "-i",
			"testsrc2=size=96x64:rate=25:duration=120", "-c:v", "libx264", "-preset", "ultrafast", "-g", "50",
			"-x264-params", "threads=1", "-fflags", "+bitexact", path).CombinedOutput()
		if err != nil {
			t.Fatalf("ffmpeg: %v %s", err, out)
		}
		data, _ := os.ReadFile(path)
		d, _ := NewDecoder(Config{Frames: 16, FPS: 8, Sampling: Random, Size: 32, Train: true})
		a, b := make([]byte, d.Config().SampleBytes()), make([]byte, d.Config().SampleBytes())
		var starts []int64
		for _, seed := range []uint64{1, 2, 3} {
			c, err := d.Decode(data, seed, a)
			if err != nil {
				t.Fatal(err)
			}
			starts = append(starts, c.PTS[0])
			rr := NewRangeReader(context.Background(), memRange{data}, "k", int64(len(data)), 32<<10)
			if _, err := d.DecodeReader(rr, int64(len(data)), seed, b); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, b) {
				t.Fatalf("%s seed %d: ranged and in-memory clips differ", ext, seed)
			}
			t.Logf("%s seed %d: %d of %d bytes in %d ranged gets", ext, seed, rr.Fetched, len(data), rr.Gets)
			if rr.Fetched > int64(len(data))/4 {
				t.Errorf("%s seed %d: a 2 s window of 120 s fetched %d of %d bytes", ext, seed, rr.Fetched, len(data))
			}
		}
		if starts[0] == starts[1] && starts[1] == starts[2] {
			t.Errorf("%s: three seeds, one window (first pts %v)", ext, starts)
		}
		t.Logf("%s: windows start at pts %v", ext, starts)
	}
}

// TestSkipsUnneededFrames: in an MP4 with B-frames, frames no target
// falls on are not decoded when nothing refers to them (TestFrameExact
// holds the frames delivered to the right ones): uniform sampling of 4
// frames decodes fewer than the frames up to the last target.
func TestSkipsUnneededFrames(t *testing.T) {
	pts := framePTS(t, "cfr_h264.mp4")
	d, err := NewDecoder(Config{Frames: 4, Sampling: Uniform, Size: 64})
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, d.Config().SampleBytes())
	c, err := d.Decode(read(t, "cfr_h264.mp4"), 1, dst)
	if err != nil {
		t.Fatal(err)
	}
	want := targets(d.Config(), c, 1)
	upTo := shown(pts, want[len(want)-1]) + 1 // frames from the start through the last target's
	if c.Decoded >= upTo {
		t.Errorf("decoded %d frames for 4 targets, the frames up to the last target's are %d: nothing skipped", c.Decoded, upTo)
	}
	t.Logf("decoded %d of the %d frames up to the last target", c.Decoded, upTo)
}

// TestPlanarMatchesRGB24: wherever a clip takes the planar path (scaled
// to YUV 4:2:2, converted with swscale's lookup), its bytes are swscale's
// RGB24 output's exactly, for every codec, both layouts, training crops,
// limited and full range, and scale factors from just past the 1:1 the
// rule excludes to 8x; and the clips the rule sends to RGB24 (heights
// barely shrunk, a portrait frame's odd width) take it.
func TestPlanarMatchesRGB24(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, args ...string) string {
		path := filepath.Join(dir, name)
		args = append([]string{"-v", "error", "-nostdin", "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=25", "-t", "1"}, args...)
		if out, err := exec.Command("ffmpeg", append(args, path)...).CombinedOutput(); err != nil {
			t.Fatalf("ffmpeg: %v %s", err, out)
		}
		return path
	}
	wide := mk("wide.mp4", "-c:v", "libx264", "-pix_fmt", "yuv420p")
	full := mk("full.avi", "-c:v", "mjpeg", "-pix_fmt", "yuvj420p")
	tall := mk("tall.mp4", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-vf", "transpose=1")
	type source struct {
		path string
		w, h int
	}
	var sources []source
	for _, f := range []string{"cfr_h264.mp4", "vfr_h264.mkv", "hevc.mp4", "vp9.webm", "av1.mkv"} {
		sources = append(sources, source{filepath.Join(media, f), 160, 128})
	}
	sources = append(sources, source{wide, 640, 360}, source{full, 640, 360}, source{tall, 360, 640})
	planar := 0
	for _, src := range sources {
		data, err := os.ReadFile(src.path)
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range []int{16, 32, 48, 56, 64, 95, 96, 100, 112, 120, 124, 126, 128, 180, 224, 228, 255, 256, 340, 344} {
			if size > min(src.w, src.h) {
				continue
			}
			// The scaled size as the decoder computes it: the short
			// side to size, the long side to the nearest even number.
			long := 2 * int(math.Round(float64(max(src.w, src.h))*float64(size)/float64(min(src.w, src.h))/2))
			sw, sh := long, size
			if src.w < src.h {
				sw, sh = size, long
			}
			want := sw%2 == 0 && src.h*16 >= sh*17
			for _, nhwc := range []bool{true, false} {
				cfg := Config{Frames: 4, Size: size, NHWC: nhwc, Train: true, Sampling: Random, FPS: 10}
				fast, _ := NewDecoder(cfg)
				slow, _ := NewDecoder(cfg)
				slow.rgbOnly = true
				a := make([]byte, fast.Config().SampleBytes())
				b := make([]byte, len(a))
				ca, err := fast.Decode(data, uint64(size), a)
				if err != nil {
					t.Fatalf("%s size %d: %v", src.path, size, err)
				}
				cb, err := slow.Decode(data, uint64(size), b)
				if err != nil {
					t.Fatalf("%s size %d: %v", src.path, size, err)
				}
				if ca.Planar != want || cb.Planar {
					t.Errorf("%s size %d (%dx%d to width %d): planar %v, want %v (RGB24-only decoder: %v)",
						filepath.Base(src.path), size, src.w, src.h, sw, ca.Planar, want, cb.Planar)
				}
				if !bytes.Equal(a, b) {
					n := 0
					for i := range a {
						if a[i] != b[i] {
							n++
						}
					}
					t.Errorf("%s size %d nhwc %v: %d of %d bytes differ from swscale's RGB24", filepath.Base(src.path), size, nhwc, n, len(a))
				}
				if ca.Planar {
					planar++
				}
			}
		}
	}
	if planar == 0 {
		t.Fatal("no clip took the planar path")
	}
}
