package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// makeDataset writes n small JPEGs in ImageFolder layout (3 classes) and
// returns the root and the keys.
func makeDataset(t *testing.T, n int) (string, []string) {
	t.Helper()
	root := t.TempDir()
	var keys []string
	for i := 0; i < n; i++ {
		cls := fmt.Sprintf("c%d", i%3)
		img := image.NewRGBA(image.Rect(0, 0, 64+i%7, 48+i%5))
		for y := 0; y < img.Bounds().Dy(); y++ {
			for x := 0; x < img.Bounds().Dx(); x++ {
				img.Set(x, y, color.RGBA{uint8(x * 4), uint8(y * 5), uint8(i), 255})
			}
		}
		var buf bytes.Buffer
		if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("%s/img%03d.jpg", cls, i)
		if err := os.MkdirAll(filepath.Join(root, cls), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, key), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return root, keys
}

// TestStandaloneContract checks what outside checks rely on: the log
// sink's lines, --stats-json's fields, and the exit status.
func TestStandaloneContract(t *testing.T) {
	root, keys := makeDataset(t, 70)
	dir := t.TempDir()
	logPath, statsPath := filepath.Join(dir, "d.log"), filepath.Join(dir, "s.json")
	var out, errb bytes.Buffer
	code := run([]string{"--standalone", "--dataset", root, "--epochs", "2", "--batch-size", "8", "--ranks", "2",
		"--transform", "train", "--size", "32", "--seed", "3", "--sink", "log:" + logPath, "--stats-json", statsPath,
		"--progress", "never"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
	}

	steps := checkOncePerEpoch(t, logPath, 2, keys)
	if len(steps["0"]) != len(steps["1"]) {
		t.Errorf("ranks took different numbers of steps: %d vs %d", len(steps["0"]), len(steps["1"]))
	}

	var s map[string]any
	b, err := os.ReadFile(statsPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"images", "seconds", "images_per_second", "first_batch_seconds", "cpu_seconds", "peak_rss_bytes", "failures", "stages"} {
		if _, ok := s[field]; !ok {
			t.Errorf("stats JSON lacks %q", field)
		}
	}
	if got := s["images"].(float64); got != 2*70 {
		t.Errorf("images = %v, want 140 (2 epochs of 70, 2 ranks, no padding needed)", got)
	}
	fails := s["failures"].(map[string]any)
	if fails["total"].(float64) != 0 {
		t.Errorf("failures = %v", fails)
	}
	if !strings.Contains(out.String(), "images/s") || !strings.Contains(out.String(), "bottleneck") {
		t.Errorf("summary lacks throughput or bottleneck:\n%s", out.String())
	}
	checkStartup(t, s, out.String())
}

func TestStandaloneFailureBudget(t *testing.T) {
	root, _ := makeDataset(t, 20)
	os.WriteFile(filepath.Join(root, "c0", "bad1.jpg"), []byte("not an image"), 0o644)
	os.WriteFile(filepath.Join(root, "c1", "bad2.jpg"), nil, 0o644)
	statsPath := filepath.Join(t.TempDir(), "s.json")
	var out, errb bytes.Buffer
	code := run([]string{"--standalone", "--dataset", root, "--batch-size", "4", "--size", "32", "--max-failures", "1",
		"--stats-json", statsPath, "--progress", "never"}, &out, &errb)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (budget exceeded)\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "failure budget exceeded") || !strings.Contains(errb.String(), "decode/unsupported") {
		t.Errorf("stderr lacks the report:\n%s", errb.String())
	}
	b, _ := os.ReadFile(statsPath)
	var s struct {
		Failures struct {
			Total    int64            `json:"total"`
			ByReason map[string]int64 `json:"by_reason"`
		} `json:"failures"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if s.Failures.Total != 2 || s.Failures.ByReason["decode/corrupt"] != 1 || s.Failures.ByReason["decode/unsupported"] != 1 {
		t.Errorf("failures = %+v", s.Failures)
	}
}

func TestFlagErrors(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"--standalone", "--epochs", "0", "--ranks", "0", "--progress", "sometimes"}, &out, &errb)
	if code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	for _, want := range []string{"--dataset is required", "--epochs", "--ranks", "--progress"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
}

// checkOncePerEpoch reads a log:PATH sink's file and checks that each of
// the first epochs delivered every key exactly once (padding aside). It
// returns the steps each rank took, as rank -> "epoch/step" set.
func checkOncePerEpoch(t *testing.T, logPath string, epochs int, keys []string) map[string]map[string]bool {
	t.Helper()
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]map[string]int{} // epoch -> key -> count (padding excluded)
	steps := map[string]map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) >= 5 && cols[4] == "short" { // a clip shorter than its window
			cols = append(cols[:4:4], cols[5:]...)
		}
		if len(cols) != 4 && !(len(cols) == 5 && cols[4] == "pad") {
			t.Fatalf("bad line %q", sc.Text())
		}
		ep, rank, step, key := cols[0], cols[1], cols[2], cols[3]
		if steps[rank] == nil {
			steps[rank] = map[string]bool{}
		}
		steps[rank][ep+"/"+step] = true
		if len(cols) == 5 {
			continue
		}
		if seen[ep] == nil {
			seen[ep] = map[string]int{}
		}
		seen[ep][key]++
	}
	want := slices.Sorted(slices.Values(keys))
	for e := range epochs {
		ep := strconv.Itoa(e)
		var got []string
		for k, c := range seen[ep] {
			if c != 1 {
				t.Errorf("epoch %s: %s delivered %d times", ep, k, c)
			}
			got = append(got, k)
		}
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("epoch %s: delivered %d distinct keys, want the %d of the dataset", ep, len(got), len(want))
		}
	}
	return steps
}

// TestLogSinkRefusesUnloggableKeys: a key with a tab or a line break would
// break the log sink's lines; the node says so before it starts, and runs
// the same dataset with another sink.
func TestLogSinkRefusesUnloggableKeys(t *testing.T) {
	root, keys := makeDataset(t, 6)
	if err := os.Rename(filepath.Join(root, keys[0]), filepath.Join(root, "c0", "bad\tname.jpg")); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "log")
	var out, errb bytes.Buffer
	code := run([]string{"--standalone", "--dataset", root, "--batch-size", "2", "--size", "32",
		"--sink", "log:" + logPath, "--progress", "never"}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), `"c0/bad\tname.jpg"`) || !strings.Contains(errb.String(), "rename it") {
		t.Fatalf("exit %d, want 1 and the key named:\n%s", code, errb.String())
	}
	if b, _ := os.ReadFile(logPath); len(b) != 0 {
		t.Errorf("the log got lines: %q", b)
	}
	errb.Reset()
	if code := run([]string{"--standalone", "--dataset", root, "--batch-size", "2", "--size", "32",
		"--sink", "null", "--progress", "never"}, &out, &errb); code != 0 {
		t.Fatalf("--sink null: exit %d\n%s", code, errb.String())
	}
}

// --decoder and --lowres pick the decode configuration: the fast path or
// FFmpeg, DCT-scaled or full scale (docs/fidelity.md).
func TestDecoderFlags(t *testing.T) {
	cases := []struct {
		args         []string
		fast, lowres bool
		err          string
	}{
		{nil, true, true, ""},
		{[]string{"--lowres=false"}, true, false, ""},
		{[]string{"--decoder", "ffmpeg"}, false, true, ""},
		{[]string{"--decoder", "ffmpeg", "--lowres=false"}, false, false, ""},
		{[]string{"--decoder", "pil"}, false, false, `--decoder "pil"`},
	}
	for _, c := range cases {
		o, err := parseFlags(append([]string{"--standalone", "--dataset", "x"}, c.args...), &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		dc, err := o.decodeConfig()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want %q", c.args, err, c.err)
			}
			continue
		}
		if err != nil || dc.FastJPEG != c.fast || dc.Lowres != c.lowres {
			t.Errorf("%v: FastJPEG %v Lowres %v (%v), want %v %v", c.args, dc.FastJPEG, dc.Lowres, err, c.fast, c.lowres)
		}
	}
}
