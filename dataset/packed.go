package dataset

import (
	"cmp"
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/longshore/longshore/internal/offheap"
	"github.com/longshore/longshore/storage"
)

// PackedConfig configures a PackedStore. The zero value is valid: every
// packed sample is read with its own ranged GET and nothing is cached.
type PackedConfig struct {
	// Block is the locality block of the epoch order (cluster.Order), in
	// samples: a chunk is the packed samples of dataset indices
	// [k*Block, (k+1)*Block) that lie in the same object, read with one
	// ranged GET. The order visits a block's samples within one window
	// of blocks, so a chunk is used up soon after it is fetched. 0 or 1:
	// no chunks, one ranged GET per sample. SetBlock changes it later.
	Block int
	// Window is the epoch order's window (cluster.Order), in blocks: a
	// rank reads the chunks of that many blocks at once, interleaved, so
	// prefetching may run up to a window of chunks ahead per rank
	// instead of one. 0 or 1: one block at a time. SetWindow changes it.
	Window int
	// CacheBytes bounds the chunk cache: the chunks held plus those being
	// fetched. A chunk that would not fit, even after evicting every idle
	// chunk, is not cached; its samples are read one ranged GET each.
	// A rank holds a window of chunks at once (Window x Block samples'
	// bytes), and the next window's first chunks while it finishes one:
	// give it about that much per rank (ranks of one standalone node
	// share their windows). 0: no cache (one ranged GET per sample).
	CacheBytes int64
	// SpillDir, when set, keeps chunks in files on that directory's
	// disk instead of in memory (what Mosaic Streaming's and LitData's
	// local cache directories do): CacheBytes then bounds the disk the
	// chunks take, and memory holds only SpillStaging chunks being
	// fetched. It must be on a disk file system with direct I/O, not
	// tmpfs (CheckSpillDir). Linux only.
	SpillDir string
	// SpillStaging is how many chunk fetches hold a staging buffer at
	// once when spilling; 0: automatic, as many as the consumption needs
	// in flight (at least DefaultSpillStaging; see spill).
	SpillStaging int
}

// DefaultPackedConfig returns what the binaries start from.
func DefaultPackedConfig() PackedConfig {
	return PackedConfig{
		// The order's block and window for a packed dataset
		// (cluster.PackedBlock, cluster.DefaultWindow: a test in
		// cmd/node keeps them equal): a chunk of 16 ~110 KB images is
		// one ~1.8 MB GET, and a window of 128 such chunks (~225 MB)
		// is what a rank holds at once.
		Block:  16,
		Window: 128,
		// Room for four ranks' windows of ImageNet-sized JPEGs in a
		// cluster (each rank reads its own), or one standalone node's
		// window and the next; give an 8-GPU cluster node 2 GiB
		// (docs/packed-datasets.md).
		CacheBytes: 1 << 30,
	}
}

// Validate reports every problem with c at once (errors.Join), or nil.
func (c PackedConfig) Validate() error {
	var errs []error
	if c.Block < 0 {
		errs = append(errs, fmt.Errorf("packed store: Block %d is negative", c.Block))
	}
	if c.Window < 0 {
		errs = append(errs, fmt.Errorf("packed store: Window %d is negative", c.Window))
	}
	if c.CacheBytes < 0 {
		errs = append(errs, fmt.Errorf("packed store: CacheBytes %d is negative", c.CacheBytes))
	}
	if c.SpillStaging < 0 {
		errs = append(errs, fmt.Errorf("packed store: SpillStaging %d is negative", c.SpillStaging))
	}
	return errors.Join(errs...)
}

// PackedStats counts what a PackedStore did.
type PackedStats struct {
	Chunks        int64 `json:"chunks"`         // chunk fetches (one ranged GET each)
	ChunkBytes    int64 `json:"chunk_bytes"`    // bytes they read
	Hits          int64 `json:"hits"`           // samples served from a chunk
	ReadAlone     int64 `json:"read_alone"`     // samples read with a ranged GET of their own
	Evictions     int64 `json:"evictions"`      // chunks dropped before every sample was served
	Overflows     int64 `json:"overflows"`      // samples read alone because the cache was full
	Prefetches    int64 `json:"prefetches"`     // chunk fetches started by Prefetch
	Reused        int64 `json:"reused"`         // chunk fetches into a recycled buffer
	CachedBytes   int64 `json:"cached_bytes"`   // now: chunks held or being fetched
	FreeBytes     int64 `json:"free_bytes"`     // now: buffers kept for reuse
	PeakBytes     int64 `json:"peak_bytes"`     // most CachedBytes+FreeBytes ever: the memory held
	ChunkFailures int64 `json:"chunk_failures"` // chunk fetches that failed
	ReleasedBytes int64 `json:"released_bytes"` // pages of served members given back to the kernel
	Spilled       int64 `json:"spilled"`        // chunks written to the spill directory (PackedConfig.SpillDir)
	SpillErrors   int64 `json:"spill_errors"`   // chunk files not written (a full disk) and spilled members not read back: those members are read alone from the store
	CacheBytes    int64 `json:"cache_bytes"`    // PackedConfig.CacheBytes: 0, no chunks (every sample read alone, in place on a local disk)
	SpillStaging  int64 `json:"spill_staging"`  // now: staging buffers a spilling store allows (fetches in flight)
}

// The prefetch budget (PackedStore.mu.budget): how many chunks Prefetch
// may hold that no Get has asked for yet, in windows of the order (a
// rank's next window's chunks are needed together): it starts at one
// window and grows to maxPrefetchWindows, for that many ranks' next
// windows.
const maxPrefetchWindows = 64

// sparseSlack is the waste allowed per member in a chunk's span before it
// counts against fetching the span at once: a tar member's header and
// padding (512 to 1535 bytes, more with PAX records) and a small sidecar
// member (WebDataset's .cls or .json) between two images.
const sparseSlack = 4 << 10

