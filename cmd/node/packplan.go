package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// packSpill is --pack-spill: a directory on a local disk for the chunks a
// packed dataset reads ahead; off (or empty): chunks in memory; auto (the
// default): packPlan decides, spilling to a temporary directory on a
// local disk (spillDirs) the windows of chunks from an object store or a
// network file system that would take more than spillAbove of memory.
//
// For those it wins on both counts: from MinIO, ImageNet-sized samples
// spilled ran at 1.23x the in-memory chunks' images/s at 0.49x their peak
// memory (docs/performance.md, "Packed memory"). Memory pays for faulting
// each chunk in and releasing its pages as members are served; a spilled
// chunk is written once with direct I/O and its members read back with
// one pread each, as plain files are.
type packSpill struct {
	dir  string
	auto bool
}

func (p *packSpill) Set(s string) error {
	switch t := strings.TrimSpace(s); strings.ToLower(t) {
	case "auto":
		*p = packSpill{auto: true}
	case "", "off", "none", "memory":
		*p = packSpill{}
	default:
		*p = packSpill{dir: t}
	}
	return nil
}

func (p packSpill) String() string {
	switch {
	case p.auto:
		return "auto"
	case p.dir == "":
		return "off"
	}
	return p.dir
}

// spillDirs are where --pack-spill auto looks, in order: $TMPDIR (or
// /tmp), then /var/tmp, which is on disk where /tmp is tmpfs. A spilled
// file is unlinked as soon as it is opened, so nothing is left there
// after the node exits, however it exits.
func spillDirs() []string {
	dirs := []string{os.TempDir()}
	if dirs[0] != "/var/tmp" {
		dirs = append(dirs, "/var/tmp")
	}
	return dirs
}

// packPlan is where a packed dataset keeps the chunks it reads ahead:
// cache bytes (0: no chunks, every member read alone, in place), the
// spill directory ("": memory), and how that was chosen, for the start
// line.
type packPlan struct {
	cache int64
	spill string
	why   string
}

// spillAbove is the node's windows of chunks, in bytes, above which
// --pack-spill auto spills them: below it they take little memory, and
// held in memory they are faster to serve than from a disk (small
// samples at high rates: a member read from a spilled file is a request
// to the disk, at 0.46-0.63x the in-memory images/s of 16x16 JPEGs from
// MinIO, docs/performance.md); above it (ImageNet-sized samples: ~225 MB
// a rank at the defaults) spilling saves the window's memory and was
// faster too.
const spillAbove = 32 << 20

// spillPerCore is the samples' bytes a second one core consumes when it
// decodes them: ~550 ImageNet-sized JPEGs (112 KB) a second a core on
// the 2-vCPU bench machine (docs/performance.md), rounded up. A spill
// disk must keep up with the node's cores at that rate both ways (each
// chunk written once, each member read back once), or the window is
// served slower than from memory: spilled to a disk throttled to 100
// MB/s and 2,000 IOPS, 0.78x the in-memory rate; to 25 MB/s and 500
// IOPS, 0.2x (docs/packed-datasets.md).
const spillPerCore = 64 << 20

// spillProbeBudget bounds the start-up probe of a spill disk (half
// writing, half reading).
const spillProbeBudget = 300 * time.Millisecond

// spillNeed is what a spill disk must sustain for this node: bytes a
// second each way, and member reads a second of the mean sample.
type spillNeed struct {
	cores       int
	mean        int64
	bytesPerSec float64
	readsPerSec float64
}

func newSpillNeed(mean int64) spillNeed {
	n := spillNeed{cores: runtime.GOMAXPROCS(0), mean: mean}
	n.bytesPerSec = float64(n.cores) * spillPerCore
	if mean > 0 {
		n.readsPerSec = n.bytesPerSec / float64(mean)
	}
	return n
}

