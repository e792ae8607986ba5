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
