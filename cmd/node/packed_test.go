package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// packDataset packs the ImageFolder at root (keys) into tar shards of
// perShard samples with a manifest.jsonl, as longshore-pack does, and
// returns the packed dataset's directory and its sample keys.
func packDataset(t *testing.T, root string, keys []string, perShard int) (string, []string) {
	t.Helper()
	out := t.TempDir()
	if err := os.MkdirAll(filepath.Join(out, "shards"), 0o755); err != nil {
		t.Fatal(err)
	}
	var classes []string
	for _, k := range keys {
		if c := path.Dir(k); !slices.Contains(classes, c) {
			classes = append(classes, c)
		}
	}
	slices.Sort(classes)
	ds := &dataset.Dataset{Classes: classes}
	var packed []string
	for first := 0; first < len(keys); first += perShard {
		object := fmt.Sprintf("shards/shard-%06d.tar", first/perShard)
		id := ds.AddObject(object)
		names := keys[first:min(first+perShard, len(keys))]
		datas := make([][]byte, len(names))
		for j, k := range names {
			var err error
			if datas[j], err = os.ReadFile(filepath.Join(root, k)); err != nil {
				t.Fatal(err)
			}
		}
		var buf bytes.Buffer
		members, err := dataset.WriteTarShard(&buf, names, datas)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range members {
			smp := m.Sample(ds, id, int32(slices.Index(classes, path.Dir(m.Name))))
			ds.Samples, packed = append(ds.Samples, smp), append(packed, smp.Key)
		}
		if err := os.WriteFile(filepath.Join(out, filepath.FromSlash(object)), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var manifest bytes.Buffer
	if err := dataset.WriteManifestJSONL(&manifest, ds); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, dataset.ManifestJSONLName), manifest.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	sort.Strings(packed)
	return out, packed
}

// TestStandalonePacked runs the node over a packed dataset: every sample
// is delivered once per epoch, read a chunk at a time (one ranged GET per
// shard and epoch, not one per sample); with --pack-cache 0 each sample is
// read alone, and the delivery is the same; with --pack-spill every chunk
// goes through a file on disk, and the delivery is the same.
func TestStandalonePacked(t *testing.T) {
	root, keys := makeDataset(t, 70)
	packed, pkeys := packDataset(t, root, keys, 16)
	for _, tc := range []struct {
		cache, block   string
		chunks, single func(int64) bool
		spill          bool
	}{
		{"256MiB", "256", func(n int64) bool { return n >= 10 && n <= 20 }, func(n int64) bool { return n == 0 }, false},
		{"0", "256", func(n int64) bool { return n == 0 }, func(n int64) bool { return n >= 140 }, false},
		// No --pack-cache: auto, and the test's directory is on a local
		// file system, so every member is read in place.
		{"", "256", func(n int64) bool { return n == 0 }, func(n int64) bool { return n >= 140 }, false},
		// Blocks of 4: each 16-sample shard is four chunks (18 an epoch,
		// 36 for two). Fewer when a chunk still cached from epoch 0
		// serves epoch 1's samples of it (the ranks overlap the epoch
		// boundary, more so on a loaded machine): a read saved, not lost.
		{"256MiB", "4", func(n int64) bool { return n >= 18 && n <= 44 }, func(n int64) bool { return n == 0 }, false},
		{"256MiB", "4", func(n int64) bool { return n >= 18 && n <= 44 }, func(n int64) bool { return n == 0 }, true},
	} {
		name := "cache" + cmp.Or(tc.cache, "auto") + "/block" + tc.block
		if tc.spill {
			name += "/spill"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			logPath, statsPath := filepath.Join(dir, "d.log"), filepath.Join(dir, "s.json")
			var out, errb bytes.Buffer
			args := []string{"--standalone", "--dataset", packed, "--epochs", "2", "--batch-size", "8", "--ranks", "2",
				"--size", "32", "--seed", "5", "--sink", "log:" + logPath, "--stats-json", statsPath, "--progress", "never",
				"--block", tc.block}
			if tc.cache != "" {
				args = append(args, "--pack-cache", tc.cache)
			}
			if tc.spill {
				args = append(args, "--pack-spill", t.TempDir())
			}
			code := run(args, &out, &errb)
			if code != 0 {
				t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
			}
			checkOncePerEpoch(t, logPath, 2, pkeys)
			var s Summary
			b, _ := os.ReadFile(statsPath)
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatal(err)
			}
			if s.Pack == nil || s.Failures.Total != 0 {
				t.Fatalf("stats: pack %+v, failures %+v", s.Pack, s.Failures)
			}
			if !tc.chunks(s.Pack.Chunks) || !tc.single(s.Pack.ReadAlone) || s.Pack.PeakBytes > 256<<20 {
				t.Errorf("--pack-cache %s: %+v", tc.cache, *s.Pack)
			}
			// A chunk used up from its staging buffer before its file was
			// written is not spilled: at most every chunk is.
			if spilled := s.Pack.Spilled <= s.Pack.Chunks && s.Pack.SpillErrors == 0; tc.spill != (spilled && s.Pack.Spilled > 0) {
				t.Errorf("--pack-spill given: %v; pack stats %+v", tc.spill, *s.Pack)
			}
			if tc.cache == "" && !strings.Contains(errb.String(), "read in place") {
				t.Errorf("--pack-cache auto on a local directory: the start lacks the in-place line:\n%s", errb.String())
			}
			if !strings.Contains(out.String(), "packed ") {
				t.Errorf("summary lacks the packed line:\n%s", out.String())
			}
		})
	}
}

