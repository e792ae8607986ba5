package cluster

import "fmt"

// Lineage of a standalone job: which samples went into rank r's step t
// of epoch e, and where a sample appeared. It is the standalone feeder's
// mapping (actors.Feeder) written as a pure function of the job's
// parameters: rank r of W takes the epoch order's positions r, r+W,
// r+2W, ... (PyTorch's DistributedSampler), padded with repeats from the
// start of the order so every rank gets ceil(N/W) samples, and batch k
// of the stream (stream offsets [k*B, (k+1)*B)) is step k.
//
// A cluster job's streams are made of the leases the coordinator granted
// as ranks asked, which depend on timing: its lineage is what the journal
// records of each rank session's commits (Trail, EpochLineage in
// trail.go; docs/lineage.md).

// Lineage is a standalone job's layout: its dataset size, world and
// batch size, and whether each epoch's last short batch is dropped.
type Lineage struct {
	Samples  int64 // N, after exclusions
	World    int   // ranks
	Batch    int64 // samples per batch
	DropLast bool  // --drop-last: the epoch's last short batch is not delivered
}

// LineageSample is one sample of a step, in batch order.
type LineageSample struct {
	Slot     int   // place in the batch, from 0
	Offset   int64 // stream offset in the rank's stream of the epoch
	OrderPos int64 // position in the epoch's order (Order.At)
	Index    int64 // dataset index
	Pad      bool  // a repeat that pads the rank's stream to ceil(N/W)
}

// LineageHit is one place a sample appeared: rank, step and slot, and
// whether it was padding there.
type LineageHit struct {
	Rank   int
	Step   int64
	Slot   int
	Offset int64
	Pad    bool
}

// Validate reports a layout that no job has.
func (l Lineage) Validate() error {
	switch {
	case l.Samples < 0:
		return fmt.Errorf("cluster: lineage: %d samples", l.Samples)
	case l.World < 1:
		return fmt.Errorf("cluster: lineage: world %d, need >= 1", l.World)
	case l.Batch < 1:
		return fmt.Errorf("cluster: lineage: batch size %d, need >= 1", l.Batch)
	}
	return nil
}

// StreamLen is how many samples each rank gets per epoch: ceil(N/W)
// (padded) with more than one rank, else N.
func (l Lineage) StreamLen() int64 {
	if l.Samples == 0 {
		return 0
	}
	return (l.Samples + int64(l.World) - 1) / int64(l.World)
}

// Steps is how many steps each rank delivers per epoch: the stream in
// batches, the last one short unless DropLast drops it.
func (l Lineage) Steps() int64 {
	n := l.StreamLen()
	if l.DropLast {
		return n / l.Batch
	}
	return (n + l.Batch - 1) / l.Batch
}

// LineageOrder is what Step reads of an epoch's positions: an Order, or
// a mixture's epoch (MixEpoch), whose Len is its positions.
type LineageOrder interface {
	Len() int64
	At(pos int64) int64
}

// Step returns the samples of rank's step of the epoch whose order is o
// (o.Len() must be Samples). It fails for a rank or step the job has not.
func (l Lineage) Step(o LineageOrder, rank int, step int64) ([]LineageSample, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if o.Len() != l.Samples {
		return nil, fmt.Errorf("cluster: lineage: order of %d samples for a dataset of %d", o.Len(), l.Samples)
	}
	if rank < 0 || rank >= l.World {
		return nil, fmt.Errorf("rank %d: the job has ranks 0..%d", rank, l.World-1)
	}
	if steps := l.Steps(); step < 0 || step >= steps {
		return nil, fmt.Errorf("step %d: each rank has steps 0..%d of an epoch (%d samples a rank, batch size %d%s)",
			step, steps-1, l.StreamLen(), l.Batch, map[bool]string{true: ", last short batch dropped"}[l.DropLast])
	}
	first := step * l.Batch
	end := min(first+l.Batch, l.StreamLen())
	out := make([]LineageSample, 0, end-first)
	for off := first; off < end; off++ {
		g := int64(rank) + off*int64(l.World)
		p := g % l.Samples
		out = append(out, LineageSample{Slot: int(off - first), Offset: off, OrderPos: p, Index: o.At(p), Pad: g >= l.Samples})
	}
	return out, nil
}

// Find returns every place the sample index appeared in the epoch whose
// order is o: its own place, then, when the streams are padded, its
// repeats: O(1) (Order.PositionOf), and a hit per repeat.
func (l Lineage) Find(o Order, index int64) ([]LineageHit, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if o.Len() != l.Samples {
		return nil, fmt.Errorf("cluster: lineage: order of %d samples for a dataset of %d", o.Len(), l.Samples)
	}
	if index < 0 || index >= l.Samples {
		return nil, fmt.Errorf("index %d outside the dataset's [0, %d)", index, l.Samples)
	}
	return l.Hits(o.PositionOf(index)), nil
}

// Hits returns every place position p of an epoch's order was delivered:
// its own place, then its repeats as padding. A mixture's epoch is no
// permutation (a sample may be at several positions or none), so its
// samples are found by their positions.
func (l Lineage) Hits(p int64) []LineageHit {
	total := l.StreamLen() * int64(l.World) // global slots, padding included
	delivered := l.Steps() * l.Batch        // stream offsets delivered, at most
	var hits []LineageHit
	for g := p; g < total; g += l.Samples {
		off := g / int64(l.World)
		if off >= delivered {
			continue // in a dropped last batch
		}
		hits = append(hits, LineageHit{Rank: int(g % int64(l.World)), Step: off / l.Batch, Slot: int(off % l.Batch), Offset: off, Pad: g >= l.Samples})
	}
	return hits
}

// PositionOf is At's inverse: the position of sample index in the epoch
// (At(PositionOf(i)) == i). Like At it costs O(1): each of the order's
// keyed bijections is inverted in turn (the block's place, the offset
// within the block, the window's shuffle). It panics if index is outside
// [0, Len()).
func (o Order) PositionOf(index int64) int64 {
	if index < 0 || index >= o.n {
		panic(fmt.Sprintf("cluster: Order.PositionOf(%d) outside [0, %d)", index, o.n))
	}
	b := index / o.block
	slot := int64(o.blocks.invert(uint64(b)))
	pos := o.slotStart(slot) + int64(o.within(b).invert(uint64(index-b*o.block)))
	if o.window > 1 {
		w := o.WindowAt(pos) // the window shuffle stays within the window
		pos = w.Start + int64(o.shuffle(w).invert(uint64(pos-w.Start)))
	}
	return pos
}
