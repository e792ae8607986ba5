package observe

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/coord"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/internal/clock"
)

// TestStatusTrainerStall: the status page shows each rank's stall share
// from its node's report, and the job's over every rank that reported.
func TestStatusTrainerStall(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	status := func(context.Context) (coord.Status, error) {
		now := clk.Now()
		return coord.Status{
			Census: cluster.Census{Nodes: 2, Ranks: []cluster.RankCensus{{Rank: "a/0", Node: "a"}, {Rank: "a/1", Node: "a"}, {Rank: "b/0", Node: "b"}}},
			Nodes: []coord.NodeStatus{
				{Node: "a", State: coord.NodeAlive, ReportAt: now, Report: &wire.NodeReport{Ranks: []*wire.RankReport{
					{Rank: "a/0", StallSteps: 10, WaitUs: 900_000, ComputeUs: 100_000}, // a slow feed: 90%
					{Rank: "a/1", StallSteps: 10, WaitUs: 100_000, ComputeUs: 900_000}, // 10%
				}}},
				{Node: "b", State: coord.NodeAlive, ReportAt: now, Report: &wire.NodeReport{Ranks: []*wire.RankReport{{Rank: "b/0"}}}}, // its trainer reports nothing
			},
		}, nil
	}
	p := &StatusPage{Status: status, Clock: clk, Job: JobInfo{Samples: 100, Epochs: 1}}
	s, err := p.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if r := s.Ranks[0]; r.TrainerSteps != 10 || !near(r.StallShare, 0.9) || !near(r.TrainerWaitSeconds, 0.9) || !near(r.TrainerComputeSeconds, 0.1) {
		t.Errorf("rank a/0 %+v: want 10 steps, 0.9 s waiting, 0.1 s computing, share 0.9", r)
	}
	if r := s.Ranks[1]; !near(r.StallShare, 0.1) {
		t.Errorf("rank a/1 share %v, want 0.1", r.StallShare)
	}
	if r := s.Ranks[2]; r.TrainerSteps != 0 || r.StallShare != -1 {
		t.Errorf("rank b/0 %+v: want no steps and share -1 (not reported)", r)
	}
	if w := s.TrainerWait; w.Steps != 20 || !near(w.WaitSeconds, 1) || !near(w.ComputeSeconds, 1) || !near(w.StallShare, 0.5) {
		t.Errorf("job-wide %+v: want 20 steps, 1 s waiting, 1 s computing, share 0.5", w)
	}
}
