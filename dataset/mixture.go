package dataset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/longshore/longshore/storage"
)

// MixtureSource is one source of a MixtureCatalog: a dataset opened on
// its own store (Open: a PackedStore for a packed one), under a name.
type MixtureSource struct {
	// Name names the source: its samples' keys are "<Name>/<key>" in the
	// mixture. Unique, without "/".
	Name string
	// Catalog gives the source's samples (DatasetCatalog or an
	// IndexedManifest).
	Catalog Catalog
	// Store reads them, by the source's own keys and indices.
	Store storage.Store
	// BudgetWeight is the source's part of the node's request rates
	// (RateParts): of its share of a job-wide store request budget
	// (node.StoreBudget) and of its own cap (--store-rps), split among
	// the sources whose stores take one in proportion to it; 0 for every
	// source: equal parts.
	BudgetWeight float64
}

// MixtureCatalog is several datasets as one index space, for a
// weighted mixture (cluster.Mixture): source s, in the order given, owns
// the global indices [Offset(s), Offset(s)+Len_s). A global sample is
// the source's own with
//
//   - its key (and a packed sample's object key) prefixed with
//     "<name>/", so keys stay unique across sources and MixtureStore
//     routes them back;
//   - its label offset by the classes of the sources before it, so that
//     Classes, "<name>/<class>" for each source's classes in order, names
//     every label.
//
// Its digest covers each source (name and digest, in order) and the
// mixture's identity (cluster.Mixture.Identity: sizes, round, weights and
// schedule), so that a journal or a resume token made under other weights
// names another dataset, of the same count: refused on resume unless
// forced, as another dataset is (docs/resume.md).
type MixtureCatalog struct {
	srcs     []MixtureSource
	offsets  []int64
	classOff []int32
	classes  []string
	total    int64
	ident    string
	digest   string
	byName   map[string]int
	store    storage.Store
	looked   []atomic.Int64 // per source: samples Sample returned
}

var _ Catalog = (*MixtureCatalog)(nil)

// NewMixtureCatalog joins sources into one catalog; identity is the
// mixture's (cluster.Mixture.Identity), which the digest covers. The
// catalog owns the sources' catalogs and stores: Close closes them.
func NewMixtureCatalog(sources []MixtureSource, identity string) (*MixtureCatalog, error) {
	if len(sources) == 0 {
		return nil, errors.New("dataset: mixture: no sources")
	}
	c := &MixtureCatalog{srcs: slices.Clone(sources), ident: identity, byName: map[string]int{}}
	for i, s := range sources {
		if s.Name == "" || strings.Contains(s.Name, "/") {
			return nil, fmt.Errorf("dataset: mixture: source name %q: want a non-empty name without /", s.Name)
		}
		if _, dup := c.byName[s.Name]; dup {
			return nil, fmt.Errorf("dataset: mixture: source %q named twice", s.Name)
		}
		if s.Catalog == nil || s.Store == nil {
			return nil, fmt.Errorf("dataset: mixture: source %q: no catalog or store", s.Name)
		}
		c.byName[s.Name] = i
		c.offsets = append(c.offsets, c.total)
		c.classOff = append(c.classOff, int32(len(c.classes)))
		for _, cl := range s.Catalog.Classes() {
			c.classes = append(c.classes, s.Name+"/"+cl)
		}
		c.total += s.Catalog.Len()
	}
	c.looked = make([]atomic.Int64, len(sources))
	c.digest = MixtureDigest(identity, c.digestSources())
	c.store = newMixtureStore(c)
	return c, nil
}

// MixtureDigestSource is what a mixture's digest covers of one source.
type MixtureDigestSource struct {
	Name    string
	Samples int64
	Digest  string // the source's own (ManifestDigest, an index's)
}

// MixtureDigest is the digest of a mixture of identity over sources, in
// order: "<count>:<hash>", count the sources' samples together. It is
// MixtureCatalog.Digest, for a coordinator that knows each source's
// count and digest without opening its catalog.
func MixtureDigest(identity string, sources []MixtureDigestSource) string {
	h := uint64(14695981039346656037) // FNV-1a 64, as ManifestDigest
	add := func(s string) {
		for i := 0; i <= len(s); i++ {
			b := byte(0) // each field ends with a NUL
			if i < len(s) {
				b = s[i]
			}
			h ^= uint64(b)
			h *= 1099511628211
		}
	}
	add("mixture")
	add(identity)
	var total int64
	for _, s := range sources {
		add(s.Name)
		add(s.Digest)
		total += s.Samples
	}
	return fmt.Sprintf("%d:%016x", total, h)
}