// PackedStore serves the packed samples of a dataset (Sample.Packed)
// from the objects that hold them, under their sample keys. It reads a
// chunk at a time — the block's samples that share an object, with one
// ranged GET spanning them — and keeps chunks in a cache bounded in bytes,
// so that an epoch visiting samples block by block costs one request per
// chunk instead of one per sample.
//
//   - Get of a packed sample's key returns its bytes; every other key and
//     every other method go to the wrapped store unchanged.
//   - Concurrent Gets of one chunk share one fetch. A Get whose context
//     ends returns at once; the fetch goes on for the others and is
//     cancelled when no Get waits for it any more.
//   - A chunk is dropped as soon as each of its samples has been served
//     once; other chunks are evicted least recently used when a new one
//     needs room. Chunks being fetched count against CacheBytes too.
//   - A chunk whose span is more than twice its samples' bytes (plus a
//     few KiB per sample for tar headers), or that is bigger than the
//     cache, is not fetched as a whole: its samples are read one ranged
//     GET each.
//   - Errors of the wrapped store come back unchanged (errors.Is works
//     with the storage sentinels and context errors), to every Get that
//     waited for the failed fetch; nothing failed is cached.
//   - Prefetch starts a sample's chunk ahead of its first Get (the
//     pipeline calls it as work arrives), so that the fetch overlaps the
//     decoding of the chunks before. With windows (PackedConfig.Window)
//     up to a window of chunks per rank may be prefetched: the order
//     reads them together.
//   - Chunk buffers live off the Go heap (internal/offheap) and are
//     recycled: a dropped chunk's buffer is kept for the next fetch,
//     within CacheBytes, and freed past it, so the memory held is the
//     cache's working set, not twice it (the collector's heap growth
//     between GCs), and goes back to the kernel as chunks are dropped.
//
// A PackedStore is safe for concurrent use. Close cancels fetches still
// running, waits for them and closes the wrapped store if it is an
// io.Closer.
type PackedStore struct {
	inner storage.Store
	spill *spill // nil: chunks in memory
	// unpack is the dataset's Unpacker (Dataset.Unpacker): nil when a
	// packed sample's range is its bytes (a tar member).
	unpack    Unpacker
	stageDone *sync.Cond // on mu: a chunk's last staging reader is done
	// ds is the dataset in memory (NewPackedStore), nil on the lazy path
	// (NewCatalogPackedStore), where Get by a packed sample's key passes
	// through: only GetSample knows a sample there.
	ds *Dataset
	// src serves the samples by index, peek where they lie without
	// blocking (false when the sample is not at hand: its piece of the
	// manifest is not read; Sample.Key may be empty: planning and
	// prefetching never read it). Lock order: mu before the catalog's
	// own.
	src  Catalog
	peek func(i int64) (Sample, string, bool)
	n    int64
	// byKey holds the dataset indices of the packed samples sorted by
	// key, for Get's lookup: 4 bytes a sample, where a map from key to
	// index costs ~50 (hundreds of MB at ten million samples). Made on
	// the first Get by key: the pipeline reads by index (GetSample) and
	// never needs it.
	byKeyOnce sync.Once
	byKey     []int32
	cap       int64
	block     atomic.Int64
	window    atomic.Int64
	alone     atomic.Int64   // PackedStats.ReadAlone
	wg        sync.WaitGroup // chunk fetches
	mu        struct {
		sync.Mutex
		chunks map[chunkKey]*chunk
		lru    list.List // of *chunk, loaded ones only, most recent first
		used   int64     // bytes held or being fetched
		// served remembers which samples of an evicted chunk were
		// served, so that the chunk fetched again is dropped once the
		// rest have been (else it would wait for samples already gone).
		// One bit per index of the chunk's block.
		served map[chunkKey][]uint64
		// alone marks chunks whose samples are read one by one: not
		// worth fetching whole (sparse, a single member, bigger than the
		// cache), or whose fetch failed for good (a truncated or missing
		// shard), so that one bad sample does not fail its whole block
		// and a plan is not made again for every Get.
		alone map[chunkKey]bool
		// spans remembers the span of chunks planned, so that a prefetch
		// that would not fit is refused without planning again.
		spans map[chunkKey]int64
		// unread counts speculative chunks; Prefetch starts one only
		// while unread < budget. The budget starts at a window's chunks
		// (PackedConfig.Window, at least one). A prefetch some Get then
		// asks for adds one to it, up to maxPrefetchWindows windows; one
		// evicted before any Get asked halves it: in a cache too small
		// for the ranks' next chunks prefetching backs off to one at a
		// time instead of evicting chunks that are about to be read.
		unread, budget int
		// free holds buffers of dropped chunks for the next fetches;
		// freeBytes is their capacity, which with used stays within
		// cap.
		free      [][]byte
		freeBytes int64
		closed    bool
		stats     PackedStats
	}
}

var (
	_ storage.Store        = (*PackedStore)(nil)
	_ storage.SampleStore  = (*PackedStore)(nil)
	_ storage.PrefixLister = (*PackedStore)(nil)
	_ io.Closer            = (*PackedStore)(nil)
)

// chunkKey names a chunk: an object of the dataset and a block of dataset
// indices. The block's bounds (not its number) are the key, so a change
// of Block makes new chunks and never mixes them with old ones. The
// object is its key: a lazy catalog numbers objects per piece.
//
// With an Unpacker (a Parquet dataset) a chunk is also one range of the
// object, at: the block's samples in one row group, whose range they
// share. A block that straddles row groups reads each one's range, not
// the span between them (other columns' chunks).
type chunkKey struct {
	object string
	at     int64 // the range's offset, with an Unpacker; else 0
	lo, hi int64
}

// blockSample is a sample of a block and its object, read for planning.
type blockSample struct {
	s      Sample
	object string
}

