package gossip

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// backstop bounds every wait in these tests. It is a failure backstop
// only: the tests wait for events, and memberlist's own timers (a 1 s
// probe interval, seconds of suspicion) set the pace, so a loaded machine
// makes them slower, never wrong.
const backstop = 60 * time.Second

// start starts member id on n (real sockets if n is nil), joining join.
func start(t *testing.T, n *Network, id string, join ...string) *Membership {
	t.Helper()
	return startProfile(t, n, id, "local", join...)
}

// startProfile is start with memberlist timings of profile.
func startProfile(t *testing.T, n *Network, id, profile string, join ...string) *Membership {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), backstop)
	defer cancel()
	m, err := Start(ctx, Config{
		Meta:     Meta{ID: id, Role: RoleNode, ActorAddr: "127.0.0.1:9", Ranks: []string{id + "/0", id + "/1"}},
		BindAddr: "127.0.0.1:0",
		Join:     join,
		Profile:  profile,
		Network:  n,
	})
	if err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	return m
}

// waitFor reads m's events until want(e) holds.
func waitFor(t *testing.T, m *Membership, what string, want func(Event) bool) Event {
	t.Helper()
	timeout := time.NewTimer(backstop)
	defer timeout.Stop()
	for {
		select {
		case e, ok := <-m.Events():
			if !ok {
				t.Fatalf("events closed while waiting for %s", what)
			}
			if want(e) {
				return e
			}
		case <-timeout.C:
			t.Fatalf("no %s within %v", what, backstop)
		}
	}
}

func is(kind EventKind, name string) func(Event) bool {
	return func(e Event) bool { return e.Kind == kind && e.Name == name }
}

func shutdown(t *testing.T, m *Membership) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), backstop)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// TestJoinFailLeave: members join through any member and carry their
// metadata; a hard kill is reported as Failed, a graceful Shutdown as
// Left. On the in-memory network nothing is lost, so Left is certain.
// The LAN timings: with the loopback profile's 200 ms probe timeout, a
// race-instrumented run beside other packages once had a probe of the
// live member b time out while c's death was being detected, and b,
// suspected and then declared dead, was reported Failed when it left.
func TestJoinFailLeave(t *testing.T) {
	var n Network
	a := startProfile(t, &n, "a", "lan")
	defer a.Shutdown(context.Background())
	b := startProfile(t, &n, "b", "lan", a.Addr())
	defer b.Shutdown(context.Background())
	c := startProfile(t, &n, "c", "lan", b.Addr()) // joining through any member works

	for _, id := range []string{"b", "c"} {
		e := waitFor(t, a, id+" joined", is(Joined, id))
		if e.Meta.ID != id || len(e.Meta.Ranks) != 2 || e.Meta.Ranks[1] != id+"/1" {
			t.Fatalf("joined %s: meta %+v", id, e.Meta)
		}
	}
	if n := len(a.Members()); n != 3 {
		t.Fatalf("a sees %d members, want 3", n)
	}

	// A hard kill (no Leave) must be reported as Failed.
	started := time.Now()
	c.halt()
	e := waitFor(t, a, "c gone", func(e Event) bool { return (e.Kind == Failed || e.Kind == Left) && e.Name == "c" })
	if e.Kind != Failed {
		t.Errorf("hard-killed member reported %v, want Failed", e.Kind)
	}
	t.Logf("hard-killed member reported failed after %v (lan profile)", time.Since(started).Round(10*time.Millisecond))

	// A graceful Shutdown must be reported as Left: the leaving metadata
	// reaches a before the leave does.
	shutdown(t, b)
	e = waitFor(t, a, "b gone", func(e Event) bool { return (e.Kind == Left || e.Kind == Failed) && e.Name == "b" })
	if e.Kind != Left {
		t.Errorf("gracefully shut down member reported %v, want Left", e.Kind)
	}
	if n := len(a.Members()); n != 1 {
		t.Errorf("a sees %d members after the others went, want 1", n)
	}
}

