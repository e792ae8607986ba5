package coord_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/storage"
)

// TestLinkBoundEvicts: the coordinator's mail to a node is lost, for
// good, while gossip still sees the node (the Welcome too, so the core
// sends it again and again: new frames on the link); the link's
// bound (LinkMaxPending 4) declares the node lost, the coordinator
// evicts its life and says so unnumbered; once that reaches the node it
// rejoins as a new life, and the job finishes with every sample
// committed exactly once.
func TestLinkBoundEvicts(t *testing.T) {
	h := newHarness(t, 97)
	h.linkMax = 4
	defer h.sys.Shutdown()
	co := h.startCoordinator(1, 0, openJournal(t, storage.NewMemStore("journal")), nil)
	defer co.Shutdown(context.Background())
	nd := h.startNode("n0")
	defer nd.Shutdown(context.Background())
	lostBefore := cluster.Links.Totals().Lost
	var dropped, evictions atomic.Int32
	drop, err := h.sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		m, ok := c.Message().(*wire.NodeMail)
		if !ok {
			return
		}
		switch {
		case m.Seq == 0 && len(m.Evictions) > 0:
			evictions.Add(1) // the link lost its peer: the eviction, unnumbered
		case evictions.Load() == 0 && m.Seq > 0:
			dropped.Add(1)
			return // lost: the connection is dead one way
		}
		c.Send(nd.PID(), m)
	}), "dropper")
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.co = co
	h.mu.Unlock()
	nd.SetCoordinatorPID(co.PID())
	co.SetNodePID(nd.Name(), drop)
	co.Membership(gossip.Event{Kind: gossip.Joined, Name: nd.Name(), Meta: gossip.Meta{
		ID: nd.Name(), Role: gossip.RoleNode, Ranks: nd.RankNames(), Incarnation: nd.Incarnation()}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h.train(ctx, nd, co)
	h.check(1)
	st, err := co.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if evictions.Load() == 0 || st.Stats.Evictions == 0 {
		t.Errorf("%d unnumbered evictions, %d evictions: the bound never declared the node lost", evictions.Load(), st.Stats.Evictions)
	}
	if d := cluster.Links.Totals().Lost - lostBefore; d == 0 {
		t.Error("longshore_control_link_peers_lost_total did not move")
	}
	t.Logf("%d frames dropped; coordinator stats %+v", dropped.Load(), st.Stats)
}

// TestNodeLinkBoundRejoins: the node's events to the coordinator are
// lost, for good, while gossip still sees both; the node's link bound
// (LinkMaxPending 8) declares the coordinator lost, and the node ends
// its life and rejoins as a new one, whose events get through; the job
// finishes with every sample committed exactly once.
func TestNodeLinkBoundRejoins(t *testing.T) {
	h := newHarness(t, 97)
	h.nodeMax = 8
	defer h.sys.Shutdown()
	co := h.startCoordinator(1, 0, openJournal(t, storage.NewMemStore("journal")), nil)
	defer co.Shutdown(context.Background())
	nd := h.startNode("n0")
	defer nd.Shutdown(context.Background())
	lostBefore := cluster.Links.Totals().Lost
	first := nd.Incarnation()
	var dropped atomic.Int32
	var later atomic.Uint64 // a later life heard from
	drop, err := h.sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*wire.NodeEvents); ok {
			if m.Incarnation != first {
				later.Store(m.Incarnation)
			}
			if m.Incarnation == first && m.Seq > 0 {
				dropped.Add(1)
				return // lost: the connection is dead one way, for this life
			}
			c.Forward(co.PID())
		}
	}), "eventdropper")
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.co = co
	h.mu.Unlock()
	nd.SetCoordinatorPID(drop)
	co.SetNodePID(nd.Name(), nd.PID())
	co.Membership(gossip.Event{Kind: gossip.Joined, Name: nd.Name(), Meta: gossip.Meta{
		ID: nd.Name(), Role: gossip.RoleNode, Ranks: nd.RankNames(), Incarnation: first}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h.train(ctx, nd, co)
	h.check(1)
	if later.Load() == 0 {
		t.Error("the node never left the life whose events were lost")
	}
	if d := cluster.Links.Totals().Lost - lostBefore; d == 0 {
		t.Error("longshore_control_link_peers_lost_total did not move")
	}
	t.Logf("%d frames dropped; node life %d -> %d", dropped.Load(), first, later.Load())
}
