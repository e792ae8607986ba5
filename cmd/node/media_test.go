package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// audioDataset is an ImageFolder of the committed clips (scripts/mkmedia.sh):
// speech and tones in every format, two short ones, one without audio.
func audioDataset(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for class, names := range map[string][]string{
		"speech": {"speech.wav", "speech.flac", "speech.mp3", "speech.opus", "speech.ogg"},
		"tone":   {"tone.wav", "tone.flac", "tone.mp3", "tone.opus", "tone.ogg", "short.flac", "short.wav"},
	} {
		os.MkdirAll(filepath.Join(root, class), 0o755)
		for _, n := range names {
			b, err := os.ReadFile(filepath.Join("../../testdata/media", n))
			if err != nil {
				t.Fatalf("%v (scripts/mkmedia.sh makes it)", err)
			}
			os.WriteFile(filepath.Join(root, class, n), b, 0o644)
		}
	}
	return root
}

// runMedia runs a standalone media job (audio unless args say --media video) with a log sink and returns its
// lines sorted, each "epoch key px" (rank and step vary with timing only
// in their order, not their content), and " short" for a sample the log
// marks shorter than its window.
func runMedia(t *testing.T, root string, args ...string) []string {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "a.log")
	var out, errb bytes.Buffer
	code := run(append([]string{"--standalone", "--dataset", root, "--media", "audio", "--epochs", "2", "--batch-size", "3",
		"--ranks", "2", "--seed", "4", "--sink", "log:" + logPath, "--log-pixels", "--progress", "never", "--decoders", "2"}, args...), &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "audio") && !strings.Contains(errb.String(), "video") {
		t.Errorf("summary does not say audio:\n%s", errb.String())
	}
	one, many := "waveform", "waveforms"
	if slices.Contains(args, "video") {
		one, many = "clip", "clips"
	}
	if !strings.Contains(out.String(), " "+many+" (") || !strings.Contains(out.String(), "ms per "+one+")") {
		t.Errorf("the summary does not count %s:\n%s", many, out.String())
	}
	b, _ := os.ReadFile(logPath)
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Split(l, "\t")
		if f[len(f)-2] == "pad" {
			continue
		}
		line := f[0] + " " + f[3] + " " + f[len(f)-1]
		if slices.Contains(f[4:], "short") {
			line += " short"
		}
		lines = append(lines, line)
	}
	slices.Sort(lines)
	return lines
}

