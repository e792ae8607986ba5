package dataset_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

func fastDisk(_ string, size int64) (dataset.DiskSpeed, error) {
	return dataset.DiskSpeed{WriteBytesPerSecond: 1e12, ReadsPerSecond: 1e9, ReadSize: size}, nil
}

// TestPlanPackCache: where a packed dataset's chunks go, by the store
// they come from and what was asked: members in place on a local disk,
// chunks from afar spilled to a fast local disk when their windows take
// memory worth saving, else in memory, always saying why.
func TestPlanPackCache(t *testing.T) {
	local, err := storage.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	remote := storage.NewMemStore("mem") // does not read in place, as S3 does not
	disk := t.TempDir()
	auto := dataset.PackPlanConfig{CacheAuto: true, SpillAuto: true, Probe: fastDisk}
	def := dataset.DefaultPackedConfig().CacheBytes
	const window, mean = 225 << 20, 112 << 10 // ImageNet's window at the defaults
	for _, tc := range []struct {
		name  string
		c     dataset.PackPlanConfig
		s     storage.Store
		cache int64
		spill string
		why   string
	}{
		{"auto on a local disk: in place", auto, local, 0, "", "on a local disk"},
		{"auto through a counting wrapper: in place", auto, storage.NewCountingStore(local), 0, "", "on a local disk"},
		{"auto from afar: spilled", auto, remote, def, disk, "on a local disk ("},
		{"auto from afar, counted: spilled", auto, storage.NewCountingStore(remote), def, disk, "on a local disk ("},
		{"a directory asks for chunks, even on a local disk", dataset.PackPlanConfig{CacheAuto: true, SpillDir: disk}, local, def, disk, "--pack-spill " + disk},
		{"off: in memory", dataset.PackPlanConfig{CacheAuto: true}, remote, def, "", "--pack-spill off"},
		{"off on a local disk: in place", dataset.PackPlanConfig{CacheAuto: true}, local, 0, "", "on a local disk"},
		{"a size on a local disk: not spilled", dataset.PackPlanConfig{CacheBytes: 64 << 20, SpillAuto: true, Probe: fastDisk}, local, 64 << 20, "", "copy it to another file"},
		{"a size from afar: spilled", dataset.PackPlanConfig{CacheBytes: 64 << 20, SpillAuto: true, Probe: fastDisk}, remote, 64 << 20, disk, "on a local disk ("},
		{"size 0: no chunks", dataset.PackPlanConfig{SpillAuto: true, Probe: fastDisk}, remote, 0, "", "--pack-cache 0"},
		{"a memory cap bounds the cache in memory", dataset.PackPlanConfig{CacheAuto: true, MemoryCap: 8 << 20}, remote, 8 << 20, "", "off"},
		{"a memory cap does not bound a spilled cache", dataset.PackPlanConfig{CacheAuto: true, SpillDir: disk, MemoryCap: 8 << 20}, remote, def, disk, "--pack-spill"},
	} {
		p := dataset.PlanPackCache(tc.s, tc.c, []string{disk}, window, mean)
		if p.CacheBytes != tc.cache || p.SpillDir != tc.spill || !strings.Contains(p.Why, tc.why) {
			t.Errorf("%s: %+v; want cache %d, spill %q, why with %q", tc.name, p, tc.cache, tc.spill, tc.why)
		}
	}
	// auto spills only windows that take memory worth saving: small
	// samples' chunks stay in memory, and so do those whose size is not
	// known at start.
	for _, wb := range []int64{dataset.SpillAbove - 1, 0} {
		if p := dataset.PlanPackCache(remote, auto, []string{disk}, wb, wb/2048); p.CacheBytes != def || p.SpillDir != "" || !strings.Contains(p.Why, "auto") {
			t.Errorf("auto, windows of %d bytes: %+v; want the cache in memory", wb, p)
		}
	}
	if p := dataset.PlanPackCache(remote, auto, []string{disk}, dataset.SpillAbove, dataset.SpillAbove/2048); p.SpillDir != disk {
		t.Errorf("auto, windows of %d bytes: %+v; want spilled to %s", int64(dataset.SpillAbove), p, disk)
	}
	// A disk slower than the node's cores consume, in bytes or in reads,
	// is passed over with the figures; a probe that fails, too.
	need := dataset.NewSpillNeed(4, mean)
	for name, sp := range map[string]dataset.DiskSpeed{
		"writes": {WriteBytesPerSecond: need.BytesPerSecond / 2, ReadsPerSecond: 2 * need.ReadsPerSecond, ReadSize: mean},
		"reads":  {WriteBytesPerSecond: 2 * need.BytesPerSecond, ReadsPerSecond: need.ReadsPerSecond / 2, ReadSize: mean},
	} {
		c := auto
		c.Cores = 4
		c.Probe = func(string, int64) (dataset.DiskSpeed, error) { return sp, nil }
		if p := dataset.PlanPackCache(remote, c, []string{disk}, window, mean); p.SpillDir != "" || p.CacheBytes != def || !strings.Contains(p.Why, "slower than this node's 4 cores") || !strings.Contains(p.Why, "reads/s") {
			t.Errorf("a disk slow in %s: %+v; want the chunks in memory, saying why", name, p)
		}
	}
	c := auto
	c.Probe = func(string, int64) (dataset.DiskSpeed, error) { return dataset.DiskSpeed{}, errors.New("probe failed") }
	if p := dataset.PlanPackCache(remote, c, []string{disk}, window, mean); p.SpillDir != "" || !strings.Contains(p.Why, "probe failed") {
		t.Errorf("a failed probe: %+v; want the chunks in memory, saying why", p)
	}
}