type chunk struct {
	key    chunkKey
	off    int64    // first byte of the span in the object
	size   int64    // span length: what the chunk reserves in the cache
	n      int      // members: the block's samples that lie in the object
	served []uint64 // a bit per index of the block: member served
	left   int      // members not served yet
	// taken marks the members this fetch's bytes were handed out for:
	// their pages are released once copied (releasable), so a second Get
	// of one reads it alone. releasable is false when members overlap
	// (a page of one may hold another's bytes), or the inner store
	// returned bytes of its own instead of filling buf.
	taken      []uint64
	releasable bool
	// members decodes the chunk's data for the samples in it, made by
	// the first Get to copy one out, when the dataset has an Unpacker.
	membersOnce sync.Once
	members     Members
	readers     int // Gets copying out of data now (unlocked)
	// speculative: fetched by Prefetch, and no Get has asked for it yet.
	speculative bool

	done chan struct{} // closed when the fetch ended
	buf  []byte        // the fetch's buffer, off the heap: freed or kept for reuse by recycleLocked
	file *spillFile    // when spilling, once written: the chunk's bytes; closed by recycleLocked
	// stageReaders counts the Gets copying from a spilling chunk's
	// staging buffer (data until the file is written): the fetch gives
	// the buffer back when none is left.
	stageReaders int
	data         []byte // after done, on success: buf's bytes (or the inner store's own)
	err          error  // after done, on failure
	waiters      int    // Gets waiting for the fetch
	cancel       context.CancelFunc
	gone         bool // removed from the cache (abandoned, failed, used up, evicted)
	elem         *list.Element
}

// NewPackedStore wraps inner to serve ds's packed samples. ds must not
// change while the store is in use.
func NewPackedStore(inner storage.Store, ds *Dataset, cfg PackedConfig) (*PackedStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(ds.Samples) > math.MaxInt32 {
		return nil, fmt.Errorf("dataset: packed store: %d samples, more than %d", len(ds.Samples), math.MaxInt32)
	}
	for i, s := range ds.Samples {
		if s.Object < 0 || int(s.Object) > len(ds.Objects) {
			return nil, fmt.Errorf("dataset: packed store: sample %d (%s): object ID %d outside the dataset's %d objects (a bug of the dataset's maker)", i, s.Key, s.Object, len(ds.Objects))
		}
	}
	p, err := newPackedStore(inner, &datasetCatalog{ds: ds}, cfg, ds.Unpacker)
	if err != nil {
		return nil, err
	}
	p.ds = ds
	return p, nil
}

// SamplePeeker is a Catalog that can tell a sample without blocking, when
// it is at hand (an IndexedManifest: its piece is loaded). A
// PackedStore over a catalog prefetches chunks only through it.
type SamplePeeker interface {
	Peek(i int64) (s Sample, object string, ok bool)
}

// Peek implements SamplePeeker.
func (c *datasetCatalog) Peek(i int64) (Sample, string, bool) {
	if i < 0 || i >= int64(len(c.ds.Samples)) {
		return Sample{}, "", false
	}
	s := c.ds.Samples[i]
	return s, c.ds.ObjectOf(s), true
}

// NewCatalogPackedStore is NewPackedStore over a catalog instead of the
// whole sample list: the lazy path of a packed dataset read through its
// manifest index (IndexedManifest). It plans chunks from the samples the
// catalog has at hand, reading the block's pieces of the manifest first
// when a Get needs them, and prefetches a chunk only when its samples
// are at hand (else it prefetches their pieces). Get by a packed
// sample's key is the inner store's (the sample list to look keys up in
// is what this path does without); the pipeline reads by index
// (GetSample).
func NewCatalogPackedStore(inner storage.Store, cat Catalog, cfg PackedConfig) (*PackedStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return newPackedStore(inner, cat, cfg, nil)
}

// newPackedStore makes the store; unpack is the dataset's Unpacker (nil:
// a sample's range is its bytes). A dataset with an Unpacker keeps its
// chunks in memory: SpillDir is not used.
func newPackedStore(inner storage.Store, cat Catalog, cfg PackedConfig, unpack Unpacker) (*PackedStore, error) {
	p := &PackedStore{inner: inner, src: cat, n: cat.Len(), cap: cfg.CacheBytes, unpack: unpack}
	if cfg.SpillDir != "" && unpack == nil {
		sp, err := newSpill(cfg.SpillDir, cfg.SpillStaging, time.Now)
		if err != nil {
			return nil, fmt.Errorf("dataset: packed store: %w", err)
		}
		p.spill = sp
	}
	switch c := cat.(type) {
	case *IndexedManifest:
		p.peek = c.placement // no key copied per sample planned or prefetched
	case SamplePeeker:
		p.peek = c.Peek
	default:
		p.peek = func(int64) (Sample, string, bool) { return Sample{}, "", false }
	}
	p.stageDone = sync.NewCond(&p.mu)
	p.block.Store(int64(cfg.Block))
	p.window.Store(int64(max(cfg.Window, 1)))
	p.mu.chunks = map[chunkKey]*chunk{}
	p.mu.served = map[chunkKey][]uint64{}
	p.mu.alone = map[chunkKey]bool{}
	p.mu.spans = map[chunkKey]int64{}
	p.mu.budget = max(cfg.Window, 1)
	return p, nil
}

// SetBlock changes the chunk block (PackedConfig.Block), for a node that
// learns the epoch order's block from the coordinator after it opened the
// dataset. Safe at any time: chunks already cached stay until used up or
// evicted.
func (p *PackedStore) SetBlock(block int) { p.block.Store(int64(max(block, 0))) }

// Block returns the current chunk block.
func (p *PackedStore) Block() int { return int(p.block.Load()) }

// SetWindow changes the order's window (PackedConfig.Window), for a node
// that learns it from the coordinator after it opened the dataset: the
// prefetch budget is at least a window's chunks from now on.
func (p *PackedStore) SetWindow(window int) {
	w := max(window, 1)
	p.window.Store(int64(w))
	p.mu.Lock()
	p.mu.budget = min(max(p.mu.budget, w), w*maxPrefetchWindows)
	p.mu.Unlock()
}

// Window returns the current window.
func (p *PackedStore) Window() int { return int(p.window.Load()) }

