package cluster

import (
	"reflect"
	"testing"
)

// TestRankStepsThrough: a commit's step maps to the stream offset just
// after its batch, within the session's runs of its epoch; steps not
// given whole are refused.
func TestRankStepsThrough(t *testing.T) {
	s := NewRankSteps(4)
	s.StartSession()
	if got := s.Open(0, 0); got != 0 {
		t.Fatalf("first run of epoch 0 starts at step %d", got)
	}
	s.Give(8)
	s.End(false) // cut: epoch 1's position came next, epoch 0's stream grows later
	s.Open(1, 0)
	s.Give(6) // open, mid-batch
	cases := []struct {
		epoch   int
		step    int64
		through int64
		ok      bool
	}{
		{0, 0, 4, true},
		{0, 1, 8, true},
		{0, 2, 0, false}, // not delivered
		{1, 0, 4, true},
		{1, 1, 0, false}, // its batch is still open
		{2, 0, 0, false},
	}
	check := func() {
		t.Helper()
		for _, tc := range cases {
			got, err := s.Through(tc.epoch, tc.step)
			if (err == nil) != tc.ok || got != tc.through {
				t.Errorf("Through(%d, %d) = %d, %v; want %d, ok %v", tc.epoch, tc.step, got, err, tc.through, tc.ok)
			}
		}
	}
	check()
	s.End(true) // epoch 1's stream ends at 6: its short last batch is step 1
	s.Open(0, 8)
	s.Give(3)
	s.End(true)
	cases = []struct {
		epoch   int
		step    int64
		through int64
		ok      bool
	}{
		{0, 1, 8, true},
		{0, 2, 11, true}, // the grown stream's run, numbered on from step 2
		{0, 3, 0, false},
		{1, 1, 6, true},
		{1, 2, 0, false},
	}
	check()
	want := []StepRun{
		{Epoch: 0, FirstStep: 0, Base: 0, Length: 8, Ended: true},
		{Epoch: 1, FirstStep: 0, Base: 0, Length: 6, Ended: true, StreamEnd: true},
		{Epoch: 0, FirstStep: 2, Base: 8, Length: 3, Ended: true, StreamEnd: true},
	}
	if got := s.Runs(); !reflect.DeepEqual(got, want) {
		t.Errorf("runs\n got %+v\nwant %+v", got, want)
	}
	if s.NextStep(0) != 3 || s.NextStep(1) != 2 || s.NextStep(2) != 0 {
		t.Errorf("next steps %d %d %d, want 3 2 0", s.NextStep(0), s.NextStep(1), s.NextStep(2))
	}
	// Where the runs were cut, as a commit tells it: only the ends of
	// short last batches, at or below the commit's offset (epoch 0's
	// first run ended on a whole batch, its second short at 11).
	for _, c := range []struct {
		epoch   int
		through int64
		want    []int64
	}{
		{0, 8, nil}, {0, 10, nil}, {0, 11, []int64{11}}, {1, 4, nil}, {1, 6, []int64{6}}, {2, 4, nil},
	} {
		if got := s.Cuts(c.epoch, c.through); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Cuts(%d, %d) = %v, want %v", c.epoch, c.through, got, c.want)
		}
	}
}

// TestRankStepsAcrossSessions: a new session numbers each epoch on from
// its last acknowledged step, whichever session acknowledged it, and its
// offsets start again at 0; steps of earlier sessions do not map.
func TestRankStepsAcrossSessions(t *testing.T) {
	s := NewRankSteps(4)
	s.StartSession()
	s.Open(0, 0)
	s.Give(16)
	s.Acked(0, 1)
	s.Acked(0, 0) // late and older: ignored
	if st, ok := s.LastAcked(0); !ok || st != 1 {
		t.Fatalf("LastAcked(0) = %d, %v", st, ok)
	}
	if _, ok := s.LastAcked(1); ok {
		t.Fatal("epoch 1 acknowledged")
	}

	s.StartSession() // rolled back to step 1 of epoch 0
	if s.Current() != nil || len(s.Runs()) != 0 {
		t.Fatal("the last session's runs survived")
	}
	if got := s.Open(0, 0); got != 2 {
		t.Fatalf("next session's run of epoch 0 starts at step %d, want 2", got)
	}
	s.Give(4)
	if got, err := s.Through(0, 2); err != nil || got != 4 {
		t.Errorf("Through(0, 2) = %d, %v; want 4", got, err)
	}
	if _, err := s.Through(0, 1); err == nil {
		t.Error("a step of the last session maps in this one")
	}
	s.End(false)
	if got := s.Open(1, 0); got != 0 {
		t.Errorf("epoch 1, never acknowledged, starts at step %d", got)
	}
}

// TestRankStepsLateAckBeforeFirstRun: a commit of an earlier session that
// is acknowledged after the new session started, but before it opened a
// run of that epoch, moves the epoch's first step past it; once a run of
// the epoch is open its numbering stays.
func TestRankStepsLateAckBeforeFirstRun(t *testing.T) {
	s := NewRankSteps(4)
	s.StartSession()
	s.Open(0, 0)
	s.Give(8)
	s.End(false)
	s.Acked(0, 0)
	s.StartSession() // the next session: epoch 0 numbers on from step 1
	if got := s.NextStep(0); got != 1 {
		t.Fatalf("NextStep(0) = %d after step 0's ack, want 1", got)
	}
	s.Acked(0, 1) // the old session's commit of step 1, acknowledged late
	if got := s.NextStep(0); got != 2 {
		t.Fatalf("NextStep(0) = %d after a late ack of step 1, want 2", got)
	}
	if got := s.Open(0, 0); got != 2 {
		t.Fatalf("the session's first run of epoch 0 starts at step %d, want 2", got)
	}
	s.Give(4)
	s.Acked(0, 5) // cannot renumber an open run
	if r := s.Current(); r.FirstStep != 2 {
		t.Fatalf("an ack renumbered the open run: %+v", r)
	}
}