// TestPickSpillDir: an automatic spill takes the first directory that is
// on a disk, has room for the cache and keeps up, and says why it passed
// over the others; with none, the chunks stay in memory and the reason
// names each.
func TestPickSpillDir(t *testing.T) {
	disk := t.TempDir()
	missing := filepath.Join(t.TempDir(), "missing")
	need := dataset.NewSpillNeed(0, 100<<10)
	if dir, why := dataset.PickSpillDir([]string{missing, disk}, 1<<20, need, fastDisk); dir != disk || why == "" {
		t.Errorf("missing, then a disk: %q (%s); want %q", dir, why, disk)
	}
	// A slow disk is passed over for the next directory's fast one.
	slow := t.TempDir()
	probe := func(d string, size int64) (dataset.DiskSpeed, error) {
		if d == slow {
			return dataset.DiskSpeed{WriteBytesPerSecond: 25e6, ReadsPerSecond: 500, ReadSize: size}, nil
		}
		return fastDisk(d, size)
	}
	if dir, why := dataset.PickSpillDir([]string{slow, disk}, 1<<20, need, probe); dir != disk || !strings.Contains(why, "reads/s") {
		t.Errorf("a slow disk, then a fast one: %q (%s); want %q", dir, why, disk)
	}
	free, err := dataset.SpillDirFree(disk)
	if err != nil || free <= 0 {
		t.Fatalf("SpillDirFree(%s): %d, %v", disk, free, err)
	}
	dir, why := dataset.PickSpillDir([]string{missing, disk}, free, need, fastDisk)
	if dir != "" || !strings.Contains(why, missing) || !strings.Contains(why, disk+": ") || !strings.Contains(why, "too little") || !strings.Contains(why, "--pack-spill off") {
		t.Errorf("no directory with room for %d bytes: %q, %s", free, dir, why)
	}
	if shm := "/dev/shm"; dataset.CheckSpillDir(shm) != nil {
		if dir, why := dataset.PickSpillDir([]string{shm}, 1, need, fastDisk); dir != "" || !strings.Contains(why, "tmpfs") {
			t.Errorf("%s (tmpfs): %q, %s", shm, dir, why)
		}
	}
}

// TestSpillNeed: the disk must keep up with every core both ways.
func TestSpillNeed(t *testing.T) {
	n := dataset.NewSpillNeed(4, 1<<20)
	if n.BytesPerSecond != 4*dataset.SpillPerCore || n.ReadsPerSecond != 4*dataset.SpillPerCore/float64(1<<20) {
		t.Errorf("4 cores, 1 MiB samples: %+v", n)
	}
	if n := dataset.NewSpillNeed(2, 0); n.ReadsPerSecond != 0 || n.BytesPerSecond != 2*dataset.SpillPerCore {
		t.Errorf("unknown mean: %+v", n)
	}
	if got := dataset.HumanBytes(3 << 29); got != "1.5 GiB" {
		t.Errorf("HumanBytes(1.5 GiB) = %q", got)
	}
}
