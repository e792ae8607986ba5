package cluster

import (
	"fmt"
	"testing"
)

// TestEqualStepsNotKnownAtWelcome: with EqualSteps, how many steps a
// rank gets in an epoch is not a function of the job, so a node cannot
// tell its trainers at the feed welcome (no epoch_steps in cluster mode,
// docs/feed-protocol.md). The same job (every Config field the node's Job
// carries) and the same welcome to node a (its two ranks, first epoch 0)
// give a's ranks 50, 25 or 40 positions of epoch 0 depending on how many
// ranks the coordinator holds when the epoch starts (the Job carries no
// world size) and on when another node joins (the quota never drops
// below what a member already holds); and a stream already ended grows
// when a node leaves (the quota is re-planned over the members left).
func TestEqualStepsNotKnownAtWelcome(t *testing.T) {
	const batch = 8
	steps := func(positions int64) int64 { return (positions + batch - 1) / batch }
	cfg := DefaultConfig()
	cfg.Samples, cfg.ShardSize, cfg.Epochs, cfg.Seed = 100, 10, 1, 3
	// start welcomes node a's two ranks before anything else happens.
	start := func(t *testing.T) (*harness, []string) {
		h := newHarness(t, cfg)
		return h, h.join("a", 1, 2)
	}
	requestAll := func(h *harness, ranks []string) {
		for _, r := range ranks {
			h.must(Request{Rank: r, Session: h.session[r], Epoch: 0, Through: 1 << 40})
		}
	}
	// ended is the length of rank's last StreamEnd of epoch 0 (-1: none).
	ended := func(h *harness, rank string) int64 {
		n := int64(-1)
		for _, e := range h.ends[rank] {
			if e.Epoch == 0 {
				n = e.Length
			}
		}
		return n
	}
	got := map[string]int64{}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, h *harness, a []string) []string // returns the members left
		want int64                                               // positions each of a's ranks ends epoch 0 with
	}{
		{"alone", func(t *testing.T, h *harness, a []string) []string { requestAll(h, a); return a }, 50},
		{"b joined before the epoch", func(t *testing.T, h *harness, a []string) []string {
			b := h.join("b", 1, 2)
			requestAll(h, append(a, b...))
			return append(a, b...)
		}, 25},
		{"b joined after a/0 took 40", func(t *testing.T, h *harness, a []string) []string {
			h.must(Request{Rank: a[0], Session: h.session[a[0]], Epoch: 0, Through: 40})
			b := h.join("b", 1, 2)
			requestAll(h, append(a, b...))
			return append(a, b...)
		}, 40},
		{"b left after a's streams ended", func(t *testing.T, h *harness, a []string) []string {
			b := h.join("b", 1, 2)
			requestAll(h, append(a, b...))
			for _, r := range a {
				if n := ended(h, r); n != 25 {
					t.Fatalf("%s: stream ended at %d before b left, want 25", r, n)
				}
			}
			h.must(Leave{Node: "b", Incarnation: 1})
			requestAll(h, a)
			return a
		}, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, a := start(t)
			members := tc.run(t, h, a)
			for _, r := range a {
				if n, _ := h.granted(r, 0); n != tc.want || ended(h, r) != tc.want {
					t.Errorf("%s: granted %d, stream ended at %d; want %d", r, n, ended(h, r), tc.want)
				}
			}
			got[tc.name] = tc.want
			for _, r := range members {
				h.finish(r, 0)
			}
			if !h.done {
				t.Errorf("job not done: %+v", h.c.Epoch(0))
			}
		})
	}
	distinct := map[int64]bool{}
	for _, n := range got {
		distinct[steps(n)] = true
	}
	if len(distinct) < 3 {
		t.Errorf("steps per rank %v: want at least three different counts from one job", fmt.Sprint(got))
	}
}