func (c *MixtureCatalog) digestSources() []MixtureDigestSource {
	out := make([]MixtureDigestSource, len(c.srcs))
	for i, s := range c.srcs {
		out[i] = MixtureDigestSource{Name: s.Name, Samples: s.Catalog.Len(), Digest: s.Catalog.Digest()}
	}
	return out
}

// DigestFor is the digest the catalog would have under another identity
// (a cluster node learns the mixture's round with the coordinator's job).
func (c *MixtureCatalog) DigestFor(identity string) string {
	return MixtureDigest(identity, c.digestSources())
}

// Len is the sources' samples together.
func (c *MixtureCatalog) Len() int64 { return c.total }

// Classes are every source's classes, "<name>/<class>", in source order.
func (c *MixtureCatalog) Classes() []string { return c.classes }

// Digest identifies the mixture: "<count>:<hash>" of the identity and
// each source's name and digest.
func (c *MixtureCatalog) Digest() string { return c.digest }

// Identity is the mixture's identity the catalog was made with.
func (c *MixtureCatalog) Identity() string { return c.ident }

// Sources are the sources, in order.
func (c *MixtureCatalog) Sources() []MixtureSource { return c.srcs }

// Offset is source s's first global index.
func (c *MixtureCatalog) Offset(s int) int64 { return c.offsets[s] }

// Source returns the source of global index i and i's index in it; ok
// is false outside [0, Len()).
func (c *MixtureCatalog) Source(i int64) (s int, local int64, ok bool) {
	if i < 0 || i >= c.total {
		return 0, 0, false
	}
	s = sort.Search(len(c.offsets), func(k int) bool { return c.offsets[k] > i }) - 1
	return s, i - c.offsets[s], true
}

// SourceOfKey returns the source a mixture key ("<name>/<key>") names
// and the key in it.
func (c *MixtureCatalog) SourceOfKey(key string) (s int, local string, ok bool) {
	name, rest, cut := strings.Cut(key, "/")
	if !cut {
		return 0, "", false
	}
	s, ok = c.byName[name]
	return s, rest, ok
}

// Sample returns global sample i (see MixtureCatalog).
func (c *MixtureCatalog) Sample(ctx context.Context, i int64) (Sample, string, error) {
	s, local, ok := c.Source(i)
	if !ok {
		return Sample{}, "", fmt.Errorf("dataset: mixture: sample %d outside [0, %d)", i, c.total)
	}
	src := c.srcs[s]
	smp, object, err := src.Catalog.Sample(ctx, local)
	if err != nil {
		return Sample{}, "", fmt.Errorf("mixture source %s: %w", src.Name, err)
	}
	c.looked[s].Add(1)
	smp.Key = src.Name + "/" + smp.Key
	if smp.Label != NoLabel {
		smp.Label += c.classOff[s] // a sample without a label names no class in any source
	}
	if object != "" {
		object = src.Name + "/" + object
	}
	return smp, object, nil
}

// MixtureCount is one source's count (MixtureCatalog.Counts).
type MixtureCount struct {
	Source  string `json:"source"`
	Samples int64  `json:"samples"`
}

// Counts are the samples of each source the catalog has given
// (Sample), in source order: on a node, the positions of each source it
// handed to its pipelines, padding and re-issued work included.
func (c *MixtureCatalog) Counts() []MixtureCount {
	out := make([]MixtureCount, len(c.srcs))
	for i, s := range c.srcs {
		out[i] = MixtureCount{Source: s.Name, Samples: c.looked[i].Load()}
	}
	return out
}

// Prefetch passes the hint on to the sources that hold [lo, hi).
func (c *MixtureCatalog) Prefetch(lo, hi int64) {
	lo, hi = max(lo, 0), min(hi, c.total)
	for s, src := range c.srcs {
		a, b := max(lo, c.offsets[s]), min(hi, c.offsets[s]+src.Catalog.Len())
		if a < b {
			src.Catalog.Prefetch(a-c.offsets[s], b-c.offsets[s])
		}
	}
}

// InMemory reports whether every source's catalog is in memory (see the
// function InMemory).
func (c *MixtureCatalog) InMemory() bool {
	for _, s := range c.srcs {
		if !InMemory(s.Catalog) {
			return false
		}
	}
	return true
}

// Store returns the store that reads the mixture's samples by their
// mixture keys (and indices): a storage.SampleStore when any source's
// store is one (a packed source), so the pipeline reads by index.
func (c *MixtureCatalog) Store() storage.Store { return c.store }

