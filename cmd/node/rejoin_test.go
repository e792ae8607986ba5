package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/longshore/longshore/cluster/gossip"
)

func TestCoordWatch(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := newCoordWatch(t0, 3*time.Second, 2*time.Second)
	steps := []struct {
		ms     int
		alive  bool
		rejoin bool
	}{
		{500, true, false},
		{1000, false, false},  // silent 0.5 s
		{3400, false, false},  // silent 2.9 s
		{3500, false, true},   // 3 s: first re-join
		{4000, false, false},  // 0.5 s after it
		{5400, false, false},  // 1.9 s after it
		{5500, false, true},   // every 2 s while it lasts
		{6000, true, false},   // back
		{8000, false, false},  // a new silence counts from 6 s
		{9000, false, true},   // 3 s
		{9100, true, false},   // back again
		{12100, false, true},  // 3 s after the last sighting, though a try was 3.1 s ago
		{12200, false, false}, // not twice
	}
	for _, s := range steps {
		if got := w.observe(at(s.ms), s.alive); got != s.rejoin {
			t.Errorf("at %d ms (alive=%v): rejoin=%v, want %v", s.ms, s.alive, got, s.rejoin)
		}
	}
}

func TestCoordinatorAlive(t *testing.T) {
	node := gossip.Member{Meta: gossip.Meta{Role: gossip.RoleNode}}
	coord := gossip.Member{Meta: gossip.Meta{Role: gossip.RoleCoordinator}}
	leaving := gossip.Member{Meta: gossip.Meta{Role: gossip.RoleCoordinator, Leaving: true}}
	for _, tc := range []struct {
		ms   []gossip.Member
		want bool
	}{
		{nil, false},
		{[]gossip.Member{node}, false},
		{[]gossip.Member{node, leaving}, false},
		{[]gossip.Member{node, coord}, true},
	} {
		if got := coordinatorAlive(tc.ms); got != tc.want {
			t.Errorf("coordinatorAlive(%v) = %v, want %v", tc.ms, got, tc.want)
		}
	}
}

// TestRejoinFindsRestartedCoordinator runs real memberlists on loopback:
// a node joins a coordinator, the coordinator goes away and a new one
// starts at the same gossip address without contacting anybody (its
// journal named no peers). The node's watch re-joins it; without the
// watch the two would never meet.
func TestRejoinFindsRestartedCoordinator(t *testing.T) {
	start := func(id string, role gossip.Role, bind string, join ...string) *gossip.Membership {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m, err := gossip.Start(ctx, gossip.Config{Meta: gossip.Meta{ID: id, Role: role, ActorAddr: "127.0.0.1:1"},
			BindAddr: bind, Join: join, Profile: "local"})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for range m.Events() {
			}
		}()
		return m
	}
	shut := func(m *gossip.Membership) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Shutdown(ctx)
	}
	c1 := start("coordinator", gossip.RoleCoordinator, "127.0.0.1:0")
	addr := c1.Addr()
	n := start("n1", gossip.RoleNode, "127.0.0.1:0", addr)
	defer shut(n)

	ctx, cancel := context.WithCancel(context.Background())
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w := newCoordWatch(time.Now(), 300*time.Millisecond, 300*time.Millisecond)
		watchCoordinator(ctx, n, []string{addr}, w, tick.C, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	defer func() { cancel(); wg.Wait() }()

	shut(c1)
	waitFor(t, 10*time.Second, "the node to see the coordinator gone", func() bool { return !coordinatorAlive(n.Members()) })
	c2 := start("coordinator", gossip.RoleCoordinator, addr) // same address, joins nobody
	defer shut(c2)
	began := time.Now()
	waitFor(t, 10*time.Second, "the node to find the new coordinator", func() bool { return coordinatorAlive(n.Members()) })
	waitFor(t, 10*time.Second, "the new coordinator to see the node", func() bool {
		for _, m := range c2.Members() {
			if m.Meta.Role == gossip.RoleNode {
				return true
			}
		}
		return false
	})
	t.Logf("new coordinator up → node and coordinator see each other: %.2f s (re-join after 0.3 s of silence)", time.Since(began).Seconds())
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// members is a membership whose member list a test sets.
type members struct {
	mu sync.Mutex
	ms []gossip.Member
}

func (m *members) Members() []gossip.Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ms
}

func (m *members) Join(context.Context, []string) error { return nil }

// TestGiveUp: a node gives up once no coordinator has been alive for
// --give-up-after, not while one is.
func TestGiveUp(t *testing.T) {
	m := &members{ms: []gossip.Member{{Name: "c", Meta: gossip.Meta{ID: "c", Role: gossip.RoleCoordinator}}}}
	ctx, giveUp := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchGiveUp(t.Context(), m, 100*time.Millisecond, giveUp)
	}()
	time.Sleep(400 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatalf("gave up with a coordinator alive: %v", context.Cause(ctx))
	}
	m.mu.Lock()
	m.ms = nil
	m.mu.Unlock()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("did not give up without a coordinator")
	}
	if err := context.Cause(ctx); !errors.Is(err, errGaveUp) {
		t.Fatalf("cause %v, want errGaveUp", err)
	}
}
