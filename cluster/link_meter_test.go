package cluster

import "testing"

// TestLinkMeter: a link that loses, duplicates and reorders frames moves
// its meter - resends, duplicates, frames held ahead of a gap, the
// frames pending - and a link replaced by a new life (Close) leaves
// nothing pending on the meter.
func TestLinkMeter(t *testing.T) {
	var m LinkMeter
	a := Link[int, int]{Resend: 1, Meter: &m}
	b := Link[int, int]{Meter: &m}
	var fs []LinkFrame[int]
	for i := range 5 {
		fs = append(fs, a.Send(i, 0))
	}
	if got := m.Totals(); got.Sent != 5 || got.Pending != 5 {
		t.Fatalf("after 5 sends: %+v", got)
	}
	// Frame 1 is lost; 2..5 arrive, held ahead of the gap; 3 twice.
	for _, f := range append(fs[1:], fs[2]) {
		b.Accept(f)
	}
	if got := m.Totals(); got.Held != 4 || got.Applied != 0 {
		t.Fatalf("after a lost first frame: %+v; want 4 held, none applied", got)
	}
	for _, f := range a.Due(1) { // the resend repairs the loss
		b.Accept(f)
	}
	b.Accept(fs[4]) // a late duplicate (the resent 2..5 were too)
	a.Acked(b.Ack(), 1)
	got := m.Totals()
	if got.Resent != 5 || got.Applied != 5 || got.Duplicates != 5 || got.Pending != 0 {
		t.Fatalf("after the resend: %+v; want 5 resent, 5 applied, 5 duplicates, 0 pending", got)
	}
	a.Send(9, 2)
	a.Send(10, 2)
	if got := m.Totals().Pending; got != 2 {
		t.Fatalf("pending %d, want 2", got)
	}
	a.Close() // a new life replaces the link
	a.Close() // twice changes nothing
	if got := m.Totals().Pending; got != 0 {
		t.Fatalf("pending %d after Close, want 0", got)
	}
}
