package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/internal/clock"
)

func TestCoordWatch(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := NewCoordWatch(t0, 3*time.Second, 2*time.Second)
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
		if got := w.Observe(at(s.ms), s.alive); got != s.rejoin {
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
		if got := CoordinatorAlive(tc.ms); got != tc.want {
			t.Errorf("CoordinatorAlive(%v) = %v, want %v", tc.ms, got, tc.want)
		}
	}
}

// TestRejoinFindsRestartedCoordinator runs real memberlists on gossip's
// in-memory network: a node joins a coordinator, the coordinator goes
// away and a new one starts at the same gossip address without
// contacting anybody (its journal named no peers). The node's watch
// re-joins it; without the watch the two would never meet.
func TestRejoinFindsRestartedCoordinator(t *testing.T) {
	var network gossip.Network
	start := func(id string, role gossip.Role, bind string, join ...string) *gossip.Membership {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		m, err := gossip.Start(ctx, gossip.Config{Meta: gossip.Meta{ID: id, Role: role, ActorAddr: "127.0.0.1:1"},
			BindAddr: bind, Join: join, Profile: "local", Network: &network})
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
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_ = m.Shutdown(ctx)
	}
	c1 := start("coordinator", gossip.RoleCoordinator, "127.0.0.1:0")
	addr := c1.Addr()
	n := start("n1", gossip.RoleNode, "127.0.0.1:0", addr)
	defer shut(n)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w := NewCoordWatch(time.Now(), 300*time.Millisecond, 300*time.Millisecond)
		WatchCoordinator(ctx, clock.Real{}, 50*time.Millisecond, n, []string{addr}, w, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	defer func() { cancel(); wg.Wait() }()

	// A Join returns before the member it reached has taken the joiner
	// in; a coordinator that left before then would leave unseen.
	sees := func(m *gossip.Membership, role gossip.Role) func() bool {
		return func() bool {
			for _, mb := range m.Members() {
				if mb.Meta.Role == role {
					return true
				}
			}
			return false
		}
	}
	waitFor(t, "the coordinator to see the node", sees(c1, gossip.RoleNode))
	shut(c1)
	waitFor(t, "the node to see the coordinator gone", func() bool { return !CoordinatorAlive(n.Members()) })
	c2 := start("coordinator", gossip.RoleCoordinator, addr) // same address, joins nobody
	defer shut(c2)
	began := time.Now()
	waitFor(t, "the node to find the new coordinator", func() bool { return CoordinatorAlive(n.Members()) })
	waitFor(t, "the new coordinator to see the node", sees(c2, gossip.RoleNode))
	t.Logf("new coordinator up → node and coordinator see each other: %.2f s (re-join after 0.3 s of silence)", time.Since(began).Seconds())
}

// waitFor polls ok until it holds; the minute is a failure backstop only.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	const d = time.Minute
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// members is a Membership whose member list a test sets. With asked
// set, each Members call also sends on it (after reading the list), so a
// test knows the watcher has taken its tick.
type members struct {
	mu    sync.Mutex
	ms    []gossip.Member
	asked chan struct{}
}

func (m *members) Members() []gossip.Member {
	m.mu.Lock()
	ms := m.ms
	m.mu.Unlock()
	if m.asked != nil {
		m.asked <- struct{}{}
	}
	return ms
}

func (m *members) Join(context.Context, []string) error { return nil }

// TestGiveUp: a node gives up once no coordinator has been alive for
// --give-up-after, not while one is. The watcher ticks on a fake clock,
// one tick at a time, so the give-up comes on exactly the tick 10 s into
// the silence.
func TestGiveUp(t *testing.T) {
	m := &members{ms: []gossip.Member{{Name: "c", Meta: gossip.Meta{ID: "c", Role: gossip.RoleCoordinator}}}, asked: make(chan struct{})}
	fc := clock.NewFake(time.Time{})
	backstop, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a failure backstop only
	defer cancel()
	ctx, giveUp := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		WatchGiveUp(backstop, fc, m, 10*time.Second, giveUp)
	}()
	if err := fc.BlockUntil(backstop, 1); err != nil {
		t.Fatalf("the watcher's ticker is not on the clock: %v", err)
	}
	tick := func() bool { // one second; false once the watcher has returned
		fc.Advance(time.Second)
		select {
		case <-m.asked:
			return true
		case <-done:
			return false
		case <-backstop.Done():
			t.Fatal("the watcher neither asked for the members nor returned")
			return false
		}
	}
	for i := range 30 {
		if !tick() {
			t.Fatalf("gave up %d s in with a coordinator alive: %v", i, context.Cause(ctx))
		}
	}
	m.mu.Lock()
	m.ms = nil
	m.mu.Unlock()
	silent := 0
	for tick() {
		silent++
	}
	if silent != 10 {
		t.Errorf("gave up after %d s of silence, want 10", silent)
	}
	if err := context.Cause(ctx); !errors.Is(err, ErrGaveUp) {
		t.Fatalf("cause %v, want ErrGaveUp", err)
	}
}
