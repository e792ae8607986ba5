package cluster

import "math"

// StoreShares divides a job-wide object-store request budget (requests
// per second, the coordinator's --job-store-rps) among the live nodes by
// their ranks: node n gets budget × ranks[n] / Σ ranks, so the sum never
// exceeds the budget and a host with more trainers fetches for more. A
// node with no ranks gets no share (it fetches nothing). The coordinator
// calls it whenever membership changes; with 4,096 hosts on one bucket
// it keeps the cluster under the bucket's per-prefix request limits,
// which per-node caps alone cannot (they add up with every host).
func StoreShares(budget float64, ranks map[string]int) map[string]float64 {
	total := 0
	for _, r := range ranks {
		total += max(r, 0)
	}
	out := make(map[string]float64, len(ranks))
	if budget <= 0 || total == 0 {
		return out
	}
	for n, r := range ranks {
		if r > 0 {
			out[n] = budget * float64(r) / float64(total)
		}
	}
	return out
}

// ShareChanged reports whether a node's share moved from old to new by
// enough to tell it (more than 1%, or to or from none): a join in a
// cluster of thousands moves every share a little, and mailing them all
// for each would be a storm for nothing.
func ShareChanged(old, new float64) bool {
	if old <= 0 || new <= 0 {
		return old != new
	}
	return math.Abs(new-old) > 0.01*old
}