// TestRealSockets: the same over UDP and TCP on loopback. Whether a
// shut-down member reads as Left or Failed depends on its leaving
// metadata spreading in time, which a loaded machine does not promise
// (Failed is the safe reading), so only that it is gone is checked.
func TestRealSockets(t *testing.T) {
	a := start(t, nil, "a")
	defer a.Shutdown(context.Background())
	b := start(t, nil, "b", a.Addr())
	defer b.Shutdown(context.Background())
	e := waitFor(t, a, "b joined", is(Joined, "b"))
	if e.Meta.ActorAddr != "127.0.0.1:9" || e.Addr != b.Addr() {
		t.Fatalf("joined b: %+v, want its meta and gossip address %s", e, b.Addr())
	}
	shutdown(t, b)
	e = waitFor(t, a, "b gone", func(e Event) bool { return (e.Kind == Left || e.Kind == Failed) && e.Name == "b" })
	t.Logf("b shut down gracefully over sockets: %v", e.Kind)
}

func TestValidate(t *testing.T) {
	long := make([]string, 100)
	for i := range long {
		long[i] = fmt.Sprintf("a-rather-long-node-name/%d", i)
	}
	err := Config{BindAddr: "nope", Profile: "wan", Meta: Meta{Ranks: long}}.Validate()
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{"Meta.ID is required", "BindAddr", "Profile", "512-byte limit"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	err = Config{Meta: Meta{ID: "x"}, BindAddr: "localhost:0", Network: &Network{}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "must be an IP address") {
		t.Errorf("a host name on an in-memory network: %v", err)
	}
}

func TestJoinUnreachableGivesUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	_, err := Start(ctx, Config{Meta: Meta{ID: "x"}, BindAddr: "127.0.0.1:0", Join: []string{"127.0.0.9:9"}, Profile: "local", Network: &Network{}})
	if err == nil || !strings.Contains(err.Error(), "join") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a join error ending with the context, got %v", err)
	}
}

// TestAddressReuse: an address is taken while its member runs and free
// once it shut down (a restarted coordinator comes back at its address).
func TestAddressReuse(t *testing.T) {
	var n Network
	a := start(t, &n, "a")
	_, err := Start(context.Background(), Config{Meta: Meta{ID: "a2"}, BindAddr: a.Addr(), Network: &n})
	if !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("second member at %s: %v, want ErrAddrInUse", a.Addr(), err)
	}
	addr := a.Addr()
	shutdown(t, a)
	a2, err := Start(context.Background(), Config{Meta: Meta{ID: "a2"}, BindAddr: addr, Network: &n})
	if err != nil {
		t.Fatalf("restart at %s: %v", addr, err)
	}
	shutdown(t, a2)
}

func TestUpdateMeta(t *testing.T) {
	var n Network
	a := start(t, &n, "a")
	defer a.Shutdown(context.Background())
	b := start(t, &n, "b", a.Addr())
	waitFor(t, a, "b joined", is(Joined, "b"))
	ctx, cancel := context.WithTimeout(context.Background(), backstop)
	defer cancel()
	if err := b.UpdateMeta(ctx, func(m *Meta) { m.Incarnation = 7 }); err != nil {
		t.Fatal(err)
	}
	e := waitFor(t, a, "b updated", is(Updated, "b"))
	if e.Meta.Incarnation != 7 || len(e.Meta.Ranks) != 2 {
		t.Fatalf("updated meta %+v, want incarnation 7 and the ranks kept", e.Meta)
	}
	shutdown(t, b)
	if err := b.UpdateMeta(ctx, func(m *Meta) {}); err != ErrClosed {
		t.Fatalf("UpdateMeta after Shutdown: %v, want ErrClosed", err)
	}
}

// TestMetaOf64Ranks: a node of 64 ranks named as nodes name them fits
// memberlist's 512-byte metadata limit, and decodes back to the same
// names; ranks named otherwise still travel as a list.
func TestMetaOf64Ranks(t *testing.T) {
	id := "gpu-host-0123.rack-17.example.internal"
	m := Meta{ID: id, Role: RoleNode, ActorAddr: "[fd00:1234:5678::abcd]:43210", Incarnation: 1<<63 + 12345}
	for i := range 64 {
		m.Ranks = append(m.Ranks, fmt.Sprintf("%s/%d", id, i))
	}
	b, err := m.encode()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("64 ranks: %d bytes of metadata (limit %d)", len(b), maxMeta)
	if got := decodeMeta(b); !reflect.DeepEqual(got, m) {
		t.Fatalf("decoded %+v, want %+v", got, m)
	}
	odd := Meta{ID: "n", Ranks: []string{"n/1", "n/0"}}
	b, err = odd.encode()
	if err != nil {
		t.Fatal(err)
	}
	if got := decodeMeta(b); !reflect.DeepEqual(got, odd) {
		t.Fatalf("decoded %+v, want %+v", got, odd)
	}
}
