package cluster

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestTrailSteps(t *testing.T) {
	seg := func(n int64) []Range { return []Range{{Start: 100, End: 100 + n}} }
	for _, c := range []struct {
		name string
		t    Trail
		want []TrailStep // nil: an error naming want
		err  string
	}{
		{"full batches, first step from the first commit", Trail{Segs: seg(12), Commits: []TrailCommit{{Step: 5, Offset: 8}, {Step: 6, Offset: 12}}},
			[]TrailStep{{4, 0, 4, false}, {5, 4, 4, false}, {6, 8, 4, false}}, ""},
		{"a stream end's short batch, committed", Trail{Segs: seg(11), Commits: []TrailCommit{{Step: 1, Offset: 6}, {Step: 3, Offset: 11}}, Ends: []int64{6}},
			[]TrailStep{{0, 0, 4, false}, {1, 4, 2, false}, {2, 6, 4, false}, {3, 10, 1, false}}, ""},
		{"an end the stream grew past: one layout fits", Trail{Segs: seg(12), Commits: []TrailCommit{{Step: 2, Offset: 12}}, Ends: []int64{6}},
			[]TrailStep{{0, 0, 4, false}, {1, 4, 4, false}, {2, 8, 4, false}}, ""},
		{"an end whose commit is missing: two layouts fit", Trail{Segs: seg(9), Commits: []TrailCommit{{Step: 0, Offset: 4}, {Step: 2, Offset: 9}}, Ends: []int64{5}},
			[]TrailStep{{0, 0, 4, false}, {1, 4, 4, true}, {2, 8, 1, true}}, ""},
		{"the same, the node told the cut: the short batch was there", Trail{Segs: seg(9), Commits: []TrailCommit{{Step: 0, Offset: 4}, {Step: 2, Offset: 9}}, Ends: []int64{5}, Cuts: []int64{5}, CutsTold: true},
			[]TrailStep{{0, 0, 4, false}, {1, 4, 1, false}, {2, 5, 4, false}}, ""},
		{"the same, the node told no cut: the run went on past the end", Trail{Segs: seg(9), Commits: []TrailCommit{{Step: 0, Offset: 4}, {Step: 2, Offset: 9}}, Ends: []int64{5}, CutsTold: true},
			[]TrailStep{{0, 0, 4, false}, {1, 4, 4, false}, {2, 8, 1, false}}, ""},
		{"a first commit over a told cut: its first step follows", Trail{Segs: seg(9), Commits: []TrailCommit{{Step: 3, Offset: 9}}, Ends: []int64{5, 6}, Cuts: []int64{5}, CutsTold: true},
			[]TrailStep{{1, 0, 4, false}, {2, 4, 1, false}, {3, 5, 4, false}}, ""},
		{"more ends than weighed, cuts told: exact", Trail{Segs: seg(40), Commits: []TrailCommit{{Step: 0, Offset: 4}, {Step: 10, Offset: 40}},
			Ends: []int64{5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22}, Cuts: []int64{6, 22}, CutsTold: true},
			[]TrailStep{{0, 0, 4, false}, {1, 4, 2, false}, {2, 6, 4, false}, {3, 10, 4, false}, {4, 14, 4, false}, {5, 18, 4, false},
				{6, 22, 4, false}, {7, 26, 4, false}, {8, 30, 4, false}, {9, 34, 4, false}, {10, 38, 2, false}}, ""},
		{"a told cut the steps do not fit", Trail{Segs: seg(9), Commits: []TrailCommit{{Step: 0, Offset: 4}, {Step: 1, Offset: 9}}, Ends: []int64{5}, Cuts: []int64{5}, CutsTold: true},
			nil, "5 positions are not 1 steps"},
		{"a first commit of more positions than its steps hold", Trail{Segs: seg(9), Commits: []TrailCommit{{Step: 1, Offset: 9}}}, nil, "9 positions"},
		{"too few steps for the positions", Trail{Segs: seg(9), Commits: []TrailCommit{{Step: 0, Offset: 4}, {Step: 1, Offset: 9}}}, nil, "5 positions are not 1 steps"},
		{"segments short of the commits", Trail{Segs: seg(7), Commits: []TrailCommit{{Step: 1, Offset: 8}}}, nil, "holds 7 positions"},
	} {
		got, err := TrailSteps(c.t, 4)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want an error with %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	p, err := TrailPosition(Trail{Segs: []Range{{Start: 50, End: 52}, {Start: 10, End: 13}}}, 3)
	if err != nil || p != 11 {
		t.Errorf("TrailPosition: %d, %v; want 11 (the second segment's second)", p, err)
	}
}

// TrimCommits leaves out only commits whose absence changes nothing
// TrailSteps answers: checked over random sessions (full batches, stream
// ends, short batches, commits every k steps, some runs' end commits
// lost), with the cuts told and without. Told, every step is the one
// the session delivered.
func TestTrimCommitsKeepsSteps(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 3000 {
		batch := 1 + rng.Int64N(8)
		var tr Trail
		var truth []TrailStep
		var off, step int64
		for range 1 + rng.IntN(6) { // runs
			n := 1 + rng.Int64N(5*batch)
			for k := int64(0); k < n; k += batch {
				l := min(batch, n-k)
				truth = append(truth, TrailStep{Step: step, Offset: off, Len: l})
				off += l
				if rng.IntN(3) == 0 || k+batch >= n && rng.IntN(4) != 0 { // commits every few steps, and most runs' ends
					tr.Commits = append(tr.Commits, TrailCommit{Step: step, Offset: off})
				}
				step++
			}
			if n%batch != 0 {
				tr.Cuts = append(tr.Cuts, off)
			}
			if n%batch != 0 || rng.IntN(2) == 0 {
				tr.Ends = append(tr.Ends, off)
			}
		}
		if len(tr.Commits) == 0 || tr.Commits[len(tr.Commits)-1].Offset != off {
			tr.Commits = append(tr.Commits, TrailCommit{Step: step - 1, Offset: off})
		}
		tr.Segs = []Range{{Start: 0, End: off}}
		for len(tr.Ends) > 0 && tr.Ends[len(tr.Ends)-1] >= off {
			tr.Ends = tr.Ends[:len(tr.Ends)-1]
		}
		for len(tr.Cuts) > 0 && tr.Cuts[len(tr.Cuts)-1] >= off {
			tr.Cuts = tr.Cuts[:len(tr.Cuts)-1]
		}
		tr.CutsTold = rng.IntN(2) == 0
		want, err := TrailSteps(tr, batch)
		if err != nil {
			t.Fatalf("%d: %v (%+v)", i, err, tr)
		}
		if tr.CutsTold {
			// The first commit fixes the first step: the steps before it
			// that its span holds are all it knows of.
			first := truth[len(truth)-len(want):]
			if !reflect.DeepEqual(want, first) {
				t.Fatalf("%d: batch %d, %+v: cuts told, steps %+v; the session's %+v", i, batch, tr, want, truth)
			}
		}
		trimmed := tr
		trimmed.Commits = TrimCommits(tr, batch)
		got, err := TrailSteps(trimmed, batch)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%d: batch %d, %+v: trimmed to %+v: %+v, %v; want %+v", i, batch, tr, trimmed.Commits, got, err, want)
		}
	}
}

