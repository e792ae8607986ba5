package cluster

import (
	"fmt"
	"sort"
)

// RankCommit is a rank session's last applied commit in one epoch, as the
// durable state keeps it.
//
// Why it is kept: the coordinator makes a commit durable before it
// acknowledges it (see Ready), so a coordinator that dies between the two
// leaves a commit in the journal that its rank never heard about. The next
// life counts those positions as committed and never issues them again;
// the rank, told to roll back to its last acknowledged commit, would lose
// them. Likewise an Ack on its way to a node that is evicted meanwhile is
// dropped with the session. So the state keeps each rank's last commit
// per epoch, a Welcome hands the rank its records (RankSession.Committed),
// and the node acknowledges them to its trainer late: the trainer's model
// does include those steps (it commits after saving), and now its cursor
// says so too.
type RankCommit struct {
	Rank    string
	Session Fence
	Epoch   int
	Step    int64
	// Offset is the rank's stream offset committed through, in Session's
	// stream of Epoch.
	Offset int64
	// Gen is the journal generation that made the commit durable (the
	// shell's, see Coordinator.Persisted); 0: not yet written.
	Gen uint64
}

// keepCommit records r's last commit in ep, if its session made one, for
// after the stream is gone.
func (ep *epoch) keepCommit(r *rank, st *stream) {
	if st.committed == 0 {
		return // an older session's record, if any, stays the newest
	}
	if ep.commits == nil {
		ep.commits = make(map[string]RankCommit)
	}
	ep.commits[r.id] = RankCommit{Rank: r.id, Session: r.session, Epoch: ep.n, Step: st.step, Offset: st.committed, Gen: st.gen}
}

// keptEpochs returns the epochs whose commit records are kept: the open
// ones and the one that completed last.
func (c *Coordinator) keptEpochs() []*epoch {
	out := c.openEpochs()
	if c.lastClosed >= 0 && c.lastClosed < c.firstOpen {
		out = append([]*epoch{c.epochs[c.lastClosed]}, out...)
	}
	return out
}

// pastCommits returns the kept records of earlier sessions of rank id,
// oldest epoch first: what its new session's Welcome carries.
func (c *Coordinator) pastCommits(id string) []RankCommit {
	var out []RankCommit
	for _, ep := range c.keptEpochs() {
		if rc, ok := ep.commits[id]; ok {
			out = append(out, rc)
		}
	}
	return out
}

// commitsOf returns ep's records, live sessions' included, sorted by rank.
func (c *Coordinator) commitsOf(ep *epoch) []RankCommit {
	var out []RankCommit
	for id, rc := range ep.commits {
		if r := c.ranks[id]; r != nil {
			if st := r.streams[ep.n]; st != nil && st.committed > 0 {
				continue // the live session's commit supersedes it
			}
		}
		out = append(out, rc)
	}
	for _, r := range c.rankOrder {
		if st := r.streams[ep.n]; st != nil && st.committed > 0 {
			out = append(out, RankCommit{Rank: r.id, Session: r.session, Epoch: ep.n, Step: st.step, Offset: st.committed, Gen: st.gen})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out
}

// Persisted tells the coordinator that the shell wrote the Snapshot it
// took for the last Ready as journal generation gen: commits not yet
// durable before it are durable as of gen. Their Gen names the
// generation a resume token must restore.
func (c *Coordinator) Persisted(gen uint64) {
	for _, n := range c.unpersisted {
		if n != c.lastClosed {
			c.epochs[n].trails = nil // the journal holds them (and archives them)
		}
	}
	c.unpersisted = c.unpersisted[:0]
	for _, ep := range c.keptEpochs() {
		for id, rc := range ep.commits {
			if rc.Gen == 0 {
				rc.Gen = gen
				ep.commits[id] = rc
			}
		}
		for _, r := range c.rankOrder {
			if st := r.streams[ep.n]; st != nil && st.committed > 0 && st.gen == 0 {
				st.gen = gen
			}
		}
	}
}

// restoreCommits loads an epoch's records from a State.
func (ep *epoch) restoreCommits(rcs []RankCommit) error {
	for _, rc := range rcs {
		if rc.Rank == "" || rc.Offset <= 0 || rc.Step < 0 || rc.Epoch != ep.n {
			return fmt.Errorf("%w: epoch %d: unusable commit record %+v", ErrState, ep.n, rc)
		}
		if _, dup := ep.commits[rc.Rank]; dup {
			return fmt.Errorf("%w: epoch %d: two commit records for rank %q", ErrState, ep.n, rc.Rank)
		}
		if ep.commits == nil {
			ep.commits = make(map[string]RankCommit)
		}
		ep.commits[rc.Rank] = rc
	}
	return nil
}