// Unwrap returns the store the packed samples are read from.
func (p *PackedStore) Unwrap() storage.Store { return p.inner }

// Stats returns the counters so far.
func (p *PackedStore) Stats() PackedStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.mu.stats
	s.CachedBytes = p.mu.used
	s.FreeBytes = p.mu.freeBytes
	s.ReadAlone = p.alone.Load()
	s.CacheBytes = p.cap
	if p.spill != nil {
		s.SpillStaging = int64(p.spill.stagingLimit())
	}
	return s
}

// Get implements Store: a packed sample's bytes, or the wrapped store's
// object for any other key.
func (p *PackedStore) Get(ctx context.Context, key string, dst []byte) ([]byte, error) {
	i, ok := p.lookup(key)
	if !ok {
		return p.inner.Get(ctx, key, dst)
	}
	s := p.ds.Samples[i]
	return p.getSample(ctx, int64(i), s, p.ds.ObjectOf(s), dst)
}

// GetSample implements SampleStore: sample index of the dataset, read
// without a lookup by key.
func (p *PackedStore) GetSample(ctx context.Context, index int64, key string, dst []byte) ([]byte, error) {
	return p.GetSampleLimit(ctx, index, key, -1, dst)
}

// sampleAt is sample index of the catalog, checked to be key.
func (p *PackedStore) sampleAt(ctx context.Context, index int64, key string) (Sample, string, error) {
	if index < 0 || index >= p.n {
		return Sample{}, "", fmt.Errorf("%w: packed store: sample %d is not %q: the dataset has %d samples (the store holds another dataset)", storage.ErrInvalidKey, index, key, p.n)
	}
	s, object, err := p.src.Sample(ctx, index)
	if err != nil {
		return Sample{}, "", err
	}
	if s.Key != key {
		return Sample{}, "", fmt.Errorf("%w: packed store: sample %d is %q, not %q (the store holds another dataset)", storage.ErrInvalidKey, index, s.Key, key)
	}
	return s, object, nil
}

// getSample reads packed sample i, s in object.
func (p *PackedStore) getSample(ctx context.Context, i int64, s Sample, object string, dst []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return dst[:0], err
	}
	ck, ok := p.chunkOf(i, s, object)
	if !ok {
		return p.getMember(ctx, s, object, dst)
	}

	p.mu.Lock()
	if p.mu.alone[ck] {
		p.mu.Unlock()
		return p.getMember(ctx, s, object, dst)
	}
	c := p.mu.chunks[ck]
	if c == nil {
		var atHand bool
		c, atHand = p.startLocked(ctx, ck, p.peek)
		if !atHand {
			// The block's samples are not all at hand (a lazy catalog
			// has not read their pieces, or holds fewer pieces than a
			// block straddles): read them, and plan from what was read.
			p.mu.Unlock()
			block := make([]blockSample, 0, ck.hi-ck.lo)
			for j := ck.lo; j < ck.hi; j++ {
				s, object, err := p.src.Sample(ctx, j)
				if err != nil {
					if ctx.Err() != nil {
						return dst[:0], ctx.Err()
					}
					break // that sample fails on its own Get; this one is read alone
				}
				block = append(block, blockSample{s, object})
			}
			at := func(j int64) (Sample, string, bool) {
				if b := j - ck.lo; b < int64(len(block)) {
					return block[b].s, block[b].object, true
				}
				return Sample{}, "", false
			}
			p.mu.Lock()
			if c = p.mu.chunks[ck]; c == nil && !p.mu.alone[ck] {
				c, _ = p.startLocked(ctx, ck, at)
			}
		}
		if c == nil { // not worth a chunk, or no room
			if !p.mu.alone[ck] {
				// No room: this sample is read alone, so a fetch of its
				// chunk later must not wait for it to be served.
				p.markServedLocked(ck, i)
			}
			p.mu.Unlock()
			return p.getMember(ctx, s, object, dst)
		}
	} else if c.speculative {
		c.speculative = false // a prefetch that paid
		p.mu.unread--
		p.mu.budget = min(p.mu.budget+1, int(p.window.Load())*maxPrefetchWindows)
	}
	select {
	case <-c.done:
		if c.err == nil {
			v, ok := p.serveLocked(c, i, s)
			p.mu.Unlock()
			if !ok {
				return p.getMember(ctx, s, object, dst)
			}
			return p.copyOutOrAlone(ctx, c, s, object, v, dst)
		}
	default:
	}
	c.waiters++
	p.mu.Unlock()

	select {
	case <-c.done:
	case <-ctx.Done():
		p.mu.Lock()
		p.leaveLocked(c)
		p.mu.Unlock()
		return dst[:0], ctx.Err()
	}
	p.mu.Lock()
	c.waiters--
	if c.err != nil {
		// The chunk failed: read this sample alone, so that its own
		// outcome (often fine: one bad member fails a whole span) is
		// what the pipeline sees.
		if c.gone {
			p.recycleLocked(c)
		}
		p.mu.Unlock()
		return p.getMember(ctx, s, object, dst)
	}
	v, ok := p.serveLocked(c, i, s)
	p.mu.Unlock()
	if !ok {
		return p.getMember(ctx, s, object, dst)
	}
	return p.copyOutOrAlone(ctx, c, s, object, v, dst)
}

// copyOutOrAlone is copyOut, and the sample read alone from the store
// when its spilled chunk's file cannot be read (counted in SpillErrors).
func (p *PackedStore) copyOutOrAlone(ctx context.Context, c *chunk, s Sample, object string, v view, dst []byte) ([]byte, error) {
	out, err := p.copyOut(c, s, v, dst)
	if err == nil || p.unpack != nil { // an unpacker's error is the data's: reading alone would meet it again
		return out, err
	}
	p.mu.Lock()
	p.mu.stats.SpillErrors++
	p.mu.Unlock()
	return p.getMember(ctx, s, object, dst)
}

