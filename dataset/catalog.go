package dataset

import (
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"path"
	"sync"

	"github.com/longshore/longshore/internal/offheap"
	"github.com/longshore/longshore/storage"
)

// Catalog is a dataset's samples looked up by index: what a node needs
// of the manifest for the samples its leases touch. A *Dataset serves
// one from memory (DatasetCatalog); an IndexedManifest reads the pieces
// of the manifest that hold the samples asked for, through the manifest
// index, into a cache bounded in bytes.
//
// Implementations are safe for concurrent use. Sample may block on I/O
// (honouring ctx); Prefetch never blocks.
type Catalog interface {
	// Len is the number of samples.
	Len() int64
	// Classes are the label names (Dataset.Classes).
	Classes() []string
	// Digest is the dataset's ManifestDigest.
	Digest() string
	// Sample returns sample i and, for a packed one, the key of its
	// object ("" for a plain sample). s.Object means nothing outside the
	// call: only the returned key names the object.
	Sample(ctx context.Context, i int64) (s Sample, object string, err error)
	// Prefetch hints that samples [lo, hi) will be asked for soon.
	Prefetch(lo, hi int64)
}

var (
	_ Catalog      = (*datasetCatalog)(nil)
	_ Catalog      = (*IndexedManifest)(nil)
	_ FieldCatalog = (*datasetCatalog)(nil)
	_ FieldCatalog = (*IndexedManifest)(nil)
	_ SamplePeeker = (*datasetCatalog)(nil)
	_ SamplePeeker = (*IndexedManifest)(nil)
)

// DatasetCatalog serves ds from memory; its digest is computed once, on
// the first Digest. ds must not change while it is in use.
func DatasetCatalog(ds *Dataset) Catalog { return &datasetCatalog{ds: ds} }

// InMemory reports whether c serves its samples from memory
// (DatasetCatalog): Sample never blocks.
func InMemory(c Catalog) bool {
	_, ok := c.(*datasetCatalog)
	return ok
}

type datasetCatalog struct {
	ds     *Dataset
	once   sync.Once
	digest string
}

func (c *datasetCatalog) Len() int64        { return int64(len(c.ds.Samples)) }
func (c *datasetCatalog) Classes() []string { return c.ds.Classes }
func (c *datasetCatalog) Digest() string {
	c.once.Do(func() { c.digest = ManifestDigest(c.ds) })
	return c.digest
}
func (c *datasetCatalog) Prefetch(lo, hi int64) {}
func (c *datasetCatalog) Schema() Schema        { return c.ds.Fields.Schema() }
func (c *datasetCatalog) Fields(_ context.Context, i int64) ([]Value, error) {
	if i < 0 || i >= int64(len(c.ds.Samples)) {
		return nil, fmt.Errorf("dataset: catalog: sample %d outside [0, %d)", i, len(c.ds.Samples))
	}
	return c.ds.Fields.Row(int(i)), nil
}
func (c *datasetCatalog) Sample(_ context.Context, i int64) (Sample, string, error) {
	if i < 0 || i >= int64(len(c.ds.Samples)) {
		return Sample{}, "", fmt.Errorf("dataset: catalog: sample %d outside [0, %d)", i, len(c.ds.Samples))
	}
	s := c.ds.Samples[i]
	return s, c.ds.ObjectOf(s), nil
}

// IndexedConfig configures an IndexedManifest. The zero value is valid.
type IndexedConfig struct {
	// CacheBytes bounds the decoded pieces kept (--manifest-cache); 0
	// means DefaultManifestCache. A piece being read counts against it,
	// and makes room by evicting loaded pieces; pieces being read are
	// not evicted, so with a bound smaller than Fetches+1 pieces the
	// cache holds up to that many.
	CacheBytes int64
	// Fetches bounds the pieces read at once by Prefetch; 0 means 4.
	Fetches int
}

// DefaultManifestCache is the default IndexedConfig.CacheBytes: a lease
// of a window (128 blocks of 16) touches 130-230 pieces of 1024 samples,
// 8-14 MB decoded, so 32 MiB holds about two leases' pieces: the one a
// rank reads and the next (docs/scale.md on sizing it).
const DefaultManifestCache = 32 << 20

// IndexedManifest is a Catalog over a manifest and its index: the node's
// lazy path. It holds the index (12 bytes a piece) and a bounded cache
// of decoded pieces; a sample's piece is read with one ranged GET the
// first time one of its samples is asked for (or prefetched), checked
// against the index's checksum (ErrStaleIndex if it changed) and parsed.
// Close stops the reads in flight and waits for them.
type IndexedManifest struct {
	s      storage.Store
	x      *ManifestIndex
	prefix string
	cap    int64
	sem    chan struct{} // Prefetch's reads in flight
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     struct {
		sync.Mutex
		pieces map[int]*catalogPiece
		lru    list.List // loaded pieces, most recently used first
		used   int64
		closed bool
		stats  CatalogStats
	}
}

