package main

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hostileFailures is how each failing file of testdata/hostile/images
// fails in a node run (stage/class); every other file is delivered.
// decode/hostile_test.go checks the decoder's side of the same corpus
// (pixels against PIL, reasons).
var hostileFailures = map[string]string{
	"legal/jpeg_arithmetic.jpg":             "decode/unsupported",
	"legal/jpeg_progressive_2080_scans.jpg": "decode/too_large",
	"legal/webp_animated.webp":              "decode/unsupported",
	"bad/empty.jpg":                         "decode/corrupt",
	"bad/empty.png":                         "decode/corrupt",
	"bad/random.jpg":                        "decode/unsupported",
	"bad/random.png":                        "decode/unsupported",
	"bad/random.webp":                       "decode/unsupported",
	"bad/text.jpg":                          "decode/unsupported",
	"bad/truncated_jpeg_header.jpg":         "decode/corrupt",
	"bad/truncated_jpeg_middle.jpg":         "decode/corrupt",
	"bad/truncated_jpeg_before_end.jpg":     "decode/corrupt",
	"bad/truncated_png_header.png":          "decode/corrupt",
	"bad/truncated_png_middle.png":          "decode/corrupt",
	"bad/truncated_png_before_end.png":      "decode/corrupt",
	"bad/truncated_webp_header.webp":        "decode/corrupt",
	"bad/truncated_webp_middle.webp":        "decode/corrupt",
	"bad/truncated_webp_before_end.webp":    "decode/corrupt",
	"bad/jpeg_header_60000x60000.jpg":       "decode/too_large",
	"bad/png_header_100000x100000.png":      "decode/too_large",
	"bad/png_idat_crc.png":                  "decode/corrupt",
	// Made by the test: see below.
	"bad/png_idat_bomb.png":   "decode/too_large",
	"bad/huge_object.jpg":     "fetch/too_large",
	"bad/unreadable_file.jpg": "fetch/access_denied",
}