// lookup returns the dataset index of the packed sample key; never on the
// lazy path.
func (p *PackedStore) lookup(key string) (int, bool) {
	if p.ds == nil {
		return 0, false
	}
	p.byKeyOnce.Do(func() {
		for i := range p.ds.Samples {
			if p.ds.Samples[i].Packed() {
				p.byKey = append(p.byKey, int32(i))
			}
		}
		p.byKey = slices.Clip(p.byKey)
		slices.SortFunc(p.byKey, func(a, b int32) int { return strings.Compare(p.ds.Samples[a].Key, p.ds.Samples[b].Key) })
	})
	j, ok := slices.BinarySearchFunc(p.byKey, key, func(i int32, key string) int {
		return strings.Compare(p.ds.Samples[i].Key, key)
	})
	if !ok {
		return 0, false
	}
	return int(p.byKey[j]), true
}

// chunkOf names the chunk of sample i under the current block; false when
// samples are read one by one (block 0 or 1, or no cache).
func (p *PackedStore) chunkOf(i int64, s Sample, object string) (chunkKey, bool) {
	b := p.block.Load()
	if b <= 1 || p.cap <= 0 {
		return chunkKey{}, false
	}
	lo := i / b * b
	ck := chunkKey{object: object, lo: lo, hi: min(lo+b, p.n)}
	if p.unpack != nil {
		ck.at = s.Offset
	}
	return ck, true
}

// getMember reads one packed sample with a ranged GET of its own.
func (p *PackedStore) getMember(ctx context.Context, s Sample, object string, dst []byte) ([]byte, error) {
	p.alone.Add(1)
	if p.unpack == nil {
		return p.inner.GetRange(ctx, object, s.Offset, s.Size, dst)
	}
	data, err := p.inner.GetRange(ctx, object, s.Offset, s.Size, nil)
	if err != nil {
		return dst[:0], err
	}
	if int64(len(data)) != s.Size {
		return dst[:0], fmt.Errorf("get range %s/%s [%d,+%d): got %d bytes: %w", p.inner, object, s.Offset, s.Size, len(data), storage.ErrRange)
	}
	m := p.unpack.Unpack(object, s.Offset, data)
	defer m.Release()
	b, err := m.Member(s)
	if err != nil {
		return dst[:0], err
	}
	return append(dst[:0], b...), nil
}

// copyOut appends the sample's bytes from its chunk's data to dst[:0]. It
// runs unlocked: a loaded chunk's data is not written while it has
// readers (serveLocked counted this one), and its buffer is recycled only
// once it has none.
//
// Then it gives the member's pages back to the kernel (the pages wholly
// inside its bytes; serveLocked took the member, so no other Get reads
// them): a chunk holds in memory only the members not yet served.
//
// A spilled chunk's member is read from its file instead (an error is
// the file's), or from the staging buffer while the file is being
// written.
func (p *PackedStore) copyOut(c *chunk, s Sample, v view, dst []byte) ([]byte, error) {
	at := s.Offset - c.off
	var err error
	var released int
	switch {
	case p.unpack != nil: // no spill: the chunk is in memory
		c.membersOnce.Do(func() { c.members = p.unpack.Unpack(c.key.object, c.off, v.data) })
		var b []byte
		if b, err = c.members.Member(s); err == nil {
			dst = append(dst[:0], b...)
		} else {
			dst = dst[:0]
		}
	case v.file != nil:
		dst, err = v.file.read(at, s.Size, dst)
	default:
		member := v.data[at : at+s.Size]
		dst = append(dst[:0], member...)
		if c.releasable && holdsPage(at, s.Size) {
			released, _ = offheap.ReleasePages(member) // an error leaves them resident: only memory
		}
	}
	p.mu.Lock()
	p.mu.stats.ReleasedBytes += int64(released)
	c.readers--
	if v.staged {
		if c.stageReaders--; c.stageReaders == 0 {
			p.stageDone.Broadcast() // the fetch may give its staging buffer back
		}
	}
	if c.gone {
		p.recycleLocked(c)
	}
	p.mu.Unlock()
	return dst, err
}

// view is where a Get copies its member from: a chunk's data (its
// buffer, or a spilling chunk's staging buffer: staged), or its file.
type view struct {
	data   []byte
	file   *spillFile
	staged bool
}

// recycleLocked keeps the buffer of the dropped chunk c for a later
// fetch, once nobody reads it, if it fits within the cache's bound; else
// it frees it (its pages go back to the kernel at once).
//
// A spilled chunk's file is closed instead, which frees its disk (off
// the lock: see spill.discard).
func (p *PackedStore) recycleLocked(c *chunk) {
	if c.readers > 0 || c.waiters > 0 {
		return // a Get still reads it, or will once it wakes up
	}
	if c.members != nil {
		// No Get copies from the decoded members now, and none will:
		// the chunk is gone.
		c.members.Release()
		c.members = nil
	}
	if c.file != nil {
		p.spill.discard(c.file)
		c.file = nil
	}
	if c.buf == nil {
		return
	}
	buf := c.buf[:0]
	c.buf, c.data = nil, nil
	if p.mu.closed || p.mu.used+p.mu.freeBytes+int64(cap(buf)) > p.cap {
		offheap.Free(buf)
		return
	}
	p.mu.free = append(p.mu.free, buf)
	p.mu.freeBytes += int64(cap(buf))
}

// freeBuffersLocked frees the free list's buffers from index j on.
func (p *PackedStore) freeBuffersLocked(j int) {
	for k := j; k < len(p.mu.free); k++ {
		p.mu.freeBytes -= int64(cap(p.mu.free[k]))
		offheap.Free(p.mu.free[k])
		p.mu.free[k] = nil
	}
	p.mu.free = p.mu.free[:j]
}

