package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/longshore/longshore/dataset/datasettest"
)

// parquetDataset writes the ImageFolder at root (keys) as Parquet files
// under data/ (datasettest.HFDataset), perFile rows each in row groups of
// perGroup, and returns the directory and the samples' keys
// ("<file>/<row>").
func parquetDataset(t *testing.T, root string, keys []string, perFile int, perGroup int64) (string, []string) {
	t.Helper()
	out := t.TempDir()
	if err := os.MkdirAll(filepath.Join(out, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	images := make([][]byte, len(keys))
	for i, k := range keys {
		b, err := os.ReadFile(filepath.Join(root, k))
		if err != nil {
			t.Fatal(err)
		}
		images[i] = b
	}
	files, _ := datasettest.HFDataset(t, images, keys, perFile, perGroup, parquet.Compression(&parquet.Snappy))
	var sampleKeys []string
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(out, filepath.FromSlash(f.Key)), f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range keys {
		sampleKeys = append(sampleKeys, fmt.Sprintf("%s/%d", files[i/perFile].Key, i%perFile))
	}
	return out, sampleKeys
}

// TestStandaloneParquet runs the node over a Parquet dataset in a
// directory: every row is delivered once per epoch, read a row group's
// media chunk at a time (--pack-cache auto keeps a cache even on a
// local disk: a Parquet sample is not one read), one ranged GET per row
// group per block.
func TestStandaloneParquet(t *testing.T) {
	root, keys := makeDataset(t, 70)
	dir, pkeys := parquetDataset(t, root, keys, 32, 8) // 3 files, 9 row groups of up to 8 rows
	for _, block := range []string{"8", "4"} {
		t.Run("block"+block, func(t *testing.T) {
			tmp := t.TempDir()
			logPath, statsPath := filepath.Join(tmp, "d.log"), filepath.Join(tmp, "s.json")
			var out, errb bytes.Buffer
			args := []string{"--standalone", "--dataset", dir, "--epochs", "2", "--batch-size", "8", "--ranks", "2",
				"--size", "32", "--seed", "5", "--sink", "log:" + logPath, "--stats-json", statsPath, "--progress", "never",
				"--block", block}
			if code := run(args, &out, &errb); code != 0 {
				t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
			}
			checkOncePerEpoch(t, logPath, 2, sortedCopy(pkeys))
			var s Summary
			b, _ := os.ReadFile(statsPath)
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatal(err)
			}
			if s.Pack == nil || s.Failures.Total != 0 {
				t.Fatalf("stats: pack %+v, failures %+v\n%s", s.Pack, s.Failures, errb.String())
			}
			// Row groups of 8 rows in files of 32: with blocks of 8 a
			// block is one row group (9 an epoch, 18 for two), with
			// blocks of 4 half of one (18 an epoch, 36 for two); fewer
			// when a chunk still cached serves the next epoch's rows.
			// A row read alone is a whole row group's GET: none here.
			want := map[string][2]int64{"8": {9, 18}, "4": {18, 36}}[block]
			if s.Pack.Chunks < want[0] || s.Pack.Chunks > want[1] || s.Pack.ReadAlone != 0 {
				t.Errorf("block %s: %d chunk GETs (want %d to %d), %d read alone; %+v\n%s", block, s.Pack.Chunks, want[0], want[1], s.Pack.ReadAlone, *s.Pack, errb.String())
			}
		})
	}
}

func sortedCopy(keys []string) []string {
	out := append([]string(nil), keys...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
