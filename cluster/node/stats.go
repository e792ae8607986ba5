package node

import "github.com/longshore/longshore/actors"

// Counters returns the rank's pipeline counters over every session of
// this process life (actors.Tally): what the node's summary and metrics
// report for it. Safe for concurrent use.
func (r *Rank) Counters() actors.Counters { return r.tally.Counters() }

// Failures returns the rank's failure report over every session of this
// process life. Safe for concurrent use.
func (r *Rank) Failures() actors.FailureReport { return r.tally.Failures() }

// RankCounters returns each rank's Counters, by rank.
func (n *Node) RankCounters() []actors.Counters {
	out := make([]actors.Counters, len(n.ranks))
	for i, r := range n.ranks {
		out[i] = r.Counters()
	}
	return out
}

// Failures returns the node's failure report: its ranks' merged.
func (n *Node) Failures() actors.FailureReport {
	var out actors.FailureReport
	for _, r := range n.ranks {
		out = actors.MergeReports(out, r.Failures())
	}
	return out
}
