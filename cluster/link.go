package cluster

// Link is one end of a reliable channel between the coordinator and one
// node life, over a transport that may drop, duplicate, delay and reorder
// (protoactor remote delivers at most once: a send on a connection that
// breaks is lost). The sender numbers every frame that carries state
// (Send), keeps it until the peer acknowledges it, and sends it again
// every Resend ticks while it is not (Due); the receiver applies frames
// in number order, each once (Accept), and acknowledges cumulatively
// (Ack, carried on every frame and on ack-only frames, number 0). So
// every message that changes the job's state is delivered at least once
// and applied exactly once, in the order it was sent, as long as both
// ends live.
//
// A link lives as long as the pair of process lives it joins: the
// coordinator keeps one per node life, a node one per coordinator life.
// When either end's life changes, the link is replaced by a new one and
// what the old one had not delivered is dropped: a new life of either end
// fences every session of the old (Eviction, Welcome), so nothing the old
// link carried still matters.
//
// S is what this end sends, R what it receives. Like the Coordinator, a
// Link is pure: the shell passes its clock as an
// abstract now (ticks) and does the sending.
type Link[S, R any] struct {
	// Resend is how many ticks a frame waits for its acknowledgement
	// before it is sent again; 0 means 1. The wait doubles with each
	// resend of the same oldest frame, up to 4 times Resend.
	Resend int64
	// Window is how many of the oldest unacknowledged frames a resend
	// sends again; 0 means 64. The receiver keeps frames that arrive
	// ahead of a gap, so the rest follow as the oldest are acknowledged.
	Window int
	// MaxPending bounds the frames kept for the peer's acknowledgement;
	// 0 means DefaultLinkMaxPending. MaxBytes bounds them in bytes as
	// Size counts a body (no byte bound without Size); 0 means
	// DefaultLinkMaxBytes. The frame that would go over either bound
	// declares the peer lost (Lost): see there.
	MaxPending int
	MaxBytes   int64
	Size       func(S) int
	// Meter, if set, totals what the link does for the process's metrics
	// (LinkMeter); the shell gives every link the same one.
	Meter *LinkMeter

	sent    uint64 // the number of the last frame sent
	unacked []LinkFrame[S]
	acked   uint64 // the peer acknowledged every frame through this
	due     int64  // when the oldest unacknowledged frame is resent
	tries   int    // resends of the oldest frame since it became the oldest
	bytes   int64  // the sizes of unacked, as Size counts them
	lost    bool   // the peer was declared lost (Lost)

	recv    uint64       // every frame through this was applied
	early   map[uint64]R // frames received ahead of a gap
	ackDue  bool         // frames were received since the last Ack
	maxHeld int          // bound on early; 0: 1024
	Stats   LinkStats    // counters, for metrics and tests
	_       [0]func()    // not comparable
}

// LinkFrame is one numbered frame a Link sends.
type LinkFrame[T any] struct {
	Seq  uint64 // 0: not numbered (an ack alone, or best effort)
	Body T
	size int // as Link.Size counted it
}

// The default bounds on what a Link keeps for its peer's acknowledgement
// (Link.MaxPending, Link.MaxBytes). A live peer acknowledges every frame
// within a few link ticks; only a peer that has been unreachable for a
// long while (a half-open connection gossip still sees alive) gets near.
const (
	DefaultLinkMaxPending = 4096
	DefaultLinkMaxBytes   = 64 << 20
)

// LinkStats counts what a Link did.
type LinkStats struct {
	Sent, Resent, Applied, Duplicates, Early, DroppedEarly uint64
	PeerLost                                               uint64 // 1 once Lost
}

// Send numbers body as the next frame and keeps it until acknowledged.
// The shell sends the frame now (with Ack as its acknowledgement).
//
// Over the bound (MaxPending, MaxBytes) the link declares its peer lost
// instead: it drops every frame it kept, and from then on it numbers and
// keeps nothing (the frame Send returns has Seq 0, sent once, best
// effort); it still receives. The shell then ends the peer's life the
// way it would if gossip had declared the peer dead (Lost). That is what
// keeps exactly-once: nothing the link dropped is ever applied late out
// of order on a life that goes on, because the life ends - the
// coordinator evicts the node life (Fail: the core fences its sessions
// and issues its uncommitted work again), a node ends the sessions of
// its life and rejoins as a new one - and a new life gets a new link.
// What the dropped frames carried is either fenced with the life or
// stated again to the new one (Welcomes, grants of reissued work; a
// trainer rolls back to its last acknowledged commit). Dropping only
// some frames instead (say, state that can be recomputed) would leave a
// gap the receiver waits on for good, or need a second numbering.
func (l *Link[S, R]) Send(body S, now int64) LinkFrame[S] {
	if l.lost {
		return LinkFrame[S]{Body: body}
	}
	f := LinkFrame[S]{Seq: l.sent + 1, Body: body}
	if l.Size != nil {
		f.size = l.Size(body)
	}
	maxN, maxB := l.MaxPending, l.MaxBytes
	if maxN <= 0 {
		maxN = DefaultLinkMaxPending
	}
	if maxB <= 0 {
		maxB = DefaultLinkMaxBytes
	}
	if len(l.unacked)+1 > maxN || (l.Size != nil && l.bytes+int64(f.size) > maxB) {
		l.drop()
		l.lost = true
		l.Stats.PeerLost++
		if m := l.Meter; m != nil {
			m.lost.Add(1)
		}
		return LinkFrame[S]{Body: body}
	}
	l.sent++
	if len(l.unacked) == 0 {
		l.tries = 0
		l.due = now + l.wait()
	}
	l.unacked = append(l.unacked, f)
	l.bytes += int64(f.size)
	l.Stats.Sent++
	if m := l.Meter; m != nil {
		m.sent.Add(1)
		m.pending.Add(1)
	}
	return f
}

