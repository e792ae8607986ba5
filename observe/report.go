package observe

import (
	"math"
	"sort"

	"github.com/longshore/longshore/cluster/wire"
)

// NodeReport is the node's report for the coordinator's status page,
// read from s through t's rows whose Figure is a report's: each rank's
// samples, last delivered epoch and step, slots in use and trainers'
// stall accounting, the node's samples, seconds and failures. The
// throughput and the bottleneck are the caller's (observe/pipeline).
func (t Table) NodeReport(s Snapshot) *wire.NodeReport {
	v := t.Eval(s, GroupNode, GroupTrainer)
	r := &wire.NodeReport{}
	var ranks []RankSnapshot
	if s.Node != nil {
		ranks = s.Node.Ranks
	}
	for _, rk := range ranks {
		rr := &wire.RankReport{Rank: rk.Name, Epoch: -1, Step: -1}
		if x, ok := v.Lookup(FigRankSamples, rk.Name); ok {
			rr.Samples = int64(x.Value)
			r.Samples += rr.Samples
		}
		if x, ok := v.Lookup(FigRankSeconds, rk.Name); ok {
			r.Seconds = max(r.Seconds, x.Value)
		}
		if x, ok := v.Lookup(FigRankEpoch, rk.Name); ok {
			rr.Epoch = int64(x.Value)
		}
		if x, ok := v.Lookup(FigRankStep, rk.Name); ok {
			rr.Step = int64(x.Value)
		}
		if x, ok := v.Lookup(FigRankSlotsInUse, rk.Name); ok {
			rr.SlotsInUse = int64(x.Value)
		}
		if x, ok := v.Lookup(FigRankTrainerWait, rk.Name); ok {
			rr.StallSteps, rr.WaitUs = int64(x.Hist.Count), micros(x.Hist.Sum)
		}
		if x, ok := v.Lookup(FigRankTrainerCompute, rk.Name); ok {
			rr.ComputeUs = micros(x.Value)
		}
		r.Ranks = append(r.Ranks, rr)
	}
	for _, x := range v.Figure(FigFailures) {
		n := int64(x.Value)
		r.Failures = append(r.Failures, &wire.FailureCount{Reason: x.Labels[0] + "/" + x.Labels[1], Count: n})
		r.Failed += n
	}
	sort.Slice(r.Failures, func(i, j int) bool {
		a, b := r.Failures[i], r.Failures[j]
		return a.Count > b.Count || a.Count == b.Count && a.Reason < b.Reason
	})
	return r
}

// micros is seconds in whole microseconds.
func micros(seconds float64) int64 { return int64(math.Round(seconds * 1e6)) }
