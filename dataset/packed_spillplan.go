package dataset

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/longshore/longshore/storage"
)

// PackPlanConfig is what an operator asked of a packed dataset's chunk
// cache (the node's --pack-cache and --pack-spill): a size or auto, and
// a spill directory, off (memory) or auto.
type PackPlanConfig struct {
	// CacheAuto leaves the cache's size to PlanPackCache; else
	// CacheBytes is it (0: no chunks, every member read alone).
	CacheAuto  bool
	CacheBytes int64
	// SpillDir keeps the chunks in files there; else SpillAuto lets
	// PlanPackCache choose a directory (SpillDirs) or memory; neither:
	// memory.
	SpillDir  string
	SpillAuto bool
	// MemoryCap, if positive, is the most an automatic cache kept in
	// memory may take (the node's share of --memory-budget).
	MemoryCap int64
	// Probe measures a candidate spill directory's disk (nil:
	// ProbeSpillDisk within SpillProbeBudget; tests give their own).
	Probe func(dir string, readSize int64) (DiskSpeed, error)
	// Cores is how many cores consume the chunks (0: GOMAXPROCS).
	Cores int
	// Unpacked says the samples are unpacked from ranges they share
	// (Dataset.Unpacker: Parquet row groups): a member is not one read
	// even on a local disk, so auto keeps a cache, and in memory (a
	// PackedStore never spills such chunks).
	Unpacked bool
}

// PackPlan is where a packed dataset keeps the chunks it reads ahead:
// CacheBytes (0: no chunks, every member read alone, in place), the
// spill directory ("": memory), and why, for the node's start line.
type PackPlan struct {
	CacheBytes int64
	SpillDir   string
	Why        string
}

// SpillAbove is the node's windows of chunks, in bytes, above which an
// automatic spill spills them: below it they take little memory, and
// held in memory they are faster to serve than from a disk (small
// samples at high rates: a member read from a spilled file is a request
// to the disk, at 0.46-0.63x the in-memory images/s of 16x16 JPEGs from
// MinIO, docs/performance.md); above it (ImageNet-sized samples: ~225 MB
// a rank at the defaults) spilling saves the window's memory and was
// faster too.
const SpillAbove = 32 << 20

// SpillPerCore is the samples' bytes a second one core consumes when it
// decodes them: ~550 ImageNet-sized JPEGs (112 KB) a second a core on
// the 2-vCPU bench machine (docs/performance.md), rounded up. A spill
// disk must keep up with the node's cores at that rate both ways (each
// chunk written once, each member read back once), or the window is
// served slower than from memory: spilled to a disk throttled to 100
// MB/s and 2,000 IOPS, 0.78x the in-memory rate; to 25 MB/s and 500
// IOPS, 0.2x (docs/packed-datasets.md).
const SpillPerCore = 64 << 20

// SpillProbeBudget bounds the start-up probe of a spill disk (half
// writing, half reading).
const SpillProbeBudget = 300 * time.Millisecond

// SpillNeed is what a spill disk must sustain for a node: bytes a second
// each way, and member reads a second of the mean sample.
type SpillNeed struct {
	Cores          int
	Mean           int64
	BytesPerSecond float64
	ReadsPerSecond float64
}

// NewSpillNeed is what cores (0: GOMAXPROCS) decoding samples of mean
// bytes need of a spill disk.
func NewSpillNeed(cores int, mean int64) SpillNeed {
	if cores <= 0 {
		cores = runtime.GOMAXPROCS(0)
	}
	n := SpillNeed{Cores: cores, Mean: mean}
	n.BytesPerSecond = float64(n.Cores) * SpillPerCore
	if mean > 0 {
		n.ReadsPerSecond = n.BytesPerSecond / float64(mean)
	}
	return n
}

// SpillDirs are where an automatic spill looks, in order: $TMPDIR (or
// /tmp), then /var/tmp, which is on disk where /tmp is tmpfs. A spilled
// file is unlinked as soon as it is opened, so nothing is left there
// after the node exits, however it exits.
func SpillDirs() []string {
	dirs := []string{os.TempDir()}
	if dirs[0] != "/var/tmp" {
		dirs = append(dirs, "/var/tmp")
	}
	return dirs
}