// bufferLocked returns a recycled buffer of at least size bytes (the
// smallest), or a new one; it also gives up free buffers as long as they
// would push the memory held past the cache's bound once this fetch's
// span is reserved. Buffers are off the Go heap (internal/offheap): the
// cache's bytes cost what they are, not the collector's twice, and a
// freed one's pages go back to the kernel.
func (p *PackedStore) bufferLocked(size int64) ([]byte, error) {
	best := -1
	for j, b := range p.mu.free {
		if int64(cap(b)) >= size && (best < 0 || cap(b) < cap(p.mu.free[best])) {
			best = j
		}
	}
	var out []byte
	if best >= 0 {
		out = p.mu.free[best]
		p.mu.free = append(p.mu.free[:best], p.mu.free[best+1:]...)
		p.mu.freeBytes -= int64(cap(out))
		p.mu.stats.Reused++
	} else {
		// Every free buffer is too small: chunks have grown (or these
		// were the short last shard's). Let them go rather than hold
		// memory no fetch can use, and make a new one with room to
		// spare, so that chunks of similar size share buffers.
		p.freeBuffersLocked(0)
		b, err := offheap.Alloc(int(bufferSize(size)))
		if err != nil {
			return nil, err
		}
		out = b[:0]
	}
	for len(p.mu.free) > 0 && p.mu.used+p.mu.freeBytes > p.cap {
		p.freeBuffersLocked(len(p.mu.free) - 1)
	}
	return out, nil
}

// bufferSize is the capacity of a new chunk buffer for a span of size
// bytes: an eighth more, in 64 KiB units, so that a buffer fits the
// chunks of similarly sized shards after it.
func bufferSize(size int64) int64 {
	const unit = 64 << 10
	return (size + size/8 + unit - 1) / unit * unit
}

// PrefetchSample implements SampleStore: it starts fetching the chunk of
// packed sample index, if it is not cached or being fetched and fits in
// the cache without evicting anything. It does nothing for other
// indices and never blocks on I/O.
func (p *PackedStore) PrefetchSample(index int64) {
	if index < 0 || index >= p.n {
		return
	}
	s, object, ok := p.peek(index)
	if !ok {
		p.src.Prefetch(index, index+1) // its piece of the manifest
		return
	}
	if !s.Packed() {
		return
	}
	ck, ok := p.chunkOf(index, s, object)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.chunks[ck] != nil || p.mu.alone[ck] || p.mu.unread >= p.mu.budget {
		return
	}
	if span, ok := p.mu.spans[ck]; ok && p.mu.used+2*span > p.cap {
		return // no room (see planLocked), known without planning again
	}
	c, atHand := p.planLocked(ck, false, p.peek)
	if !atHand {
		p.src.Prefetch(ck.lo, ck.hi)
		return
	}
	if c != nil && p.launchLocked(context.Background(), c) {
		c.speculative = true
		p.mu.unread++
		p.mu.stats.Prefetches++
	}
}

// startLocked plans the chunk ck and, if it is worth fetching whole and
// fits (evicting idle chunks as needed), reserves its bytes and starts its
// fetch; it returns nil otherwise, and atHand false when the block's
// samples are not at hand to plan with (see planLocked).
func (p *PackedStore) startLocked(ctx context.Context, ck chunkKey, at func(int64) (Sample, string, bool)) (c *chunk, atHand bool) {
	c, atHand = p.planLocked(ck, true, at)
	if c != nil && !p.launchLocked(ctx, c) {
		c = nil
	}
	return c, atHand
}

