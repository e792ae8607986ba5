package cluster

import "testing"

// TestCensus follows one rank's leases through their states, and a
// departed node's uncommitted positions into Returned.
func TestCensus(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Samples, cfg.ShardSize = 20, 5
	h := newHarness(t, cfg)
	a := h.join("a", 1, 1)[0]
	b := h.join("b", 1, 1)[0]
	if c := h.c.Census(); c.Nodes != 2 || len(c.Ranks) != 2 || c.Ranks[0].Rank != a || c.Ranks[1].Node != "b" {
		t.Fatalf("census after joins: %+v", c)
	}
	h.must(Request{Rank: a, Session: h.session[a], Epoch: 0, Through: 10})
	l0, l1 := h.leases[a][0], h.leases[a][1]
	c := h.c.Census()
	if c.Leases != (LeaseStates{Active: 2}) || c.Ranks[0].Leases != 2 || c.Ranks[0].Granted != 10 || c.Ranks[0].Epoch != 0 || c.Ranks[0].Step != -1 {
		t.Fatalf("two leases out: %+v", c)
	}
	h.must(LeaseDone{Rank: a, Session: h.session[a], Lease: l0.Fence, Through: l0.End})
	if c := h.c.Census(); c.Leases != (LeaseStates{Active: 1, Delivered: 1}) {
		t.Errorf("one lease delivered: %+v", c.Leases)
	}
	h.must(Commit{Rank: a, Session: h.session[a], Epoch: 0, Lease: l0.Fence, Through: l0.End, Offset: l0.Len(), Step: 1})
	c = h.c.Census()
	if c.Leases != (LeaseStates{Active: 1}) || c.Ranks[0].Committed != 5 || c.Ranks[0].Step != 1 || c.Ranks[0].Leases != 1 {
		t.Errorf("first lease committed: %+v", c)
	}
	// Three of l1's positions are committed; when a's node fails the
	// other two go back to the pool.
	h.must(Commit{Rank: a, Session: h.session[a], Epoch: 0, Lease: l1.Fence, Through: l1.Start + 3, Offset: l0.Len() + 3, Step: 2})
	h.must(Fail{Node: "a", Incarnation: 1})
	c = h.c.Census()
	if c.Nodes != 1 || len(c.Ranks) != 1 || c.Ranks[0].Rank != b || h.c.Stats().Returned != 2 {
		t.Errorf("after a failed: %+v, returned %d", c, h.c.Stats().Returned)
	}
}
