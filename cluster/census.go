package cluster

// Census counts what the coordinator holds now, for metrics and the
// status page: members, and the leases of open epochs by state.
type Census struct {
	Nodes int // live node lives
	// Leases counts the open epochs' leases not wholly committed, by
	// state: Active (being delivered), Delivered (the rank said it
	// delivered all of it; waiting for a commit), Revoking (asked to stop
	// early, not yet answered).
	Leases LeaseStates
	// Ranks lists the live ranks in join order.
	Ranks []RankCensus
}

// LeaseStates counts leases by state.
type LeaseStates struct {
	Active, Delivered, Revoking int
}

// RankCensus is one live rank.
type RankCensus struct {
	Rank, Node string
	Session    Fence
	// Epoch is the oldest open epoch in which the rank has a stream (-1:
	// none).
	Epoch int
	// Leases counts its leases not wholly committed, in open epochs.
	Leases int
	// Granted, Committed: positions of its streams in open epochs,
	// padding included.
	Granted, Committed int64
	// Step is the step of its last commit in Epoch (-1: none).
	Step int64
}

// Census returns what the coordinator holds now.
func (c *Coordinator) Census() Census {
	out := Census{Nodes: len(c.nodes)}
	for _, r := range c.rankOrder {
		rc := RankCensus{Rank: r.id, Node: r.node.id, Session: r.session, Epoch: -1, Step: -1}
		for _, ep := range c.openEpochs() {
			st := r.streams[ep.n]
			if st == nil {
				continue
			}
			if rc.Epoch < 0 {
				rc.Epoch = ep.n
				if st.committed > 0 {
					rc.Step = st.step
				}
			}
			rc.Granted += st.granted
			rc.Committed += st.committed
			for i := st.cseg; i < len(st.segs); i++ {
				seg := &st.segs[i]
				if i == st.cseg && seg.start+st.committed-st.csegOff >= seg.end {
					continue // wholly committed
				}
				rc.Leases++
				switch {
				case seg.revoking:
					out.Leases.Revoking++
				case seg.delivered >= seg.end:
					out.Leases.Delivered++
				default:
					out.Leases.Active++
				}
			}
		}
		out.Ranks = append(out.Ranks, rc)
	}
	return out
}
