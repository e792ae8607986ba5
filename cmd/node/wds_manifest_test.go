package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
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
	checkWritesManifest(t, root, keys, "WebDataset")
}