// TestStandaloneAudio: --media audio through the product binary's
// standalone mode: every clip once per epoch; the same windows on a
// second run (seeded by seed, epoch, sample); training windows of the
// long clips differ between epochs, evaluation's (centered) do not.
func TestStandaloneAudio(t *testing.T) {
	root := audioDataset(t)
	train := runMedia(t, root, "--transform", "train", "--audio-seconds", "0.5", "--sample-rate", "8000", "--channels", "2")
	if len(train) != 2*12 {
		t.Fatalf("%d samples delivered, want 24 (2 epochs of 12):\n%s", len(train), strings.Join(train, "\n"))
	}
	again := runMedia(t, root, "--transform", "train", "--audio-seconds", "0.5", "--sample-rate", "8000", "--channels", "2")
	if !slices.Equal(train, again) {
		t.Fatalf("a second run gave other windows:\n%s\nvs\n%s", strings.Join(train, "\n"), strings.Join(again, "\n"))
	}
	eval := runMedia(t, root, "--transform", "eval", "--audio-seconds", "0.5", "--sample-rate", "8000", "--channels", "2")
	px := func(lines []string, epoch, key string) string {
		for _, l := range lines {
			if f := strings.Fields(l); f[0] == epoch && strings.HasSuffix(f[1], key) {
				return f[2]
			}
		}
		t.Fatalf("no line for epoch %s %s", epoch, key)
		return ""
	}
	for _, k := range []string{"speech.flac", "speech.mp3", "tone.opus"} {
		if px(train, "0", k) == px(train, "1", k) {
			t.Errorf("%s: the same training window in both epochs", k)
		}
		if px(eval, "0", k) != px(eval, "1", k) {
			t.Errorf("%s: evaluation windows differ between epochs", k)
		}
		if px(eval, "0", k) == px(train, "0", k) {
			t.Errorf("%s: training window is the centered one", k)
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"--standalone", "--dataset", root, "--media", "audio", "--sample-rate", "5", "--channels", "0", "--transform", "resize"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "sample rate") || !strings.Contains(errb.String(), "transform") {
		t.Errorf("bad audio flags: exit %d\n%s", code, errb.String())
	}
	if code := run([]string{"--standalone", "--dataset", root, "--media", "film"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--media") {
		t.Errorf("--media film: exit %d\n%s", code, errb.String())
	}
}

func videoDataset(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for class, names := range map[string][]string{
		"a": {"cfr_h264.mp4", "vfr_h264.mkv", "short_h264.mp4"},
		"b": {"hevc.mp4", "vp9.webm", "av1.mkv"},
	} {
		os.MkdirAll(filepath.Join(root, class), 0o755)
		for _, n := range names {
			b, err := os.ReadFile(filepath.Join("../../testdata/media", n))
			if err != nil {
				t.Fatalf("%v (scripts/mkmedia.sh makes it)", err)
			}
			os.WriteFile(filepath.Join(root, class, n), b, 0o644)
		}
	}
	// a truncated clip: a per-sample failure, not the end of the job
	b, _ := os.ReadFile(filepath.Join("../../testdata/media", "cfr_h264.mp4"))
	os.WriteFile(filepath.Join(root, "b", "cut.mp4"), b[:len(b)/2], 0o644)
	return root
}

// TestStandaloneVideo: --media video through the standalone node: every
// clip once per epoch but the truncated one (a recorded failure), the
// same clips on a second run, training windows and crops that differ
// between epochs, evaluation clips that do not.
func TestStandaloneVideo(t *testing.T) {
	root := videoDataset(t)
	args := func(transform string) []string {
		return []string{"--media", "video", "--transform", transform, "--clip-frames", "4", "--clip-fps", "5",
			"--clip-sampling", "random", "--size", "32", "--max-failures", "5"}
	}
	var train []string
	for i := 0; i < 2; i++ {
		lines := runMedia(t, root, args("train")...)
		if len(lines) != 2*6 {
			t.Fatalf("%d clips delivered, want 12 (2 epochs of 6; cut.mp4 fails):\n%s", len(lines), strings.Join(lines, "\n"))
		}
		if i == 1 && !slices.Equal(lines, train) {
			t.Fatalf("a second run gave other clips")
		}
		train = lines
	}
	// The 6-frame clip is shorter than the 0.8 s window: the log marks
	// it, and only it.
	for _, l := range train {
		if short := strings.HasSuffix(l, " short"); short != strings.Contains(l, "short_h264.mp4") {
			t.Errorf("line %q: marked short %v", l, short)
		}
	}
	eval := runMedia(t, root, args("eval")...)
	px := func(lines []string, epoch, key string) string {
		for _, l := range lines {
			if f := strings.Fields(l); f[0] == epoch && strings.HasSuffix(f[1], key) {
				return f[2]
			}
		}
		t.Fatalf("no line for epoch %s %s", epoch, key)
		return ""
	}
	for _, k := range []string{"cfr_h264.mp4", "vfr_h264.mkv", "av1.mkv"} {
		if px(train, "0", k) == px(train, "1", k) {
			t.Errorf("%s: the same training clip in both epochs", k)
		}
		if px(eval, "0", k) != px(eval, "1", k) {
			t.Errorf("%s: evaluation clips differ between epochs", k)
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"--standalone", "--dataset", root, "--media", "video", "--clip-sampling", "middle", "--clip-frames", "0"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "--clip-sampling") || !strings.Contains(errb.String(), "--clip-frames") {
		t.Errorf("bad video flags: exit %d\n%s", code, errb.String())
	}
}

// relKeys lists an ImageFolder's files as sorted keys.
func relKeys(t *testing.T, root string) []string {
	var keys []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			r, _ := filepath.Rel(root, p)
			keys = append(keys, filepath.ToSlash(r))
		}
		return nil
	})
	slices.Sort(keys)
	return keys
}

// TestPackedMedia: audio and video packed into tar shards (as
// longshore-pack writes them) give the same samples, pixel for pixel and
// sample for sample, as the loose files: the augmentation follows (seed,
// epoch, index), and a packed sample is fetched whole with its chunk.
func TestPackedMedia(t *testing.T) {
	for _, tc := range []struct {
		root string
		args []string
	}{
		{audioDataset(t), []string{"--transform", "train", "--audio-seconds", "0.5", "--sample-rate", "8000"}},
		{videoDataset(t), []string{"--media", "video", "--transform", "train", "--clip-frames", "3", "--clip-sampling", "random", "--size", "24", "--max-failures", "5"}},
	} {
		keys := relKeys(t, tc.root)
		packed, _ := packDataset(t, tc.root, keys, 4)
		loose := runMedia(t, tc.root, tc.args...)
		pk := runMedia(t, packed, tc.args...)
		norm := func(lines []string) []string {
			var out []string
			for _, l := range lines {
				f := strings.Fields(l)
				for _, k := range keys {
					if strings.HasSuffix(f[1], k) {
						f[1] = k
					}
				}
				out = append(out, strings.Join(f, " "))
			}
			slices.Sort(out)
			return out
		}
		if a, b := norm(loose), norm(pk); !slices.Equal(a, b) || len(a) == 0 {
			t.Errorf("packed and loose runs differ:\n%s\nvs\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
		}
	}
}
