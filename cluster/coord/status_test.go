package coord_test

import (
	"context"
	"testing"
	"time"

	"github.com/longshore/longshore/cluster/coord"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/storage"
)

// TestStatusNodes: a node's reports reach Status with its standing —
// alive while it reports, evicted once gossip says it failed, left once
// it left; a node heard of but not joined is joining.
func TestStatusNodes(t *testing.T) {
	h := newHarness(t, 16)
	co := h.startCoordinator(1, 1, openJournal(t, storage.NewMemStore("journal")), nil)
	defer co.Shutdown(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	join := func(name string, kind gossip.EventKind) {
		co.Membership(gossip.Event{Kind: kind, Name: name, Meta: gossip.Meta{ID: name, Role: gossip.RoleNode, Ranks: []string{name + "/0"}, Incarnation: 7}})
	}
	join("a", gossip.Joined)
	join("b", gossip.Joined)
	rep := &wire.NodeReport{Samples: 40, SamplesPerSecond: 123, Bottleneck: "decode", Ranks: []*wire.RankReport{{Rank: "a/0", Samples: 40, Step: 4}}}
	h.sys.Root.Send(co.PID(), &wire.NodeEvents{Node: "a", Incarnation: 7, Report: rep})
	h.sys.Root.Send(co.PID(), &wire.NodeEvents{Node: "c", Incarnation: 1, Report: rep})
	st, err := co.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]coord.NodeState{}
	for _, n := range st.Nodes {
		states[n.Node] = n.State
		if n.Node == "a" && (n.Report == nil || n.Report.SamplesPerSecond != 123 || n.Report.Ranks[0].Step != 4 || n.Incarnation != 7) {
			t.Errorf("a's status %+v", n)
		}
	}
	if states["a"] != coord.NodeAlive || states["b"] != coord.NodeSilent || states["c"] != coord.NodeJoining {
		t.Errorf("states %v: want a alive, b silent (no report yet), c joining", states)
	}
	// Suspicion: a suspect until it answers again; one for a life the
	// state machine does not count changes nothing.
	join("b", gossip.Suspected)
	co.Membership(gossip.Event{Kind: gossip.Suspected, Name: "a", Meta: gossip.Meta{ID: "a", Role: gossip.RoleNode, Incarnation: 6}})
	if st, err = co.Status(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		states[n.Node] = n.State
	}
	if states["a"] != coord.NodeAlive || states["b"] != coord.NodeSuspect {
		t.Errorf("states %v: want a alive (the suspicion was of an older life), b suspect", states)
	}
	join("b", gossip.Recovered)
	if st, err = co.Status(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		states[n.Node] = n.State
	}
	if states["b"] != coord.NodeSilent {
		t.Errorf("states %v: want b silent again (answers gossip, no report yet)", states)
	}
	join("b", gossip.Suspected)
	join("a", gossip.Failed)
	join("b", gossip.Left)
	if st, err = co.Status(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		states[n.Node] = n.State
	}
	if states["a"] != coord.NodeEvicted || states["b"] != coord.NodeLeft {
		t.Errorf("states %v: want a evicted, b left", states)
	}
}