// CatalogStats counts an IndexedManifest's work.
type CatalogStats struct {
	Reads      int64 // pieces read (ranged GETs)
	ReadBytes  int64
	Prefetches int64 // of Reads, started by Prefetch
	Hits       int64 // Sample calls served from a loaded piece
	Waits      int64 // Sample calls that waited for a read
	Evictions  int64
	CacheBytes int64 // decoded pieces held or being read now
	Pieces     int   // held now
	// PackedSamples and PackedBytes total the packed samples of the
	// pieces read (a piece read again counts again): their mean size is
	// the dataset's, as far as it has been read.
	PackedSamples, PackedBytes int64
}

type catalogPiece struct {
	index   int
	done    chan struct{}
	recs    compactPiece // after done, on success; freed on eviction
	err     error
	cost    int64
	elem    *list.Element
	waiters int
}

// compactPiece holds a decoded piece's samples off the Go heap
// (internal/offheap), so that a cache of B bytes costs B and not the
// collector's 2B: a record a sample, then the keys back to back. A
// plain piece's record is the key's end and the label (8 bytes); a
// piece with packed samples adds the object, offset and size (28).
// Keys are copied out (Sample), never pointed into: the buffer is
// freed when the piece is evicted.
type compactPiece struct {
	data    []byte
	heap    bool // data is a heap slice: the mapping failed (see newCompactPiece)
	n       int
	rec     int      // record size
	objects []string // ObjectID i is objects[i-1], on the heap
	fields  *Fields  // the samples' fields, on the heap; nil without
}

const (
	plainRecord  = 8
	packedRecord = 28
)

// newCompactPiece encodes ds's samples.
func newCompactPiece(ds *Dataset) (compactPiece, error) {
	c := compactPiece{n: len(ds.Samples), rec: plainRecord, objects: ds.Objects, fields: ds.Fields}
	if ds.Packed() {
		c.rec = packedRecord
	}
	keys := 0
	for _, s := range ds.Samples {
		keys += len(s.Key)
	}
	if int64(keys) > math.MaxUint32 {
		return compactPiece{}, fmt.Errorf("a piece of %d bytes of keys: more than a piece may hold", keys)
	}
	size := max(c.n*c.rec+keys, 1)
	data, err := offheap.Alloc(size)
	if err != nil {
		// Out of mappings (vm.max_map_count: a huge cache of tiny
		// pieces) or memory: the piece is as good on the heap, only
		// counted twice by the collector.
		data, c.heap = make([]byte, size), true
	}
	c.data = data
	at, end := c.n*c.rec, uint32(0)
	le := binary.LittleEndian
	for i, s := range ds.Samples {
		end += uint32(len(s.Key))
		r := data[i*c.rec:]
		le.PutUint32(r, end)
		le.PutUint32(r[4:], uint32(s.Label))
		if c.rec == packedRecord {
			le.PutUint32(r[8:], uint32(s.Object))
			le.PutUint64(r[12:], uint64(s.Offset))
			le.PutUint64(r[20:], uint64(s.Size))
		}
		at += copy(data[at:], s.Key)
	}
	return c, nil
}

// sample decodes sample j of the piece and its object's key ("" if
// plain); its key is a copy, and with withKey false it is left empty
// (planning reads only where a sample lies: no copy to make).
func (c compactPiece) sample(j int, withKey bool) (Sample, string) {
	le := binary.LittleEndian
	r := c.data[j*c.rec:]
	s := Sample{Label: int32(le.Uint32(r[4:]))}
	if withKey {
		start := uint32(0)
		if j > 0 {
			start = le.Uint32(c.data[(j-1)*c.rec:])
		}
		s.Key = string(c.data[c.n*c.rec:][start:le.Uint32(r)])
	}
	if c.rec != packedRecord {
		return s, ""
	}
	s.Object = ObjectID(int32(le.Uint32(r[8:])))
	s.Offset, s.Size = int64(le.Uint64(r[12:])), int64(le.Uint64(r[20:]))
	if s.Object == NoObject {
		return s, ""
	}
	return s, c.objects[s.Object-1]
}

// cost is what the piece holds: its buffer, its fields and its
// objects' keys.
func (c compactPiece) cost() int64 {
	n := int64(cap(c.data)) + c.fields.Bytes()
	for _, o := range c.objects {
		n += int64(len(o)) + 16
	}
	return n
}

