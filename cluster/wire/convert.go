// Package wire holds the protobuf messages that carry cluster control
// traffic over protoactor remote (wire.proto, generated into wire.pb.go by
// `make proto`), and the conversions between them and package cluster's
// events and effects. Conversions are total: a message that decodes with
// missing fields converts to zero values, which the coordinator and
// RankLeases refuse or ignore like any other stale message.
package wire

import (
	"fmt"

	"github.com/longshore/longshore/cluster"
)

// FenceOf converts a cluster.Fence.
func FenceOf(f cluster.Fence) *Fence { return &Fence{Incarnation: f.Incarnation, Seq: f.Seq} }

// Cluster converts back; a nil Fence is the zero fence (never issued).
func (f *Fence) Cluster() cluster.Fence {
	if f == nil {
		return cluster.Fence{}
	}
	return cluster.Fence{Incarnation: f.Incarnation, Seq: f.Seq}
}

// EventOf converts a rank's event (Request, Progress, LeaseDone, Commit).
func EventOf(ev cluster.Event) (*Event, error) {
	switch e := ev.(type) {
	case cluster.Request:
		return &Event{Event: &Event_Request{Request: &Request{
			Rank: e.Rank, Session: FenceOf(e.Session), Epoch: int64(e.Epoch), Through: e.Through}}}, nil
	case cluster.Progress:
		return &Event{Event: &Event_Progress{Progress: &Progress{
			Rank: e.Rank, Session: FenceOf(e.Session), Lease: FenceOf(e.Lease), Through: e.Through}}}, nil
	case cluster.LeaseDone:
		return &Event{Event: &Event_LeaseDone{LeaseDone: &LeaseDone{
			Rank: e.Rank, Session: FenceOf(e.Session), Lease: FenceOf(e.Lease), Through: e.Through}}}, nil
	case cluster.Commit:
		return &Event{Event: &Event_Commit{Commit: &Commit{
			Rank: e.Rank, Session: FenceOf(e.Session), Epoch: int64(e.Epoch), Lease: FenceOf(e.Lease),
			Through: e.Through, Offset: e.Offset, Step: e.Step, Cuts: e.Cuts, CutsTold: e.CutsTold}}}, nil
	case cluster.Reset:
		return &Event{Event: &Event_RankReset{RankReset: &RankReset{Rank: e.Rank, Session: FenceOf(e.Session)}}}, nil
	}
	return nil, fmt.Errorf("wire: %T is not a rank event", ev)
}

// Cluster converts a rank event back; nil for an empty or unknown one.
func (e *Event) Cluster() cluster.Event {
	switch m := e.GetEvent().(type) {
	case *Event_Request:
		r := m.Request
		return cluster.Request{Rank: r.Rank, Session: r.Session.Cluster(), Epoch: int(r.Epoch), Through: r.Through}
	case *Event_Progress:
		p := m.Progress
		return cluster.Progress{Rank: p.Rank, Session: p.Session.Cluster(), Lease: p.Lease.Cluster(), Through: p.Through}
	case *Event_LeaseDone:
		d := m.LeaseDone
		return cluster.LeaseDone{Rank: d.Rank, Session: d.Session.Cluster(), Lease: d.Lease.Cluster(), Through: d.Through}
	case *Event_Commit:
		c := m.Commit
		return cluster.Commit{Rank: c.Rank, Session: c.Session.Cluster(), Epoch: int(c.Epoch), Lease: c.Lease.Cluster(),
			Through: c.Through, Offset: c.Offset, Step: c.Step, Cuts: c.Cuts, CutsTold: c.CutsTold}
	case *Event_RankReset:
		return cluster.Reset{Rank: m.RankReset.Rank, Session: m.RankReset.Session.Cluster()}
	}
	return nil
}

// JoinOf, LeaveOf and FailOf convert membership events; the coordinator
// shell makes them from gossip, so they rarely travel.
func JoinOf(j cluster.Join) *Join {
	return &Join{Node: j.Node, Incarnation: j.Incarnation, Ranks: append([]string(nil), j.Ranks...)}
}

// Cluster converts back.
func (j *Join) Cluster() cluster.Join {
	return cluster.Join{Node: j.GetNode(), Incarnation: j.GetIncarnation(), Ranks: append([]string(nil), j.GetRanks()...)}
}

// LeaveOf converts a Leave.
func LeaveOf(l cluster.Leave) *Leave { return &Leave{Node: l.Node, Incarnation: l.Incarnation} }

// Cluster converts back.
func (l *Leave) Cluster() cluster.Leave {
	return cluster.Leave{Node: l.GetNode(), Incarnation: l.GetIncarnation()}
}

// FailOf converts a Fail.
func FailOf(f cluster.Fail) *Fail { return &Fail{Node: f.Node, Incarnation: f.Incarnation} }

// Cluster converts back.
func (f *Fail) Cluster() cluster.Fail {
	return cluster.Fail{Node: f.GetNode(), Incarnation: f.GetIncarnation()}
}

