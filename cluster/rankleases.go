package cluster

import (
	"fmt"
	"slices"
	"sort"
)

// RankLeases is one rank session's side of the protocol: the node-side
// twin of the Coordinator, pure in the same way. The node's lease
// requester feeds it what the coordinator sends (Grant, Revoke, End, Ack),
// takes positions to fetch from it in stream order (Take), tells it what
// the trainer committed (Commit), and sends what Messages returns.
//
// It encodes the rules that are easy to get wrong: leases of an epoch are
// taken in Index order whatever order they arrive in; a Revoke that
// overtakes its grant is applied when the grant arrives; a rank stops a
// revoked lease where it has got to if that is past the revoke point; a
// StreamEnd counts only once every lease it names is here, and a late one
// is ignored; a commit names its lease, position and stream offset.
//
// Not safe for concurrent use.
type RankLeases struct {
	rank    string
	session Fence
	epochs  int
	cur     int // the epoch it requests work for
	streams map[int]*rankStream
	order   []int           // the keys of streams, ascending: Take's order
	early   map[Fence]int64 // revokes that arrived before their grant
	out     []Event
	align   int64 // SetAlign's unit; <= 1: none
}

type rankStream struct {
	leases    map[int]*heldLease // by Index
	next      int                // Index of the lease being taken
	pos       int64              // next position of leases[next]; < Start: not begun
	taken     int64              // positions taken: the stream offset
	segs      []takenSeg         // leases taken from, with their stream offsets
	end       *StreamEnd
	complete  bool
	committed int64 // offset of the last Commit queued
	acked     int64
	requested int64
}

type heldLease struct {
	Lease
	end  int64 // End, or where a revoke stopped it
	done bool  // LeaseDone queued
}

type takenSeg struct {
	lease  Fence
	start  int64 // first position
	offset int64 // stream offset of start
}

// Position is one position handed out by Take: deliver the sample
// Order(Epoch).Sample(Pos) as the Offset-th item of the epoch stream.
type Position struct {
	Epoch  int
	Offset int64
	Pos    int64
	Lease  Fence
	Pad    bool
}

// NewRankLeases starts a rank session from its part of a Welcome; epochs
// is Config.Epochs.
func NewRankLeases(rs RankSession, epochs int) *RankLeases {
	return &RankLeases{
		rank: rs.Rank, session: rs.Session, epochs: epochs, cur: rs.FirstEpoch,
		streams: make(map[int]*rankStream), early: make(map[Fence]int64),
	}
}

// SetAlign sets the unit (Config.Align: a mixture's round) a revoked
// lease is stopped at a whole number of: the rank stops at the first
// unit boundary at or after the revoke's From and what it has taken, so
// the tail it gives up, and what it keeps, are whole units (with
// Dynamic, whose steals would otherwise cut a round). 0 or 1: none.
func (r *RankLeases) SetAlign(unit int) { r.align = int64(unit) }

// Session returns the session fence all its messages carry.
func (r *RankLeases) Session() Fence { return r.session }

// Epoch returns the epoch the rank is requesting work for; Config.Epochs
// once it has finished the last.
func (r *RankLeases) Epoch() int { return r.cur }

// Messages returns the messages to send to the coordinator, in order, and
// forgets them.
func (r *RankLeases) Messages() []Event {
	out := r.out
	r.out = nil
	return out
}

func (r *RankLeases) stream(e int) *rankStream {
	st := r.streams[e]
	if st == nil {
		st = &rankStream{leases: make(map[int]*heldLease)}
		r.streams[e] = st
		i, _ := slices.BinarySearch(r.order, e)
		r.order = slices.Insert(r.order, i, e)
	}
	return st
}

// mine reports whether a message from the coordinator is for this session.
func (r *RankLeases) mine(rank string, s Fence) bool { return rank == r.rank && s == r.session }

// Grant records a lease (duplicates are ignored).
func (r *RankLeases) Grant(l Lease) {
	if !r.mine(l.Rank, l.Session) {
		return
	}
	st := r.stream(l.Epoch)
	if st.leases[l.Index] != nil || l.Index < st.next {
		return
	}
	st.leases[l.Index] = &heldLease{Lease: l, end: l.End}
	if from, ok := r.early[l.Fence]; ok {
		delete(r.early, l.Fence)
		r.revoke(st, l.Index, from)
	}
}

// Revoke stops a lease at rv.From, or where taking it has got to if that
// is further, and queues the LeaseDone that says where.
func (r *RankLeases) Revoke(rv Revoke) {
	if !r.mine(rv.Rank, rv.Session) {
		return
	}
	for _, st := range r.streams {
		for i, l := range st.leases {
			if l.Fence == rv.Lease {
				r.revoke(st, i, rv.From)
				return
			}
		}
		for _, sg := range st.segs { // taken and finished already
			if sg.lease == rv.Lease {
				return // its LeaseDone was sent with its full extent
			}
		}
	}
	r.early[rv.Lease] = rv.From
}

func (r *RankLeases) revoke(st *rankStream, i int, from int64) {
	l := st.leases[i]
	stop := from
	switch {
	case i < st.next:
		stop = l.end
	case i == st.next:
		stop = max(from, st.pos)
	}
	if a := r.align; a > 1 && i >= st.next {
		stop = (stop + a - 1) / a * a // whole units: finish the round it is in
	}
	stop = min(max(stop, l.Start), l.end)
	l.end = stop
	l.done = true
	r.out = append(r.out, LeaseDone{Rank: r.rank, Session: r.session, Lease: l.Fence, Through: stop})
}