// PlanPackCache decides the chunk cache of a packed dataset in store s.
// On a local disk (ReadsInPlace) auto means no chunks: a member is one
// pread from the page cache, and a chunk would only copy it twice, or to
// another file and back. Elsewhere (an object store, a network file
// system) auto means DefaultPackedConfig's cache (at most MemoryCap in
// memory), spilled to the first of dirs that can hold it when the
// windows (windowBytes: a mean sample's bytes x block x window x the
// windows read at once; 0: not known yet) pass SpillAbove, and whose
// disk keeps up with the node (SpillNeed of the mean sample, measured by
// c.Probe).
func PlanPackCache(s storage.Store, c PackPlanConfig, dirs []string, windowBytes, mean int64) PackPlan {
	inPlace := storage.ReadsInPlace(s)
	var p PackPlan
	switch {
	case !c.CacheAuto:
		p.CacheBytes = c.CacheBytes
	case c.SpillDir == "" && inPlace && !c.Unpacked:
		p.Why = "on a local disk a member is one read, as a file is; --pack-cache auto"
		return p
	default:
		p.CacheBytes = DefaultPackedConfig().CacheBytes
		if c.MemoryCap > 0 && c.SpillDir == "" {
			p.CacheBytes = min(p.CacheBytes, c.MemoryCap)
		}
	}
	switch {
	case p.CacheBytes == 0:
		p.Why = "--pack-cache 0"
	case c.Unpacked:
		p.Why = "the samples are decoded out of shared ranges (Parquet row groups): chunks in memory"
	case c.SpillDir != "":
		p.SpillDir, p.Why = c.SpillDir, "--pack-spill "+c.SpillDir
	case !c.SpillAuto:
		p.Why = "--pack-spill off"
	case inPlace:
		p.Why = "the dataset is on a local disk: spilling would copy it to another file and back; --pack-spill auto"
	case windowBytes == 0:
		p.Why = "--pack-spill auto: the samples' mean size is not known at start (the manifest's first piece could not be read), so the window's memory is not either"
	case windowBytes < SpillAbove:
		p.Why = fmt.Sprintf("--pack-spill auto: the windows of chunks take about %s, under %s: in memory they cost little and are served faster than from a disk", HumanBytes(windowBytes), HumanBytes(SpillAbove))
	default:
		probe := c.Probe
		if probe == nil {
			probe = func(dir string, size int64) (DiskSpeed, error) {
				return ProbeSpillDisk(dir, size, SpillProbeBudget)
			}
		}
		p.SpillDir, p.Why = PickSpillDir(dirs, p.CacheBytes, NewSpillNeed(c.Cores, mean), probe)
	}
	return p
}

// PickSpillDir returns the first of dirs that can hold spilled chunks
// (CheckSpillDir), has room for cache bytes of them beside a tenth of
// the file system's free space, and whose disk, probed, writes and
// reads as fast as need; and why it was chosen. Or "" and why each was
// passed over: the chunks are then kept in memory, and the node's start
// line says so.
func PickSpillDir(dirs []string, cache int64, need SpillNeed, probe func(string, int64) (DiskSpeed, error)) (string, string) {
	var skipped []string
	for _, d := range dirs {
		if err := CheckSpillDir(d); err != nil {
			skipped = append(skipped, strings.TrimPrefix(err.Error(), ErrSpillDir.Error()+": "))
			continue
		}
		free, err := SpillDirFree(d)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", d, err))
			continue
		}
		if free-free/10 < cache {
			skipped = append(skipped, fmt.Sprintf("%s: %s free, too little for the %s cache", d, HumanBytes(free), HumanBytes(cache)))
			continue
		}
		sp, err := probe(d, need.Mean)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: probing its disk: %v", d, err))
			continue
		}
		disk := fmt.Sprintf("%s/s of writes and %.0f reads/s of %s measured", HumanBytes(int64(sp.WriteBytesPerSecond)), sp.ReadsPerSecond, HumanBytes(sp.ReadSize))
		if sp.WriteBytesPerSecond < need.BytesPerSecond || sp.ReadsPerSecond < need.ReadsPerSecond {
			skipped = append(skipped, fmt.Sprintf("%s: its disk is slower than this node's %d cores consume (%s; they want %s/s and %.0f reads/s): the window would be served slower than from memory", d, need.Cores, disk, HumanBytes(int64(need.BytesPerSecond)), need.ReadsPerSecond))
			continue
		}
		return d, "--pack-spill auto: chunks from an object store or a network file system, on a local disk (" + disk + ")"
	}
	return "", "--pack-spill auto found no local disk directory to hold them (" + strings.Join(skipped, "; ") + "); set --pack-spill DIR to spill there anyway, or --pack-spill off to keep them in memory without this note"
}

// HumanBytes is n bytes rounded for people: 1.5 GiB, 27 MiB, 80 GiB.
func HumanBytes(n int64) string {
	v, units := float64(n), []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for ; v >= 1024 && i < len(units)-1; i++ {
		v /= 1024
	}
	if v < 10 && v != float64(int64(v)) {
		return fmt.Sprintf("%.1f %s", v, units[i])
	}
	return fmt.Sprintf("%.0f %s", v, units[i])
}