// WelcomeOf converts a Welcome; job is attached as is. Each rank's
// Committed records become Acks whose Token is token(record), or "" when
// token is nil.
func WelcomeOf(w cluster.Welcome, job *Job, token func(cluster.RankCommit) string) *Welcome {
	out := &Welcome{Node: w.Node, Incarnation: w.Incarnation, Job: job}
	for _, rs := range w.Ranks {
		ws := &RankSession{Rank: rs.Rank, Session: FenceOf(rs.Session), FirstEpoch: int64(rs.FirstEpoch)}
		for _, rc := range rs.Committed {
			a := CommitAckOf(rc)
			if token != nil {
				a.Token = token(rc)
			}
			ws.Committed = append(ws.Committed, a)
		}
		out.Ranks = append(out.Ranks, ws)
	}
	return out
}

// CommitAckOf converts a commit record to the Ack it stands for (without
// a token).
func CommitAckOf(rc cluster.RankCommit) *Ack {
	return &Ack{Rank: rc.Rank, Session: FenceOf(rc.Session), Epoch: int64(rc.Epoch), Offset: rc.Offset, Step: rc.Step}
}

// Cluster converts back (without the Job; commit records without their
// generation, which the Acks' tokens carry).
func (w *Welcome) Cluster() cluster.Welcome {
	out := cluster.Welcome{Node: w.GetNode(), Incarnation: w.GetIncarnation()}
	for _, rs := range w.GetRanks() {
		cs := cluster.RankSession{Rank: rs.Rank, Session: rs.Session.Cluster(), FirstEpoch: int(rs.FirstEpoch)}
		for _, a := range rs.GetCommitted() {
			cs.Committed = append(cs.Committed, cluster.RankCommit{
				Rank: a.GetRank(), Session: a.GetSession().Cluster(), Epoch: int(a.GetEpoch()), Step: a.GetStep(), Offset: a.GetOffset(),
			})
		}
		out.Ranks = append(out.Ranks, cs)
	}
	return out
}

// LeaseOf converts a Lease.
func LeaseOf(l cluster.Lease) *Lease {
	return &Lease{Rank: l.Rank, Session: FenceOf(l.Session), Fence: FenceOf(l.Fence), Epoch: int64(l.Epoch),
		Index: int64(l.Index), Start: l.Start, End: l.End, Pad: l.Pad}
}

// Cluster converts back.
func (l *Lease) Cluster() cluster.Lease {
	return cluster.Lease{Rank: l.GetRank(), Session: l.GetSession().Cluster(), Fence: l.GetFence().Cluster(),
		Epoch: int(l.GetEpoch()), Index: int(l.GetIndex()), Start: l.GetStart(), End: l.GetEnd(), Pad: l.GetPad()}
}

// RevokeOf converts a Revoke.
func RevokeOf(r cluster.Revoke) *Revoke {
	return &Revoke{Rank: r.Rank, Session: FenceOf(r.Session), Lease: FenceOf(r.Lease), From: r.From}
}

// Cluster converts back.
func (r *Revoke) Cluster() cluster.Revoke {
	return cluster.Revoke{Rank: r.GetRank(), Session: r.GetSession().Cluster(), Lease: r.GetLease().Cluster(), From: r.GetFrom()}
}

// StreamEndOf converts a StreamEnd.
func StreamEndOf(e cluster.StreamEnd) *StreamEnd {
	return &StreamEnd{Rank: e.Rank, Session: FenceOf(e.Session), Epoch: int64(e.Epoch), Length: e.Length,
		Leases: int64(e.Leases), Fence: FenceOf(e.Fence), EpochComplete: e.EpochComplete}
}

// Cluster converts back.
func (e *StreamEnd) Cluster() cluster.StreamEnd {
	return cluster.StreamEnd{Rank: e.GetRank(), Session: e.GetSession().Cluster(), Epoch: int(e.GetEpoch()),
		Length: e.GetLength(), Leases: int(e.GetLeases()), Fence: e.GetFence().Cluster(), EpochComplete: e.GetEpochComplete()}
}

// AckOf converts an Ack.
func AckOf(a cluster.Ack) *Ack {
	return &Ack{Rank: a.Rank, Session: FenceOf(a.Session), Epoch: int64(a.Epoch), Offset: a.Offset, Step: a.Step, Token: a.Token}
}

// Cluster converts back.
func (a *Ack) Cluster() cluster.Ack {
	return cluster.Ack{Rank: a.GetRank(), Session: a.GetSession().Cluster(), Epoch: int(a.GetEpoch()), Offset: a.GetOffset(), Step: a.GetStep(), Token: a.GetToken()}
}

// EvictionOf converts an Eviction.
func EvictionOf(e cluster.Eviction) *Eviction {
	return &Eviction{Node: e.Node, Incarnation: e.Incarnation}
}

// Cluster converts back.
func (e *Eviction) Cluster() cluster.Eviction {
	return cluster.Eviction{Node: e.GetNode(), Incarnation: e.GetIncarnation()}
}

// IsEmpty reports whether the mail carries nothing.
func (m *NodeMail) IsEmpty() bool {
	return len(m.Welcomes) == 0 && len(m.Evictions) == 0 && len(m.Grants) == 0 && len(m.Revokes) == 0 &&
		len(m.Ends) == 0 && len(m.Acks) == 0 && len(m.Fenced) == 0 && !m.Done && m.StoreBudget == nil
}
