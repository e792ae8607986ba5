package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/delivery"
	"github.com/longshore/longshore/observe/pipeline"
)

// TestTrainerWaitReport: the trainers' reports reach the summary (job-wide
// and per rank; nothing when no trainer reported) and the node's report
// for the coordinator's status page (by rank name).
func TestTrainerWaitReport(t *testing.T) {
	ws := []delivery.TrainerWait{
		{Rank: 0, Steps: 10, Wait: 900 * time.Millisecond, Compute: 100 * time.Millisecond, HeadspaceSteps: 10, HeadspaceCompute: 250 * time.Millisecond},
		{Rank: 1, Steps: 10, Wait: 100 * time.Millisecond, Compute: 900 * time.Millisecond},
		{Rank: 2}, // an older client: nothing
	}
	s := trainerWait(ws)
	if s == nil || s.Steps != 20 || s.StallShare != 0.5 || len(s.Ranks) != 2 || s.Ranks[0].StallShare != 0.9 {
		t.Fatalf("summary %+v: want 20 steps at 0.5, ranks 0 (0.9) and 1", s)
	}
	var out bytes.Buffer
	printTrainerWait(&out, s)
	if !strings.Contains(out.String(), "trainer wait  50.0% of the trainers' time waiting for data") || !strings.Contains(out.String(), "rank 0 90.0%") {
		t.Errorf("summary line %q", out.String())
	}
	// rank 0's steps took 100 ms, its headspace steps 25 ms: 4x; job-wide
	// (rank 1 ran none) 2 s over 20 steps against 25 ms: 4x
	if s.Ranks[0].Gain != 4 || s.Ranks[1].Gain != 0 || s.Gain != 4 || s.HeadspaceSteps != 10 {
		t.Errorf("headspace: rank 0 %+v, rank 1 %+v, job %+v", s.Ranks[0].Headspace, s.Ranks[1].Headspace, s.Headspace)
	}
	if !strings.Contains(out.String(), "headspace     25.00 ms a step on replayed batches against 100.00 ms measured: a perfect loader would make the trainers 4.00x faster") {
		t.Errorf("summary lines %q", out.String())
	}
	if trainerWait(ws[2:]) != nil {
		t.Error("a summary with no trainer reporting")
	}

	names := []string{"n/0", "n/1", "n/2"}
	ob := &observer{rep: &pipeline.Reporter{},
		ranks: func() []pipeline.RankCounters {
			out := make([]pipeline.RankCounters, len(names))
			for i, n := range names {
				out[i] = pipeline.RankCounters{Name: n, Counters: actors.NewTally(i).Counters()}
			}
			return out
		},
		waits: func() []pipeline.TrainerWait {
			out := make([]pipeline.TrainerWait, len(ws))
			for i, w := range ws {
				out[i] = pipeline.TrainerWait{Rank: names[w.Rank], TrainerWait: w}
			}
			return out
		}}
	r := ob.nodeReport()
	if rr := r.Ranks[0]; rr.StallSteps != 10 || rr.WaitUs != 900_000 || rr.ComputeUs != 100_000 {
		t.Errorf("rank n/0 report %+v", rr)
	}
	if rr := r.Ranks[2]; rr.StallSteps != 0 {
		t.Errorf("rank n/2 report %+v: want no steps", rr)
	}
}
