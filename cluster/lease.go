package cluster

import (
	"fmt"
	"sort"
)

// Fence orders everything one coordinator issues: rank sessions and
// leases. Seq grows by one per issue within an Incarnation, and a new
// coordinator life has a larger Incarnation, so a message carrying a fence
// the coordinator no longer holds is recognizably stale, whatever the
// network did to it.
type Fence struct {
	Incarnation uint64
	Seq         uint64
}

// Less orders fences by issue.
func (f Fence) Less(g Fence) bool {
	if f.Incarnation != g.Incarnation {
		return f.Incarnation < g.Incarnation
	}
	return f.Seq < g.Seq
}

// IsZero reports whether f is the zero Fence, which is never issued.
func (f Fence) IsZero() bool { return f == Fence{} }

func (f Fence) String() string { return fmt.Sprintf("%d.%d", f.Incarnation, f.Seq) }

// Range is the half-open run of positions [Start, End).
type Range struct {
	Start, End int64
}

// Len returns End-Start.
func (r Range) Len() int64 { return r.End - r.Start }

// ShardOf returns the shard of the plain grid that holds position pos (0
// <= pos < n): the runs [k*size, (k+1)*size) of an epoch's positions, the
// last cut short at n. No lease crosses its boundaries when the order's
// block is 1 or does not divide size; otherwise the coordinator lays the
// same grid over the order's blocks, around the short block (see
// Order.ShortBlock), and leases follow that.
func ShardOf(pos int64, size int, n int64) Range {
	s := int64(size)
	start := pos / s * s
	return Range{start, min(start+s, n)}
}

// Lease grants the positions [Start, End) of epoch Epoch to one rank.
// The rank delivers a lease's positions in order, and its leases of one
// epoch in Index order: that concatenation is the rank's epoch stream,
// which its trainer cuts into batches.
//
// Positions >= the dataset size are padding (Pad is then true): the rank
// delivers Order.Sample(pos), a repeat, marked as padding so that it is
// trained on (keeping steps equal) but never counted as the sample.
type Lease struct {
	Rank    string
	Session Fence // the rank's session the lease belongs to
	Fence   Fence // names this lease; progress about it must carry it
	Epoch   int
	Index   int // position of the lease in the rank's epoch stream: 0, 1, ...
	Start   int64
	End     int64
	Pad     bool
}

// Len returns the number of positions leased.
func (l Lease) Len() int64 { return l.End - l.Start }

// Sample maps a position of o to a sample index, wrapping positions at or
// beyond o.Len() onto the start of the order (PyTorch's DistributedSampler
// pads the same way) and reporting them as padding.
func (o Order) Sample(pos int64) (index int64, pad bool) {
	if pos < o.n {
		return o.At(pos), false
	}
	if o.n == 0 {
		panic("cluster: Order.Sample: padding an empty epoch")
	}
	return o.At((pos - o.n) % o.n), true
}

// rangeSet is a set of positions as sorted, disjoint, non-adjacent
// ranges. The pool of unleased positions is one: it is [0, N) at the start
// of an epoch, taken from the front, and gets back the uncommitted tails
// of dead ranks and split leases, so it holds few ranges.
type rangeSet struct {
	rs   []Range
	size int64
}

func (s *rangeSet) len() int64 { return s.size }

func (s *rangeSet) ranges() []Range { return s.rs }

// front returns the lowest range; the set must not be empty.
func (s *rangeSet) front() Range { return s.rs[0] }

// takeFront removes [front().Start, end) from the set.
func (s *rangeSet) takeFront(end int64) Range {
	r := s.rs[0]
	if end >= r.End {
		s.rs[0] = Range{}
		s.rs = s.rs[1:]
		s.size -= r.Len()
		if len(s.rs) == 0 {
			s.rs = nil // let the backing array go
		}
		return r
	}
	s.rs[0].Start = end
	s.size -= end - r.Start
	return Range{r.Start, end}
}

// add inserts r, which must not overlap the set.
func (s *rangeSet) add(r Range) {
	if r.Len() <= 0 {
		return
	}
	i := sort.Search(len(s.rs), func(i int) bool { return s.rs[i].Start >= r.End })
	// s.rs[i-1] is the last range starting before r ends.
	if i > 0 && s.rs[i-1].End > r.Start {
		panic(fmt.Sprintf("cluster: returning %v to the pool, which already holds %v", r, s.rs[i-1]))
	}
	s.size += r.Len()
	joinLeft := i > 0 && s.rs[i-1].End == r.Start
	joinRight := i < len(s.rs) && s.rs[i].Start == r.End
	switch {
	case joinLeft && joinRight:
		s.rs[i-1].End = s.rs[i].End
		s.rs = append(s.rs[:i], s.rs[i+1:]...)
	case joinLeft:
		s.rs[i-1].End = r.End
	case joinRight:
		s.rs[i].Start = r.Start
	default:
		s.rs = append(s.rs, Range{})
		copy(s.rs[i+1:], s.rs[i:])
		s.rs[i] = r
	}
}

// takeBack removes up to n positions from the high end and returns them,
// highest range first.
func (s *rangeSet) takeBack(n int64) []Range {
	var out []Range
	for n > 0 && len(s.rs) > 0 {
		last := &s.rs[len(s.rs)-1]
		k := min(n, last.Len())
		out = append(out, Range{last.End - k, last.End})
		last.End -= k
		s.size -= k
		n -= k
		if last.Len() == 0 {
			s.rs = s.rs[:len(s.rs)-1]
		}
	}
	return out
}

// mergeRanges sorts rs and joins overlapping or adjacent ranges, in place.
func mergeRanges(rs []Range) []Range {
	sort.Slice(rs, func(i, j int) bool { return rs[i].Start < rs[j].Start })
	out := rs[:0]
	for _, r := range rs {
		if r.Len() <= 0 {
			continue
		}
		if n := len(out); n > 0 && out[n-1].End >= r.Start {
			out[n-1].End = max(out[n-1].End, r.End)
			continue
		}
		out = append(out, r)
	}
	return out
}
