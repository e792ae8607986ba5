package audio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
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

// formats are the committed clips (scripts/mkmedia.sh): speech at 22050 Hz
// mono and a tone pair at 44100 Hz stereo, in every format.
var formats = []string{"wav", "flac", "mp3", "opus", "ogg"}

func read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(media, name))
	if err != nil {
		t.Fatalf("%v (make the clips with scripts/mkmedia.sh)", err)
	}
	return b
}

// ffmpegPCM is ffmpeg's own decode and resampling of the file to rate and
// channels, interleaved float32.
func ffmpegPCM(t testing.TB, name string, rate, channels int) []float32 {
	t.Helper()
	cmd := exec.Command("ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-i", filepath.Join(media, name),
		"-vn", "-ar", strconv.Itoa(rate), "-ac", strconv.Itoa(channels), "-f", "f32le", "-")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("ffmpeg %s: %v\n%s", name, err, stderr.String())
	}
	b := out.Bytes()
	p := make([]float32, len(b)/4)
	for i := range p {
		p[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return p
}

// TestAgainstFFmpeg: every format of both clips, at three output rates and
// mono and stereo, matches ffmpeg's decode+resample (-ar, -ac) within a
// tolerance: the same length to 0.5 ms, and a per-sample difference at
// most 1e-5 of full scale with an RMS difference under 1e-6. Both run
// FFmpeg's decoders and libswresample with its defaults (the command line
// through its aresample filter); on Debian 12's FFmpeg 5.1 the output is
// bit-identical, the tolerance leaves room for rounding in other builds.
func TestAgainstFFmpeg(t *testing.T) {
	for _, clip := range []string{"speech", "tone"} {
		for _, f := range formats {
			for _, out := range []struct{ rate, ch int }{{16000, 1}, {22050, 2}, {48000, 1}} {
				name := clip + "." + f
				d, err := NewDecoder(Config{SampleRate: out.rate, Channels: out.ch})
				if err != nil {
					t.Fatal(err)
				}
				got, n, err := d.PCM(read(t, name))
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				want := ffmpegPCM(t, name, out.rate, out.ch)
				wn := len(want) / out.ch
				if diff := n - wn; diff < -out.rate/2000 || diff > out.rate/2000 {
					t.Errorf("%s at %d Hz x%d: %d frames, ffmpeg %d", name, out.rate, out.ch, n, wn)
					continue
				}
				m := min(len(got), len(want))
				var maxd, sq float64
				for i := 0; i < m; i++ {
					dd := math.Abs(float64(got[i] - want[i]))
					maxd = max(maxd, dd)
					sq += dd * dd
				}
				rms := math.Sqrt(sq / float64(m))
				var energy float64
				for _, v := range want {
					energy += float64(v) * float64(v)
				}
				if math.Sqrt(energy/float64(len(want))) < 0.01 {
					t.Fatalf("%s: ffmpeg's reference is near silence: the comparison would prove nothing", name)
				}
				t.Logf("%s at %d Hz x%d: %d frames (ffmpeg %d), max difference %.3g, rms %.3g", name, out.rate, out.ch, n, wn, maxd, rms)
				if maxd > 1e-5 || rms > 1e-6 {
					t.Errorf("%s at %d Hz x%d: max difference %.3g, rms %.3g against ffmpeg", name, out.rate, out.ch, maxd, rms)
				}
			}
		}
	}
}

func floats(b []byte) []float32 {
	p := make([]float32, len(b)/4)
	for i := range p {
		p[i] = math.Float32frombits(binary.NativeEndian.Uint32(b[4*i:]))
	}
	return p
}

// TestWindows: a window is the PCM's samples from its start, in channel
// planes; eval takes the centered one; train one drawn from the seed, the
// same for the same seed and different across seeds; audio shorter than
// the window is zero-padded and short.
func TestWindows(t *testing.T) {
	data := read(t, "tone.flac") // 3 s stereo
	cfg := Config{SampleRate: 8000, Channels: 2, Seconds: 0.5}
	d, err := NewDecoder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pcm, total, err := d.PCM(data)
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Samples()
	window := func(d *Decoder, seed uint64) ([]float32, bool) {
		dst := make([]byte, d.Config().SampleBytes())
		short, err := d.Decode(data, seed, dst)
		if err != nil {
			t.Fatal(err)
		}
		return floats(dst), short
	}
	check := func(what string, w []float32, start int) {
		for ch := 0; ch < 2; ch++ {
			for i := 0; i < s; i++ {
				if w[ch*s+i] != pcm[(start+i)*2+ch] {
					t.Fatalf("%s: channel %d sample %d is not the PCM's sample %d", what, ch, i, start+i)
				}
			}
		}
	}
	w, short := window(d, 1)
	if short {
		t.Fatal("eval window of 0.5 s in 3 s audio is short")
	}
	check("eval", w, (total-s)/2)

	cfg.Train = true
	td, _ := NewDecoder(cfg)
	starts := map[int]bool{}
	for seed := uint64(0); seed < 20; seed++ {
		w1, _ := window(td, seed)
		w2, _ := window(td, seed)
		start, _ := Window(total, s, true, seed)
		check("train", w1, start)
		if !slices.Equal(w1, w2) {
			t.Fatalf("seed %d: two windows differ", seed)
		}
		starts[start] = true
	}
	if len(starts) < 15 {
		t.Fatalf("20 seeds drew only %d distinct starts", len(starts))
	}

	// 0.5 s of audio in a 1 s window: padded with zeros, short.
	sd, _ := NewDecoder(Config{SampleRate: 16000, Channels: 1, Seconds: 1, Train: true})
	sdata := read(t, "short.flac")
	spcm, sn, err := sd.PCM(sdata)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, sd.Config().SampleBytes())
	short, err = sd.Decode(sdata, 7, dst)
	if err != nil || !short || sn != 8000 {
		t.Fatalf("short clip: short %v, %d samples, err %v", short, sn, err)
	}
	sw := floats(dst)
	if !slices.Equal(sw[:sn], spcm) || slices.ContainsFunc(sw[sn:], func(v float32) bool { return v != 0 }) {
		t.Fatal("short clip: window is not its samples then zeros")
	}
}

