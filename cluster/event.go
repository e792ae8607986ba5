package cluster

// Event is an input to Coordinator.Step: a membership change seen by the
// gossip layer, a message from a rank, or a tick of the shell's clock.
// The concrete types are the ones in this file.
type Event interface{ isEvent() }

// Join says a node is alive with these ranks (from gossip). Incarnation
// distinguishes lives of a node with the same name: a Join with a larger
// one replaces the old life (its uncommitted work is re-issued); a smaller
// or equal one is a stale or duplicate report and is ignored.
type Join struct {
	Node        string
	Incarnation uint64
	Ranks       []string // unique across the cluster, e.g. "<node>/<i>"
}

// Leave says a node left on purpose; Fail says gossip declared it dead.
// Both re-issue the node's uncommitted work and fence its ranks; they
// differ only in what the shell logs. Incarnation 0 matches any life.
type Leave struct {
	Node        string
	Incarnation uint64
}

// Fail: see Leave.
type Fail struct {
	Node        string
	Incarnation uint64
}

// Request asks for work: the rank can take leases of epoch Epoch until its
// epoch stream is Through positions long. Through is cumulative (a credit
// limit, not an increment), so a duplicated or reordered Request cannot
// over-lease: the coordinator keeps the largest seen. A Request for the
// epoch after the newest started one starts it.
type Request struct {
	Rank    string
	Session Fence
	Epoch   int
	Through int64
}

// Progress is a watermark: the rank delivered lease Lease's positions
// [Start, Through). It steers lease splitting; accounting rests on Commit.
type Progress struct {
	Rank    string
	Session Fence
	Lease   Fence
	Through int64
}

// LeaseDone says the rank will deliver nothing more of the lease than
// [Start, Through): Through == End when it finished, less when it answers
// a Revoke or hands the tail back. The positions [Through, End) return to
// the pool. Through must not be below what the rank already committed.
type LeaseDone struct {
	Rank    string
	Session Fence
	Lease   Fence
	Through int64
}

// Commit says the rank's trainer saved its model through step Step of
// epoch Epoch, which ends inside lease Lease at position Through
// (exclusive); Offset is the same point as a count of positions in the
// rank's epoch stream. The coordinator checks that Offset matches its own
// view of the stream; if the rank shortened an earlier lease and that
// LeaseDone is still in flight, the commit waits for it.
type Commit struct {
	Rank    string
	Session Fence
	Epoch   int
	Lease   Fence
	Through int64
	Offset  int64
	Step    int64 // echoed in the Ack, for the trainer's log
	// Cuts are where the session's runs of the epoch were cut: the
	// stream offsets, at or below Offset and ascending, at which a run
	// ended with a short batch (RankSteps.Cuts), the only places a step
	// held fewer positions than a batch. CutsTold says the node sent
	// them; a node from before it did not, and what its trail answers
	// may be uncertain where a stream end's commit was lost (TrailSteps).
	Cuts     []int64
	CutsTold bool
}

// Reset says the rank's trainer went back to its last acknowledged commit
// while its node stays (the trainer process restarted and reconnected):
// the session is fenced, what it holds beyond its commits is issued
// again, and the rank gets a new session in a Welcome of its own, as a
// rank of a rejoining node would.
type Reset struct {
	Rank    string
	Session Fence
}

// Tick advances the coordinator's abstract clock by one.
type Tick struct{}

func (Join) isEvent()      {}
func (Leave) isEvent()     {}
func (Fail) isEvent()      {}
func (Request) isEvent()   {}
func (Progress) isEvent()  {}
func (LeaseDone) isEvent() {}
func (Commit) isEvent()    {}
func (Reset) isEvent()     {}
func (Tick) isEvent()      {}