func TestPackCacheFlag(t *testing.T) {
	o, err := parseFlags([]string{"--standalone", "--dataset", "x"}, io.Discard)
	if err != nil || !o.packCache.auto || o.packCache.String() != "auto" || !o.packSpill.auto || o.packSpill.String() != "auto" {
		t.Errorf("default --pack-cache %v, --pack-spill %v, %v; want auto, auto", o.packCache, o.packSpill, err)
	}
	local, err := storage.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	remote := storage.NewMemStore("mem") // does not read in place, as S3 does not
	disk := t.TempDir()
	plan := func(args ...string) func(storage.Store) dataset.PackPlan {
		t.Helper()
		o, err := parseFlags(append([]string{"--standalone", "--dataset", "x"}, args...), io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		o.spillProbe = fastDisk
		return func(s storage.Store) dataset.PackPlan {
			return dataset.PlanPackCache(s, o.packConfig(), []string{disk}, 225<<20, 112<<10)
		} // ImageNet's window at the defaults

	}
	for _, tc := range []struct {
		args  []string
		s     storage.Store
		cache int64
		spill string
	}{
		// auto, auto: members in place on a local directory (through the
		// node's counting wrapper too); on a store that does not read in
		// place, the default cache spilled to a local disk.
		{nil, storage.NewCountingStore(local), 0, ""},
		{nil, remote, 1 << 30, disk},
		{nil, storage.NewCountingStore(remote), 1 << 30, disk},
		// --pack-spill DIR asks for chunks, even on a local disk.
		{[]string{"--pack-spill", disk}, local, 1 << 30, disk},
		// off: chunks in memory; "" is off, as it was before auto.
		{[]string{"--pack-spill", "off"}, remote, 1 << 30, ""},
		{[]string{"--pack-spill", ""}, remote, 1 << 30, ""},
		{[]string{"--pack-spill", "off"}, local, 0, ""},
		// An explicit size: chunks, spilled only where they come from
		// afar (a local dataset copied to a file and back gains nothing).
		{[]string{"--pack-cache", "64MiB"}, local, 64 << 20, ""},
		{[]string{"--pack-cache", "64MiB"}, remote, 64 << 20, disk},
		{[]string{"--pack-cache", "0"}, remote, 0, ""},
		{[]string{"--pack-cache", "Auto", "--pack-spill", "AUTO"}, remote, 1 << 30, disk},
	} {
		if p := plan(tc.args...)(tc.s); p.CacheBytes != tc.cache || p.SpillDir != tc.spill || p.Why == "" {
			t.Errorf("%q on %s: cache %d, spill %q (%s); want %d, %q", tc.args, tc.s, p.CacheBytes, p.SpillDir, p.Why, tc.cache, tc.spill)
		}
	}
	// --memory-budget caps a cache in memory at its share.
	if p := plan("--memory-budget", "64MiB", "--pack-spill", "off")(remote); p.CacheBytes != 16<<20 {
		t.Errorf("--memory-budget 64MiB --pack-spill off: %+v; want the cache at its share of the budget", p)
	}
	// The policy itself (thresholds, slow disks, failed probes):
	// storage's TestPlanPackCache.
	// The estimate: standalone ranks share one window; a cluster node's
	// each read one, of the coordinator's defaults until the job says.
	sc, _ := o.nodeOpen(16, 128)
	if got, want := sc.WindowBytes(1000), int64(1000*16*128); got != want {
		t.Errorf("standalone windowBytes: %d; want %d", got, want)
	}
	cc, _ := options{ranks: 8}.nodeOpen(0, 0)
	if got, want := cc.WindowBytes(1000), int64(1000*cluster.PackedBlock*cluster.DefaultWindow*8); got != want {
		t.Errorf("cluster windowBytes before the job: %d; want %d", got, want)
	}
	t.Setenv("LONGSHORE_PACK_CACHE", "1GiB")
	t.Setenv("LONGSHORE_PACK_SPILL", "off")
	if p := plan()(local); p.CacheBytes != 1<<30 || p.SpillDir != "" {
		t.Errorf("LONGSHORE_PACK_CACHE=1GiB LONGSHORE_PACK_SPILL=off: %+v", p)
	}
	if _, err = parseFlags([]string{"--standalone", "--dataset", "x", "--pack-cache", "lots"}, io.Discard); err == nil || !strings.Contains(err.Error(), "256MiB") {
		t.Errorf("--pack-cache lots: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	if _, err = parseFlags([]string{"--standalone", "--dataset", "x", "--pack-spill", missing}, io.Discard); !errors.Is(err, dataset.ErrSpillDir) || !strings.Contains(err.Error(), "--pack-spill") {
		t.Errorf("--pack-spill %s (missing): %v", missing, err)
	}
}

func TestBlockFlag(t *testing.T) {
	o, err := parseFlags([]string{"--standalone", "--dataset", "x"}, io.Discard)
	if err != nil || o.orderBlock(false) != 1 || o.orderBlock(true) != cluster.PackedBlock || o.window != cluster.DefaultWindow {
		t.Errorf("default --block %d plain, %d packed, --mix-window %d, %v; want the coordinator's: 1, %d, %d",
			o.orderBlock(false), o.orderBlock(true), o.window, err, cluster.PackedBlock, cluster.DefaultWindow)
	}
	if o, err = parseFlags([]string{"--standalone", "--dataset", "x", "--block", "64", "--mix-window", "4"}, io.Discard); err != nil ||
		o.orderBlock(false) != 64 || o.orderBlock(true) != 64 || o.window != 4 {
		t.Errorf("--block 64 --mix-window 4: %d plain, %d packed, window %d, %v", o.orderBlock(false), o.orderBlock(true), o.window, err)
	}
	for _, bad := range [][]string{{"--block", "0"}, {"--mix-window", "0"}} {
		if _, err := parseFlags(append([]string{"--standalone", "--dataset", "x"}, bad...), io.Discard); err == nil || !strings.Contains(err.Error(), strings.Join(bad, " ")) {
			t.Errorf("%s: %v", strings.Join(bad, " "), err)
		}
	}
	for _, f := range [][]string{{"--block", "64"}, {"--block", "1"}, {"--mix-window", "128"}} { // the default too: given is given
		_, err = parseFlags(append([]string{"--dataset", "x", "--join", "h:1", "--gossip", "h:2", "--listen", "h:3"}, f...), io.Discard)
		if err == nil || !strings.Contains(err.Error(), f[0]+" is the coordinator's in cluster mode") {
			t.Errorf("%s in cluster mode: %v", strings.Join(f, " "), err)
		}
	}
}

// TestPackedDefaultsMatchTheOrder: the packed store's defaults are the
// order's for a packed dataset, so a chunk is a block.
func TestPackedDefaultsMatchTheOrder(t *testing.T) {
	if c := dataset.DefaultPackedConfig(); c.Block != cluster.PackedBlock || c.Window != cluster.DefaultWindow {
		t.Errorf("dataset.DefaultPackedConfig() block %d, window %d; cluster.PackedBlock %d, cluster.DefaultWindow %d",
			c.Block, c.Window, cluster.PackedBlock, cluster.DefaultWindow)
	}
}

// TestDecoderNone: --decoder none delivers every sample once an epoch
// without decoding (the benchmarks' knob for the feed's own cost), and
// is refused for video.
func TestDecoderNone(t *testing.T) {
	root, keys := makeDataset(t, 30)
	dir := t.TempDir()
	logPath, statsPath := filepath.Join(dir, "d.log"), filepath.Join(dir, "s.json")
	var out, errb bytes.Buffer
	code := run([]string{"--standalone", "--dataset", root, "--epochs", "2", "--batch-size", "8", "--size", "32",
		"--decoder", "none", "--sink", "log:" + logPath, "--stats-json", statsPath, "--progress", "never"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
	}
	checkOncePerEpoch(t, logPath, 2, keys)
	var s Summary
	b, _ := os.ReadFile(statsPath)
	if err := json.Unmarshal(b, &s); err != nil || s.Failures.Total != 0 {
		t.Fatalf("stats: %v, failures %+v", err, s.Failures)
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"--standalone", "--dataset", root, "--media", "video", "--decoder", "none", "--sink", "null"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "images only") {
		t.Errorf("--decoder none --media video: exit %d, %s", code, errb.String())
	}
}

func TestAutoVideoThreads(t *testing.T) {
	for _, c := range []struct{ cores, decoders, want int }{
		{2, 0, 1}, {2, 2, 1}, {16, 0, 1}, {16, 16, 1}, {16, 8, 2}, {16, 4, 2}, {2, 4, 1}, {1, 1, 1},
	} {
		if got := autoVideoThreads(c.cores, c.decoders); got != c.want {
			t.Errorf("%d cores, %d decoders: %d threads a stream, want %d", c.cores, c.decoders, got, c.want)
		}
	}
}

// fastDisk is a spill disk probe that finds any disk fast enough.
func fastDisk(_ string, size int64) (dataset.DiskSpeed, error) {
	return dataset.DiskSpeed{WriteBytesPerSecond: 1e12, ReadsPerSecond: 1e9, ReadSize: size}, nil
}