// free returns the piece's buffer.
func (c *compactPiece) free() {
	if c.data != nil && !c.heap {
		offheap.Free(c.data)
	}
	c.data, c.fields = nil, nil
}

// OpenIndexedManifest reads the index of the manifest at key (IndexKey)
// and checks that it still describes the manifest: the last piece's
// checksum, and that the manifest ends where the index says. Errors:
// ErrNotFound without an index, ErrBadIndex, ErrStaleIndex.
func OpenIndexedManifest(ctx context.Context, s storage.Store, key string, cfg IndexedConfig) (*IndexedManifest, error) {
	x, err := ReadManifestIndex(ctx, s, key)
	if err != nil {
		return nil, err
	}
	return OpenIndex(ctx, s, x, cfg)
}

// ReadManifestIndex reads and checks the index beside manifest key (one
// GET; ErrNotFound, wrapped, when there is none). Its Layout tells a
// caller which path to take before any of the manifest is read.
func ReadManifestIndex(ctx context.Context, s storage.Store, key string) (*ManifestIndex, error) {
	data, err := s.Get(ctx, IndexKey(key), nil)
	if err != nil {
		return nil, fmt.Errorf("manifest index %s: %w", IndexKey(key), err)
	}
	x, err := ParseManifestIndex(data)
	if err != nil {
		return nil, fmt.Errorf("manifest index %s: %w", IndexKey(key), err)
	}
	if x.Manifest != key {
		return nil, fmt.Errorf("manifest index %s: %w: made for %s", IndexKey(key), ErrStaleIndex, x.Manifest)
	}
	if x.Pieces() == 0 {
		return nil, fmt.Errorf("manifest index %s: holds only totals (made with --every 0): rebuild it with longshore-manifest --index: %w", IndexKey(key), ErrBadIndex)
	}
	return x, nil
}

// OpenIndex opens the manifest that index x (from ReadManifestIndex on
// the same store) describes: it checks that the manifest has neither
// grown nor changed at its end, and then reads pieces as they are asked
// for.
func OpenIndex(ctx context.Context, s storage.Store, x *ManifestIndex, cfg IndexedConfig) (*IndexedManifest, error) {
	if cfg.CacheBytes < 0 || cfg.Fetches < 0 {
		return nil, fmt.Errorf("dataset: indexed manifest: CacheBytes %d and Fetches %d must not be negative", cfg.CacheBytes, cfg.Fetches)
	}
	key := x.Manifest
	m := &IndexedManifest{s: s, x: x, cap: cfg.CacheBytes}
	if m.cap == 0 {
		m.cap = DefaultManifestCache
	}
	m.sem = make(chan struct{}, max(cfg.Fetches, 4))
	if cfg.Fetches > 0 {
		m.sem = make(chan struct{}, cfg.Fetches)
	}
	if dir := path.Dir(key); dir != "." {
		m.prefix = dir + "/"
	}
	m.mu.pieces = map[int]*catalogPiece{}
	m.ctx, m.cancel = context.WithCancel(context.Background())

	// The manifest must not have grown: a byte past its indexed end is
	// out of range.
	if _, err := s.GetRange(ctx, key, x.Size(), 1, nil); err == nil {
		m.cancel()
		return nil, fmt.Errorf("manifest index %s: %w: the manifest is longer than the %d bytes indexed: rebuild it with longshore-manifest --index", IndexKey(key), ErrStaleIndex, x.Size())
	} else if !errors.Is(err, storage.ErrRange) {
		m.cancel()
		return nil, fmt.Errorf("manifest %s: %w", key, err)
	}
	// Nor changed at its end (nor shrunk): the last piece's checksum.
	if _, _, err := m.Sample(ctx, x.Samples-1); err != nil {
		m.cancel()
		return nil, err
	}
	return m, nil
}

// Index returns the manifest's index.
func (m *IndexedManifest) Index() *ManifestIndex { return m.x }

// Len implements Catalog.
func (m *IndexedManifest) Len() int64 { return m.x.Samples }

// Classes implements Catalog.
func (m *IndexedManifest) Classes() []string { return m.x.Classes }

// Digest implements Catalog.
func (m *IndexedManifest) Digest() string { return m.x.Digest }

// Schema implements FieldCatalog: the index's schema.
func (m *IndexedManifest) Schema() Schema { return m.x.Schema }