// planLocked plans the chunk ck: nil if it is not worth fetching whole or
// does not fit (with evict, after evicting every idle chunk; without,
// as things stand), from the block's samples as at gives them. atHand is
// false, and nothing planned, when at does not have one of them (a lazy
// catalog has not read its piece).
func (p *PackedStore) planLocked(ck chunkKey, evict bool, at func(int64) (Sample, string, bool)) (c *chunk, atHand bool) {
	if p.mu.closed || p.mu.alone[ck] {
		return nil, true
	}
	n := 0
	first, end, total := int64(-1), int64(0), int64(0)
	var spans [][2]int64 // the members' byte ranges, to find overlaps
	for j := ck.lo; j < ck.hi; j++ {
		s, object, ok := at(j)
		if !ok {
			return nil, false
		}
		if object != ck.object || !s.Packed() || (p.unpack != nil && s.Offset != ck.at) {
			continue
		}
		spans = append(spans, [2]int64{s.Offset, s.Offset + s.Size})
		n++
		if first < 0 || s.Offset < first {
			first = s.Offset
		}
		end = max(end, s.Offset+s.Size)
		total += s.Size
	}
	span := end - first
	if n < 2 || span > 2*total+int64(n)*sparseSlack || span > p.cap {
		p.markAloneLocked(ck)
		return nil, true
	}
	// Samples served while the chunk was not cached (evicted after
	// serving them, or read alone) are not waited for; if that is all of
	// them, a sample delivered again is read alone.
	served, left := p.mu.served[ck], n
	for _, w := range served {
		left -= bits.OnesCount64(w)
	}
	if left == 0 {
		return nil, true
	}
	if len(p.mu.spans) >= maxServedRecords {
		clear(p.mu.spans)
	}
	p.mu.spans[ck] = span
	if !evict && p.mu.used+2*span > p.cap {
		// A prefetch leaves room for one more chunk like it: the one a
		// Get needs now must not find the cache full of chunks that are
		// still being fetched (those cannot be evicted).
		return nil, true
	}
	if p.mu.used+span > p.cap {
		// Evict only if that makes room: chunks being fetched cannot
		// be evicted, and evicting loaded ones for nothing would only
		// make them be fetched again.
		var loaded int64
		for e := p.mu.lru.Front(); e != nil; e = e.Next() {
			loaded += e.Value.(*chunk).size
		}
		if p.mu.used-loaded+span > p.cap {
			p.mu.stats.Overflows++
			return nil, true
		}
	}
	for p.mu.used+span > p.cap {
		e := p.victimLocked()
		if e == nil {
			p.mu.stats.Overflows++
			return nil, true
		}
		p.evictLocked(e.Value.(*chunk))
	}
	if served != nil {
		delete(p.mu.served, ck)
	} else {
		served = make([]uint64, (ck.hi-ck.lo+63)/64)
	}
	slices.SortFunc(spans, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	disjoint := true
	for k := 1; k < len(spans); k++ {
		disjoint = disjoint && spans[k][0] >= spans[k-1][1]
	}
	words := (ck.hi - ck.lo + 63) / 64
	return &chunk{key: ck, off: first, size: span, n: n, served: served, left: left, taken: make([]uint64, words), releasable: disjoint, done: make(chan struct{})}, true
}

// launchLocked reserves the planned chunk c's bytes and starts its fetch,
// into a recycled buffer when there is one; false, and nothing started,
// when no buffer can be had (the system's mappings or memory are out):
// the caller reads the sample alone.
//
// A spilling store's chunk has no buffer: its fetch borrows a staging
// buffer (spill.load).
func (p *PackedStore) launchLocked(ctx context.Context, c *chunk) bool {
	var buf []byte
	if p.spill == nil {
		var err error
		if buf, err = p.bufferLocked(c.size); err != nil {
			p.mu.stats.Overflows++
			return false
		}
	} else {
		c.releasable = false // members are read from the file, as often as asked
	}
	c.buf = buf
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel
	p.mu.chunks[c.key] = c
	p.mu.used += c.size
	p.mu.stats.PeakBytes = max(p.mu.stats.PeakBytes, p.mu.used+p.mu.freeBytes)
	p.mu.stats.Chunks++
	p.mu.stats.ChunkBytes += c.size
	p.wg.Add(1)
	if p.spill != nil {
		go p.fetchSpilled(fctx, c)
	} else {
		go p.fetch(fctx, c, buf)
	}
	return true
}

// fetch reads c's span into buf (appending to buf[:0]) and publishes the
// outcome.
func (p *PackedStore) fetch(ctx context.Context, c *chunk, buf []byte) {
	defer p.wg.Done()
	object := c.key.object
	data, err := p.inner.GetRange(ctx, object, c.off, c.size, buf)
	if err == nil && int64(len(data)) != c.size {
		err = fmt.Errorf("get range %s/%s [%d,+%d): got %d bytes: %w", p.inner, object, c.off, c.size, len(data), storage.ErrRange)
	}
	c.cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	// Pages are released only from the buffer this store owns.
	c.releasable = c.releasable && err == nil && len(data) > 0 && cap(buf) > 0 && &data[0] == &buf[:1][0]
	p.loadedLocked(c, data, err)
}

// loadedLocked publishes the outcome of c's read: its bytes, or err.
func (p *PackedStore) loadedLocked(c *chunk, data []byte, err error) {
	c.data = data
	if err != nil {
		c.err = err
		if !c.gone { // else abandoned: nobody waits for the outcome
			p.mu.stats.ChunkFailures++
		}
		if errors.Is(err, storage.ErrRange) || errors.Is(err, storage.ErrNotFound) {
			// The shard is short or gone: that will not mend, and a
			// chunk read per sample would read it all again each time.
			p.markAloneLocked(c.key)
		}
		p.dropLocked(c) // the next Get tries again (or reads alone)
	} else if !c.gone {
		c.elem = p.mu.lru.PushFront(c)
	}
	if c.gone {
		p.recycleLocked(c)
	}
	close(c.done)
}

// fetchSpilled is fetch for a spilling store: it reads c's span into a
// staging buffer and publishes it at once, so the Gets waiting for the
// chunk copy their members out of memory, then writes the file while they
// do. Members asked for later are read from the file. The staging buffer
// goes back once the file is written and its last reader is done. A chunk
// whose every member was served from the staging buffer is not written.
// If the file cannot be written (a full disk), the chunk's other members
// are read alone, counted in SpillErrors.
func (p *PackedStore) fetchSpilled(ctx context.Context, c *chunk) {
	defer p.wg.Done()
	buf, took, err := p.spill.take(ctx, c.n)
	held := err == nil
	var data []byte
	if held {
		buf, data, err = p.spill.get(ctx, p.inner, c.key.object, c.off, c.size, buf)
	}
	c.cancel()
	p.mu.Lock()
	p.loadedLocked(c, data, err)
	usedUp := c.gone
	p.mu.Unlock()
	if !held {
		return
	}
	if err != nil {
		p.spill.give(buf, took)
		return
	}
	var f *spillFile
	var werr error
	if !usedUp {
		f, werr = createSpillFile(p.spill.dir, buf[:c.size])
	}
	p.mu.Lock()
	switch {
	case werr != nil:
		p.mu.stats.SpillErrors++
		p.markAloneLocked(c.key)
		p.dropLocked(c)
	case f != nil:
		c.file = f
		p.mu.stats.Spilled++
	}
	c.data = nil // Gets from now on read the file
	for c.stageReaders > 0 {
		p.stageDone.Wait()
	}
	if c.gone {
		p.recycleLocked(c)
	}
	p.mu.Unlock()
	p.spill.give(buf, took)
}

// serveLocked marks member i of the loaded chunk c served and returns the
// chunk's data, counting the caller as a reader until its copyOut; a
// chunk whose every member has been served is dropped. ok is false, and
// nothing counted, for a member already handed out from this fetch
// whose pages are (being) released: the caller reads it alone.
func (p *PackedStore) serveLocked(c *chunk, i int64, s Sample) (v view, ok bool) {
	if p.spill != nil && c.data == nil && c.file == nil {
		return view{}, false // its file could not be written (spillLoaded): read alone
	}
	b := i - c.key.lo
	if c.releasable && holdsPage(s.Offset-c.off, s.Size) {
		if c.taken[b/64]&(1<<(b%64)) != 0 {
			return view{}, false
		}
		c.taken[b/64] |= 1 << (b % 64)
	}
	p.mu.stats.Hits++
	if p.spill != nil {
		p.spill.served(1)
	}
	v = view{data: c.data, file: c.file, staged: c.file == nil && p.spill != nil}
	if v.staged {
		c.stageReaders++
	}
	c.readers++
	if c.served[b/64]&(1<<(b%64)) == 0 {
		c.served[b/64] |= 1 << (b % 64)
		c.left--
	}
	if c.left == 0 {
		p.dropLocked(c)
	} else if c.elem != nil {
		p.mu.lru.MoveToFront(c.elem)
	}
	return v, true
}

// holdsPage reports whether the bytes [at, at+n) of a chunk's buffer
// (which starts on a page) hold a whole page, which copyOut releases: a
// smaller member is left resident, and may be served again.
func holdsPage(at, n int64) bool {
	ps := int64(offheap.PageSize())
	return ps > 1 && (at+n)/ps*ps-(at+ps-1)/ps*ps >= ps
}

// leaveLocked is a Get giving up on c's fetch: the last one to leave
// cancels it and forgets the chunk, so a later Get starts afresh rather
// than inherit a cancelled fetch.
func (p *PackedStore) leaveLocked(c *chunk) {
	c.waiters--
	select {
	case <-c.done:
		if c.gone {
			p.recycleLocked(c)
		}
		return
	default:
	}
	if c.waiters == 0 {
		c.cancel()
		p.dropLocked(c)
	}
}

// victimLocked picks the loaded chunk to evict: the least recently used
// one nobody has read from yet (a prefetch), else the least recently used
// one. Dropping a prefetched chunk costs what not prefetching would have:
// its rank fetches it when it gets there. Dropping a chunk a rank is
// reading makes that rank fetch it again at once, and take room from the
// next one: under pressure that cascades into every rank re-reading.
func (p *PackedStore) victimLocked() *list.Element {
	for e := p.mu.lru.Back(); e != nil; e = e.Prev() {
		if c := e.Value.(*chunk); c.left == c.n {
			return e
		}
	}
	return p.mu.lru.Back()
}

// markAloneLocked records that ck's samples are read one by one.
func (p *PackedStore) markAloneLocked(ck chunkKey) {
	if len(p.mu.alone) >= maxServedRecords {
		clear(p.mu.alone) // forgetting costs a plan, or one failed fetch
	}
	p.mu.alone[ck] = true
}

// maxServedRecords bounds PackedStore.mu.served (and mu.alone). A record outlives its
// use only when an evicted chunk's other samples never come (their lease
// went to another node); forgetting them all costs at most one extra
// fetch per chunk.
const maxServedRecords = 1 << 14

// evictLocked drops the loaded chunk c to make room, remembering which of
// its samples were served.
func (p *PackedStore) evictLocked(c *chunk) {
	p.mu.stats.Evictions++
	if c.speculative {
		p.mu.budget = max(p.mu.budget/2, 1) // a prefetch wasted
	}
	if c.left > 0 && c.left < c.n {
		if len(p.mu.served) >= maxServedRecords {
			clear(p.mu.served)
		}
		p.mu.served[c.key] = c.served
	}
	p.dropLocked(c)
}

// markServedLocked records that sample i of the chunk ck was served
// without ck being cached (evicted after serving it, or read alone).
func (p *PackedStore) markServedLocked(ck chunkKey, i int64) {
	bits := p.mu.served[ck]
	if bits == nil {
		if len(p.mu.served) >= maxServedRecords {
			clear(p.mu.served)
		}
		bits = make([]uint64, (ck.hi-ck.lo+63)/64)
		p.mu.served[ck] = bits
	}
	b := i - ck.lo
	bits[b/64] |= 1 << (b % 64)
}

// dropLocked removes c from the cache and releases its bytes. Gets that
// waited for it still read its data; the buffer is recycled after them
// (or at once, if nobody reads it, or when its fetch ends).
func (p *PackedStore) dropLocked(c *chunk) {
	if c.gone {
		return
	}
	c.gone = true
	if c.speculative {
		c.speculative = false
		p.mu.unread--
	}
	if p.mu.chunks[c.key] == c {
		delete(p.mu.chunks, c.key)
	}
	if c.elem != nil {
		p.mu.lru.Remove(c.elem)
		c.elem = nil
	}
	p.mu.used -= c.size
	select {
	case <-c.done:
		p.recycleLocked(c)
	default: // fetch still running: it recycles when it ends
	}
}

// Close cancels the chunk fetches still running, waits for them, drops
// every chunk (its buffer is freed once no Get copies from it), and
// closes the wrapped store if it is an io.Closer. Gets after Close read
// every sample alone.
func (p *PackedStore) Close() error {
	p.mu.Lock()
	p.mu.closed = true
	p.freeBuffersLocked(0)
	for _, c := range p.mu.chunks {
		if c.cancel != nil {
			c.cancel()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.mu.Lock()
	for _, c := range p.mu.chunks {
		p.dropLocked(c)
	}
	p.mu.Unlock()
	if p.spill != nil {
		p.spill.close() // every fetch has ended: no load holds a buffer
	}
	return storage.Close(p.inner)
}

// List implements Store by passing through.
func (p *PackedStore) List(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	return p.inner.List(ctx, prefix, fn)
}

// ListPrefixes implements PrefixLister by passing through.
func (p *PackedStore) ListPrefixes(ctx context.Context, prefix string) ([]string, error) {
	return storage.ListPrefixes(ctx, p.inner, prefix)
}

// GetRange implements Store by passing through.
func (p *PackedStore) GetRange(ctx context.Context, key string, off, length int64, dst []byte) ([]byte, error) {
	return p.inner.GetRange(ctx, key, off, length, dst)
}

// Stat implements Store by passing through.
func (p *PackedStore) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	return p.inner.Stat(ctx, key)
}

// Put implements Store by passing through.
func (p *PackedStore) Put(ctx context.Context, key string, data []byte, c storage.Cond) (string, error) {
	return p.inner.Put(ctx, key, data, c)
}

// Delete implements Store by passing through.
func (p *PackedStore) Delete(ctx context.Context, key string) error {
	return p.inner.Delete(ctx, key)
}

// String names the wrapped store.
func (p *PackedStore) String() string { return p.inner.String() }
