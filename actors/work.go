package actors

import (
	"context"
	"fmt"

	"github.com/longshore/longshore/dataset"
)

// Item is one sample to load: where it sits in the rank's stream and what
// it is.
type Item struct {
	// Pos is the sample's offset in the rank's stream of its epoch.
	Pos int64
	// Index is the sample's index in the dataset, [0, N).
	Index int64
	Key   string // object key in the store
	Label int32
	// Pad marks a repeated sample that evens out ranks' shares
	// (DistributedSampler's padding); the trainer may mask it out.
	Pad bool
}

// ItemAt is the item at offset pos of a rank's stream: sample idx of
// cat (a lazy catalog may read a piece of its index first), pad if it
// is a repeated sample. Standalone feeders and the cluster node's actor
// both map a position's index to its key and label here.
func ItemAt(ctx context.Context, cat dataset.Catalog, pos, idx int64, pad bool) (Item, error) {
	s, _, err := cat.Sample(ctx, idx)
	if err != nil {
		return Item{}, fmt.Errorf("dataset: sample %d: %w", idx, err)
	}
	return Item{Pos: pos, Index: idx, Key: s.Key, Label: s.Label, Pad: pad}, nil
}

// Work is an ordered stretch of a rank's stream of one epoch: a lease, or
// a piece of the standalone order. It carries the job's coordinates, and
// no layer renumbers them: Epoch is the job's epoch (with Item.Index it
// seeds each sample's transform), positions are stream offsets, steps
// are the trainer's.
//
// Consecutive Works form a run, which ends with RunEnd (or StreamEnd or
// Last). A run starts anywhere: at any offset of its epoch's stream, and
// at any step; batch k of a run that opened at offset O and step S holds
// offsets [O+k*BatchSize, O+(k+1)*BatchSize) and is step S+k. A rank's
// stream of an epoch may come in several runs (in a cluster, work of a
// departed rank comes back after the rank moved on), each starting at or
// after where the last one of that epoch ended; see Intake for the rules.
type Work struct {
	// Epoch is the job's epoch.
	Epoch int
	// Start is Items[0].Pos; Items[i].Pos must be Start+i, continuing
	// where the run's last Work stopped.
	Start int64
	// Step is the step of the run's first batch. It is read from the Work
	// that opens a run (the first, or the first after a run's end) and
	// ignored on the run's later Works.
	Step  int64
	Items []Item
	// RunEnd says the run ends after these items: its last batch may be
	// short. The next Work opens a run.
	RunEnd bool
	// StreamEnd says the rank's stream of Epoch, as the source plans it,
	// ends here: the run's last batch carries Batch.EndOfStream. It
	// implies RunEnd.
	StreamEnd bool
	// Last says no work follows: once everything is delivered, Next
	// returns io.EOF. Last implies RunEnd.
	Last bool
	// Err, if set, stops the pipeline: Next returns it (wrapped).
	Err error
}

// ends reports whether the run ends with w.
func (w *Work) ends() bool { return w.RunEnd || w.StreamEnd || w.Last }

// Source supplies a rank's work, credit-based: the pipeline asks for more
// when it has room, so a slow rank takes less.
//
// Concurrency contract: Want is called from the pipeline's scheduler actor,
// one call at a time, and never again before the previous call was
// answered. It must not block. It answers by calling give exactly once, now
// or later and from any goroutine, with at most n items (zero items are
// allowed only with an end (RunEnd, StreamEnd, Last) or Err set, else the pipeline would ask
// again at once).
type Source interface {
	Want(n int, give func(Work))
}

// Order is an epoch's permutation of [0, N): position -> sample index.
// cluster.Order implements it.
type Order interface {
	Len() int64
	At(pos int64) int64
}

// OrderFunc builds epoch's order over n samples. Pass cluster.NewOrder
// (with its block size bound) so standalone and cluster runs agree.
type OrderFunc func(seed uint64, epoch int, n int64) Order

// Feeder is the standalone Source: rank Rank of World takes stream
// positions r, r+World, r+2*World, ... of each epoch's order, as PyTorch's
// DistributedSampler does, padding with repeats from the start of the order
// (marked Pad) so every rank gets ceil(N/World) samples and the same number
// of steps. Each epoch is one run, from offset 0 and step 0 unless Seek
// moved it. It is a plain state machine: no goroutines, no clocks, over
// a catalog in memory. Over a lazy one (dataset.IndexedManifest: the
// manifest read piece by piece) Want answers from a goroutine, since a
// lookup may wait for a piece, Next prefetches the pieces of the next
// run, and a lookup that fails ends the work with Work.Err.
type Feeder struct {
	cat        dataset.Catalog
	lazy       bool
	seed       uint64
	rank       int
	world      int
	batch      int64
	firstEpoch int
	epochs     int
	order      OrderFunc

	epoch   int   // current epoch
	pos     int64 // next stream offset in it
	skipped int64 // offsets Seek jumped over (for Total)
	cur     Order
	done    bool
}

var _ Source = (*Feeder)(nil)

