package dataset

import (
	"context"
	"errors"
	"fmt"

	"github.com/longshore/longshore/storage"
)

// NodeOpen is how a node opens its dataset in a store it opened
// (storage/stores.Open): OpenLazy first, then, where that leaves the
// manifest whole, OpenNode. Both size a packed dataset's chunk cache
// with PlanPackCache for the windows of chunks the node reads at once
// (WindowBytes).
type NodeOpen struct {
	// Raw names the dataset in errors: "dataset <Raw>: ...".
	Raw string
	// Discover says what Discover keeps: the manifest (Discover.Manifest,
	// "" for the default names), the media's extensions, the exclusions.
	Discover DiscoverOptions
	// ManifestCache is the bytes of manifest pieces OpenLazy keeps; 0
	// reads every manifest whole.
	ManifestCache int64
	// Pack decides the chunk cache and where it lives (PlanPackCache).
	Pack PackPlanConfig
	// SpillDirs are the candidate spill directories (nil: SpillDirs()).
	SpillDirs []string
	// Block and Window are the epoch order's block and window of blocks;
	// Block 0: not known yet (a cluster node learns them from the job),
	// samples are read one by one until PackedStore.SetBlock.
	Block, Window int
	// SizeBlock and SizeWindow stand in for Block and Window in
	// WindowBytes while Block is 0 (a cluster node: the coordinator's
	// defaults).
	SizeBlock, SizeWindow int
	// Windows is how many windows of chunks are read at once (a cluster
	// node's ranks each read their own; standalone ranks share one).
	Windows int
}

// WindowBytes estimates the bytes of the chunks a node holds at once: a
// mean packed sample's (0: unknown, then 0) times the order's block and
// window (SizeBlock and SizeWindow while Block is 0), times Windows.
func (c NodeOpen) WindowBytes(mean int64) int64 {
	block, window := c.Block, c.Window
	if block == 0 {
		block, window = c.SizeBlock, c.SizeWindow
	}
	return mean * int64(max(block, 1)) * int64(max(window, 1)) * int64(max(c.Windows, 1))
}

func (c NodeOpen) plan(s storage.Store, mean int64) PackPlan {
	dirs := c.SpillDirs
	if dirs == nil {
		dirs = SpillDirs()
	}
	return PlanPackCache(s, c.Pack, dirs, c.WindowBytes(mean), mean)
}

// OpenNode discovers the dataset in s (Open). A packed dataset gets its
// store wrapped in a PackedStore that reads a chunk of samples at a
// time: those of one block of the epoch order that share a shard,
// Window blocks' chunks at once, in a cache PlanPackCache sized (the
// plan returned says how and why). On error s is closed.
func OpenNode(ctx context.Context, s storage.Store, c NodeOpen) (storage.Store, *Dataset, PackPlan, error) {
	packed := PackedConfig{Block: c.Block, Window: c.Window}
	if err := packed.Validate(); err != nil {
		storage.Close(s)
		return nil, nil, PackPlan{}, fmt.Errorf("dataset %s: %w", c.Raw, err)
	}
	s, ds, err := Open(ctx, s, c.Raw, c.Discover, nil)
	if err != nil || !ds.Packed() {
		return s, ds, PackPlan{}, err
	}
	// Samples unpacked from ranges they share (Parquet row groups) are
	// never one read each: the plan keeps a cache for them.
	c.Pack.Unpacked = ds.Unpacker != nil
	plan := c.plan(s, PackedMean(ds, nil))
	packed.CacheBytes, packed.SpillDir = plan.CacheBytes, plan.SpillDir
	ps, err := NewPackedStore(s, ds, packed)
	if err != nil {
		storage.Close(s)
		return nil, nil, PackPlan{}, fmt.Errorf("dataset %s: %w", c.Raw, err)
	}
	return ps, ds, plan, nil
}

// OpenLazy opens, where the lazy path applies (docs/scale.md), the
// dataset's manifest through its index: the node reads the pieces of the
// manifest its leases touch, into ManifestCache bytes, instead of the
// whole sample list. The catalog is nil, and s is returned as it is for
// OpenNode, when the dataset has no index, or ManifestCache is 0, or
// Discover.Exclude is not empty (exclusions renumber the samples, which
// needs them all). The layout is read from the index (one GET) before
// any of the manifest is. A packed dataset's lazy store is a PackedStore
// over the catalog, which reads chunks of the order's blocks as
// OpenNode's does; it is given Block and Window when Block is set. On
// error s is closed.
func OpenLazy(ctx context.Context, s storage.Store, c NodeOpen) (storage.Store, *IndexedManifest, PackPlan, error) {
	if c.ManifestCache == 0 || len(c.Discover.Exclude) > 0 {
		return s, nil, PackPlan{}, nil
	}
	fail := func(err error) (storage.Store, *IndexedManifest, PackPlan, error) {
		storage.Close(s)
		return nil, nil, PackPlan{}, err
	}
	keys := []string{ManifestCSVName, ManifestJSONLName}
	if c.Discover.Manifest != "" {
		keys = []string{c.Discover.Manifest}
	}
	var found *ManifestIndex
	for _, key := range keys {
		x, err := ReadManifestIndex(ctx, s, key)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			continue
		case err != nil:
			return fail(fmt.Errorf("dataset %s: %w", c.Raw, err))
		case found != nil:
			return fail(fmt.Errorf("dataset %s: both %s and %s are indexed: pick one with --manifest", c.Raw, ManifestCSVName, ManifestJSONLName))
		}
		found = x
	}
	if found == nil {
		return s, nil, PackPlan{}, nil
	}
	m, err := OpenIndex(ctx, s, found, IndexedConfig{CacheBytes: c.ManifestCache})
	if err != nil {
		return fail(fmt.Errorf("dataset %s: %w", c.Raw, err))
	}
	if found.Layout() == "plain" {
		return s, m, PackPlan{}, nil
	}
	// The mean sample from the manifest's first piece (one small read,
	// which the run needs anyway): enough to tell ImageNet-sized samples,
	// whose window is worth spilling, from small ones.
	var mean int64
	if _, _, err := m.Sample(ctx, 0); err == nil {
		mean = PackedMean(nil, m)
	}
	plan := c.plan(s, mean)
	ps, err := NewCatalogPackedStore(s, m, PackedConfig{CacheBytes: plan.CacheBytes, SpillDir: plan.SpillDir})
	if err != nil {
		m.Close()
		return fail(fmt.Errorf("dataset %s: %w", c.Raw, err))
	}
	if c.Block > 0 {
		ps.SetBlock(c.Block)
		ps.SetWindow(c.Window)
	}
	return ps, m, plan, nil
}

// PackedMean is the mean size of a packed sample: over ds, or (ds nil)
// over the pieces of the manifest m has read so far; 0 when there is
// none.
func PackedMean(ds *Dataset, m *IndexedManifest) int64 {
	var n, bytes int64
	if ds != nil {
		var last Sample
		for _, s := range ds.Samples {
			if s.Packed() {
				n++
				// Samples that share a range (a Parquet row group's)
				// count its bytes once.
				if s.Object != last.Object || s.Offset != last.Offset || s.Size != last.Size {
					bytes += s.Size
				}
				last = s
			}
		}
	} else if m != nil {
		st := m.Stats()
		n, bytes = st.PackedSamples, st.PackedBytes
	}
	if n == 0 {
		return 0
	}
	return bytes / n
}