// Lost reports whether the frames kept for the peer went over the bound
// (Send): the peer is lost, and the shell ends its life (the coordinator
// fails the node life; a node rejoins as a new life).
func (l *Link[S, R]) Lost() bool { return l.lost }

func (l *Link[S, R]) wait() int64 {
	r := max(l.Resend, 1)
	return r << min(l.tries, 2)
}

// Acked takes the peer's cumulative acknowledgement: every frame through
// seq arrived. Frames it no longer needs are released.
func (l *Link[S, R]) Acked(seq uint64, now int64) {
	if seq <= l.acked || seq > l.sent {
		return // old, or not a number this life sent (ignore)
	}
	k := 0
	for k < len(l.unacked) && l.unacked[k].Seq <= seq {
		l.bytes -= int64(l.unacked[k].size)
		var zero LinkFrame[S]
		l.unacked[k] = zero
		k++
	}
	l.unacked = l.unacked[k:]
	if m := l.Meter; m != nil {
		m.pending.Add(-int64(k))
	}
	if len(l.unacked) == 0 {
		l.unacked = nil
	}
	l.acked = seq
	l.tries = 0
	l.due = now + l.wait()
}

// Due returns the frames to send again now, oldest first: the Window
// oldest unacknowledged ones, once the oldest has waited its turn.
func (l *Link[S, R]) Due(now int64) []LinkFrame[S] {
	if len(l.unacked) == 0 || now < l.due {
		return nil
	}
	l.tries++
	l.due = now + l.wait()
	w := l.Window
	if w <= 0 {
		w = 64
	}
	out := l.unacked[:min(w, len(l.unacked))]
	l.Stats.Resent += uint64(len(out))
	if m := l.Meter; m != nil {
		m.resent.Add(uint64(len(out)))
	}
	return out
}

// Pending is how many frames wait for their acknowledgement.
func (l *Link[S, R]) Pending() int { return len(l.unacked) }

// Accept takes a received frame and returns the bodies to apply now, in
// order: none for a duplicate or a frame ahead of a gap (kept until the
// gap is filled), else this one and any kept ones that follow it.
func (l *Link[S, R]) Accept(f LinkFrame[R]) []R {
	if f.Seq == 0 {
		return nil // ack-only
	}
	l.ackDue = true // acknowledge duplicates too: the Ack was lost
	switch {
	case f.Seq <= l.recv:
		l.Stats.Duplicates++
		if m := l.Meter; m != nil {
			m.duplicates.Add(1)
		}
		return nil
	case f.Seq > l.recv+1:
		if l.early == nil {
			l.early = map[uint64]R{}
		}
		if _, ok := l.early[f.Seq]; !ok {
			if len(l.early) >= max(l.maxHeld, 1024) {
				l.Stats.DroppedEarly++ // the sender will send it again
				if m := l.Meter; m != nil {
					m.droppedHeld.Add(1)
				}
				return nil
			}
			l.early[f.Seq] = f.Body
			l.Stats.Early++
			if m := l.Meter; m != nil {
				m.held.Add(1)
			}
		}
		return nil
	}
	out := []R{f.Body}
	l.recv = f.Seq
	for {
		b, ok := l.early[l.recv+1]
		if !ok {
			break
		}
		delete(l.early, l.recv+1)
		l.recv++
		out = append(out, b)
	}
	l.Stats.Applied += uint64(len(out))
	if m := l.Meter; m != nil {
		m.applied.Add(uint64(len(out)))
	}
	return out
}

// Close ends the link when a new life of either end replaces it: what it
// had not delivered is dropped (and no longer counts as pending on its
// Meter). Closing twice changes nothing.
func (l *Link[S, R]) Close() {
	l.drop()
	l.early = nil
}

// drop drops the frames kept for the peer's acknowledgement.
func (l *Link[S, R]) drop() {
	if m := l.Meter; m != nil {
		m.pending.Add(-int64(len(l.unacked)))
	}
	clear(l.unacked)
	l.unacked, l.bytes = nil, 0
}

// Ack is the acknowledgement to send: every frame through it was
// applied. Calling it clears AckDue.
func (l *Link[S, R]) Ack() uint64 {
	l.ackDue = false
	return l.recv
}

// AckDue reports whether frames arrived since the last Ack: the shell
// sends an ack-only frame if it has nothing else to carry one.
func (l *Link[S, R]) AckDue() bool { return l.ackDue }

// NoJournal marks the incarnation of a coordinator that runs without a
// journal: it cannot learn its predecessor's incarnation, so it takes
// NoJournal with 63 random bits instead of the next number, and nodes
// follow any such life they have not followed before (NewerCoordinator).
// Lives with a journal are numbered in order, and a node never goes back
// to an older one.
const NoJournal = uint64(1) << 63

// NewerCoordinator reports whether a node that follows coordinator life
// cur should follow next, a life it has not followed before: the first
// it hears of, a later numbered life, or any change to or from a life
// without a journal.
func NewerCoordinator(cur, next uint64) bool {
	return next != cur && (cur == 0 || next > cur || cur&NoJournal != 0 || next&NoJournal != 0)
}