// TestBadMedia: garbage, an object without audio, too-long audio, and
// every file cut at many offsets fail as classified per-sample errors (or
// decode what is left), never crash.
func TestBadMedia(t *testing.T) {
	d, _ := NewDecoder(Config{})
	dst := make([]byte, d.Config().SampleBytes())
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrCorrupt},
		{"garbage", bytes.Repeat([]byte("not audio "), 500), ErrCorrupt},
		{"no audio stream", read(t, "noaudio.mkv"), ErrUnsupported},
	} {
		if _, err := d.Decode(tc.data, 1, dst); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	long, _ := NewDecoder(Config{Seconds: 1, MaxSeconds: 1.5})
	if _, err := long.Decode(read(t, "tone.flac"), 1, dst); !errors.Is(err, ErrTooLarge) {
		t.Errorf("3 s with MaxSeconds 1.5: %v", err)
	}
	for _, clip := range []string{"speech", "tone"} {
		for _, f := range formats {
			data := read(t, clip+"."+f)
			fails := 0
			for cut := 0; cut < len(data); cut += len(data)/37 + 1 {
				_, err := d.Decode(data[:cut], 1, dst)
				if err != nil {
					fails++
					if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
						t.Fatalf("%s.%s cut at %d: unclassified error %v", clip, f, cut, err)
					}
				}
			}
			if fails == 0 {
				t.Errorf("%s.%s: no cut failed (the cut at 0 must)", clip, f)
			}
		}
	}
}

// TestNoMemoryGrowth decodes thousands of objects (good and cut) and
// checks the process's resident memory does not grow with their number:
// everything FFmpeg allocates per object is freed.
func TestNoMemoryGrowth(t *testing.T) {
	d, _ := NewDecoder(Config{Seconds: 0.25})
	dst := make([]byte, d.Config().SampleBytes())
	objs := [][]byte{read(t, "short.flac"), read(t, "tone.opus")[:6000], read(t, "tone.ogg")[:5000], read(t, "short.wav")}
	run := func(n int) {
		for i := 0; i < n; i++ {
			d.Decode(objs[i%len(objs)], uint64(i), dst)
		}
	}
	run(200) // warm up: FFmpeg's one-time tables, the allocator's arenas
	r0 := rss(t)
	run(3000)
	r1 := rss(t)
	t.Logf("resident memory %d -> %d KiB over 3000 decodes", r0>>10, r1>>10)
	if r1-r0 > 16<<20 {
		t.Fatalf("resident memory grew by %d KiB over 3000 decodes", (r1-r0)>>10)
	}
}

func rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	f := bytes.Fields(b)
	pages, _ := strconv.ParseInt(string(f[1]), 10, 64)
	return pages * int64(os.Getpagesize())
}

func TestConfigDefaults(t *testing.T) {
	c := Config{}
	if c.Samples() != 16000 || c.SampleBytes() != 64000 || c.Validate() != nil {
		t.Fatalf("zero config: %d samples, %d bytes, %v", c.Samples(), c.SampleBytes(), c.Validate())
	}
	if err := (Config{SampleRate: 10, Channels: 99, Seconds: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "sample rate") ||
		!strings.Contains(err.Error(), "channels") || !strings.Contains(err.Error(), "window") {
		t.Fatalf("bad config: %v", err)
	}
}
