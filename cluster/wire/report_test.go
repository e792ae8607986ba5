package wire

import (
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
)

// TestReportBound: a report of a huge node with long reasons stays small
// once bound.
func TestReportBound(t *testing.T) {
	r := &NodeReport{Samples: 1 << 40, Seconds: 1e6, SamplesPerSecond: 1234.5, Bottleneck: "decode",
		BottleneckReason: strings.Repeat("é", 1000), BottleneckAdvice: strings.Repeat("x", 1000), Failed: 99}
	for i := range 100 {
		r.Ranks = append(r.Ranks, &RankReport{Rank: strings.Repeat("n", 300), Samples: 1 << 30, Epoch: 9, Step: int64(i), SlotsInUse: 4})
		r.Failures = append(r.Failures, &FailureCount{Reason: strings.Repeat("r", 500), Count: int64(i)})
	}
	b, err := proto.Marshal(r.Bound())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Ranks) != MaxReportRanks || len(r.Failures) != MaxReportFailures || !utf8.ValidString(r.BottleneckReason) || len(r.BottleneckReason) > MaxReportText {
		t.Errorf("bound: %d ranks, %d failures, reason %d bytes", len(r.Ranks), len(r.Failures), len(r.BottleneckReason))
	}
	if len(b) > 8<<10 {
		t.Errorf("a bound report is %d bytes", len(b))
	}
	t.Logf("the largest report: %d bytes", len(b))
}
