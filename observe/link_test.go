package observe

import (
	"testing"

	"github.com/longshore/longshore/cluster"
)

// TestRegistryHasLinkMetrics: every daemon's registry exports the
// control links' counters (cluster.Links), and they move when a link
// loses a frame and repairs it.
func TestRegistryHasLinkMetrics(t *testing.T) {
	names := []string{
		"longshore_control_link_sent_total", "longshore_control_link_resends_total",
		"longshore_control_link_applied_total", "longshore_control_link_duplicates_total",
		"longshore_control_link_held_total", "longshore_control_link_held_dropped_total",
		"longshore_control_link_peers_lost_total", "longshore_control_link_unacknowledged",
	}
	read := func() map[string]float64 {
		mfs, err := Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				got[mf.GetName()] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
		for _, n := range names {
			if _, ok := got[n]; !ok {
				t.Fatalf("%s not exported", n)
			}
		}
		return got
	}
	before := read()
	a := cluster.Link[int, int]{Resend: 1, Meter: &cluster.Links}
	b := cluster.Link[int, int]{Meter: &cluster.Links}
	a.Send(1, 0)      // lost
	f := a.Send(2, 0) // held ahead of the gap
	b.Accept(f)
	mid := read()
	for _, f := range a.Due(1) {
		b.Accept(f)
	}
	after := read()
	for n, want := range map[string]float64{
		"longshore_control_link_sent_total": 2, "longshore_control_link_held_total": 1,
		"longshore_control_link_resends_total": 2, "longshore_control_link_duplicates_total": 1,
		"longshore_control_link_applied_total": 2,
	} {
		if d := after[n] - before[n]; d != want {
			t.Errorf("%s moved by %v, want %v", n, d, want)
		}
	}
	if d := mid["longshore_control_link_unacknowledged"] - before["longshore_control_link_unacknowledged"]; d != 2 {
		t.Errorf("unacknowledged moved by %v with two frames out, want 2", d)
	}
	a.Acked(b.Ack(), 1)
	if d := read()["longshore_control_link_unacknowledged"] - before["longshore_control_link_unacknowledged"]; d != 0 {
		t.Errorf("unacknowledged %v above the start once acknowledged, want 0", d)
	}
}
