package wire

// Bounds on a NodeReport, so that a node's report costs the control
// plane a few hundred bytes a second whatever the node holds.
const (
	MaxReportRanks    = 16
	MaxReportFailures = 8
	MaxReportText     = 240
)

// Bound cuts r to the bounds: the first MaxReportRanks ranks, the first
// MaxReportFailures failure groups (the caller orders them, largest
// first), strings to MaxReportText bytes (on a UTF-8 boundary).
func (r *NodeReport) Bound() *NodeReport {
	if r == nil {
		return nil
	}
	if len(r.Ranks) > MaxReportRanks {
		r.Ranks = r.Ranks[:MaxReportRanks]
	}
	if len(r.Failures) > MaxReportFailures {
		r.Failures = r.Failures[:MaxReportFailures]
	}
	r.Bottleneck = cut(r.Bottleneck)
	r.BottleneckReason = cut(r.BottleneckReason)
	r.BottleneckAdvice = cut(r.BottleneckAdvice)
	for _, f := range r.Failures {
		f.Reason = cut(f.Reason)
	}
	for _, rk := range r.Ranks {
		rk.Rank = cut(rk.Rank)
	}
	return r
}

func cut(s string) string {
	if len(s) <= MaxReportText {
		return s
	}
	i := MaxReportText
	for i > 0 && s[i]&0xC0 == 0x80 { // not in the middle of a rune
		i--
	}
	return s[:i]
}