// NewFeeder returns the standalone source for rank of world over ds for
// cfg's epochs in the epoch order order makes (required: pass a wrapper
// of cluster.NewOrder, as the node does, so standalone and cluster runs
// agree).
func NewFeeder(ds *dataset.Dataset, cfg Config, rank, world int, order OrderFunc) (*Feeder, error) {
	if ds == nil {
		return nil, fmt.Errorf("actors: feeder: nil dataset")
	}
	return NewCatalogFeeder(dataset.DatasetCatalog(ds), cfg, rank, world, order)
}

// NewCatalogFeeder is NewFeeder over a catalog: the samples looked up as
// they are handed out, for a dataset held in memory or read lazily.
func NewCatalogFeeder(cat dataset.Catalog, cfg Config, rank, world int, order OrderFunc) (*Feeder, error) {
	cfg = cfg.WithDefaults()
	if world < 1 || rank < 0 || rank >= world {
		return nil, fmt.Errorf("actors: feeder for rank %d of %d: need 0 <= rank < world", rank, world)
	}
	if cat == nil {
		return nil, fmt.Errorf("actors: feeder: nil dataset")
	}
	if order == nil {
		return nil, fmt.Errorf("actors: feeder: no epoch order (pass a wrapper of cluster.NewOrder, as the node does)")
	}
	return &Feeder{cat: cat, lazy: !dataset.InMemory(cat), seed: cfg.Seed, rank: rank, world: world, batch: int64(cfg.BatchSize),
		firstEpoch: cfg.FirstEpoch, epochs: cfg.Epochs, order: order, epoch: cfg.FirstEpoch}, nil
}

// StreamLen is how many samples the rank gets per epoch: ceil(N/World)
// (with padding) when World > 1, else N.
func (f *Feeder) StreamLen() int64 {
	n := f.cat.Len()
	if n == 0 {
		return 0
	}
	return (n + int64(f.world) - 1) / int64(f.world)
}

// Total is the number of samples the feeder hands out over the whole run
// (after Seek: from where it moved to).
func (f *Feeder) Total() int64 { return f.StreamLen()*int64(f.epochs) - f.skipped }

// Seek moves the feeder to stream offset pos of epoch, which must lie in
// the feeder's epochs: the next Work starts there, at step pos/BatchSize
// (pos is normally a batch boundary: where a trainer's commit left off).
// Nothing before it is handed out. Call it before the first Want.
func (f *Feeder) Seek(epoch int, pos int64) error {
	if epoch < f.firstEpoch || epoch >= f.firstEpoch+f.epochs || pos < 0 || pos > f.StreamLen() {
		return fmt.Errorf("actors: feeder: seek to epoch %d offset %d: outside epochs [%d, %d) and offsets [0, %d]",
			epoch, pos, f.firstEpoch, f.firstEpoch+f.epochs, f.StreamLen())
	}
	f.skipped = int64(epoch-f.firstEpoch)*f.StreamLen() + pos
	f.epoch, f.pos, f.cur, f.done = epoch, pos, nil, false
	return nil
}

// Want implements Source by answering with Next(n): at once over a
// catalog in memory, from a goroutine over a lazy one (the Source
// contract: one Want at a time, so Next never runs twice at once).
func (f *Feeder) Want(n int, give func(Work)) {
	if !f.lazy {
		give(f.Next(n))
		return
	}
	go func() { give(f.Next(n)) }()
}

// Next returns the next run of at most max items (at least one unless the
// epoch or the run ends here).
func (f *Feeder) Next(max int) Work {
	if f.done {
		return Work{Epoch: f.epoch, StreamEnd: true, Last: true}
	}
	n := f.cat.Len()
	if f.cur == nil || f.cur.Len() != n {
		f.cur = f.order(f.seed, f.epoch, n)
	}
	l := f.StreamLen()
	w := Work{Epoch: f.epoch, Start: f.pos, Step: f.pos / f.batch}
	for len(w.Items) < max && f.pos < l {
		g := int64(f.rank) + f.pos*int64(f.world)
		pad := g >= n
		idx := f.cur.At(g % n)
		it, err := ItemAt(context.Background(), f.cat, f.pos, idx, pad)
		if err != nil {
			// The dataset cannot be read (a lazy catalog's piece: the
			// store down past its retries, a stale index): as at start.
			return Work{Epoch: f.epoch, Err: err}
		}
		w.Items = append(w.Items, it)
		f.pos++
	}
	if f.lazy {
		// The next run's pieces, read while this one is fetched.
		for p := f.pos; p < min(f.pos+int64(max), l); p++ {
			idx := f.cur.At((int64(f.rank) + p*int64(f.world)) % n)
			f.cat.Prefetch(idx, idx+1)
		}
	}
	if f.pos >= l {
		w.StreamEnd = true
		f.epoch++
		f.pos = 0
		f.cur = nil
		if f.epoch >= f.firstEpoch+f.epochs {
			w.Last = true
			f.done = true
			f.epoch-- // stay on the last epoch for repeated calls
		}
	}
	return w
}
