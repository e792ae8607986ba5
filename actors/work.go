package actors

import (
	"fmt"
	"math/rand/v2"

	"github.com/longshore/longshore/storage"
)

// Item is one sample to load: where it sits in the rank's stream and what
// it is.
type Item struct {
	// Pos is the position in the rank's stream for the epoch, from 0.
	// Batch k of an epoch is positions [k*BatchSize, (k+1)*BatchSize).
	Pos int64
	// Index is the sample's index in the dataset, [0, N).
	Index int64
	Key   string // object key in the store
	Label int32
	// Pad marks a repeated sample that evens out ranks' shares
	// (DistributedSampler's padding); the trainer may mask it out.
	Pad bool
}

// Work is an ordered run of a rank's stream for one epoch: a lease, or a
// piece of the standalone order.
type Work struct {
	Epoch int
	// Start is Items[0].Pos; Items[i].Pos must be Start+i. An epoch's runs
	// arrive in order, without gaps, from position 0.
	Start int64
	Items []Item
	// Fence is the lease's fencing token; the pipeline carries it and does
	// not interpret it.
	Fence uint64
	// EpochEnd says the rank's stream for Epoch ends after these items.
	EpochEnd bool
	// Last says no work follows: once everything is delivered, Next
	// returns io.EOF. Last implies EpochEnd.
	Last bool
	// Err, if set, stops the pipeline: Next returns it (wrapped).
	Err error
}

// Source supplies a rank's work, credit-based: the pipeline asks for more
// when it has room, so a slow rank takes less.
//
// Concurrency contract: Want is called from the pipeline's scheduler actor,
// one call at a time, and never again before the previous call was
// answered. It must not block. It answers by calling give exactly once, now
// or later and from any goroutine, with at most n items (zero items are
// allowed only with EpochEnd, Last or Err set, else the pipeline would ask
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

// permOrder is the fallback OrderFunc: an explicit Fisher-Yates permutation
// from a PCG seeded with (seed, epoch), 8 bytes per sample.
type permOrder []int64

func (p permOrder) Len() int64         { return int64(len(p)) }
func (p permOrder) At(pos int64) int64 { return p[pos] }
func shuffledOrder(seed uint64, epoch int, n int64) Order {
	r := rand.New(rand.NewPCG(seed, uint64(epoch)^0x9e3779b97f4a7c15))
	p := make(permOrder, n)
	for i := range p {
		p[i] = int64(i)
	}
	r.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
	return p
}

// Feeder is the standalone Source: rank Rank of World takes stream
// positions r, r+World, r+2*World, ... of each epoch's order, as PyTorch's
// DistributedSampler does, padding with repeats from the start of the order
// (marked Pad) so every rank gets ceil(N/World) samples and the same number
// of steps. It is a plain state machine: no goroutines, no clocks.
type Feeder struct {
	ds         *storage.Dataset
	seed       uint64
	rank       int
	world      int
	firstEpoch int
	epochs     int
	order      OrderFunc

	epoch int   // current epoch
	pos   int64 // next stream position in it
	cur   Order
	done  bool
}

var _ Source = (*Feeder)(nil)

// NewFeeder returns the standalone source for rank of world over ds for
// cfg's epochs. order nil means a built-in seeded shuffle.
func NewFeeder(ds *storage.Dataset, cfg Config, rank, world int, order OrderFunc) (*Feeder, error) {
	cfg = cfg.WithDefaults()
	if world < 1 || rank < 0 || rank >= world {
		return nil, fmt.Errorf("actors: feeder for rank %d of %d: need 0 <= rank < world", rank, world)
	}
	if ds == nil {
		return nil, fmt.Errorf("actors: feeder: nil dataset")
	}
	if order == nil {
		order = shuffledOrder
	}
	return &Feeder{ds: ds, seed: cfg.Seed, rank: rank, world: world, firstEpoch: cfg.FirstEpoch,
		epochs: cfg.Epochs, order: order, epoch: cfg.FirstEpoch}, nil
}

// StreamLen is how many samples the rank gets per epoch: ceil(N/World)
// (with padding) when World > 1, else N.
func (f *Feeder) StreamLen() int64 {
	n := int64(len(f.ds.Samples))
	if n == 0 {
		return 0
	}
	return (n + int64(f.world) - 1) / int64(f.world)
}

// Total is the number of samples the feeder hands out over the whole run.
func (f *Feeder) Total() int64 { return f.StreamLen() * int64(f.epochs) }

// Want implements Source by answering at once with Next(n).
func (f *Feeder) Want(n int, give func(Work)) { give(f.Next(n)) }

// Next returns the next run of at most max items (at least one unless the
// epoch or the run ends here).
func (f *Feeder) Next(max int) Work {
	if f.done {
		return Work{Epoch: f.epoch, EpochEnd: true, Last: true}
	}
	n := int64(len(f.ds.Samples))
	if f.cur == nil || f.cur.Len() != n {
		f.cur = f.order(f.seed, f.epoch, n)
	}
	l := f.StreamLen()
	w := Work{Epoch: f.epoch, Start: f.pos}
	for len(w.Items) < max && f.pos < l {
		g := int64(f.rank) + f.pos*int64(f.world)
		pad := g >= n
		idx := f.cur.At(g % n)
		s := f.ds.Samples[idx]
		w.Items = append(w.Items, Item{Pos: f.pos, Index: idx, Key: s.Key, Label: s.Label, Pad: pad})
		f.pos++
	}
	if f.pos >= l {
		w.EpochEnd = true
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