// TestStandaloneHostileCorpus runs the node over the hostile corpus as an
// ImageFolder (classes legal, bad, odd keys), with three more made here: a
// PNG whose IDAT inflates to 1 GiB, an object over --max-object-bytes and
// a file the node may not read. Over two epochs every legal file is
// delivered once per epoch and every other fails in each epoch with its
// stage and class, within the failure budget; the run ends normally, the
// quarantine holds each failing key once, and the peak RSS (stated) stays
// near an ordinary run's.
func TestStandaloneHostileCorpus(t *testing.T) {
	root := t.TempDir()
	src := "../../testdata/hostile/images"
	var keys []string
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		keys = append(keys, filepath.ToSlash(rel))
		return writeFile(filepath.Join(root, rel), data)
	})
	if err != nil || len(keys) < 50 {
		t.Fatalf("copy the corpus: %d files, %v", len(keys), err)
	}
	if err := writeFile(filepath.Join(root, "bad/png_idat_bomb.png"), idatBomb(100, 100, 1<<30)); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(filepath.Join(root, "bad/huge_object.jpg"), bytes.Repeat([]byte{0xFF}, 40<<20)); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(root, "bad/unreadable_file.jpg")
	if err := writeFile(unreadable, []byte("x")); err != nil {
		t.Fatal(err)
	}
	os.Chmod(unreadable, 0)
	if f, err := os.Open(unreadable); err == nil { // root reads anything
		f.Close()
		os.Remove(unreadable)
		delete(hostileFailures, "bad/unreadable_file.jpg")
	} else {
		keys = append(keys, "bad/unreadable_file.jpg")
	}
	keys = append(keys, "bad/png_idat_bomb.png", "bad/huge_object.jpg")
	var good []string
	for _, k := range keys {
		if _, fails := hostileFailures[k]; !fails {
			good = append(good, k)
		}
	}

	dir := t.TempDir()
	logPath, statsPath, q := filepath.Join(dir, "d.log"), filepath.Join(dir, "s.json"), filepath.Join(dir, "q.jsonl")
	// A process of its own, so that its peak RSS is the run's.
	args := []string{"--standalone", "--dataset", root, "--epochs", "2", "--batch-size", "8", "--size", "64",
		"--transform", "eval", "--seed", "3", "--sink", "log:" + logPath, "--stats-json", statsPath, "--progress", "never",
		"--max-failures", "50%", "--max-object-bytes", "32MiB", "--quarantine", q}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNodeProcess$")
	cmd.Env = append(os.Environ(), nodeProcessEnv+"="+strings.Join(args, "\n"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	checkOncePerEpoch(t, logPath, 2, good)
	s := readSummary(t, statsPath)
	got := map[string]int{}
	for _, f := range s.Failures.Report.Records {
		got[f.Key]++
		if want := hostileFailures[f.Key]; want != f.Stage.String()+"/"+f.Class {
			t.Errorf("%s failed as %s/%s (%s); want %q", f.Key, f.Stage, f.Class, f.Reason, want)
		}
		if f.Reason == "" {
			t.Errorf("%s failed without a reason", f.Key)
		}
	}
	for k := range hostileFailures {
		if got[k] != 2 {
			t.Errorf("%s failed %d times; want once per epoch", k, got[k])
		}
	}
	lines := readQuarantine(t, q)
	if len(lines) != len(hostileFailures) {
		t.Errorf("quarantined %d keys; want the %d failing ones", len(lines), len(hostileFailures))
	}
	// The node process peaks near 90 MiB on this corpus (190 MiB under
	// -race), as on an ordinary dataset of small images: the bombs add
	// nothing, the 40 MiB object is never read and the bomb is refused by
	// its header (its 26 MiB are read: a fetch buffer).
	const limit = 256 << 20
	if s.PeakRSSBytes > limit {
		t.Errorf("peak RSS %d MiB; want at most %d MiB", s.PeakRSSBytes>>20, limit>>20)
	}
	t.Logf("HOSTILE | node run, 2 epochs | %d files: %d delivered per epoch, %d failing x 2 | by reason %v | node peak RSS %.0f MiB",
		len(keys), len(good), len(hostileFailures), s.Failures.ByReason, float64(s.PeakRSSBytes)/(1<<20))
}

func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// idatBomb is a w x h PNG whose IDAT inflates to n zero bytes (deflate's
// 258-byte back-references at distance 1, 13 bits each).
func idatBomb(w, h int, n int64) []byte {
	var z []byte
	var acc uint64
	var nbits uint
	put := func(v uint64, bits uint) {
		acc |= v << nbits
		nbits += bits
		for nbits >= 8 {
			z = append(z, byte(acc))
			acc >>= 8
			nbits -= 8
		}
	}
	code := func(c uint64, bits uint) {
		var r uint64
		for i := uint(0); i < bits; i++ {
			r |= (c >> i & 1) << (bits - 1 - i)
		}
		put(r, bits)
	}
	z = append(z, 0x78, 0x01)
	put(1, 1)
	put(1, 2)
	code(0x30, 8)
	for m := (n - 1) / 258; m > 0; m-- {
		code(0xC5, 8)
		code(0, 5)
	}
	code(0, 7)
	if nbits > 0 {
		z = append(z, byte(acc))
	}
	z = binary.BigEndian.AppendUint32(z, 1) // the Adler-32 does not matter: it is never reached
	out := []byte("\x89PNG\r\n\x1a\n")
	chunk := func(kind string, body []byte) {
		out = binary.BigEndian.AppendUint32(out, uint32(len(body)))
		start := len(out)
		out = append(out, kind...)
		out = append(out, body...)
		out = binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(out[start:]))
	}
	ihdr := binary.BigEndian.AppendUint32(nil, uint32(w))
	ihdr = binary.BigEndian.AppendUint32(ihdr, uint32(h))
	chunk("IHDR", append(ihdr, 8, 2, 0, 0, 0))
	chunk("IDAT", z)
	chunk("IEND", nil)
	return out
}
