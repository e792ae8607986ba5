package gossip

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

func start(t *testing.T, id string, join ...string) *Membership {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := Start(ctx, Config{
		Meta:     Meta{ID: id, Role: RoleNode, ActorAddr: "127.0.0.1:9", Ranks: []string{id + "/0", id + "/1"}},
		BindAddr: "127.0.0.1:0",
		Join:     join,
		Profile:  "local",
	})
	if err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	return m
}

// waitFor reads events until want(e) holds.
func waitFor(t *testing.T, m *Membership, d time.Duration, want func(Event) bool) Event {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case e, ok := <-m.Events():
			if !ok {
				t.Fatal("events closed")
			}
			if want(e) {
				return e
			}
		case <-timeout:
			t.Fatalf("no matching event within %v", d)
		}
	}
}

func TestJoinFailLeave(t *testing.T) {
	a := start(t, "a")
	defer a.Shutdown(context.Background())
	b := start(t, "b", a.Addr())
	defer b.Shutdown(context.Background())
	c := start(t, "c", b.Addr()) // joining through any member works

	for _, id := range []string{"b", "c"} {
		e := waitFor(t, a, 5*time.Second, func(e Event) bool { return e.Kind == Joined && e.Name == id })
		if e.Meta.ID != id || len(e.Meta.Ranks) != 2 || e.Meta.Ranks[1] != id+"/1" {
			t.Fatalf("joined %s: meta %+v", id, e.Meta)
		}
	}
	if n := len(a.Members()); n != 3 {
		t.Fatalf("a sees %d members, want 3", n)
	}

	// A hard kill (no Leave) must be reported as Failed.
	start := time.Now()
	c.halt()
	waitFor(t, a, 15*time.Second, func(e Event) bool { return e.Kind == Failed && e.Name == "c" })
	t.Logf("hard-killed member reported failed after %v (local profile)", time.Since(start).Round(10*time.Millisecond))

	// A graceful Shutdown must be reported as Left. Spreading the leaving
	// metadata is best effort within Shutdown's deadline (else others see
	// Failed, the safe reading): give it room on a loaded machine, where
	// 2 s was once not enough.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown b: %v", err)
	}
	e := waitFor(t, a, 10*time.Second, func(e Event) bool { return (e.Kind == Left || e.Kind == Failed) && e.Name == "b" })
	if e.Kind != Left {
		t.Errorf("gracefully shut down member reported %v, want Left", e.Kind)
	}
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
}

func TestJoinUnreachableGivesUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	_, err := Start(ctx, Config{Meta: Meta{ID: "x"}, BindAddr: "127.0.0.1:0", Join: []string{"127.0.0.1:1"}, Profile: "local"})
	if err == nil || !strings.Contains(err.Error(), "join") {
		t.Fatalf("want a join error, got %v", err)
	}
}

func TestUpdateMeta(t *testing.T) {
	a := start(t, "a")
	defer a.Shutdown(context.Background())
	b := start(t, "b", a.Addr())
	waitFor(t, a, 5*time.Second, func(e Event) bool { return e.Kind == Joined && e.Name == "b" })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.UpdateMeta(ctx, func(m *Meta) { m.Incarnation = 7 }); err != nil {
		t.Fatal(err)
	}
	e := waitFor(t, a, 5*time.Second, func(e Event) bool { return e.Kind == Updated && e.Name == "b" })
	if e.Meta.Incarnation != 7 || len(e.Meta.Ranks) != 2 {
		t.Fatalf("updated meta %+v, want incarnation 7 and the ranks kept", e.Meta)
	}
	b.Shutdown(context.Background())
	if err := b.UpdateMeta(ctx, func(m *Meta) {}); err != ErrClosed {
		t.Fatalf("UpdateMeta after Shutdown: %v, want ErrClosed", err)
	}
}
