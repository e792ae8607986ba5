package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// TestClusterIndexed runs the node in cluster mode over datasets whose
// manifest has an index beside it, plain and packed, with a manifest
// cache of a few pieces: the node takes the lazy path (it says so), and
// every sample of the coordinator's dataset is delivered once.
//
// Each layout runs in a child process of the test binary: the test starts
// the coordinator's protoactor remote in process, and a second remote in
// one process races the first's grpc goroutines on grpc's global logger
// (remote.Start sets it).
func TestClusterIndexed(t *testing.T) {
	layout := os.Getenv(indexedLayoutEnv)
	if layout == "" {
		for _, l := range []string{"plain", "packed"} {
			t.Run(l, func(t *testing.T) {
				cmd := exec.Command(os.Args[0], "-test.run=^TestClusterIndexed$", "-test.v")
				cmd.Env = append(os.Environ(), indexedLayoutEnv+"="+l)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%s: %v\n%s", l, err, out)
				}
			})
		}
		return
	}
	root, keys := makeDataset(t, 40)
	switch layout {
	case "plain":
		var text strings.Builder
		text.WriteString("key,label\n")
		for _, k := range keys {
			fmt.Fprintf(&text, "%s,%s\n", k, filepath.Dir(k))
		}
		if err := os.WriteFile(filepath.Join(root, "manifest.csv"), []byte(text.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(filepath.Join(root, "manifest.csv")) })
		runIndexedCluster(t, root, "plain", keys)
	case "packed":
		packed, pkeys := packDataset(t, root, keys, 8)
		runIndexedCluster(t, packed, "packed", pkeys)
	default:
		t.Fatalf("%s=%q: want plain or packed", indexedLayoutEnv, layout)
	}
}

// indexedLayoutEnv names the layout a child process of TestClusterIndexed
// runs.
const indexedLayoutEnv = "LONGSHORE_TEST_INDEXED_LAYOUT"

