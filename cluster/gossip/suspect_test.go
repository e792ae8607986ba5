package gossip

import (
	"context"
	"fmt"
	"testing"

	"github.com/hashicorp/memberlist"
)

// TestSuspectedBeforeFailed: a member that stops answering is first
// reported Suspected (memberlist's probe got no ack), then Failed once
// the suspicion times out; while suspected, Members says so.
func TestSuspectedBeforeFailed(t *testing.T) {
	var n Network
	a := start(t, &n, "a")
	defer a.Shutdown(context.Background())
	c := start(t, &n, "c", a.Addr())
	waitFor(t, a, "c joined", is(Joined, "c"))
	c.halt()
	e := waitFor(t, a, "c suspected or gone", func(e Event) bool {
		return e.Name == "c" && (e.Kind == Suspected || e.Kind == Failed || e.Kind == Left)
	})
	if e.Kind != Suspected {
		t.Fatalf("a hard-killed member was first reported %v, want suspected", e.Kind)
	}
	if e.Meta.ID != "c" || e.Addr == "" {
		t.Errorf("suspected event %+v: want c's meta and address", e)
	}
	waitFor(t, a, "c failed", is(Failed, "c"))
	for _, mb := range a.Members() {
		if mb.Name == "c" {
			t.Errorf("a still lists c after it failed: %+v", mb)
		}
	}
}

// TestSuspectBook: the log line memberlist writes as it suspects a member
// raises Suspected once, a direct ack clears it with Recovered once, and
// events about members not known, or that change nothing, are dropped.
func TestSuspectBook(t *testing.T) {
	m := &Membership{wake: make(chan struct{}, 1)}
	m.push(Event{Kind: Joined, Name: "n1", Addr: "10.0.0.1:7946", Meta: Meta{ID: "n1"}})
	var forwarded []string
	w := suspectLog{m: m, next: writerFunc(func(p []byte) { forwarded = append(forwarded, string(p)) })}
	// The format memberlist v0.7.0 logs (state.go, probeNode).
	line := fmt.Sprintf("[INFO] memberlist: Suspect %s has failed, no acks received\n", "n1")
	for _, l := range []string{line, line, "[INFO] memberlist: Suspect ghost has failed, no acks received\n", "[DEBUG] memberlist: Stream connection from=x\n"} {
		if _, err := w.Write([]byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	if len(forwarded) != 4 {
		t.Errorf("forwarded %d lines, want all 4", len(forwarded))
	}
	if ms := m.Members(); len(ms) != 1 || !ms[0].Suspect {
		t.Fatalf("members %+v: want n1 suspect", ms)
	}
	pd := pingDelegate{m}
	pd.NotifyPingComplete(&memberlist.Node{Name: "n1"}, 0, nil)
	pd.NotifyPingComplete(&memberlist.Node{Name: "n1"}, 0, nil)
	if ms := m.Members(); ms[0].Suspect {
		t.Fatalf("members %+v: want n1 no longer suspect after an ack", ms)
	}
	var kinds []EventKind
	for _, e := range m.mu.queue {
		kinds = append(kinds, e.Kind)
		if e.Kind == Suspected && (e.Addr != "10.0.0.1:7946" || e.Meta.ID != "n1") {
			t.Errorf("suspected event %+v: want n1's address and meta", e)
		}
	}
	if fmt.Sprint(kinds) != fmt.Sprint([]EventKind{Joined, Suspected, Recovered}) {
		t.Errorf("events %v, want [joined suspected recovered]", kinds)
	}
	// A suspicion ends with a newer life, too.
	w.Write([]byte(line))
	m.push(Event{Kind: Updated, Name: "n1", Meta: Meta{ID: "n1", Incarnation: 2}})
	if ms := m.Members(); ms[0].Suspect {
		t.Errorf("members %+v: an update must end the suspicion", ms)
	}
}

type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }
