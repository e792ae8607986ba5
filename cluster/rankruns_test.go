package cluster

import (
	"fmt"
	"testing"
)

// TestRankRunsTrainerAcks: RankRuns is the one owner of what a trainer
// is told of acknowledgements. An Ack is taken once, in order, with a
// view whose Last is the newest; a commit waiting when the coordinator
// completes its epoch is acknowledged then, and a commit of a completed
// epoch at once, both with the newest token turned by CompletedToken; a
// late ack of the previous session is told too.
func TestRankRunsTrainerAcks(t *testing.T) {
	s := Fence{1, 1}
	r := NewRankRuns("a/0")
	r.CompletedToken = func(tok string, epoch int, step int64) string { return fmt.Sprintf("%s@%d.%d", tok, epoch, step) }
	r.StartSession(RankSession{Rank: "a/0", Session: s}, 1, 2)
	r.Grant(Lease{Rank: "a/0", Session: s, Fence: Fence{1, 2}, Epoch: 0, Index: 0, Start: 0, End: 6})
	r.End(StreamEnd{Rank: "a/0", Session: s, Epoch: 0, Length: 6, Leases: 1})
	given := 0
	for given < 6 {
		run, ok := r.Fill(6, false)
		if !ok {
			t.Fatalf("Fill gave nothing after %d positions", given)
		}
		given += len(run.Positions)
	}
	if news, view := r.TakeAcks(); news != nil || view != nil {
		t.Fatalf("acks before any: %v %v", news, view)
	}

	if err := r.Commit(0, 0); err != nil {
		t.Fatal(err)
	}
	r.Ack(Ack{Rank: "a/0", Session: s, Epoch: 0, Offset: 2, Step: 0, Token: "g1"})
	news, view := r.TakeAcks()
	if len(news) != 1 || news[0].Token != "g1" || view.Last == nil || view.Last.Step != 0 {
		t.Fatalf("after the ack of step 0: %v, last %v", news, view.Last)
	}
	if a, ok := view.Acked(s, 0); !ok || a.Step != 0 {
		t.Fatalf("view of epoch 0: %v %v", a, ok)
	}
	r.Ack(Ack{Rank: "a/0", Session: s, Epoch: 0, Offset: 2, Step: 0, Token: "g1"}) // duplicate
	if news, _ := r.TakeAcks(); news != nil {
		t.Fatalf("a duplicate ack told again: %v", news)
	}

	// Step 1 waits; the epoch completes: it is acknowledged then.
	if err := r.Commit(0, 1); err != nil {
		t.Fatal(err)
	}
	if news, _ := r.TakeAcks(); news != nil {
		t.Fatalf("a commit told acknowledged before its ack: %v", news)
	}
	r.End(StreamEnd{Rank: "a/0", Session: s, Epoch: 0, Length: 6, Leases: 1, EpochComplete: true})
	news, view = r.TakeAcks()
	if len(news) != 1 || news[0].Step != 1 || news[0].Token != "g1@0.1" || news[0].Session != s || *view.Last != news[0] {
		t.Fatalf("at the epoch's completion: %+v, last %+v", news, view.Last)
	}
	// Step 2, of the completed epoch, at once.
	if err := r.Commit(0, 2); err != nil {
		t.Fatal(err)
	}
	news, view = r.TakeAcks()
	if len(news) != 1 || news[0].Step != 2 || news[0].Token != "g1@0.1@0.2" || view.Last.Step != 2 {
		t.Fatalf("a commit of the completed epoch: %+v, last %+v", news, view.Last)
	}

	// The session ends; a Welcome reports a commit of it durable that was
	// told already: it is not told twice.
	s2 := Fence{2, 1}
	r.EndSession()
	r.LateAcks([]Ack{{Rank: "a/0", Session: s, Epoch: 0, Offset: 6, Step: 2, Token: "g2"}})
	if news, _ := r.TakeAcks(); news != nil {
		t.Fatalf("a late ack of a step already told, told again: %v", news)
	}
	r.StartSession(RankSession{Rank: "a/0", Session: s2}, 1, 2)
	if news, view := r.TakeAcks(); news != nil || view != nil {
		t.Fatalf("a session start told an ack: %v %+v", news, view)
	}
}

// TestRankRunsLateAckTold: a commit of the previous session whose Ack
// never arrived, reported durable by a Welcome, is told to the trainer
// before the new session starts, and becomes what it restores.
func TestRankRunsLateAckTold(t *testing.T) {
	s := Fence{1, 1}
	r := NewRankRuns("a/0")
	r.StartSession(RankSession{Rank: "a/0", Session: s}, 1, 2)
	r.Grant(Lease{Rank: "a/0", Session: s, Fence: Fence{1, 2}, Epoch: 0, Index: 0, Start: 0, End: 4})
	r.End(StreamEnd{Rank: "a/0", Session: s, Epoch: 0, Length: 4, Leases: 1})
	for given := 0; given < 4; {
		run, ok := r.Fill(4, false)
		if !ok {
			t.Fatal("Fill gave nothing")
		}
		given += len(run.Positions)
	}
	if err := r.Commit(0, 1); err != nil {
		t.Fatal(err)
	}
	r.EndSession()
	late := r.LateAcks([]Ack{{Rank: "a/0", Session: s, Epoch: 0, Offset: 4, Step: 1, Token: "g7"}})
	news, view := r.TakeAcks()
	if len(late) != 1 || len(news) != 1 || news[0].Token != "g7" || view.Last == nil || view.Last.Step != 1 || view.Last.Session != s {
		t.Fatalf("late %v, told %v, last %+v", late, news, view)
	}
	r.StartSession(RankSession{Rank: "a/0", Session: Fence{2, 1}}, 1, 2)
	if a, ok := view.Acked(s, 0); !ok || a.Step != 1 {
		t.Fatalf("the view lost the previous session's ack: %+v", a)
	}
}

// TestRankRunsStepsAfterRestart: a node process that is restarted has no
// acknowledged steps of its own; its new session's Welcome hands each
// rank the last commits of its earlier sessions (RankSession.Committed).
// The trainer's steps of an epoch go on right after that commit, as in
// a later session of one process life: the session's first batch of
// epoch 0 is the step after the committed one, and a commit of it is
// translated back to this session's stream. An epoch without a record
// starts at step 0. Before the fix, the new process numbered epoch 0
// from 0 again, and the same (epoch, rank, step) was committed twice.
func TestRankRunsStepsAfterRestart(t *testing.T) {
	s := Fence{3, 1} // a session of the restarted node's new process
	r := NewRankRuns("a/0")
	r.StartSession(RankSession{Rank: "a/0", Session: s, Committed: []RankCommit{
		{Rank: "a/0", Session: Fence{1, 2}, Epoch: 0, Step: 4, Offset: 10, Gen: 7},
	}}, 2, 2)
	for e := 0; e < 2; e++ {
		r.Grant(Lease{Rank: "a/0", Session: s, Fence: Fence{3, 2 + uint64(e)}, Epoch: e, Index: 0, Start: 20, End: 26})
		r.End(StreamEnd{Rank: "a/0", Session: s, Epoch: e, Length: 6, Leases: 1})
	}
	first := map[int]int64{}
	for given := 0; given < 12; {
		run, ok := r.Fill(12, false)
		if !ok {
			t.Fatalf("Fill gave nothing after %d positions: %v", given, r)
		}
		if _, seen := first[run.Epoch]; !seen {
			first[run.Epoch] = run.Step
		}
		given += len(run.Positions)
	}
	if first[0] != 5 || first[1] != 0 {
		t.Fatalf("first steps: epoch 0 at %d (want 5, after the committed step 4), epoch 1 at %d (want 0)", first[0], first[1])
	}
	if got := r.Steps().NextStep(0); got != 8 {
		t.Fatalf("epoch 0's next step %d, want 8 (steps 5..7 given)", got)
	}
	for _, c := range []struct {
		epoch int
		step  int64
		want  int64
	}{{0, 5, 2}, {0, 7, 6}, {1, 0, 2}, {1, 2, 6}} {
		if got, err := r.Steps().Through(c.epoch, c.step); err != nil || got != c.want {
			t.Fatalf("step %d of epoch %d goes through offset %d (%v), want %d", c.step, c.epoch, got, err, c.want)
		}
	}
	if _, err := r.Steps().Through(0, 4); err == nil {
		t.Fatal("step 4 of epoch 0, committed by the earlier process, translated in this session")
	}
	if err := r.Commit(0, 6); err != nil {
		t.Fatal(err)
	}
	var got []Commit
	for _, ev := range r.Leases().Messages() {
		if c, ok := ev.(Commit); ok {
			got = append(got, c)
		}
	}
	if len(got) != 1 || got[0].Step != 6 || got[0].Offset != 4 || got[0].Through != 24 {
		t.Fatalf("the commit of step 6 of epoch 0 queued %+v, want one through offset 4 (order position 24)", got)
	}

	// The job's batch size changes in this process life (a forced
	// resume): its steps are other steps, and start over.
	r.StartSession(RankSession{Rank: "a/0", Session: Fence{4, 1}, Committed: []RankCommit{
		{Rank: "a/0", Session: Fence{1, 2}, Epoch: 0, Step: 4, Offset: 10, Gen: 7},
	}}, 2, 3)
	if got := r.Steps().NextStep(0); got != 0 {
		t.Fatalf("after a change of batch size, epoch 0 starts at step %d, want 0", got)
	}
}

// TestRankRunsAcksBounded: over many sessions (every rollback or trainer
// reset starts one), RankRuns keeps the acknowledgements of the current
// and the previous session only, and what it tells the trainer
// (TakeAcks) no more: a long job's reconnects do not grow it.
func TestRankRunsAcksBounded(t *testing.T) {
	r := NewRankRuns("a/0")
	for i := range 10000 {
		s := Fence{1, uint64(i + 1)}
		r.StartSession(RankSession{Rank: "a/0", Session: s}, 2, 2)
		for e := range 2 {
			if !r.Ack(Ack{Rank: "a/0", Session: s, Epoch: e, Offset: 2, Step: 0, Token: fmt.Sprintf("g%d.%d", i, e)}) {
				t.Fatalf("session %d: ack of epoch %d refused", i, e)
			}
		}
		_, view := r.TakeAcks()
		if n := len(r.stepAcks); n > 2 || len(view.Steps) > 2 {
			t.Fatalf("session %d: acks of %d sessions kept, %d told", i, n, len(view.Steps))
		}
	}
}

// A restarted node's process acknowledged nothing of its rank, but the
// coordinator's welcome names the commits it holds from the node's
// earlier life: the newest is what the rank's trainer is told its
// checkpoint is (a trainer whose last Ack died with the old process
// learns it), and a token the trainer brings is still taken (this
// process cannot tell it stale). An Ack of this process's own replaces
// it.
func TestRankRunsInheritsTheLastCommitAfterRestart(t *testing.T) {
	r := NewRankRuns("a/0")
	old1, old2 := Fence{1, 2}, Fence{1, 5}
	r.LateAcks([]Ack{
		{Rank: "a/0", Session: old1, Epoch: 0, Step: 9, Offset: 40, Token: "g4"},
		{Rank: "a/0", Session: old2, Epoch: 1, Step: 2, Offset: 12, Token: "g6"},
		{Rank: "a/0", Session: old2, Epoch: 1, Step: 3, Offset: 16}, // not durable yet: no token
	})
	_, view := r.TakeAcks()
	if view == nil || view.Last != nil || view.Inherited == nil || view.Inherited.Epoch != 1 || view.Inherited.Step != 2 || view.Inherited.Token != "g6" {
		t.Fatalf("view after a restarted node's welcome: %+v, want no own ack and the inherited epoch 1 step 2 (g6)", view)
	}
	d := NewRankDelivery()
	at := d.Attach("g4", view, Fence{})
	if at.Stale || at.Last == nil || at.Last.Token != "g6" {
		t.Fatalf("attach with an older token: %+v, want taken, naming g6", at)
	}
	at = d.Attach("", view, Fence{})
	if at.Last == nil || at.Last.Epoch != 1 || at.Last.Step != 2 {
		t.Fatalf("attach without a token: %+v, want it to name epoch 1 step 2", at)
	}

	s := Fence{3, 1}
	r.StartSession(RankSession{Rank: "a/0", Session: s}, 2, 2)
	r.Ack(Ack{Rank: "a/0", Session: s, Epoch: 1, Step: 4, Offset: 4, Token: "g9"})
	_, view = r.TakeAcks()
	if at := d.Attach("g6", view, Fence{}); !at.Stale || at.Last.Token != "g9" {
		t.Fatalf("after this process's own ack: %+v, want the inherited commit's token stale against g9", at)
	}
}
