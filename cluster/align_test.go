package cluster

import "testing"

// TestAlignedLeases: with Align (a mixture's rounds), every lease and
// every quota is whole units, on the plain grid whatever the order's
// block — also after a node fails mid-epoch having committed part of a
// lease, and its uncommitted positions are leased again — so a rank's
// batch of whole rounds holds each source in its exact count.
func TestAlignedLeases(t *testing.T) {
	const unit = 8
	cfg := DefaultConfig()
	cfg.Samples, cfg.ShardSize, cfg.Align = 96, 16, unit // 12 units; 5 ranks: a quota of 24, not ceil(96/5) = 20
	cfg.Block, cfg.Window = 16, 4                        // a block grid would cut by the order's windows
	h := newHarness(t, cfg)
	a := h.join("a", 1, 2)
	b := h.join("b", 1, 3)
	all := append(append([]string(nil), a...), b...)
	for _, id := range all {
		h.must(Request{Rank: id, Session: h.session[id], Epoch: 0, Through: 1 << 40})
	}
	checkAligned := func(when string) {
		t.Helper()
		for _, id := range all {
			for _, l := range h.leases[id] {
				start, end := l.Start, l.End
				if l.Pad {
					start, end = start-cfg.Samples, end-cfg.Samples
				}
				if start%unit != 0 || end%unit != 0 || l.Len() == 0 {
					t.Errorf("%s: lease %+v is not whole units of %d", when, l, unit)
				}
			}
		}
	}
	for _, id := range all {
		if n, _ := h.granted(id, 0); n != 24 {
			t.Errorf("%s granted %d, want the quota 24 (20 rounded up to whole units)", id, n)
		}
	}
	checkAligned("start")
	// b/0 commits its first lease's first unit, then b dies.
	l := h.leases[b[0]][0]
	h.must(Progress{Rank: b[0], Session: h.session[b[0]], Lease: l.Fence, Through: l.Start + unit})
	h.must(Commit{Rank: b[0], Session: h.session[b[0]], Epoch: 0, Lease: l.Fence, Through: l.Start + unit, Offset: unit})
	h.must(Fail{Node: "b", Incarnation: 1})
	for _, id := range a {
		h.must(Request{Rank: id, Session: h.session[id], Epoch: 0, Through: 1 << 40})
	}
	checkAligned("after b failed")
	var total int64
	for _, id := range a {
		n, _ := h.granted(id, 0)
		if n%unit != 0 {
			t.Errorf("%s granted %d after b failed: not whole units", id, n)
		}
		total += n
	}
	if total < cfg.Samples-unit {
		t.Errorf("a's ranks hold %d positions after b failed, want at least the %d b had not committed and theirs", total, cfg.Samples-unit)
	}
	for _, id := range a {
		h.finish(id, 0)
	}
	if !h.done {
		t.Errorf("job not done: %+v", h.c.Epoch(0))
	}
	bad := cfg
	bad.ShardSize = 12
	if err := bad.Validate(); err == nil {
		t.Error("a shard of 12 with Align 8: no error")
	}
}

// TestDynamicAlignedSteals: with Dynamic and Align (a mixture's rounds),
// a straggler's lease is split at a whole unit: the coordinator's Revoke
// names a unit boundary, and the rank (RankLeases with the unit), having
// taken past it, stops at the next boundary, not where it got; so every
// lease, the stolen tail's included, stays whole units and each rank's
// batch of whole rounds stays exact.
func TestDynamicAlignedSteals(t *testing.T) {
	const unit = 8
	cfg := DefaultConfig()
	cfg.Samples, cfg.ShardSize, cfg.Align, cfg.Balance, cfg.StealMin = 96, 96, unit, Dynamic, 4
	h := newHarness(t, cfg)
	slow := h.join("slow", 1, 1)[0]
	fast := h.join("fast", 1, 1)[0]
	h.must(Request{Rank: slow, Session: h.session[slow], Epoch: 0, Through: 1})
	big := h.leases[slow][0]
	if big.Start != 0 || big.End != 96 {
		t.Fatalf("lease %+v, want the whole shard", big)
	}
	rl := NewRankLeases(RankSession{Rank: slow, Session: h.session[slow]}, 1)
	rl.SetAlign(unit)
	rl.Grant(big)
	h.must(Progress{Rank: slow, Session: h.session[slow], Lease: big.Fence, Through: 10})
	h.must(Request{Rank: fast, Session: h.session[fast], Epoch: 0, Through: 10})
	if len(h.revokes) != 1 || h.revokes[0].From%unit != 0 || h.revokes[0].From <= 10 {
		t.Fatalf("revokes %+v, want one from a unit boundary past 10 (half of the 86 undelivered: 53, rounded up to 56)", h.revokes)
	}
	// The slow rank has taken further than the coordinator knew, into
	// the round after the revoke's boundary: it finishes that round.
	for range h.revokes[0].From + 3 {
		if _, ok := rl.Take(); !ok {
			t.Fatal("nothing to take")
		}
	}
	rl.Revoke(h.revokes[0])
	msgs := rl.Messages()
	if len(msgs) != 1 {
		t.Fatalf("rank messages %+v, want its LeaseDone", msgs)
	}
	done := msgs[0].(LeaseDone)
	if want := h.revokes[0].From + unit; done.Through != want {
		t.Fatalf("the rank stopped at %d, want %d (the end of the round it was in)", done.Through, want)
	}
	h.must(done)
	for _, id := range []string{slow, fast} {
		for _, l := range h.leases[id] {
			if l.Start%unit != 0 || l.End%unit != 0 {
				t.Errorf("%s: lease %+v is not whole units of %d", id, l, unit)
			}
		}
	}
	if got := h.leases[fast]; len(got) != 1 || got[0].Start != done.Through || got[0].End != 96 {
		t.Fatalf("fast rank leases %+v, want [%d, 96)", got, done.Through)
	}
	h.must(Commit{Rank: slow, Session: h.session[slow], Epoch: 0, Lease: big.Fence, Through: done.Through, Offset: done.Through})
	h.finish(fast, 0)
	if !h.done {
		t.Fatalf("not done: %+v", h.c.Epoch(0))
	}
}

// TestRankLeasesAlignedRevoke: a rank with a unit stops a revoked lease
// at the first unit boundary at or after both the revoke's From (one not
// on a boundary, from a coordinator that does not align, included) and
// where it has got; without a unit, where they say.
func TestRankLeasesAlignedRevoke(t *testing.T) {
	s := Fence{1, 1}
	for _, tc := range []struct {
		align       int
		taken, from int64
		want        int64
	}{
		{8, 3, 13, 16}, {8, 20, 13, 24}, {8, 16, 16, 16}, {8, 30, 13, 32}, {8, 2, 16, 16},
		{0, 3, 13, 13}, {0, 20, 13, 20}, {1, 20, 13, 20},
	} {
		r := NewRankLeases(RankSession{Rank: "a/0", Session: s}, 1)
		r.SetAlign(tc.align)
		l := Lease{Rank: "a/0", Session: s, Fence: Fence{1, 2}, Epoch: 0, Index: 0, Start: 0, End: 32}
		r.Grant(l)
		for range tc.taken {
			r.Take()
		}
		r.Messages()
		r.Revoke(Revoke{Rank: "a/0", Session: s, Lease: l.Fence, From: tc.from})
		got := r.Messages()
		if len(got) != 1 || got[0].(LeaseDone).Through != tc.want {
			t.Errorf("%+v: %+v, want a LeaseDone through %d", tc, got, tc.want)
		}
	}
}
