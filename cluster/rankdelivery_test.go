package cluster

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// acked is a TrainerAcks whose last acknowledged commit is a (and the
// only one of its session and epoch).
func acked(a Ack) *TrainerAcks {
	return &TrainerAcks{Last: &a, Steps: map[Fence]map[int]Ack{a.Session: {a.Epoch: a}}}
}

// TestRankDeliveryTable drives RankDelivery through the cases its shells
// meet, one table row per case: each row is a sequence of events and
// the outputs they must give.
func TestRankDeliveryTable(t *testing.T) {
	s1, s2 := Fence{1, 1}, Fence{1, 2}
	b := func(s Fence, e int, k int64) BatchAt { return BatchAt{s, e, k} }
	deliver := func(d *RankDelivery, bs ...BatchAt) error {
		for _, x := range bs {
			if a := d.Arrive(x, nil); a.Verdict != Deliver {
				return fmt.Errorf("arrive %v: %v, want deliver", x, a.Verdict)
			}
		}
		return nil
	}
	rows := []struct {
		name string
		run  func(d *RankDelivery) error
	}{
		{"a commit of a delivered step waits and its Ack answers it with the token", func(d *RankDelivery) error {
			if err := deliver(d, b(s1, 0, 0), b(s1, 0, 1)); err != nil {
				return err
			}
			c := d.Commit(1, 0, 1, nil)
			if c.Verdict != CommitWait || c.Session != s1 || c.ID == 0 {
				return fmt.Errorf("commit: %+v", c)
			}
			if ans := d.Ack(s1, Ack{Session: s1, Epoch: 0, Step: 0, Token: "t0"}); len(ans) != 0 {
				return fmt.Errorf("an ack of step 0 answered the commit of step 1: %+v", ans)
			}
			if ans := d.Ack(s2, Ack{Session: s2, Epoch: 0, Step: 5, Token: "x"}); len(ans) != 0 {
				return fmt.Errorf("an ack of another session answered: %+v", ans)
			}
			ans := d.Ack(s1, Ack{Session: s1, Epoch: 0, Step: 1, Token: "t1"})
			if len(ans) != 1 || ans[0] != (CommitAnswer{ID: c.ID, Epoch: 0, Step: 1, Token: "t1"}) || d.Waiting() != 0 {
				return fmt.Errorf("answers %+v, %d waiting", ans, d.Waiting())
			}
			return nil
		}},
		{"commits that are not valid are refused and not sent", func(d *RankDelivery) error {
			if c := d.Commit(1, 0, 0, nil); c.Verdict != CommitRolledBack {
				return fmt.Errorf("a commit before any batch: %v", c.Verdict)
			}
			if err := deliver(d, b(s1, 0, 3), b(s1, 0, 4)); err != nil {
				return err
			}
			for _, tc := range []struct {
				era  uint64
				step int64
				want CommitVerdict
			}{{1, 5, CommitNotDelivered}, {1, 2, CommitGoesBack}, {2, 4, CommitRolledBack}, {0, 4, CommitWait}} {
				if c := d.Commit(tc.era, 0, tc.step, nil); c.Verdict != tc.want {
					return fmt.Errorf("commit era %d step %d: %v, want %v", tc.era, tc.step, c.Verdict, tc.want)
				}
			}
			if c := d.Commit(1, 1, 0, nil); c.Verdict != CommitNotDelivered {
				return fmt.Errorf("a commit of an epoch never delivered: %v", c.Verdict)
			}
			return nil
		}},
		{"a commit already acknowledged is answered at once; one before it goes back", func(d *RankDelivery) error {
			if err := deliver(d, b(s1, 0, 0), b(s1, 0, 1), b(s1, 0, 2)); err != nil {
				return err
			}
			acks := acked(Ack{Session: s1, Epoch: 0, Step: 1, Token: "t1"})
			if c := d.Commit(1, 0, 1, acks); c.Verdict != CommitAnswered || c.Token != "t1" {
				return fmt.Errorf("commit of the acked step: %+v", c)
			}
			if c := d.Commit(1, 0, 0, acks); c.Verdict != CommitGoesBack || c.Last != 1 {
				return fmt.Errorf("commit before the acked step: %+v", c)
			}
			if d.Waiting() != 0 {
				return fmt.Errorf("%d waiting", d.Waiting())
			}
			return nil
		}},
		{"a batch of a new session holds: rollback to the last ack, waiting commits rolled back, then delivered in the new era", func(d *RankDelivery) error {
			if err := deliver(d, b(s1, 0, 0), b(s1, 0, 1)); err != nil {
				return err
			}
			c := d.Commit(1, 0, 1, nil)
			acks := acked(Ack{Session: s1, Epoch: 0, Step: 0, Token: "t0"})
			a := d.Arrive(b(s2, 0, 1), acks)
			if a.Verdict != Hold || a.Rollback.Era != 2 || a.Rollback.Last == nil || a.Rollback.Last.Token != "t0" {
				return fmt.Errorf("arrival of s2: %+v", a)
			}
			if len(a.Answers) != 1 || a.Answers[0] != (CommitAnswer{ID: c.ID, Epoch: 0, Step: 1, RolledBack: true}) {
				return fmt.Errorf("answers %+v", a.Answers)
			}
			if cc := d.Commit(1, 0, 1, acks); cc.Verdict != CommitRolledBack {
				return fmt.Errorf("a commit of the ended era: %v", cc.Verdict)
			}
			if a := d.Arrive(b(s2, 0, 1), acks); a.Verdict != Deliver || a.Era != 2 || d.Session() != s2 {
				return fmt.Errorf("the held batch again: %+v, session %v", a, d.Session())
			}
			if cc := d.Commit(2, 0, 1, acks); cc.Verdict != CommitWait || cc.Session != s2 {
				return fmt.Errorf("a commit in the new era: %+v", cc)
			}
			return nil
		}},
		{"a rollback with nothing acknowledged tells no commit", func(d *RankDelivery) error {
			if err := deliver(d, b(s1, 0, 0)); err != nil {
				return err
			}
			if a := d.Arrive(b(s2, 0, 0), nil); a.Verdict != Hold || a.Rollback != (TrainerRollback{Era: 2}) {
				return fmt.Errorf("arrival: %+v", a)
			}
			return nil
		}},
		{"attach: a stale token is refused and changes nothing", func(d *RankDelivery) error {
			if err := deliver(d, b(s1, 0, 0), b(s1, 0, 1)); err != nil {
				return err
			}
			acks := acked(Ack{Session: s1, Epoch: 0, Step: 0, Token: "t0"})
			at := d.Attach("old", acks, s1)
			if !at.Stale || at.Reset || at.Last.Token != "t0" || d.Era() != 1 || d.Session() != s1 {
				return fmt.Errorf("attach with a stale token: %+v, era %d", at, d.Era())
			}
			return nil
		}},
		{"attach: batches after the last ack reset the rank; the live session's batches are dropped", func(d *RankDelivery) error {
			if err := deliver(d, b(s1, 0, 0), b(s1, 0, 1)); err != nil {
				return err
			}
			c := d.Commit(1, 0, 1, nil)
			acks := acked(Ack{Session: s1, Epoch: 0, Step: 0, Token: "t0"})
			at := d.Attach("t0", acks, s1)
			if at.Stale || !at.Reset || at.ResetSession != s1 || at.Era != 2 || at.Last.Step != 0 {
				return fmt.Errorf("attach: %+v", at)
			}
			if len(at.Answers) != 1 || at.Answers[0].ID != c.ID || !at.Answers[0].RolledBack {
				return fmt.Errorf("answers %+v", at.Answers)
			}
			if a := d.Arrive(b(s1, 0, 2), acks); a.Verdict != Drop {
				return fmt.Errorf("a batch of the reset session: %v", a.Verdict)
			}
			if a := d.Arrive(b(s2, 0, 1), acks); a.Verdict != Deliver || a.Era != 2 {
				return fmt.Errorf("a batch of the next session: %+v", a)
			}
			return nil
		}},
		{"attach: nothing after the last ack, or nothing delivered, keeps the era", func(d *RankDelivery) error {
			if at := d.Attach("", nil, Fence{}); at.Reset || at.Stale || at.Era != 1 || at.Last != nil {
				return fmt.Errorf("first attach: %+v", at)
			}
			if err := deliver(d, b(s1, 0, 0)); err != nil {
				return err
			}
			acks := acked(Ack{Session: s1, Epoch: 0, Step: 0, Token: "t0"})
			if at := d.Attach("t0", acks, s1); at.Reset || at.Stale || at.Era != 1 {
				return fmt.Errorf("attach at the last ack: %+v", at)
			}
			return nil
		}},
		{"attach: a node process that acknowledged nothing takes any token", func(d *RankDelivery) error {
			if at := d.Attach("from-before-a-restart", &TrainerAcks{}, s1); at.Stale || at.Reset {
				return fmt.Errorf("attach: %+v", at)
			}
			return nil
		}},
		{"a commit before the last acknowledged one goes back, across epochs too", func(d *RankDelivery) error {
			if err := deliver(d, b(s1, 0, 3), b(s1, 0, 4), b(s1, 1, 0)); err != nil {
				return err
			}
			c := d.Commit(1, 1, 0, nil)
			if c.Verdict != CommitWait {
				return fmt.Errorf("commit of epoch 1 step 0: %+v", c)
			}
			d.Ack(s1, Ack{Session: s1, Epoch: 1, Step: 0, Token: "t10"})
			if c := d.Commit(1, 0, 4, nil); c.Verdict != CommitGoesBack {
				return fmt.Errorf("commit of epoch 0 step 4 after epoch 1 step 0 was acknowledged: %v", c.Verdict)
			}
			if c := d.Commit(1, 1, 0, nil); c.Verdict != CommitWait {
				return fmt.Errorf("the acknowledged commit again: %v", c.Verdict)
			}
			return nil
		}},
		{"an epoch before the last acknowledged commit's is forgotten: any commit of it goes back, delivered or not", func(d *RankDelivery) error {
			if err := deliver(d, b(s1, 0, 3), b(s1, 0, 4), b(s1, 1, 0), b(s1, 1, 1)); err != nil {
				return err
			}
			c := d.Commit(1, 1, 0, nil)
			d.Ack(s1, Ack{Session: s1, Epoch: 1, Step: 0, Token: "t10"})
			if c.Verdict != CommitWait || d.retained() != 1 {
				return fmt.Errorf("commit %v, %d entries kept after the ack", c.Verdict, d.retained())
			}
			for _, k := range []int64{2, 4, 9} {
				if c := d.Commit(1, 0, k, nil); c.Verdict != CommitGoesBack || c.LastEpoch != 1 || c.Last != 0 {
					return fmt.Errorf("commit of epoch 0 step %d: %+v", k, c)
				}
			}
			if c := d.Commit(1, 1, 1, nil); c.Verdict != CommitWait {
				return fmt.Errorf("a commit after the floor: %v", c.Verdict)
			}
			return nil
		}},
		{"cancel forgets a commit the shell could not send", func(d *RankDelivery) error {
			if err := deliver(d, b(s1, 0, 0)); err != nil {
				return err
			}
			c := d.Commit(1, 0, 0, nil)
			d.Cancel(c.ID)
			if ans := d.Ack(s1, Ack{Session: s1, Epoch: 0, Step: 0, Token: "t"}); len(ans) != 0 || d.Waiting() != 0 {
				return fmt.Errorf("a cancelled commit answered: %+v", ans)
			}
			return nil
		}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			if err := row.run(NewRankDelivery()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRankDeliveryStandalone drives RankDelivery as a standalone rank's
// shell does, one table row per case: each stream the shell opens is a
// session of its own (Opened), each commit that waits is acknowledged as
// soon as its token is made (Ack), and a connecting trainer brings its
// checkpoint's cursor, or none (Resume).
func TestRankDeliveryStandalone(t *testing.T) {
	s1, s2 := Fence{Seq: 1}, Fence{Seq: 2}
	b := func(s Fence, e int, k int64) BatchAt { return BatchAt{s, e, k} }
	cur := func(e int, k int64) *Cursor { return &Cursor{e, k} }
	deliver := func(d *RankDelivery, bs ...BatchAt) error {
		for _, x := range bs {
			if a := d.Arrive(x, nil); a.Verdict != Deliver {
				return fmt.Errorf("arrive %v: %v, want deliver", x, a.Verdict)
			}
		}
		return nil
	}
	// commit commits (e, k) and acknowledges it, as the shell does once
	// the token is made.
	commit := func(d *RankDelivery, e int, k int64) error {
		c := d.Commit(0, e, k, nil)
		if c.Verdict != CommitWait {
			return fmt.Errorf("commit %d/%d: %v, want wait", e, k, c.Verdict)
		}
		ans := d.Ack(c.Session, Ack{Session: c.Session, Epoch: e, Step: k, Token: fmt.Sprintf("t%d.%d", e, k)})
		if len(ans) != 1 || ans[0].ID != c.ID || ans[0].RolledBack {
			return fmt.Errorf("commit %d/%d answered %+v", e, k, ans)
		}
		return nil
	}
	refused := func(d *RankDelivery, e int, k int64, want CommitVerdict) error {
		if c := d.Commit(0, e, k, nil); c.Verdict != want {
			return fmt.Errorf("commit %d/%d: %v, want %v", e, k, c.Verdict, want)
		}
		return nil
	}
	resume := func(d *RankDelivery, from *Cursor, at Cursor, reopen bool) error {
		r := d.Resume(from)
		if r.At != at || r.Reopen != reopen {
			return fmt.Errorf("resume from %v: %+v, want at %v reopen %v", from, r, at, reopen)
		}
		return nil
	}
	rows := []struct {
		name string
		run  func(d *RankDelivery) error
	}{
		{"a trainer without a token resumes after the last commit; the stream is there: no reopen", func(d *RankDelivery) error {
			if err := resume(d, nil, Cursor{0, 0}, false); err != nil {
				return err
			}
			if err := deliver(d, b(s1, 0, 0), b(s1, 0, 1)); err != nil {
				return err
			}
			if err := commit(d, 0, 1); err != nil {
				return err
			}
			return resume(d, nil, Cursor{0, 2}, false)
		}},
		{"the stream ran past the last commit: a trainer without a token reopens it there, in a new era", func(d *RankDelivery) error {
			if err := deliver(d, b(s1, 0, 0), b(s1, 0, 1), b(s1, 0, 2)); err != nil {
				return err
			}
			if err := commit(d, 0, 0); err != nil {
				return err
			}
			if err := resume(d, nil, Cursor{0, 1}, true); err != nil {
				return err
			}
			if d.Era() != 2 {
				return fmt.Errorf("era %d after a reopen", d.Era())
			}
			if err := refused(d, 0, 1, CommitRolledBack); err != nil { // no stream until Opened
				return err
			}
			d.Opened(s2, Cursor{0, 1})
			if a := d.Arrive(b(s1, 0, 3), nil); a.Verdict != Drop {
				return fmt.Errorf("a batch of the old stream: %v", a.Verdict)
			}
			return deliver(d, b(s2, 0, 1))
		}},
		{"a trainer resumes from a checkpoint older than the last commit: reopened there, and may commit the step before it again", func(d *RankDelivery) error {
			if err := deliver(d, b(s1, 0, 0), b(s1, 0, 1), b(s1, 0, 2), b(s1, 0, 3), b(s1, 0, 4)); err != nil {
				return err
			}
			if err := commit(d, 0, 3); err != nil {
				return err
			}
			if err := resume(d, cur(0, 2), Cursor{0, 2}, true); err != nil {
				return err
			}
			d.Opened(s2, Cursor{0, 2})
			if err := commit(d, 0, 1); err != nil {
				return fmt.Errorf("the checkpoint's own step again: %v", err)
			}
			if err := refused(d, 0, 0, CommitGoesBack); err != nil {
				return err
			}
			if err := refused(d, 0, 3, CommitNotDelivered); err != nil { // the old stream's
				return err
			}
			if err := deliver(d, b(s2, 0, 2), b(s2, 0, 3)); err != nil {
				return err
			}
			if err := commit(d, 0, 3); err != nil {
				return err
			}
			// Without a token, the next trainer resumes after that commit.
			return resume(d, nil, Cursor{0, 4}, false)
		}},
		{"a token at the stream's cursor keeps the stream, and commits may not go back before it", func(d *RankDelivery) error {
			if err := deliver(d, b(s1, 0, 0), b(s1, 0, 1), b(s1, 0, 2)); err != nil {
				return err
			}
			if err := resume(d, cur(0, 3), Cursor{0, 3}, false); err != nil {
				return err
			}
			if d.Era() != 1 {
				return fmt.Errorf("era %d without a reopen", d.Era())
			}
			if err := refused(d, 0, 1, CommitGoesBack); err != nil {
				return err
			}
			return commit(d, 0, 2)
		}},
		{"commits across epochs: one before the last commit goes back; the step before the next epoch's start may be committed after a reopen there", func(d *RankDelivery) error {
			if err := deliver(d, b(s1, 0, 3), b(s1, 0, 4), b(s1, 1, 0), b(s1, 1, 1)); err != nil {
				return err
			}
			if err := commit(d, 1, 0); err != nil {
				return err
			}
			if err := refused(d, 0, 4, CommitGoesBack); err != nil {
				return err
			}
			if err := refused(d, 2, 0, CommitNotDelivered); err != nil {
				return err
			}
			// A checkpoint at epoch 0's end: the stream opens at epoch 1 step 0.
			if err := resume(d, cur(0, 5), Cursor{0, 5}, true); err != nil {
				return err
			}
			d.Opened(s2, Cursor{0, 5})
			if err := commit(d, 0, 4); err != nil {
				return err
			}
			if err := deliver(d, b(s2, 1, 0)); err != nil {
				return err
			}
			return commit(d, 1, 0)
		}},
		{"the delivery ledger's sequence: recommits, a crash, a clean reconnect, a token going back", func(d *RankDelivery) error {
			s3 := Fence{Seq: 3}
			if err := resume(d, nil, Cursor{0, 0}, false); err != nil {
				return err
			}
			if err := deliver(d, b(s1, 0, 0), b(s1, 0, 1), b(s1, 0, 2), b(s1, 0, 3), b(s1, 0, 4)); err != nil {
				return err
			}
			if err := refused(d, 0, 5, CommitNotDelivered); err != nil {
				return err
			}
			if err := refused(d, 1, 0, CommitNotDelivered); err != nil {
				return err
			}
			if err := commit(d, 0, 2); err != nil {
				return err
			}
			if err := refused(d, 0, 1, CommitGoesBack); err != nil {
				return err
			}
			if err := commit(d, 0, 2); err != nil {
				return fmt.Errorf("recommit: %v", err)
			}
			if err := resume(d, nil, Cursor{0, 3}, true); err != nil { // after a crash
				return err
			}
			d.Opened(s2, Cursor{0, 3})
			if err := commit(d, 0, 2); err != nil {
				return fmt.Errorf("commit of the resume point's batch: %v", err)
			}
			if err := deliver(d, b(s2, 0, 3), b(s2, 1, 0)); err != nil {
				return err
			}
			if err := commit(d, 1, 0); err != nil {
				return err
			}
			if err := resume(d, nil, Cursor{1, 1}, false); err != nil { // a clean reconnect
				return err
			}
			if err := resume(d, cur(0, 1), Cursor{0, 1}, true); err != nil {
				return err
			}
			d.Opened(s3, Cursor{0, 1})
			return resume(d, nil, Cursor{0, 1}, false) // the token reset the last commit
		}},
		{"a reopen that failed reopens again at the next trainer", func(d *RankDelivery) error {
			if err := deliver(d, b(s1, 0, 0), b(s1, 0, 1)); err != nil {
				return err
			}
			if err := resume(d, cur(0, 1), Cursor{0, 1}, true); err != nil {
				return err
			}
			// Not Opened: the open failed.
			if err := refused(d, 0, 0, CommitRolledBack); err != nil {
				return err
			}
			if err := resume(d, nil, Cursor{0, 1}, true); err != nil {
				return err
			}
			d.Opened(s2, Cursor{0, 1})
			return commit(d, 0, 0)
		}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			d := NewRankDelivery()
			d.Opened(s1, Cursor{})
			if err := row.run(d); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("opened mid-epoch: the step before the start may be committed, none before it", func(t *testing.T) {
		d := NewRankDelivery()
		d.Opened(s1, Cursor{2, 7})
		if err := resume(d, nil, Cursor{2, 7}, false); err != nil {
			t.Fatal(err)
		}
		if err := refused(d, 2, 5, CommitGoesBack); err != nil {
			t.Fatal(err)
		}
		if err := commit(d, 2, 6); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRankDeliverySeeded drives RankDelivery with seeded random events
// (batches of a few sessions, attaches with good and stale tokens,
// commits, acks, cancels) and checks what must hold after every one:
// every commit that waited is answered exactly once (by its Ack, a
// rollback or a reset) unless cancelled; an Ack answers only commits it
// covers; a commit waits only for a delivered step of the current
// session; eras only grow, and a delivery's era is the current one; a
// held batch is delivered when it arrives again; only the reset
// session's batches are dropped.
func TestRankDeliverySeeded(t *testing.T) {
	seen := map[string]int{}
	for seed := uint64(1); seed <= 200; seed++ {
		if err := rankDeliveryRun(seed, 400, seen); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
	// The runs met every case, or the checks above held vacuously.
	for _, k := range []string{"deliver", "drop", "hold", "wait", "answered", "rolled back", "not delivered", "goes back", "stale", "reset", "ack answers", "rollback answers", "reset answers"} {
		if seen[k] < 10 {
			t.Errorf("%q happened %d times in the seeded runs: %v", k, seen[k], seen)
		}
	}
}

func rankDeliveryRun(seed uint64, steps int, seen map[string]int) error {
	rng := rand.New(rand.NewPCG(seed, 0))
	d := NewRankDelivery()
	live := Fence{1, 1}
	step := map[Fence]int64{}
	var acks *TrainerAcks
	waiting := map[uint64]BatchAt{}
	answered := map[uint64]bool{}
	delivered := map[BatchAt]bool{}
	var dropped Fence
	era := d.Era()
	answer := func(ans []CommitAnswer, by string) error {
		if len(ans) > 0 {
			seen[by+" answers"]++
		}
		for _, a := range ans {
			w, ok := waiting[a.ID]
			if !ok || answered[a.ID] {
				return fmt.Errorf("%s answered commit %d, which is not waiting (answered before: %v)", by, a.ID, answered[a.ID])
			}
			if w.Epoch != a.Epoch || w.Step != a.Step {
				return fmt.Errorf("%s answered commit %d as %d/%d, it was %v", by, a.ID, a.Epoch, a.Step, w)
			}
			answered[a.ID] = true
			delete(waiting, a.ID)
		}
		return nil
	}
	for i := range steps {
		switch op := rng.IntN(10); {
		case op < 4: // a batch of the live session
			b := BatchAt{live, 0, step[live]}
			a := d.Arrive(b, acks)
			seen[a.Verdict.String()]++
			switch a.Verdict {
			case Drop:
				if b.Session != dropped {
					return fmt.Errorf("event %d: dropped %v, the reset session is %v", i, b, dropped)
				}
			case Hold:
				if a.Rollback.Era <= era {
					return fmt.Errorf("event %d: rollback to era %d from %d", i, a.Rollback.Era, era)
				}
				if err := answer(a.Answers, "rollback"); err != nil {
					return err
				}
				if len(waiting) != 0 {
					return fmt.Errorf("event %d: %d commits still wait after a rollback", i, len(waiting))
				}
				if again := d.Arrive(b, acks); again.Verdict != Deliver {
					return fmt.Errorf("event %d: the held batch %v again: %v", i, b, again.Verdict)
				}
				fallthrough
			case Deliver:
				delivered[b] = true
				step[live]++
			}
		case op < 5: // the session changes (rollback by the coordinator)
			live.Seq++
		case op < 7: // a commit of a step near the last delivered
			s := d.Session()
			k := step[s] - 3 + int64(rng.IntN(4))
			e := d.Era()
			if rng.IntN(5) == 0 {
				e = uint64(rng.IntN(int(d.Era()) + 1))
			}
			c := d.Commit(e, 0, k, acks)
			seen[c.Verdict.String()]++
			if c.Verdict == CommitWait {
				if s.IsZero() || c.Session != s || !delivered[BatchAt{s, 0, k}] {
					return fmt.Errorf("event %d: commit of %v/%d waits in session %v, not delivered there", i, s, k, c.Session)
				}
				if e != 0 && e != d.Era() {
					return fmt.Errorf("event %d: a commit of era %d waits in era %d", i, e, d.Era())
				}
				waiting[c.ID] = BatchAt{c.Session, 0, k}
				if rng.IntN(8) == 0 {
					d.Cancel(c.ID)
					delete(waiting, c.ID)
				}
			}
		case op < 9: // the coordinator acknowledges a step of the session
			s := d.Session()
			if s.IsZero() || step[s] == 0 {
				continue
			}
			a := Ack{Session: s, Epoch: 0, Step: int64(rng.IntN(int(step[s]))), Token: fmt.Sprintf("t%d", i)}
			ans := d.Ack(s, a)
			for _, x := range ans {
				if w := waiting[x.ID]; w.Session != s || w.Step > a.Step || x.Token != a.Token || x.RolledBack {
					return fmt.Errorf("event %d: ack %+v answered %+v (waiting %v)", i, a, x, w)
				}
			}
			if err := answer(ans, "ack"); err != nil {
				return err
			}
			for id, w := range waiting {
				if w.Session == s && w.Step <= a.Step {
					return fmt.Errorf("event %d: ack %+v left commit %d (%v) waiting", i, a, id, w)
				}
			}
			if acks == nil || acks.Last == nil || acks.Last.Step < a.Step || acks.Last.Session != s {
				acks = acked(a)
			}
		default: // a trainer connects, with the last token or a stale one
			tok := ""
			if acks != nil && acks.Last != nil {
				tok = acks.Last.Token
			}
			if rng.IntN(4) == 0 {
				tok = "stale"
			}
			before := d.Era()
			at := d.Attach(tok, acks, live)
			switch {
			case at.Stale:
				seen["stale"]++
				if d.Era() != before || tok == "" || acks == nil || acks.Last == nil || tok == acks.Last.Token {
					return fmt.Errorf("event %d: attach with %q stale: %+v", i, tok, at)
				}
			case at.Reset:
				seen["reset"]++
				if at.Era != before+1 || at.ResetSession != live {
					return fmt.Errorf("event %d: reset to era %d from %d, session %v", i, at.Era, before, at.ResetSession)
				}
				if err := answer(at.Answers, "reset"); err != nil {
					return err
				}
				dropped = live
				if rng.IntN(2) == 0 {
					live.Seq++ // the actor starts the next session at once
				} // else batches of the ended one still arrive first
			default:
				if at.Era != before {
					return fmt.Errorf("event %d: attach moved the era without a reset", i)
				}
			}
		}
		if d.Era() < era {
			return fmt.Errorf("event %d: era went back from %d to %d", i, era, d.Era())
		}
		era = d.Era()
		if d.Waiting() != len(waiting) {
			return fmt.Errorf("event %d: %d commits wait, the test counts %d", i, d.Waiting(), len(waiting))
		}
	}
	return nil
}

// ledgerModel is the delivery ledger a standalone rank decided through
// before RankDelivery did: the reference TestRankDeliveryStandaloneSeeded
// compares against.
type ledgerModel struct {
	next, committed Cursor
	lastStep        map[int]int64
}

func (l *ledgerModel) resume(tok *Cursor) (Cursor, bool) {
	at := l.committed
	if tok != nil {
		at = *tok
		l.committed = at
	}
	return at, at != l.next
}

func (l *ledgerModel) reopened(at Cursor) {
	l.next, l.lastStep = at, map[int]int64{}
	if at.Step > 0 {
		l.lastStep[at.Epoch] = at.Step - 1
	}
}

func (l *ledgerModel) delivered(e int, k int64) {
	l.next = CursorAfter(e, k)
	if s, ok := l.lastStep[e]; !ok || k > s {
		l.lastStep[e] = k
	}
}

func (l *ledgerModel) valid(e int, k int64) bool {
	last, ok := l.lastStep[e]
	return ok && k <= last && !CursorAfter(e, k).Less(l.committed)
}

// TestRankDeliveryStandaloneSeeded drives RankDelivery and the ledger
// model with the same seeded standalone events (batches across epochs
// of 4 steps, commits near the last batch, trainers connecting with no
// token, the last commit's, an older one or the stream's cursor, opens
// that fail) and checks they agree on every resume and every commit.
func TestRankDeliveryStandaloneSeeded(t *testing.T) {
	const steps = 4
	seen := map[string]int{}
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		d, l := NewRankDelivery(), &ledgerModel{lastStep: map[int]int64{}}
		s := Fence{Seq: 1}
		d.Opened(s, Cursor{})
		l.reopened(Cursor{})
		next := Cursor{} // the stream's next batch, normalized
		open := true
		var commits []Cursor
		for i := range 300 {
			switch op := rng.IntN(10); {
			case op < 5 && open: // the trainer takes a batch
				if next.Step >= steps {
					next = Cursor{next.Epoch + 1, 0}
				}
				if a := d.Arrive(BatchAt{s, next.Epoch, next.Step}, nil); a.Verdict != Deliver {
					t.Fatalf("seed %d event %d: batch %v: %v", seed, i, next, a.Verdict)
				}
				l.delivered(next.Epoch, next.Step)
				next.Step++
			case op < 8 && open: // a commit near the last batch
				e, k := next.Epoch, next.Step-1-int64(rng.IntN(3))
				if rng.IntN(4) == 0 {
					e, k = e-1, steps-1-int64(rng.IntN(2))
				}
				if k < 0 { // the ledger took a negative step; RankDelivery refuses it
					continue
				}
				want := l.valid(e, k)
				c := d.Commit(0, e, k, nil)
				if (c.Verdict == CommitWait) != want {
					t.Fatalf("seed %d event %d: commit %d/%d: %v, the ledger says valid %v", seed, i, e, k, c.Verdict, want)
				}
				if want {
					seen["commit"]++
					d.Ack(c.Session, Ack{Session: c.Session, Epoch: e, Step: k, Token: "t"})
					l.committed = CursorAfter(e, k)
					commits = append(commits, l.committed)
				} else {
					seen["refused"]++
				}
			default: // a trainer connects
				var tok *Cursor
				switch r := rng.IntN(4); {
				case r == 1 && len(commits) > 0:
					c := commits[rng.IntN(len(commits))]
					tok = &c
				case r == 2:
					c := l.next
					tok = &c
				case r == 3 && len(commits) > 0:
					c := commits[len(commits)-1]
					tok = &c
				}
				at, reopen := l.resume(tok)
				if !open {
					reopen = true // the model's next was voided when the open failed
				}
				res := d.Resume(tok)
				if res.At != at || res.Reopen != reopen {
					t.Fatalf("seed %d event %d: resume from %v: %+v, the ledger says at %v reopen %v", seed, i, tok, res, at, reopen)
				}
				if !reopen {
					seen["kept"]++
					continue
				}
				seen["reopen"]++
				if open = rng.IntN(6) != 0; !open {
					seen["open failed"]++
					continue
				}
				s.Seq++
				d.Opened(s, at)
				l.reopened(at)
				next = at
			}
		}
	}
	for _, k := range []string{"commit", "refused", "kept", "reopen", "open failed"} {
		if seen[k] < 50 {
			t.Errorf("%q happened %d times in the seeded runs: %v", k, seen[k], seen)
		}
	}
}

// TestRankDeliveryBounded drives RankDelivery through a long job's
// worth of sessions, epochs, commits and acks, as a standalone rank
// (a trainer that reconnects from a checkpoint reopens the stream: a
// session per reopen) and as a cluster rank (rollbacks and resets), and
// one session through many epochs, and checks that what it retains
// stays bounded by a small constant, however long the job runs.
func TestRankDeliveryBounded(t *testing.T) {
	const rounds, bound = 10000, 2
	check := func(t *testing.T, d *RankDelivery, i int) {
		t.Helper()
		if n := d.retained(); n > bound {
			t.Fatalf("round %d: %d entries retained, want at most %d", i, n, bound)
		}
	}
	commit := func(t *testing.T, d *RankDelivery, era uint64, e int, k int64) {
		t.Helper()
		c := d.Commit(era, e, k, nil)
		if c.Verdict != CommitWait {
			t.Fatalf("commit %d/%d: %v", e, k, c.Verdict)
		}
		if ans := d.Ack(c.Session, Ack{Session: c.Session, Epoch: e, Step: k, Token: "t"}); len(ans) != 1 {
			t.Fatalf("commit %d/%d answered %+v", e, k, ans)
		}
	}
	t.Run("standalone: a reopen per trainer reconnect", func(t *testing.T) {
		d := NewRankDelivery()
		s := Fence{Seq: 1}
		d.Opened(s, Cursor{})
		at := Cursor{}
		for i := range rounds {
			// Epoch i from at's step, then two batches of epoch i+1.
			for k := at.Step; k < 4; k++ {
				d.Arrive(BatchAt{s, i, k}, nil)
			}
			commit(t, d, 0, i, 3)
			d.Arrive(BatchAt{s, i + 1, 0}, nil)
			d.Arrive(BatchAt{s, i + 1, 1}, nil)
			commit(t, d, 0, i+1, 0)
			// The trainer reconnects from its checkpoint at epoch i+1
			// step 1: the stream ran past it.
			from := CursorAfter(i+1, 0)
			if r := d.Resume(&from); !r.Reopen || r.At != from {
				t.Fatalf("round %d: resume %+v", i, r)
			}
			s.Seq++
			d.Opened(s, from)
			at = from
			check(t, d, i)
		}
	})
	t.Run("cluster: a session per rollback or reset", func(t *testing.T) {
		d := NewRankDelivery()
		s := Fence{Incarnation: 1, Seq: 1}
		var acks *TrainerAcks
		for i := range rounds {
			for k := range int64(3) {
				if a := d.Arrive(BatchAt{s, i, k}, acks); a.Verdict != Deliver {
					t.Fatalf("round %d: batch %d: %v", i, k, a.Verdict)
				}
			}
			commit(t, d, d.Era(), i, 1)
			acks = acked(Ack{Session: s, Epoch: i, Step: 1, Token: "t"})
			if i%2 == 0 { // the coordinator rolls the rank back
				s.Seq++
				if a := d.Arrive(BatchAt{s, i + 1, 0}, acks); a.Verdict != Hold {
					t.Fatalf("round %d: new session: %v", i, a.Verdict)
				}
			} else { // the trainer reconnects: a reset
				if at := d.Attach("t", acks, s); !at.Reset {
					t.Fatalf("round %d: attach %+v", i, at)
				}
				s.Seq++
			}
			check(t, d, i)
		}
	})
	t.Run("one session through many epochs", func(t *testing.T) {
		d := NewRankDelivery()
		s := Fence{Incarnation: 1, Seq: 1}
		for e := range rounds {
			for k := range int64(3) {
				d.Arrive(BatchAt{s, e, k}, nil)
			}
			commit(t, d, d.Era(), e, 2)
			check(t, d, e)
		}
	})
}
