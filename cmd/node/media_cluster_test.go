package main

import (
	"bufio"
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/dataset"
)

// TestClusterAudio runs --media audio in cluster mode (a packed dataset:
// the coordinator reads its manifest) against a coordinator in this
// process: every waveform once, and each the very window the standalone
// node gives it (the window follows seed, epoch, index, not who served it).
func TestClusterAudio(t *testing.T) {
	root := audioDataset(t)
	keys := relKeys(t, root)
	packed, _ := packDataset(t, root, keys, 4)
	media := []string{"--media", "audio", "--transform", "train", "--audio-seconds", "0.5", "--sample-rate", "8000", "--seed", "4"}
	want := map[string]string{}
	for _, l := range runMedia(t, root, media...) {
		if f := strings.Fields(l); f[0] == "0" {
			want[f[1]] = f[2]
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ds := discoverDir(t, ctx, packed)
	cfg := cluster.DefaultConfig()
	cfg.Samples, cfg.Epochs, cfg.ShardSize, cfg.Seed = int64(len(ds.Samples)), 1, 4, 4
	c := startCoordinator(t, ctx, cfg, 3, dataset.ManifestDigest(ds))
	logPath := filepath.Join(t.TempDir(), "d.log")
	args := c.nodeArgs(t, append([]string{"--dataset", packed, "--sink", "log:" + logPath, "--log-pixels", "--ranks", "2",
		"--decoders", "2"}, media...)...)
	if out, logs, err := runNode(ctx, args); err != nil {
		t.Fatalf("node: %v\n%s%s", err, out, logs)
	}
	c.waitDone(t, ctx)
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]string{}
	count := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if cols[0] != "0" || len(cols) != 5 {
			continue // commits, sessions, pads
		}
		for _, k := range keys {
			if strings.HasSuffix(cols[3], k) {
				count[k]++
				got[k] = cols[4]
			}
		}
	}
	for _, k := range keys {
		if count[k] != 1 {
			t.Errorf("%s delivered %d times", k, count[k])
		}
		if got[k] != want[k] {
			t.Errorf("%s: cluster window %s, standalone %s", k, got[k], want[k])
		}
	}
	if len(want) != len(keys) || !slices.Equal(slices.Sorted(maps.Keys(got)), keys) {
		t.Errorf("delivered %v, want %v", slices.Sorted(maps.Keys(got)), keys)
	}
}
