package cluster

import (
	"slices"
	"testing"
)

// TestLink: frames are applied in number order, each once, whatever is
// lost, duplicated or reordered; what is not acknowledged is sent again
// (the oldest Window of it) once it has waited, the wait doubling while
// nothing is acknowledged; an acknowledgement releases what it covers.
func TestLink(t *testing.T) {
	var a Link[int, int] // the sender's end (it receives nothing here)
	var b Link[int, int] // the receiver's end
	a.Resend, a.Window = 2, 2
	var frames []LinkFrame[int]
	for i := range 4 {
		frames = append(frames, a.Send(10+i, 0))
	}
	var got []int
	take := func(f LinkFrame[int]) { got = append(got, b.Accept(f)...) }
	take(frames[1]) // ahead of a gap: kept
	take(frames[3])
	if len(got) != 0 || b.Ack() != 0 {
		t.Fatalf("applied %v, ack %d before frame 1", got, b.Ack())
	}
	take(frames[0]) // fills the gap: 1, 2 apply; 4 waits for 3
	take(frames[0]) // a duplicate
	if !slices.Equal(got, []int{10, 11}) || b.Ack() != 2 {
		t.Fatalf("applied %v, ack %d; want [10 11], 2", got, b.Ack())
	}
	if d := a.Due(1); d != nil {
		t.Fatalf("resent %v before the wait", d)
	}
	if d := a.Due(2); len(d) != 2 || d[0].Seq != 1 || d[1].Seq != 2 {
		t.Fatalf("resend at 2: %v; want frames 1 and 2 (Window 2)", d)
	}
	if d := a.Due(5); d != nil { // the wait doubled to 4
		t.Fatalf("resent %v at 5; the wait doubled", d)
	}
	if d := a.Due(6); len(d) != 2 {
		t.Fatalf("resend at 6: %v", d)
	}
	a.Acked(b.Ack(), 6)
	if a.Pending() != 2 {
		t.Fatalf("%d pending after ack 2; want 2", a.Pending())
	}
	if d := a.Due(8); len(d) != 2 || d[0].Seq != 3 {
		t.Fatalf("resend at 8: %v; want frames 3 and 4 (the wait back to 2 after progress)", d)
	}
	take(frames[2])
	if !slices.Equal(got, []int{10, 11, 12, 13}) || b.Ack() != 4 {
		t.Fatalf("applied %v, ack %d", got, b.Ack())
	}
	a.Acked(4, 9)
	a.Acked(3, 9) // an older ack changes nothing
	a.Acked(9, 9) // a number never sent is ignored
	if a.Pending() != 0 || a.Due(100) != nil {
		t.Fatalf("%d pending after ack 4", a.Pending())
	}
	if !b.AckDue() { // duplicates are acknowledged again
		take(frames[0])
	}
	b.Ack()
	if b.AckDue() {
		t.Fatal("AckDue after Ack")
	}
	if got := b.Accept(LinkFrame[int]{}); got != nil || b.AckDue() {
		t.Fatalf("an ack-only frame applied %v or asked for an ack", got)
	}
}

// TestNewerCoordinator: a node follows later numbered lives and any
// change to or from a life without a journal, never an older numbered
// life.
func TestNewerCoordinator(t *testing.T) {
	for _, c := range []struct {
		cur, next uint64
		want      bool
	}{
		{0, 3, true}, {3, 4, true}, {4, 3, false}, {4, 4, false},
		{4, NoJournal | 9, true}, {NoJournal | 9, NoJournal | 2, true}, {NoJournal | 9, 3, true}, {NoJournal | 9, NoJournal | 9, false},
	} {
		if got := NewerCoordinator(c.cur, c.next); got != c.want {
			t.Errorf("NewerCoordinator(%#x, %#x) = %v, want %v", c.cur, c.next, got, c.want)
		}
	}
}

// TestLinkBound: while the peer acknowledges nothing, the frames kept
// for it stop at the bound (MaxPending frames, or MaxBytes as Size
// counts them): the frame over it declares the peer lost (Lost), drops
// what was kept, and from then on Send keeps nothing and numbers
// nothing (Seq 0: best effort), Due resends nothing; receiving goes on.
func TestLinkBound(t *testing.T) {
	var m LinkMeter
	a := Link[int, int]{Resend: 1, MaxPending: 3, Meter: &m}
	for i := range 3 {
		if f := a.Send(i, 0); f.Seq != uint64(i+1) || a.Lost() {
			t.Fatalf("send %d: frame %d, lost %v", i, f.Seq, a.Lost())
		}
	}
	f := a.Send(3, 0) // over the bound
	if !a.Lost() || f.Seq != 0 || a.Pending() != 0 || a.Stats.PeerLost != 1 {
		t.Fatalf("over the bound: frame %d, lost %v, %d pending, stats %+v", f.Seq, a.Lost(), a.Pending(), a.Stats)
	}
	if got := m.Totals(); got.Lost != 1 || got.Pending != 0 {
		t.Fatalf("meter after the loss: %+v", got)
	}
	if f := a.Send(4, 1); f.Seq != 0 || f.Body != 4 || a.Pending() != 0 || a.Due(100) != nil {
		t.Fatalf("after the loss: frame %+v, %d pending", f, a.Pending())
	}
	a.Acked(2, 1) // a late acknowledgement changes nothing
	if got := a.Accept(LinkFrame[int]{Seq: 1, Body: 7}); len(got) != 1 || a.Ack() != 1 {
		t.Fatalf("a lost link stopped receiving: %v", got)
	}
	if a.Stats.PeerLost != 1 || m.Totals().Lost != 1 {
		t.Fatalf("the loss counted again: %+v", a.Stats)
	}

	// Bytes: three frames of 40 fit 100 bytes, but not with a fourth.
	b := Link[int, int]{MaxBytes: 100, Size: func(int) int { return 40 }}
	b.Send(1, 0)
	b.Send(2, 0)
	if b.Lost() {
		t.Fatal("lost at 80 of 100 bytes")
	}
	b.Acked(1, 0) // 40 bytes kept
	b.Send(3, 0)
	if b.Lost() || b.Pending() != 2 {
		t.Fatalf("lost at 80 bytes after an ack (%d pending)", b.Pending())
	}
	b.Send(4, 0)
	if !b.Lost() {
		t.Fatal("not lost at 120 of 100 bytes")
	}

	// The default bound: DefaultLinkMaxPending frames.
	var c Link[int, int]
	for i := range DefaultLinkMaxPending {
		c.Send(i, 0)
	}
	if c.Lost() {
		t.Fatal("lost at the default bound")
	}
	if c.Send(0, 0); !c.Lost() {
		t.Fatal("not lost over the default bound")
	}
}