// Close closes every source's catalog that holds anything (an
// IndexedManifest) and store.
func (c *MixtureCatalog) Close() error {
	var errs []error
	for _, s := range c.srcs {
		if m, ok := s.Catalog.(*IndexedManifest); ok {
			m.Close()
		}
		errs = append(errs, storage.Close(s.Store))
	}
	return errors.Join(errs...)
}

// MixtureStore reads a MixtureCatalog's samples: a key "<name>/<key>"
// is the source name's key, and writes and listings go to the source
// the key or prefix names (a listing of a prefix that names none lists
// every source, in name order).
type MixtureStore struct{ c *MixtureCatalog }

// mixtureSampleStore is a MixtureStore over at least one SampleStore.
type mixtureSampleStore struct{ MixtureStore }

var (
	_ storage.Store         = MixtureStore{}
	_ storage.LimitedGetter = MixtureStore{}
	_ storage.SampleStore   = mixtureSampleStore{}
)

func newMixtureStore(c *MixtureCatalog) storage.Store {
	for _, s := range c.srcs {
		if _, ok := s.Store.(storage.SampleStore); ok {
			return mixtureSampleStore{MixtureStore{c}}
		}
	}
	return MixtureStore{c}
}

func (m MixtureStore) route(op, key string) (storage.Store, string, error) {
	s, local, ok := m.c.SourceOfKey(key)
	if !ok {
		return nil, "", fmt.Errorf("%w: mixture: %s %q: no source of that name (a mixture key is <source>/<key>)", storage.ErrNotFound, op, key)
	}
	return m.c.srcs[s].Store, local, nil
}

// Get reads key from its source.
func (m MixtureStore) Get(ctx context.Context, key string, dst []byte) ([]byte, error) {
	st, k, err := m.route("get", key)
	if err != nil {
		return dst[:0], err
	}
	return st.Get(ctx, k, dst)
}

// GetLimit implements storage.LimitedGetter through the source's store.
func (m MixtureStore) GetLimit(ctx context.Context, key string, limit int64, dst []byte) ([]byte, error) {
	st, k, err := m.route("get", key)
	if err != nil {
		return dst[:0], err
	}
	return storage.GetLimit(ctx, st, k, limit, dst)
}

// GetRange reads a range of key from its source.
func (m MixtureStore) GetRange(ctx context.Context, key string, off, length int64, dst []byte) ([]byte, error) {
	st, k, err := m.route("get", key)
	if err != nil {
		return dst[:0], err
	}
	return st.GetRange(ctx, k, off, length, dst)
}

// Stat stats key in its source.
func (m MixtureStore) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	st, k, err := m.route("stat", key)
	if err != nil {
		return storage.ObjectInfo{}, err
	}
	info, err := st.Stat(ctx, k)
	info.Key = key
	return info, err
}

// Put writes key to its source.
func (m MixtureStore) Put(ctx context.Context, key string, data []byte, cond storage.Cond) (string, error) {
	st, k, err := m.route("put", key)
	if err != nil {
		return "", err
	}
	return st.Put(ctx, k, data, cond)
}

// Delete deletes key from its source.
func (m MixtureStore) Delete(ctx context.Context, key string) error {
	st, k, err := m.route("delete", key)
	if err != nil {
		return err
	}
	return st.Delete(ctx, k)
}

// List lists the objects under prefix, with mixture keys, in key order.
func (m MixtureStore) List(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	names := make([]string, 0, len(m.c.srcs))
	for _, s := range m.c.srcs {
		names = append(names, s.Name)
	}
	sort.Strings(names) // "<name>/" keys sort by name: '/' is below every name byte but none is in a name
	for _, n := range names {
		var sub string
		switch {
		case strings.HasPrefix(prefix, n+"/"):
			sub = strings.TrimPrefix(prefix, n+"/")
		case strings.HasPrefix(n+"/", prefix):
			sub = ""
		default:
			continue
		}
		st := m.c.srcs[m.c.byName[n]].Store
		if err := st.List(ctx, sub, func(o storage.ObjectInfo) error {
			o.Key = n + "/" + o.Key
			return fn(o)
		}); err != nil {
			return err
		}
	}
	return nil
}

// String names the sources: "mixture(a=/data/a, b=s3://bucket/b)".
func (m MixtureStore) String() string {
	parts := make([]string, len(m.c.srcs))
	for i, s := range m.c.srcs {
		parts[i] = s.Name + "=" + s.Store.String()
	}
	return "mixture(" + strings.Join(parts, ", ") + ")"
}