// A restored coordinator keeps the trails of the open epochs (the old
// life's sessions are gone, their trails stay) and Snapshot gives them
// back with the new life's.
func TestRestoreKeepsTrails(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Samples, cfg.Epochs, cfg.ShardSize = 20, 1, 4
	tr := Trail{Rank: "n1/0", Session: Fence{Incarnation: 1, Seq: 2}, Segs: []Range{{Start: 0, End: 4}}, Commits: []TrailCommit{{Step: 1, Offset: 4}}}
	s := State{Incarnation: 1, Seq: 9, Samples: 20, Block: 1, Window: 1, Epochs: []EpochState{{
		Committed: []Range{{Start: 0, End: 4}}, Trails: []Trail{tr},
		Commits: []RankCommit{{Rank: "n1/0", Session: tr.Session, Epoch: 0, Step: 1, Offset: 4, Gen: 1}},
	}}}
	c, err := Restore(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Snapshot().Epochs[0].Trails; !reflect.DeepEqual(got, []Trail{tr}) {
		t.Fatalf("trails after restore %+v, want %+v", got, []Trail{tr})
	}
	bad := s
	bad.Epochs = []EpochState{s.Epochs[0]}
	bad.Epochs[0].Trails = []Trail{{Rank: "n1/0", Segs: []Range{{Start: 0, End: 3}}, Commits: tr.Commits}}
	if _, err := Restore(cfg, bad); err == nil {
		t.Fatal("a trail holding fewer positions than its commits reach was restored")
	}
	// Where the node cut its runs comes back too; cuts out of order or
	// past the commits are refused.
	told := tr
	told.Cuts, told.CutsTold = []int64{3}, true
	s.Epochs[0].Trails = []Trail{told}
	if c, err := Restore(cfg, s); err != nil {
		t.Fatal(err)
	} else if got := c.Snapshot().Epochs[0].Trails; !reflect.DeepEqual(got, []Trail{told}) {
		t.Fatalf("trails after restore %+v, want %+v", got, []Trail{told})
	}
	for _, cuts := range [][]int64{{4}, {0}, {2, 2}} {
		told.Cuts = cuts
		bad.Epochs[0].Trails = []Trail{told}
		if _, err := Restore(cfg, bad); err == nil {
			t.Errorf("a trail with cuts %v below offset 4 was restored", cuts)
		}
	}
}

// TestCoverTrails: the trails of an epoch whose whole committed history
// the coordinator recorded cover exactly its committed positions, open
// or complete; a coordinator that took over an epoch from a state without
// trails (a journal of version 4) leaves the positions committed before
// it untraced, and CoverTrails counts them.
func TestCoverTrails(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Samples, cfg.ShardSize, cfg.Epochs, cfg.BatchSize = 40, 4, 1, 4
	// commitAll delivers and commits rank's leases of epoch 0 in order,
	// one step a lease (the leases are 4 positions, a batch), numbering
	// on from step first; it stops after stop leases (-1: all).
	commitAll := func(h *harness, rank string, first int64, stop int) {
		t.Helper()
		h.must(Request{Rank: rank, Session: h.session[rank], Epoch: 0, Through: 1 << 40})
		var off int64
		for k, l := range h.leases[rank] {
			if k == stop {
				return
			}
			off += l.Len()
			for _, ev := range []Event{
				LeaseDone{Rank: rank, Session: h.session[rank], Lease: l.Fence, Through: l.End},
				Commit{Rank: rank, Session: h.session[rank], Epoch: 0, Lease: l.Fence, Through: l.End, Offset: off, Step: first + int64(k), CutsTold: true},
			} {
				if err := h.step(ev); err != nil && !errors.Is(err, ErrStale) {
					t.Fatalf("%T: %v", ev, err)
				}
			}
		}
	}
	cover := func(s State) TrailCoverage {
		es := s.Epochs[0]
		return CoverTrails(EpochCommitted(es, s.Samples), s.Samples, es.Trails)
	}

	// A coordinator that recorded the whole epoch.
	h := newHarness(t, cfg)
	a := h.join("a", 1, 1)[0]
	commitAll(h, a, 0, 3)
	if cv := cover(h.c.Snapshot()); cv != (TrailCoverage{Committed: 12}) {
		t.Errorf("open epoch, all recorded: %+v, want 12 committed, all traced", cv)
	}
	old := h.c.Snapshot()

	// The same state as a journal of version 4 held it: no trails.
	old.Epochs[0].Trails = nil
	c, err := Restore(cfg, old)
	if err != nil {
		t.Fatal(err)
	}
	h2 := &harness{t: t, c: c, session: map[string]Fence{}, leases: map[string][]Lease{}, ends: map[string][]StreamEnd{}}
	h2.collect()
	b := h2.join("a", 1, 1)[0]
	commitAll(h2, b, 3, 2)
	if cv := cover(h2.c.Snapshot()); cv != (TrailCoverage{Committed: 20, Untraced: 12}) {
		t.Errorf("open epoch taken over from a state without trails: %+v, want 20 committed, 12 untraced", cv)
	}
	commitAll(h2, b, 3, -1)
	s := h2.c.Snapshot()
	if !s.Epochs[0].Complete || len(s.Epochs[0].Trails) == 0 {
		t.Fatalf("epoch not complete with its trails: %+v", s.Epochs[0])
	}
	if cv := cover(s); cv != (TrailCoverage{Committed: 40, Untraced: 12}) {
		t.Errorf("complete epoch taken over from a state without trails: %+v, want 40 committed, 12 untraced", cv)
	}

	// By hand: dropped positions are not committed; padding is no
	// position; a trail's position the epoch did not commit is stray.
	es := EpochState{Complete: true, Dropped: []Range{{Start: 38, End: 40}}}
	trails := []Trail{{Segs: []Range{{Start: 30, End: 39}}}, {Segs: []Range{{Start: 0, End: 10}, {Start: 40, End: 44}}}}
	if got := EpochCommitted(es, 40); len(got) != 1 || got[0] != (Range{0, 38}) {
		t.Errorf("committed %v, want [0, 38)", got)
	}
	if cv := CoverTrails(EpochCommitted(es, 40), 40, trails); cv != (TrailCoverage{Committed: 38, Untraced: 20, Stray: 1}) {
		t.Errorf("by hand: %+v, want 38 committed, 20 untraced, 1 stray", cv)
	}
}