// Fields implements FieldCatalog: sample i's fields, from its piece
// (read as Sample reads it), laid out by the index's schema.
func (m *IndexedManifest) Fields(ctx context.Context, i int64) ([]Value, error) {
	var row []Value
	err := m.withPiece(ctx, i, func(p *compactPiece, j int) error {
		if p.fields == nil {
			if len(m.x.Schema) == 0 {
				return nil
			}
			row = make([]Value, len(m.x.Schema))
			return nil
		}
		var err error
		row, err = p.fields.RowIn(j, m.x.Schema)
		if err != nil {
			return fmt.Errorf("manifest %s: sample %d: %w: %w", m.x.Manifest, i, ErrStaleIndex, err)
		}
		return nil
	})
	return row, err
}

// Stats returns the counters so far.
func (m *IndexedManifest) Stats() CatalogStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.mu.stats
	s.CacheBytes, s.Pieces = m.mu.used, m.mu.lru.Len()
	return s
}

// Sample implements Catalog.
func (m *IndexedManifest) Sample(ctx context.Context, i int64) (Sample, string, error) {
	var s Sample
	var object string
	err := m.withPiece(ctx, i, func(p *compactPiece, j int) error {
		s, object = p.sample(j, true)
		return nil
	})
	return s, object, err
}

// withPiece calls fn, with m.mu held, with the loaded piece of sample i
// and i's place in it, reading the piece first if it must.
func (m *IndexedManifest) withPiece(ctx context.Context, i int64, fn func(p *compactPiece, j int) error) error {
	if i < 0 || i >= m.x.Samples {
		return fmt.Errorf("dataset: manifest %s: sample %d outside [0, %d)", m.x.Manifest, i, m.x.Samples)
	}
	k := int(i / int64(m.x.Every))
	m.mu.Lock()
	for {
		p := m.mu.pieces[k]
		if p == nil {
			p = m.startLocked(k, false)
			if p == nil {
				m.mu.Unlock()
				return fmt.Errorf("dataset: manifest %s: closed", m.x.Manifest)
			}
		}
		select {
		case <-p.done:
			m.mu.stats.Hits++
		default:
			m.mu.stats.Waits++
			p.waiters++
			m.mu.Unlock()
			select {
			case <-p.done:
			case <-ctx.Done():
				m.mu.Lock()
				p.waiters--
				m.mu.Unlock()
				return ctx.Err()
			}
			m.mu.Lock()
			p.waiters--
		}
		if p.err != nil {
			m.mu.Unlock()
			return p.err
		}
		if p.recs.data == nil {
			continue // evicted between its read and this wake-up: again
		}
		if p.elem != nil {
			m.mu.lru.MoveToFront(p.elem)
		}
		err := fn(&p.recs, int(i-int64(k)*int64(m.x.Every)))
		m.mu.Unlock()
		return err
	}
}

// Peek implements SamplePeeker: sample i, if its piece is loaded; it
// never blocks on I/O.
func (m *IndexedManifest) Peek(i int64) (Sample, string, bool) { return m.peek(i, true) }

// placement is Peek without the key (Sample.Key empty): where sample i
// lies, for a PackedStore planning chunks, with no key copied.
func (m *IndexedManifest) placement(i int64) (Sample, string, bool) { return m.peek(i, false) }

func (m *IndexedManifest) peek(i int64, withKey bool) (Sample, string, bool) {
	if i < 0 || i >= m.x.Samples {
		return Sample{}, "", false
	}
	k := int(i / int64(m.x.Every))
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.mu.pieces[k]
	if p == nil || p.elem == nil { // not read, being read, or failed
		return Sample{}, "", false
	}
	m.mu.lru.MoveToFront(p.elem)
	s, object := p.recs.sample(int(i-int64(k)*int64(m.x.Every)), withKey)
	return s, object, true
}

// Prefetch implements Catalog: it starts reading the pieces of [lo, hi)
// not held or being read, as many as Fetches allows now (it never
// waits for room).
func (m *IndexedManifest) Prefetch(lo, hi int64) {
	lo, hi = max(lo, 0), min(hi, m.x.Samples)
	if lo >= hi {
		return
	}
	every := int64(m.x.Every)
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := int(lo / every); k <= int((hi-1)/every); k++ {
		if m.mu.pieces[k] != nil {
			continue
		}
		if m.startLocked(k, true) == nil {
			return
		}
	}
}