// packPlan decides --pack-cache and --pack-spill for a packed dataset in
// store s. On a local disk (storage.ReadsInPlace) auto means no chunks:
// a member is one pread from the page cache, and a chunk would only copy
// it twice, or to another file and back. Elsewhere (an object store, a
// network file system) auto means dataset.DefaultPackedConfig's cache,
// spilled to the first of spillDirs that can hold it when the windows
// (windowBytes: a mean sample's bytes x block x window x the windows
// read at once; 0: not known yet) pass spillAbove, and whose disk keeps
// up with the node (spillNeed of the mean sample, measured by o.probe).
func (o options) packPlan(s storage.Store, dirs []string, windowBytes, mean int64) packPlan {
	inPlace := storage.ReadsInPlace(s)
	var p packPlan
	switch {
	case !o.packCache.auto:
		p.cache = int64(o.packCache.size)
	case o.packSpill.dir == "" && inPlace:
		p.why = "on a local disk a member is one read, as a file is; --pack-cache auto"
		return p
	default:
		p.cache = dataset.DefaultPackedConfig().CacheBytes
		if o.memoryBudget > 0 && o.packSpill.dir == "" { // --memory-budget: at most its share
			p.cache = min(p.cache, int64(float64(o.memoryBudget)*budgetPackShare))
		}
	}
	switch {
	case p.cache == 0:
		p.why = "--pack-cache 0"
	case o.packSpill.dir != "":
		p.spill, p.why = o.packSpill.dir, "--pack-spill "+o.packSpill.dir
	case !o.packSpill.auto:
		p.why = "--pack-spill off"
	case inPlace:
		p.why = "the dataset is on a local disk: spilling would copy it to another file and back; --pack-spill auto"
	case windowBytes == 0:
		p.why = "--pack-spill auto: the samples' mean size is not known at start (the manifest's first piece could not be read), so the window's memory is not either"
	case windowBytes < spillAbove:
		p.why = fmt.Sprintf("--pack-spill auto: the windows of chunks take about %s, under %s: in memory they cost little and are served faster than from a disk", byteSize(windowBytes).human(), byteSize(spillAbove).human())
	default:
		probe := o.spillProbe
		if probe == nil {
			probe = func(dir string, size int64) (dataset.DiskSpeed, error) {
				return dataset.ProbeSpillDisk(dir, size, spillProbeBudget)
			}
		}
		p.spill, p.why = pickSpillDir(dirs, p.cache, newSpillNeed(mean), probe)
	}
	return p
}

// pickSpillDir returns the first of dirs that can hold spilled chunks
// (dataset.CheckSpillDir), has room for cache bytes of them beside a
// tenth of the file system's free space, and whose disk, probed, writes
// and reads as fast as need; and why it was chosen. Or "" and why each
// was passed over: the chunks are then kept in memory, and the start line
// says so.
func pickSpillDir(dirs []string, cache int64, need spillNeed, probe func(string, int64) (dataset.DiskSpeed, error)) (string, string) {
	var skipped []string
	for _, d := range dirs {
		if err := dataset.CheckSpillDir(d); err != nil {
			skipped = append(skipped, strings.TrimPrefix(err.Error(), dataset.ErrSpillDir.Error()+": "))
			continue
		}
		free, err := dataset.SpillDirFree(d)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", d, err))
			continue
		}
		if free-free/10 < cache {
			skipped = append(skipped, fmt.Sprintf("%s: %s free, too little for the %s cache", d, byteSize(free).human(), byteSize(cache).human()))
			continue
		}
		sp, err := probe(d, need.mean)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: probing its disk: %v", d, err))
			continue
		}
		disk := fmt.Sprintf("%s/s of writes and %.0f reads/s of %s measured", byteSize(int64(sp.WriteBytesPerSecond)).human(), sp.ReadsPerSecond, byteSize(sp.ReadSize).human())
		if sp.WriteBytesPerSecond < need.bytesPerSec || sp.ReadsPerSecond < need.readsPerSec {
			skipped = append(skipped, fmt.Sprintf("%s: its disk is slower than this node's %d cores consume (%s; they want %s/s and %.0f reads/s): the window would be served slower than from memory", d, need.cores, disk, byteSize(int64(need.bytesPerSec)).human(), need.readsPerSec))
			continue
		}
		return d, "--pack-spill auto: chunks from an object store or a network file system, on a local disk (" + disk + ")"
	}
	return "", "--pack-spill auto found no local disk directory to hold them (" + strings.Join(skipped, "; ") + "); set --pack-spill DIR to spill there anyway, or --pack-spill off to keep them in memory without this note"
}
