package main

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/dataset"
)

// TestClusterPacked runs the node in cluster mode over a packed dataset,
// against a coordinator in this process (what longshore-coordinator
// wires up): the node learns the order's block and window from the job
// and reads the packed samples in chunks of its blocks, and delivers each
// sample once.
func TestClusterPacked(t *testing.T) {
	root, keys := makeDataset(t, 48)
	packed, pkeys := packDataset(t, root, keys, 12)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	ds := discoverDir(t, ctx, packed)
	cfg := cluster.DefaultConfig()
	// Blocks of 12 (a shard each), two to a window, leases of a window.
	cfg.Samples, cfg.Epochs, cfg.ShardSize, cfg.Block, cfg.Window, cfg.Seed = int64(len(ds.Samples)), 1, 24, 12, 2, 3
	c := startCoordinator(t, ctx, cfg, 4, dataset.ManifestDigest(ds))
	logPath, statsPath := filepath.Join(t.TempDir(), "d.log"), filepath.Join(t.TempDir(), "s.json")
	out, logs, err := runNode(ctx, c.nodeArgs(t, "--dataset", packed, "--sink", "log:"+logPath, "--size", "32", "--ranks", "2",
		"--stats-json", statsPath, "--pack-cache", "256MiB")) // chunks, though the directory is local
	if err != nil {
		t.Fatalf("node: %v\n%s%s", err, out, logs)
	}
	c.waitDone(t, ctx)

	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	count := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) == 4 && cols[0] == "0" {
			count[cols[3]]++
		}
	}
	var got []string
	for k, c := range count {
		if c != 1 {
			t.Errorf("%s delivered %d times", k, c)
		}
		got = append(got, k)
	}
	sort.Strings(got)
	if strings.Join(got, ",") != strings.Join(pkeys, ",") {
		t.Errorf("delivered %d distinct keys, want the %d packed samples", len(got), len(pkeys))
	}
	// The job's block and window (12 and 2, not the standalone
	// defaults) reached the store, and the samples came in chunks: 4
	// shards of 12, one read each.
	if !strings.Contains(logs, "block=12 window=2") {
		t.Errorf("the node never logged the job's block and window:\n%s", logs)
	}
	mm := regexp.MustCompile(`chunk cache".* chunks=(\d+) .* read_alone=(\d+)`).FindStringSubmatch(logs)
	if mm == nil {
		t.Fatalf("no chunk cache figures in the log:\n%s", logs)
	}
	chunks, _ := strconv.Atoi(mm[1])
	alone, _ := strconv.Atoi(mm[2])
	if chunks < 4 || chunks > 8 || alone > 4 {
		t.Errorf("%d chunk reads and %d single reads for 4 shards of 12 in blocks of 12", chunks, alone)
	}
	// --stats-json works in cluster mode, with the standalone fields.
	stats := readStats(t, statsPath)
	if got := stats["images"].(float64); got < 48 || stats["epochs"].(float64) != 1 || stats["batch_size"].(float64) != 4 || stats["pack"] == nil {
		t.Errorf("cluster stats: %v images (want 48 and padding), epochs %v, batch %v, pack %v", got, stats["epochs"], stats["batch_size"], stats["pack"])
	}
}