func runIndexedCluster(t *testing.T, dir, layout string, want []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st, err := storage.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	key := dataset.ManifestJSONLName
	if _, err := os.Stat(filepath.Join(dir, dataset.ManifestCSVName)); err == nil {
		key = dataset.ManifestCSVName
	}
	x, err := dataset.WriteManifestIndex(ctx, st, key, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := dataset.Discover(ctx, st, dataset.DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if x.Digest != dataset.ManifestDigest(ds) || x.Layout() != layout {
		t.Fatalf("index: %s %s, dataset %s", x.Digest, x.Layout(), dataset.ManifestDigest(ds))
	}
	cfg := cluster.DefaultConfig()
	cfg.Samples, cfg.Epochs, cfg.ShardSize, cfg.Block, cfg.Window, cfg.Seed = x.Samples, 1, 8, 4, 2, 3
	c := startCoordinator(t, ctx, cfg, 4, x.Digest)
	logPath := filepath.Join(t.TempDir(), "d.log")
	out, logs, err := runNode(ctx, c.nodeArgs(t, "--dataset", dir, "--sink", "log:"+logPath, "--size", "32", "--ranks", "2",
		"--manifest-cache", "2KiB", "--pack-cache", "256MiB")) // chunks, though the directory is local
	if err != nil {
		t.Fatalf("node: %v\n%s%s", err, out, logs)
	}
	c.waitDone(t, ctx)
	if !strings.Contains(logs, "reading the manifest through its index") {
		t.Errorf("the node did not take the lazy path:\n%s", logs)
	}
	if layout == "packed" {
		// Blocks of 4 in shards of 8: each block is one chunk, read
		// with one ranged GET, planned from the pieces read.
		m := regexp.MustCompile(`chunk cache".* chunks=(\d+) .* read_alone=(\d+)`).FindStringSubmatch(logs)
		if m == nil || m[1] != fmt.Sprint(len(want)/4) || m[2] != "0" {
			t.Errorf("packed over the index: chunk cache %q, want %d chunks and no sample read alone:\n%s", m, len(want)/4, logs)
		}
	}
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	count := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if cols := strings.Split(sc.Text(), "\t"); len(cols) == 4 && cols[0] == "0" {
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
	sorted := append([]string(nil), want...)
	sort.Strings(sorted)
	if strings.Join(got, ",") != strings.Join(sorted, ",") {
		t.Errorf("delivered %d distinct keys %q, want the dataset's %d", len(got), got, len(want))
	}
}

// TestStandaloneIndexed runs standalone over datasets whose manifest has
// an index, plain and packed, with a manifest cache of a few pieces: the
// node takes the lazy path (it says so) and delivers exactly what the
// in-memory path (--manifest-cache 0) delivers, each sample once an epoch
// at the same epoch, rank and step; packed samples come in chunks.
func TestStandaloneIndexed(t *testing.T) {
	root, keys := makeDataset(t, 40)
	var text strings.Builder
	text.WriteString("key,label\n")
	for _, k := range keys {
		fmt.Fprintf(&text, "%s,%s\n", k, filepath.Dir(k))
	}
	if err := os.WriteFile(filepath.Join(root, dataset.ManifestCSVName), []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	packed, pkeys := packDataset(t, root, keys, 8)
	for _, tc := range []struct {
		layout, dir, manifest string
		keys                  []string
	}{{"plain", root, dataset.ManifestCSVName, keys}, {"packed", packed, dataset.ManifestJSONLName, pkeys}} {
		t.Run(tc.layout, func(t *testing.T) {
			ctx := context.Background()
			st, err := storage.NewDirStore(tc.dir)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := dataset.WriteManifestIndex(ctx, st, tc.manifest, 4, nil); err != nil {
				t.Fatal(err)
			}
			runOnce := func(cache string) (lines []string, stderr string, s Summary) {
				dir := t.TempDir()
				logPath, statsPath := filepath.Join(dir, "d.log"), filepath.Join(dir, "s.json")
				var out, errb bytes.Buffer
				code := run([]string{"--standalone", "--dataset", tc.dir, "--manifest", tc.manifest, "--epochs", "2", "--batch-size", "8", "--ranks", "2",
					"--size", "32", "--seed", "5", "--sink", "log:" + logPath, "--stats-json", statsPath, "--progress", "never",
					"--manifest-cache", cache, "--block", "4", "--pack-cache", "256MiB"}, &out, &errb) // chunks, though the directory is local
				if code != 0 {
					t.Fatalf("--manifest-cache %s: exit %d\nstdout: %s\nstderr: %s", cache, code, out.String(), errb.String())
				}
				checkOncePerEpoch(t, logPath, 2, tc.keys)
				b, _ := os.ReadFile(logPath)
				lines = strings.Split(strings.TrimSpace(string(b)), "\n")
				sort.Strings(lines)
				b, _ = os.ReadFile(statsPath)
				if err := json.Unmarshal(b, &s); err != nil {
					t.Fatal(err)
				}
				return lines, errb.String(), s
			}
			lazy, lazyErr, lazyStats := runOnce("2KiB")
			whole, wholeErr, wholeStats := runOnce("0")
			t.Logf("in memory: %+v", wholeStats.Pack)
			const says = "reading the manifest through its index"
			if !strings.Contains(lazyErr, says) || strings.Contains(wholeErr, says) {
				t.Errorf("lazy run says %q: %v, in-memory run: %v\n%s", says, strings.Contains(lazyErr, says), strings.Contains(wholeErr, says), lazyErr)
			}
			if strings.Join(lazy, "\n") != strings.Join(whole, "\n") {
				t.Errorf("the lazy path delivered %d lines, the in-memory path %d, not the same", len(lazy), len(whole))
			}
			if tc.layout == "packed" && (lazyStats.Pack == nil || lazyStats.Pack.Chunks == 0 || lazyStats.Pack.ReadAlone != 0) {
				t.Errorf("packed over the index: pack stats %+v, want chunks and no sample read alone", lazyStats.Pack)
			}
		})
	}
}

// TestClusterRankErrorStopsNode: a rank that stops on an error (here the
// node's failure budget, --max-failures 0, spent on the one corrupt
// sample) stops the node, which exits with the error, instead of running
// its other ranks on while the stopped rank's leases keep the job from
// ending.
func TestClusterRankErrorStopsNode(t *testing.T) {
	root, keys := makeDataset(t, 40)
	if err := os.WriteFile(filepath.Join(root, keys[17]), []byte("not a jpeg"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ds := discoverDir(t, ctx, root)
	cfg := cluster.DefaultConfig()
	cfg.Samples, cfg.Epochs, cfg.ShardSize, cfg.Block, cfg.Window, cfg.Seed = int64(len(ds.Samples)), 1, 8, 4, 2, 3
	c := startCoordinator(t, ctx, cfg, 2, dataset.ManifestDigest(ds))
	_, logs, err := runNode(ctx, c.nodeArgs(t, "--dataset", root, "--sink", "null", "--size", "32", "--ranks", "2", "--max-failures", "0"))
	if ctx.Err() != nil {
		t.Fatalf("the node did not exit: %v\n%s", ctx.Err(), logs)
	}
	if err == nil || !strings.Contains(logs, "failure budget exceeded") {
		t.Fatalf("node: %v, want a non-zero exit on the failure budget:\n%s", err, logs)
	}
}

// TestStandaloneWritesManifest: a standalone node that lists an
// ImageFolder of at least --write-manifest-over samples writes its
// manifest and index, and the next run reads them through the index,
// delivering what the listing did; below the threshold nothing is
// written.
func TestStandaloneWritesManifest(t *testing.T) {
	root, keys := makeDataset(t, 40)
	checkWritesManifest(t, root, keys, "ImageFolder")
}

// checkWritesManifest runs a standalone node over the 40 samples (keys)
// at root three times: with --write-manifest-over 41 (nothing may be
// written beside them), then 40 (the kind's manifest and index are
// written) and 40 again (read through the index); each run delivers the
// samples the first did, at the same steps of the same ranks.
func checkWritesManifest(t *testing.T, root string, keys []string, kind string) {
	t.Helper()
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
	before, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	inPlace, _ := runOnce("41")
	if entries, _ := os.ReadDir(root); len(entries) != len(before) {
		t.Fatalf("%d entries written beside the dataset with --write-manifest-over 41 and 40 samples", len(entries)-len(before))
	}
	first, stderr := runOnce("40")
	if !strings.Contains(stderr, "wrote the "+kind+"'s manifest") {
		t.Errorf("no line says the manifest was written:\n%s", stderr)
	}
	for _, p := range []string{filepath.Join(root, dataset.ManifestJSONLName), filepath.Join(root, dataset.IndexKey(dataset.ManifestJSONLName))} {
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

// TestClusterOneActorSystem: a cluster node's pipelines (every rank's,
// and every session's a rank opens) share one actor system, where each
// made its own (protoactor's process registry, about 2.8 MB each).
func TestClusterOneActorSystem(t *testing.T) {
	root, _ := makeDataset(t, 32)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ds := discoverDir(t, ctx, root)
	cfg := cluster.DefaultConfig()
	cfg.Samples, cfg.Epochs, cfg.ShardSize, cfg.Block, cfg.Window, cfg.Seed = int64(len(ds.Samples)), 2, 8, 4, 2, 3
	c := startCoordinator(t, ctx, cfg, 2, dataset.ManifestDigest(ds))
	t.Setenv(nodeSystemsEnv, "1")
	_, logs, err := runNode(ctx, c.nodeArgs(t, "--dataset", root, "--sink", "null", "--size", "32", "--ranks", "4"))
	if err != nil {
		t.Fatalf("node: %v\n%s", err, logs)
	}
	c.waitDone(t, ctx)
	i := strings.LastIndex(logs, systemsLine)
	if i < 0 {
		t.Fatalf("the node process did not say how many actor systems it made:\n%s", logs)
	}
	if got := strings.TrimSpace(logs[i+len(systemsLine):]); got != "1" {
		t.Errorf("the node made %s actor systems for its pipelines (4 ranks, 2 epochs), want 1", got)
	}
}
