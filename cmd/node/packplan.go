package main

import (
	"strings"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/dataset"
)

// packSpill is --pack-spill: a directory on a local disk for the chunks a
// packed dataset reads ahead; off (or empty): chunks in memory; auto (the
// default): packPlan decides, spilling to a temporary directory on a
// local disk (dataset.SpillDirs) the windows of chunks from an object store or a
// network file system that would take more than dataset.SpillAbove of memory.
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

// nodeOpen is how the node opens its dataset (dataset.NodeOpen): block
// and window are the order's (0: the job's, in cluster mode, the
// coordinator's defaults until then). Standalone ranks share one window
// of chunks; a cluster node's ranks each read their own.
func (o options) nodeOpen(block, window int) (dataset.NodeOpen, error) {
	c := dataset.NodeOpen{Raw: o.dataset, ManifestCache: int64(o.manifestCache), Pack: o.packConfig(),
		Block: block, Window: window, Windows: 1,
		SizeBlock: cluster.PackedBlock, SizeWindow: cluster.EffectiveWindow(cluster.PackedBlock, cluster.DefaultWindow)}
	if !o.standalone {
		c.Windows = o.ranks
	}
	c.Discover = dataset.DefaultDiscoverOptions()
	if o.manifest != "" {
		c.Discover.Layout = dataset.LayoutManifest
		c.Discover.Manifest = o.manifest
	}
	var err error
	if c.Discover.Extensions, err = dataset.MediaExtensions(o.mediaFlags.media); err != nil {
		return c, err
	}
	c.Discover.MediaColumn, c.Discover.LabelColumn = o.mediaColumn, o.labelColumn
	c.Discover.Exclude, err = o.faults.exclusions()
	return c, err
}

// packConfig is --pack-cache and --pack-spill for dataset.PlanPackCache,
// a cache in memory capped at its share of --memory-budget.
func (o options) packConfig() dataset.PackPlanConfig {
	c := dataset.PackPlanConfig{CacheAuto: o.packCache.auto, CacheBytes: int64(o.packCache.size),
		SpillDir: o.packSpill.dir, SpillAuto: o.packSpill.auto, Probe: o.spillProbe}
	if o.memoryBudget > 0 { // --memory-budget: at most its share
		c.MemoryCap = actors.MemoryShare(int64(o.memoryBudget), actors.MemoryPackShare)
	}
	return c
}