// End records a StreamEnd; one older than the newest seen is ignored.
func (r *RankLeases) End(e StreamEnd) {
	if !r.mine(e.Rank, e.Session) {
		return
	}
	st := r.stream(e.Epoch)
	if st.end != nil && !st.end.Fence.Less(e.Fence) {
		return
	}
	st.end = &e
	st.complete = st.complete || e.EpochComplete
}

// Ack records an acknowledged commit and returns the acknowledged stream
// offset of its epoch.
func (r *RankLeases) Ack(a Ack) int64 {
	if !r.mine(a.Rank, a.Session) {
		return 0
	}
	st := r.stream(a.Epoch)
	st.acked = max(st.acked, a.Offset)
	return st.acked
}

// Take returns the next position to deliver: from the oldest epoch whose
// next lease is here, in stream order. It queues a LeaseDone for every
// lease it finishes. ok is false when nothing can be taken now.
func (r *RankLeases) Take() (p Position, ok bool) {
	for _, e := range r.order {
		if p, ok := r.take(e, r.streams[e]); ok {
			return p, true
		}
	}
	return Position{}, false
}

// TakeFrom is Take limited to epoch e: the next position of e's stream,
// if one is held, even when an older epoch's stream has positions too (a
// consumer finishing a batch of e before it turns to an older epoch's
// stream that grew).
func (r *RankLeases) TakeFrom(e int) (Position, bool) {
	st := r.streams[e]
	if st == nil {
		return Position{}, false
	}
	return r.take(e, st)
}

func (r *RankLeases) take(e int, st *rankStream) (p Position, ok bool) {
	for {
		l := st.leases[st.next]
		if l == nil {
			return Position{}, false
		}
		if st.pos < l.Start {
			st.pos = l.Start
		}
		if st.pos >= l.end {
			r.finish(st, l)
			continue
		}
		p = Position{Epoch: e, Offset: st.taken, Pos: st.pos, Lease: l.Fence, Pad: l.Pad}
		if n := len(st.segs); n == 0 || st.segs[n-1].lease != l.Fence {
			st.segs = append(st.segs, takenSeg{lease: l.Fence, start: st.pos, offset: st.taken})
		}
		st.pos++
		st.taken++
		if st.pos >= l.end {
			r.finish(st, l)
		}
		return p, true
	}
}

func (r *RankLeases) finish(st *rankStream, l *heldLease) {
	if !l.done {
		l.done = true
		r.out = append(r.out, LeaseDone{Rank: r.rank, Session: r.session, Lease: l.Fence, Through: l.end})
	}
	delete(st.leases, st.next)
	st.next++
	st.pos = 0
}

// Ended reports whether the rank has taken its whole stream of epoch e as
// the coordinator last planned it. It can become false again if a later
// grant extends the stream (membership changed).
func (r *RankLeases) Ended(e int) bool {
	st := r.streams[e]
	if st == nil || st.end == nil || st.next < st.end.Leases || st.taken != st.end.Length {
		return false
	}
	for i := range st.leases {
		if i < st.end.Leases {
			return false
		}
	}
	return true
}

// Commit queues a Commit saying the trainer's model includes the first
// offset positions of its epoch-e stream (step is echoed back); cuts are
// where the session's runs of the epoch were cut at or below offset
// (RankSteps.Cuts; Commit.Cuts). It does nothing if offset is not past
// the last commit, or the epoch is complete (the coordinator no longer
// needs commits for it).
func (r *RankLeases) Commit(e int, offset, step int64, cuts []int64) error {
	st := r.streams[e]
	if st == nil || offset <= st.committed || st.complete {
		return nil
	}
	if offset > st.taken {
		return fmt.Errorf("%w: commit of %d positions, %d taken", ErrInvalid, offset, st.taken)
	}
	i := sort.Search(len(st.segs), func(i int) bool { return st.segs[i].offset >= offset }) - 1
	sg := st.segs[i]
	st.committed = offset
	r.out = append(r.out, Commit{
		Rank: r.rank, Session: r.session, Epoch: e, Lease: sg.lease,
		Through: sg.start + offset - sg.offset, Offset: offset, Step: step,
		Cuts: slices.Clone(cuts), CutsTold: true,
	})
	return nil
}

// Taken returns how many positions of epoch e's stream were taken.
func (r *RankLeases) Taken(e int) int64 {
	if st := r.streams[e]; st != nil {
		return st.taken
	}
	return 0
}

// Request queues a Request for the epoch the rank is on, asking for
// leases through lookahead positions past what it has taken, if that is
// more than it asked before (or always, when again is set: re-asking is
// harmless and recovers from a lost message). It first moves on past
// epochs whose stream has ended. It returns false when the job has no
// more epochs for this rank.
func (r *RankLeases) Request(lookahead int64, again bool) bool {
	for r.cur < r.epochs {
		st := r.stream(r.cur)
		if !st.complete && !r.Ended(r.cur) {
			break
		}
		r.cur++
	}
	if r.cur >= r.epochs {
		return false
	}
	st := r.stream(r.cur)
	if want := st.taken + lookahead; want > st.requested || again {
		st.requested = max(st.requested, want)
		r.out = append(r.out, Request{Rank: r.rank, Session: r.session, Epoch: r.cur, Through: want})
	}
	return true
}
