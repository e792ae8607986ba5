package cluster

// Ready lists what the shell must do after Step: persist, then send. It
// is etcd raft's Ready: the coordinator decides, the shell does, in this
// order:
//
//  1. If Persist, write Snapshot() durably (issue 4's journal).
//  2. Send Acks — only after step 1: an acknowledged commit must survive a
//     coordinator crash, or a trainer would believe data consumed that a
//     new coordinator re-issues.
//  3. Send Welcomes, Grants, Revokes, Ends and Evictions, each to the
//     node that holds the rank. Their order does not matter: every
//     message carries what the node needs to order and fence it.
//  4. Call Advance.
type Ready struct {
	Welcomes  []Welcome
	Grants    []Lease
	Revokes   []Revoke
	Ends      []StreamEnd
	Acks      []Ack
	Evictions []Eviction
	// Fenced answers messages of sessions the coordinator fenced (see
	// StepFrom): the node ends each such session and rolls its trainer
	// back.
	Fenced []Fenced
	// EpochsCompleted lists epochs whose every sample is now committed.
	EpochsCompleted []int
	// Persist says the committed state changed since the last Ready.
	Persist bool
	// Done says every epoch is committed: the job is finished.
	Done bool
}

// IsEmpty reports whether there is nothing to do.
func (r *Ready) IsEmpty() bool {
	return len(r.Welcomes) == 0 && len(r.Grants) == 0 && len(r.Revokes) == 0 &&
		len(r.Ends) == 0 && len(r.Acks) == 0 && len(r.Evictions) == 0 && len(r.Fenced) == 0 &&
		len(r.EpochsCompleted) == 0 && !r.Persist && !r.Done
}

// Welcome gives a node's ranks their sessions: every message a rank sends
// carries its Session, and the coordinator drops messages from sessions
// it has fenced. FirstEpoch is the epoch each rank should request first.
type Welcome struct {
	Node        string
	Incarnation uint64
	Ranks       []RankSession
}

// RankSession is one rank's part of a Welcome.
type RankSession struct {
	Rank       string
	Session    Fence
	FirstEpoch int
	// Committed are the last commits of the rank's earlier sessions that
	// the coordinator holds, one per epoch still open (or just closed).
	// A node that ran such a session acknowledges each one to its trainer
	// if it had not heard the Ack: the coordinator made it durable, so
	// the trainer's last acknowledged commit is at least that (see
	// RankCommit).
	Committed []RankCommit
}

// Revoke asks a rank to stop lease Lease at From or as soon after as it
// can (it may have delivered further). The rank answers with LeaseDone
// carrying where it stopped; until then the tail stays the rank's.
type Revoke struct {
	Rank    string
	Session Fence
	Lease   Fence
	From    int64
}

// StreamEnd tells a rank that its stream of epoch Epoch is complete at
// Length positions, as the coordinator plans now: its trainer may end the
// epoch (flush a short last batch, commit) and request the next one. A
// later grant for the same epoch extends the stream (membership changed
// and the rank takes over re-issued work); a later StreamEnd supersedes.
// Leases is how many leases make up the stream (Index 0..Leases-1): the
// rank may have to wait for grants still in flight. Fence orders
// StreamEnds: one older than a StreamEnd already seen is late; ignore it.
// EpochComplete says every sample of the epoch is committed cluster-wide:
// the rank finishes delivering what it holds (padding, so its steps match
// the others') and need not commit the epoch further; Length is final.
type StreamEnd struct {
	Rank          string
	Session       Fence
	Epoch         int
	Length        int64
	Leases        int
	Fence         Fence
	EpochComplete bool
}

// Ack confirms a Commit once it is durable (see Ready).
type Ack struct {
	Rank    string
	Session Fence
	Epoch   int
	Offset  int64
	Step    int64
	// Token is the commit's resume token. The core leaves it empty; the
	// shell fills it in once the journal write that made the commit
	// durable has returned (package journal).
	Token string
	// Completed marks an ack the node side made itself (RankRuns): the
	// commit is of an epoch the coordinator completed, which it
	// acknowledges no more, so the trainer need not wait; the coordinator
	// never acknowledged this commit, and its committed history (the
	// commit log) does not hold it. Never on the wire.
	Completed bool
}

// Eviction tells a node that its life Incarnation is over: its sessions
// are fenced and their uncommitted work re-issued. A node that is in fact
// alive must drop its leases, roll its trainers back to their last
// acknowledged commit, and rejoin with a larger incarnation.
type Eviction struct {
	Node        string
	Incarnation uint64
}

// Fenced tells node Node that Session is over: a message of it was
// refused (ErrFenced). The node ends the session if it is still its
// rank's, rolling the trainer back to its last acknowledged commit; a
// later Welcome gives the rank a new one.
type Fenced struct {
	Node    string
	Session Fence
}