// startLocked starts reading piece k; nil when closed, or for a
// prefetch, when Fetches reads are in flight.
func (m *IndexedManifest) startLocked(k int, prefetch bool) *catalogPiece {
	if m.mu.closed {
		return nil
	}
	if prefetch {
		select {
		case m.sem <- struct{}{}:
		default:
			return nil
		}
		m.mu.stats.Prefetches++
	}
	size := m.x.Offsets[k+1] - m.x.Offsets[k]
	p := &catalogPiece{index: k, done: make(chan struct{}), cost: 2 * size}
	m.mu.pieces[k] = p
	m.mu.used += p.cost
	m.mu.stats.Reads++
	m.mu.stats.ReadBytes += size
	m.evictLocked(p)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if prefetch {
			defer func() { <-m.sem }()
		}
		ds, err := m.read(k)
		var recs compactPiece
		if err == nil {
			if recs, err = newCompactPiece(ds); err != nil {
				err = fmt.Errorf("manifest %s: piece %d: %w", m.x.Manifest, k, err)
			}
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		p.recs, p.err = recs, err
		if err != nil {
			delete(m.mu.pieces, k) // the next Sample reads it again
			m.mu.used -= p.cost
		} else if m.mu.closed {
			// Close is waiting for this read: it must not stay behind.
			p.recs.free()
			p.err = fmt.Errorf("dataset: manifest %s: closed", m.x.Manifest)
			delete(m.mu.pieces, k)
			m.mu.used -= p.cost
		} else {
			cost := recs.cost()
			for _, s := range ds.Samples {
				if s.Packed() {
					m.mu.stats.PackedSamples++
					m.mu.stats.PackedBytes += s.Size
				}
			}
			m.mu.used += cost - p.cost
			p.cost = cost
			p.elem = m.mu.lru.PushFront(p)
			m.evictLocked(p)
		}
		close(p.done)
	}()
	return p
}

// evictLocked drops the least recently used loaded pieces but keep while
// the cache is over its bound.
func (m *IndexedManifest) evictLocked(keep *catalogPiece) {
	for e := m.mu.lru.Back(); e != nil && m.mu.used > m.cap; {
		prev := e.Prev()
		if p := e.Value.(*catalogPiece); p != keep {
			m.mu.lru.Remove(e)
			p.elem = nil
			p.recs.free() // nobody reads it: reads hold mu
			delete(m.mu.pieces, p.index)
			m.mu.used -= p.cost
			m.mu.stats.Evictions++
		}
		e = prev
	}
}

// read reads and parses piece k.
func (m *IndexedManifest) read(k int) (*Dataset, error) {
	off, end := m.x.Offsets[k], m.x.Offsets[k+1]
	raw, err := m.s.GetRange(m.ctx, m.x.Manifest, off, end-off, nil)
	if err != nil {
		if errors.Is(err, storage.ErrRange) {
			return nil, fmt.Errorf("manifest %s: piece %d [%d,%d): %w: the manifest is shorter than indexed (%v): rebuild the index with longshore-manifest --index", m.x.Manifest, k, off, end, ErrStaleIndex, err)
		}
		return nil, fmt.Errorf("manifest %s: piece %d: %w", m.x.Manifest, k, err)
	}
	if int64(len(raw)) != end-off || crc32.Checksum(raw, castagnoli) != m.x.Sums[k] {
		return nil, fmt.Errorf("manifest %s: piece %d [%d,%d): %w: its bytes changed since the index was made: rebuild it with longshore-manifest --index", m.x.Manifest, k, off, end, ErrStaleIndex)
	}
	resolve := classResolver(m.x.Classes)
	if m.x.IntegerLabels {
		n := int64(len(m.x.Classes))
		resolve = func(text string, number bool) (int32, error) {
			v, ok := parseDecimal([]byte(text))
			if !number || !ok || v < 0 || v >= n {
				return 0, fmt.Errorf("not one of the index's %d integer classes: %w", n, ErrStaleIndex)
			}
			return int32(v), nil
		}
	}
	ds, err := parsePiece(raw, m.x.Format, m.prefix, k > 0, m.x.Every, resolve)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: piece %d: %w", m.x.Manifest, k, err)
	}
	want := m.x.Every
	if k == m.x.Pieces()-1 {
		want = int(m.x.Samples - int64(k)*int64(m.x.Every))
	}
	if len(ds.Samples) != want {
		return nil, fmt.Errorf("manifest %s: piece %d: %d samples, the index says %d: %w", m.x.Manifest, k, len(ds.Samples), want, ErrStaleIndex)
	}
	return ds, nil
}

// Close stops the reads in flight, waits for them and drops the cache.
func (m *IndexedManifest) Close() error {
	m.mu.Lock()
	m.mu.closed = true
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	m.mu.Lock()
	for _, p := range m.mu.pieces {
		p.recs.free()
	}
	m.mu.pieces = map[int]*catalogPiece{}
	m.mu.lru.Init()
	m.mu.used = 0
	m.mu.Unlock()
	return nil
}