// Close closes the sources (MixtureCatalog.Close).
func (m MixtureStore) Close() error { return m.c.Close() }

// Catalog is the mixture the store reads.
func (m MixtureStore) Catalog() *MixtureCatalog { return m.c }

// sample routes global index i, whose mixture key is key.
func (m mixtureSampleStore) sample(index int64, key string) (storage.Store, int64, string, error) {
	s, local, ok := m.c.Source(index)
	if !ok {
		return nil, 0, "", fmt.Errorf("%w: mixture: sample %d outside [0, %d)", storage.ErrInvalidKey, index, m.c.total)
	}
	name := m.c.srcs[s].Name
	k, cut := strings.CutPrefix(key, name+"/")
	if !cut {
		return nil, 0, "", fmt.Errorf("%w: mixture: sample %d is of source %s, not %q", storage.ErrInvalidKey, index, name, key)
	}
	return m.c.srcs[s].Store, local, k, nil
}

// GetSample reads global sample index from its source: by its index
// there when the source's store is a SampleStore, else by key.
func (m mixtureSampleStore) GetSample(ctx context.Context, index int64, key string, dst []byte) ([]byte, error) {
	return m.GetSampleLimit(ctx, index, key, -1, dst)
}

// GetSampleLimit is GetSample refusing a sample over limit bytes
// (storage.GetSampleLimit).
func (m mixtureSampleStore) GetSampleLimit(ctx context.Context, index int64, key string, limit int64, dst []byte) ([]byte, error) {
	st, local, k, err := m.sample(index, key)
	if err != nil {
		return dst[:0], err
	}
	if ss, ok := st.(storage.SampleStore); ok {
		return storage.GetSampleLimit(ctx, ss, local, k, limit, dst)
	}
	return storage.GetLimit(ctx, st, k, limit, dst)
}

// PrefetchSample passes the hint to the source's store.
func (m mixtureSampleStore) PrefetchSample(index int64) {
	s, local, ok := m.c.Source(index)
	if !ok {
		return
	}
	if ss, ok := m.c.srcs[s].Store.(storage.SampleStore); ok {
		ss.PrefetchSample(local)
	}
}

// PackedStores are the packed stores that read s's samples, under any
// wrappers (Unwrap): s's own PackedStore, or a mixture's (MixtureStore)
// packed sources', in source order; none for a store of samples that
// are not packed. A node sets the order's block and window on each
// (PackedStore.SetBlock) and reads their counters.
func PackedStores(s storage.Store) []*PackedStore {
	for s != nil {
		switch x := s.(type) {
		case *PackedStore:
			return []*PackedStore{x}
		case interface{ Catalog() *MixtureCatalog }:
			var out []*PackedStore
			for _, src := range x.Catalog().Sources() {
				out = append(out, PackedStores(src.Store)...)
			}
			return out
		}
		u, ok := s.(interface{ Unwrap() storage.Store })
		if !ok {
			return nil
		}
		s = u.Unwrap()
	}
	return nil
}

// MixtureOf finds the mixture a store reads (a MixtureStore, under any
// wrappers that Unwrap); nil for a single dataset's store.
func MixtureOf(s storage.Store) *MixtureCatalog {
	for s != nil {
		if m, ok := s.(interface{ Catalog() *MixtureCatalog }); ok {
			return m.Catalog()
		}
		u, ok := s.(interface{ Unwrap() storage.Store })
		if !ok {
			return nil
		}
		s = u.Unwrap()
	}
	return nil
}

// SplitMixtureExclusions splits an exclusion list of a mixture's keys
// ("<source>/<key>", as a node's --quarantine writes them) into each
// source's own keys, by source name (names, in the mixture's order); a
// source nothing excludes has an empty list. A key that names no source
// is an error: it would silently exclude nothing.
func SplitMixtureExclusions(ex Exclusions, names []string) (map[string]Exclusions, error) {
	out := make(map[string]Exclusions, len(names))
	for _, n := range names {
		out[n] = Exclusions{}
	}
	for key, reason := range ex {
		name, rest, ok := strings.Cut(key, "/")
		src, known := out[name]
		if !ok || !known || rest == "" {
			return nil, fmt.Errorf("dataset: mixture: excluded key %q names no source (a mixture's key is <source>/<key>; sources: %s)", key, strings.Join(names, ", "))
		}
		src[rest] = reason
	}
	return out, nil
}
