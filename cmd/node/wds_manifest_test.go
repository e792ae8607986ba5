package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/longshore/longshore/dataset"
)

// makeWebDataset writes n small JPEGs as WebDataset tars of per samples
// each (sample i: s<i>.jpg, s<i>.cls, s<i>.txt) and returns the root and
// the samples' keys ("shard-000.tar/s0000.jpg").
func makeWebDataset(t *testing.T, n, per int) (string, []string) {
	t.Helper()
	images, files := makeDataset(t, n)
	root := t.TempDir()
	var keys []string
	for first := 0; first < n; first += per {
		tar := fmt.Sprintf("shard-%03d.tar", first/per)
		var names []string
		var datas [][]byte
		for i := first; i < min(first+per, n); i++ {
			img, err := os.ReadFile(filepath.Join(images, files[i]))
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, fmt.Sprintf("s%04d.jpg", i), fmt.Sprintf("s%04d.cls", i), fmt.Sprintf("s%04d.txt", i))
			datas = append(datas, img, []byte(fmt.Sprint(i%3)), []byte(fmt.Sprintf("a photo of %d", i)))
			keys = append(keys, fmt.Sprintf("%s/s%04d.jpg", tar, i))
		}
		var b bytes.Buffer
		if _, err := dataset.WriteTarShard(&b, names, datas); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, tar), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root, keys
}

// TestStandaloneWritesWebDatasetManifest: a standalone node that reads
// WebDataset tars in place, at least --write-manifest-over samples of
// them, writes their manifest and index, as for an ImageFolder; the next
// run reads them through the index and delivers the same samples at the
// same steps of the same ranks (the digest and order unchanged); below
// the threshold nothing is written beside the tars.
func TestStandaloneWritesWebDatasetManifest(t *testing.T) {
	root, keys := makeWebDataset(t, 40, 10)
	runOnce := func(over string) ([]string, string) {
		dir := t.TempDir()
		logPath := filepath.Join(dir, "d.log")
		var out, errb bytes.Buffer
		code := run([]string{"--standalone", "--dataset", root, "--epochs", "1", "--batch-size", "8", "--ranks", "2",
			"--size", "32", "--seed", "5", "--sink", "log:" + logPath, "--progress", "never", "--write-manifest-over", over}, &out, &errb)
		if code != 0 {
			t.Fatalf("--write-manifest-over %s: exit %d\nstdout: %s\nstderr: %s", over, code, out.String(), errb.String())
		}
		checkOncePerEpoch(t, logPath, 1, keys)
		b, _ := os.ReadFile(logPath)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		sort.Strings(lines)
		return lines, errb.String()
	}
	manifest := filepath.Join(root, dataset.ManifestJSONLName)
	inPlace, _ := runOnce("41")
	if entries, _ := os.ReadDir(root); len(entries) != 4 {
		t.Fatalf("%d entries beside the 4 tars with --write-manifest-over 41 and 40 samples", len(entries)-4)
	}
	first, stderr := runOnce("40")
	if !strings.Contains(stderr, "wrote the WebDataset's manifest") {
		t.Errorf("no line says the manifest was written:\n%s", stderr)
	}
	for _, p := range []string{manifest, filepath.Join(root, dataset.IndexKey(dataset.ManifestJSONLName))} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("after the run: %v", err)
		}
	}
	read, stderr := runOnce("40")
	if !strings.Contains(stderr, "reading the manifest through its index") {
		t.Errorf("the next run did not read the written manifest through its index:\n%s", stderr)
	}
	for what, got := range map[string][]string{"the run that wrote it": first, "the run that read it": read} {
		if strings.Join(got, "\n") != strings.Join(inPlace, "\n") {
			t.Errorf("%s: %d lines, read in place %d, not the same samples at the same steps", what, len(got), len(inPlace))
		}
	}
}
