package cluster

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// harness steps a coordinator and keeps what it said, per rank.
type harness struct {
	t       testing.TB
	c       *Coordinator
	session map[string]Fence
	leases  map[string][]Lease // per rank, in grant order
	ends    map[string][]StreamEnd
	acks    []Ack
	revokes []Revoke
	evicted []Eviction
	done    bool
}

func newHarness(t testing.TB, cfg Config) *harness {
	t.Helper()
	c, err := NewCoordinator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, c: c, session: map[string]Fence{}, leases: map[string][]Lease{}, ends: map[string][]StreamEnd{}}
	h.collect()
	return h
}

func (h *harness) collect() {
	rd := h.c.Ready()
	for _, w := range rd.Welcomes {
		for _, rs := range w.Ranks {
			h.session[rs.Rank] = rs.Session
		}
	}
	for _, l := range rd.Grants {
		h.leases[l.Rank] = append(h.leases[l.Rank], l)
	}
	for _, e := range rd.Ends {
		h.ends[e.Rank] = append(h.ends[e.Rank], e)
	}
	h.acks = append(h.acks, rd.Acks...)
	h.revokes = append(h.revokes, rd.Revokes...)
	h.evicted = append(h.evicted, rd.Evictions...)
	h.done = h.done || rd.Done
	h.c.Advance()
}

func (h *harness) step(ev Event) error {
	err := h.c.Step(ev)
	h.collect()
	return err
}

func (h *harness) must(ev Event) {
	h.t.Helper()
	if err := h.step(ev); err != nil {
		h.t.Fatalf("%T %+v: %v", ev, ev, err)
	}
}

func (h *harness) join(node string, inc uint64, ranks int) []string {
	var ids []string
	for i := range ranks {
		ids = append(ids, fmt.Sprintf("%s/%d", node, i))
	}
	h.must(Join{Node: node, Incarnation: inc, Ranks: ids})
	return ids
}

func (h *harness) granted(rank string, epoch int) (n, pad int64) {
	for _, l := range h.leases[rank] {
		if l.Epoch == epoch {
			n += l.Len()
			if l.Pad {
				pad += l.Len()
			}
		}
	}
	return n, pad
}

// finish delivers and commits every lease rank holds in epoch, in order.
func (h *harness) finish(rank string, epoch int) {
	h.t.Helper()
	var off int64
	for _, l := range h.leases[rank] {
		if l.Epoch != epoch || l.Len() == 0 {
			continue
		}
		off += l.Len()
		// Once the epoch is complete, messages about it are stale.
		if err := h.step(LeaseDone{Rank: rank, Session: h.session[rank], Lease: l.Fence, Through: l.End}); err != nil && !errors.Is(err, ErrStale) {
			h.t.Fatalf("lease done: %v", err)
		}
		err := h.step(Commit{Rank: rank, Session: h.session[rank], Epoch: epoch, Lease: l.Fence, Through: l.End, Offset: off})
		if err != nil && !errors.Is(err, ErrStale) {
			h.t.Fatalf("commit: %v", err)
		}
	}
}

func TestEqualStepsQuota(t *testing.T) {
	for _, tc := range []struct {
		n         int64
		ranks     int
		shard     int
		drop      bool
		quota     int64
		padOrDrop int64
	}{
		{n: 100, ranks: 4, shard: 16, quota: 25},
		{n: 10, ranks: 3, shard: 4, quota: 4, padOrDrop: 2},             // ceil(10/3)=4, 12-10 padded
		{n: 10, ranks: 3, shard: 4, drop: true, quota: 3, padOrDrop: 1}, // floor, 1 dropped
		{n: 2, ranks: 5, shard: 8, quota: 1, padOrDrop: 3},              // fewer samples than ranks
		{n: 2, ranks: 5, shard: 8, drop: true, quota: 0, padOrDrop: 2},  // PyTorch drops all
		{n: 1, ranks: 1, shard: 1, quota: 1},
		{n: 7, ranks: 2, shard: 1, quota: 4, padOrDrop: 1},
	} {
		name := fmt.Sprintf("n=%d/ranks=%d/shard=%d/drop=%v", tc.n, tc.ranks, tc.shard, tc.drop)
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Samples, cfg.ShardSize, cfg.DropRemainder = tc.n, tc.shard, tc.drop
			h := newHarness(t, cfg)
			ids := h.join("a", 1, tc.ranks)
			for _, id := range ids {
				h.must(Request{Rank: id, Session: h.session[id], Epoch: 0, Through: 1 << 40})
			}
			seen := map[int64]bool{}
			var pads int64
			for _, id := range ids {
				n, pad := h.granted(id, 0)
				if n != tc.quota {
					t.Errorf("%s granted %d, want quota %d", id, n, tc.quota)
				}
				pads += pad
				for _, l := range h.leases[id] {
					if !l.Pad && ShardOf(l.Start, tc.shard, tc.n) != ShardOf(l.End-1, tc.shard, tc.n) {
						t.Errorf("lease %+v crosses a shard boundary", l)
					}
					for p := l.Start; p < l.End; p++ {
						if seen[p] {
							t.Errorf("position %d leased twice", p)
						}
						seen[p] = true
					}
				}
				if e := h.ends[id]; len(e) != 1 || e[0].Length != tc.quota || e[0].Leases != len(h.leases[id]) {
					t.Errorf("%s ends %+v, want one at %d", id, e, tc.quota)
				}
			}
			st := h.c.Epoch(0)
			var dropped int64
			for _, r := range st.Dropped {
				dropped += r.Len()
				if r.End != tc.n {
					t.Errorf("dropped %v, want the tail of the order", r)
				}
			}
			if got := pads + dropped; got != tc.padOrDrop {
				t.Errorf("padding %d + dropped %d = %d, want %d", pads, dropped, got, tc.padOrDrop)
			}
			for _, id := range ids {
				h.finish(id, 0)
			}
			if !h.done {
				t.Errorf("job not done after every rank committed: %+v", h.c.Epoch(0))
			}
		})
	}
}

func TestFencing(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Samples, cfg.ShardSize = 20, 5
	h := newHarness(t, cfg)
	ids := h.join("a", 1, 1)
	h.join("b", 1, 1)
	old := h.session[ids[0]]
	h.must(Request{Rank: ids[0], Session: old, Epoch: 0, Through: 10})
	l := h.leases[ids[0]][0]
	h.must(Commit{Rank: ids[0], Session: old, Epoch: 0, Lease: l.Fence, Through: l.Start + 2, Offset: 2})

	h.must(Fail{Node: "a", Incarnation: 1})
	if len(h.evicted) != 1 {
		t.Fatalf("evictions %+v", h.evicted)
	}
	for _, ev := range []Event{
		Commit{Rank: ids[0], Session: old, Epoch: 0, Lease: l.Fence, Through: l.End, Offset: l.Len()},
		Progress{Rank: ids[0], Session: old, Lease: l.Fence, Through: l.End},
		LeaseDone{Rank: ids[0], Session: old, Lease: l.Fence, Through: l.End},
		Request{Rank: ids[0], Session: old, Epoch: 0, Through: 100},
	} {
		if err := h.step(ev); !errors.Is(err, ErrFenced) {
			t.Errorf("%T from a failed node's session: %v, want ErrFenced", ev, err)
		}
	}
	// A stale or duplicate failure report for an older life is ignored.
	h.join("a", 2, 1)
	h.must(Fail{Node: "a", Incarnation: 1})
	if h.session[ids[0]] == old || len(h.evicted) != 1 {
		t.Fatalf("rejoin: session %v (old %v), evictions %+v", h.session[ids[0]], old, h.evicted)
	}
	if err := h.step(Request{Rank: ids[0], Session: old, Epoch: 0, Through: 1}); !errors.Is(err, ErrFenced) {
		t.Errorf("old session after rejoin: %v, want ErrFenced", err)
	}
	// The two committed positions stay committed; the rest of the lease
	// went back to the pool and is issued again.
	if got := h.c.Epoch(0).Committed; got != 2 {
		t.Errorf("committed %d, want 2", got)
	}
	h.must(Request{Rank: ids[0], Session: h.session[ids[0]], Epoch: 0, Through: 100})
	reissued := false
	for _, nl := range h.leases[ids[0]] {
		if nl.Session == h.session[ids[0]] && nl.Start == l.Start+2 {
			reissued = true
		}
	}
	if !reissued {
		t.Errorf("uncommitted tail [%d, %d) not re-issued: %+v", l.Start+2, l.End, h.leases[ids[0]])
	}
}

// TestCommitWaitsForLeaseDone: a rank that shortened a lease commits past
// it; the commit overtakes the LeaseDone on the wire. The coordinator must
// not read the commit against the lease's old length.
func TestCommitWaitsForLeaseDone(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Samples, cfg.ShardSize, cfg.Balance = 40, 10, Dynamic
	h := newHarness(t, cfg)
	id := h.join("a", 1, 1)[0]
	s := h.session[id]
	h.must(Request{Rank: id, Session: s, Epoch: 0, Through: 20})
	l0, l1 := h.leases[id][0], h.leases[id][1]
	// The rank stops l0 at 4 (hands the tail back), delivers 3 of l1.
	commit := Commit{Rank: id, Session: s, Epoch: 0, Lease: l1.Fence, Through: l1.Start + 3, Offset: 4 + 3}
	h.must(commit)
	if len(h.acks) != 0 {
		t.Fatalf("commit applied before the LeaseDone it depends on: %+v", h.acks)
	}
	h.must(LeaseDone{Rank: id, Session: s, Lease: l0.Fence, Through: l0.Start + 4})
	if len(h.acks) != 1 || h.acks[0].Offset != 7 {
		t.Fatalf("acks %+v, want one at offset 7", h.acks)
	}
	if got := h.c.Epoch(0).Committed; got != 7 {
		t.Errorf("committed %d positions, want 7", got)
	}
	// A commit whose offset is ahead of the coordinator's view is a bug.
	bad := Commit{Rank: id, Session: s, Epoch: 0, Lease: l1.Fence, Through: l1.Start + 5, Offset: 100}
	if err := h.step(bad); !errors.Is(err, ErrInvalid) {
		t.Errorf("inconsistent offset: %v, want ErrInvalid", err)
	}
}

func TestStealSplitsStragglerLease(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Samples, cfg.ShardSize, cfg.Balance, cfg.StealMin = 100, 100, Dynamic, 8
	h := newHarness(t, cfg)
	slow := h.join("slow", 1, 1)[0]
	fast := h.join("fast", 1, 1)[0]
	h.must(Request{Rank: slow, Session: h.session[slow], Epoch: 0, Through: 1})
	big := h.leases[slow][0]
	if big.Len() != 100 {
		t.Fatalf("lease %+v, want the whole shard", big)
	}
	h.must(Progress{Rank: slow, Session: h.session[slow], Lease: big.Fence, Through: 10})
	h.must(Request{Rank: fast, Session: h.session[fast], Epoch: 0, Through: 10})
	if len(h.revokes) != 1 || h.revokes[0].From != 55 {
		t.Fatalf("revokes %+v, want one from 55 (half of the 90 undelivered)", h.revokes)
	}
	// The slow rank had got further than the coordinator knew.
	h.must(LeaseDone{Rank: slow, Session: h.session[slow], Lease: big.Fence, Through: 60})
	got := h.leases[fast]
	if len(got) != 1 || got[0].Start != 60 || got[0].End != 100 {
		t.Fatalf("fast rank leases %+v, want [60, 100)", got)
	}
	h.must(Commit{Rank: slow, Session: h.session[slow], Epoch: 0, Lease: big.Fence, Through: 60, Offset: 60})
	h.finish(fast, 0)
	if !h.done {
		t.Fatalf("not done: %+v", h.c.Epoch(0))
	}
}

func TestRevokeTimeoutEvicts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Samples, cfg.ShardSize, cfg.Balance, cfg.StealMin, cfg.RevokeTimeout = 100, 100, Dynamic, 8, 3
	h := newHarness(t, cfg)
	slow := h.join("slow", 1, 1)[0]
	fast := h.join("fast", 1, 1)[0]
	h.must(Request{Rank: slow, Session: h.session[slow], Epoch: 0, Through: 1})
	h.must(Request{Rank: fast, Session: h.session[fast], Epoch: 0, Through: 1})
	for range 3 {
		h.must(Tick{})
	}
	if len(h.evicted) != 1 || h.evicted[0].Node != "slow" {
		t.Fatalf("evictions %+v, want the node that ignored the revoke", h.evicted)
	}
	if n, _ := h.granted(fast, 0); n != 100 {
		t.Errorf("fast rank granted %d, want all 100 after the eviction", n)
	}
}

func TestJoinAfterAllLeased(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Samples, cfg.ShardSize, cfg.Epochs = 10, 10, 2
	h := newHarness(t, cfg)
	a := h.join("a", 1, 1)[0]
	h.must(Request{Rank: a, Session: h.session[a], Epoch: 0, Through: 10})
	h.must(Join{Node: "b", Incarnation: 1, Ranks: []string{"b/0"}})
	if n, _ := h.granted("b/0", 0); n != 0 {
		t.Errorf("late joiner got %d positions of a fully leased epoch", n)
	}
	h.must(Request{Rank: "b/0", Session: h.session["b/0"], Epoch: 1, Through: 10})
	if n, _ := h.granted("b/0", 1); n != 5 {
		t.Errorf("late joiner got %d positions of the next epoch, want 5", n)
	}
}

// TestMinRanks: Requests are held until MinRanks ranks joined, so the
// first epoch's shares are equal; a fenced session is still told so
// while they are held; once the first epoch started nothing is held.
func TestMinRanks(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Samples, cfg.ShardSize, cfg.Epochs, cfg.MinRanks = 20, 5, 2, 3
	h := newHarness(t, cfg)
	a := h.join("a", 1, 2)
	h.must(Request{Rank: a[0], Session: h.session[a[0]], Epoch: 0, Through: 10})
	if n, _ := h.granted(a[0], 0); n != 0 || h.c.Stats().HeldRequests != 1 {
		t.Fatalf("granted %d positions with 2 of 3 ranks joined (held %d)", n, h.c.Stats().HeldRequests)
	}
	stale := Fence{Incarnation: 9, Seq: 99}
	if err := h.step(Request{Rank: a[1], Session: stale, Epoch: 0, Through: 10}); !errors.Is(err, ErrFenced) {
		t.Fatalf("a request from a fenced session while held: %v, want ErrFenced", err)
	}
	b := h.join("b", 1, 1)
	h.must(Request{Rank: a[0], Session: h.session[a[0]], Epoch: 0, Through: 10})
	h.must(Request{Rank: b[0], Session: h.session[b[0]], Epoch: 0, Through: 10})
	h.must(Request{Rank: a[1], Session: h.session[a[1]], Epoch: 0, Through: 10})
	for _, r := range append(a, b...) {
		if n, _ := h.granted(r, 0); n == 0 {
			t.Errorf("%s got nothing once 3 ranks joined", r)
		}
	}
	h.must(Leave{Node: "b", Incarnation: 1})
	held := h.c.Stats().HeldRequests
	h.must(Request{Rank: a[0], Session: h.session[a[0]], Epoch: 1, Through: 10})
	if n, _ := h.granted(a[0], 1); n == 0 || h.c.Stats().HeldRequests != held {
		t.Errorf("after the first epoch started, a request with 2 of 3 ranks was held (granted %d)", n)
	}
}

// TestWelcomeResend: a node's Welcome goes again after WelcomeResend
// ticks while none of its sessions has said anything (the wait doubling),
// with the same sessions; one message from a session stops it, and a
// Reset's Welcome starts it again for the new session.
func TestWelcomeResend(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Samples, cfg.ShardSize, cfg.Epochs, cfg.WelcomeResend = 20, 5, 1, 3
	h := newHarness(t, cfg)
	var welcomes []Welcome
	tick := func(n int) {
		for range n {
			if err := h.c.Step(Tick{}); err != nil {
				t.Fatal(err)
			}
			welcomes = append(welcomes, h.c.Ready().Welcomes...)
			h.c.Advance()
		}
	}
	ids := h.join("a", 1, 2)
	first := map[string]Fence{ids[0]: h.session[ids[0]], ids[1]: h.session[ids[1]]}
	tick(2)
	if len(welcomes) != 0 {
		t.Fatalf("resent after 2 ticks: %+v", welcomes)
	}
	tick(1)
	if len(welcomes) != 1 || len(welcomes[0].Ranks) != 2 {
		t.Fatalf("after 3 silent ticks: %+v, want the node's Welcome again", welcomes)
	}
	for _, rs := range welcomes[0].Ranks {
		if first[rs.Rank] != rs.Session {
			t.Errorf("resent %s with session %v, first %v", rs.Rank, rs.Session, first[rs.Rank])
		}
	}
	tick(5) // the next wait is 6 ticks
	if len(welcomes) != 1 {
		t.Fatalf("resent again after 5 more ticks: %d", len(welcomes))
	}
	tick(1)
	if len(welcomes) != 2 {
		t.Fatalf("not resent 6 ticks after the first resend: %d", len(welcomes))
	}
	h.must(Request{Rank: ids[1], Session: h.session[ids[1]], Epoch: 0, Through: 5})
	tick(100)
	if len(welcomes) != 2 || h.c.Stats().WelcomeResends != 2 {
		t.Fatalf("resent after a session talked: %d (%d)", len(welcomes), h.c.Stats().WelcomeResends)
	}
	h.must(Reset{Rank: ids[0], Session: h.session[ids[0]]})
	tick(3)
	if len(welcomes) != 3 || len(welcomes[2].Ranks) != 1 || welcomes[2].Ranks[0].Session != h.session[ids[0]] {
		t.Fatalf("a Reset's unanswered Welcome was not resent for the new session: %+v", welcomes[2:])
	}
}

func TestEmptyDataset(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Epochs = 2
	h := newHarness(t, cfg)
	a := h.join("a", 1, 1)[0]
	h.must(Request{Rank: a, Session: h.session[a], Epoch: 0, Through: 10})
	h.must(Request{Rank: a, Session: h.session[a], Epoch: 1, Through: 10})
	if !h.done || len(h.leases[a]) != 0 {
		t.Fatalf("done=%v leases=%+v", h.done, h.leases[a])
	}
}

func TestRestore(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Samples, cfg.ShardSize = 30, 10
	h := newHarness(t, cfg)
	a := h.join("a", 1, 1)[0]
	h.must(Request{Rank: a, Session: h.session[a], Epoch: 0, Through: 20})
	l := h.leases[a][0]
	h.must(Commit{Rank: a, Session: h.session[a], Epoch: 0, Lease: l.Fence, Through: l.Start + 6, Offset: 6})
	snap := h.c.Snapshot()
	if got := snap.Epochs[0].Committed; len(got) != 1 || got[0] != (Range{0, 6}) {
		t.Fatalf("snapshot committed %+v", got)
	}
	c2, err := Restore(cfg, snap)
	if err != nil {
		t.Fatal(err)
	}
	if c2.Config().Incarnation <= cfg.Incarnation || !c2.Ready().Persist {
		t.Fatalf("restored incarnation %d, persist %v: must be new and persisted first", c2.Config().Incarnation, c2.Ready().Persist)
	}
	h2 := &harness{t: t, c: c2, session: map[string]Fence{}, leases: map[string][]Lease{}, ends: map[string][]StreamEnd{}}
	h2.collect()
	if err := h2.step(Request{Rank: a, Session: h.session[a], Epoch: 0, Through: 20}); !errors.Is(err, ErrFenced) {
		t.Errorf("old life's session: %v, want ErrFenced", err)
	}
	b := h2.join("a", 1, 1)[0]
	h2.must(Request{Rank: b, Session: h2.session[b], Epoch: 0, Through: 100})
	n, _ := h2.granted(b, 0)
	if n != 24 || h2.leases[b][0].Start != 6 {
		t.Errorf("restored coordinator leased %d from %+v, want the 24 uncommitted from 6", n, h2.leases[b])
	}
	h2.finish(b, 0)
	if !h2.done {
		t.Error("restored job did not finish")
	}

	wrong := cfg
	wrong.Seed++
	if _, err := Restore(wrong, snap); !errors.Is(err, ErrState) {
		t.Errorf("restore with another seed: %v, want ErrState", err)
	}
	testRestoreWindow(t, cfg, snap)
}

// testRestoreWindow: Restore refuses a state whose window gives another
// order, and accepts one whose window means the same order (any window
// with block 1; window 0, from a state before windows, as window 1).
func testRestoreWindow(t *testing.T, cfg Config, snap State) {
	t.Helper()
	for _, tc := range []struct {
		block, stateWindow, cfgWindow int
		ok                            bool
	}{
		{1, 128, 1, true}, {1, 0, 128, true}, {16, 0, 1, true}, {16, 128, 128, true},
		{16, 0, 128, false}, {16, 128, 1, false}, {16, 4, 8, false},
	} {
		c, s := cfg, snap
		c.Block, c.Window, s.Block, s.Window = tc.block, tc.cfgWindow, tc.block, tc.stateWindow
		if _, err := Restore(c, s); (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrState)) {
			t.Errorf("block %d: restore a state of window %d with window %d: %v, want ok %v", tc.block, tc.stateWindow, tc.cfgWindow, err, tc.ok)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig: %v", err)
	}
	bad := Config{Samples: -1, Balance: Dynamic, DropRemainder: true, RevokeTimeout: -1}
	err := bad.Validate()
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("got %v, want ErrConfig", err)
	}
	for _, want := range []string{"Samples", "Epochs", "ShardSize", "Block", "Window", "DropRemainder", "StealMin", "RevokeTimeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate does not report %s: %v", want, err)
		}
	}
}

func TestRangeSet(t *testing.T) {
	var s rangeSet
	s.add(Range{10, 20})
	s.add(Range{0, 5})
	s.add(Range{5, 10}) // joins both sides
	s.add(Range{30, 40})
	s.add(Range{25, 30}) // joins right
	if got := fmt.Sprint(s.ranges()); got != "[{0 20} {25 40}]" || s.len() != 35 {
		t.Fatalf("ranges %s len %d", got, s.len())
	}
	if r := s.takeFront(7); r != (Range{0, 7}) {
		t.Fatalf("takeFront %v", r)
	}
	if back := s.takeBack(17); fmt.Sprint(back) != "[{25 40} {18 20}]" {
		t.Fatalf("takeBack %v", back)
	}
	if got := fmt.Sprint(s.ranges()); got != "[{7 18}]" || s.len() != 11 {
		t.Fatalf("after takes: %s len %d", got, s.len())
	}
	defer func() {
		if recover() == nil {
			t.Error("overlapping add did not panic")
		}
	}()
	s.add(Range{17, 22})
}

// BenchmarkCoordinator measures lease operations per second on one core:
// each iteration is one lease's life — Request (grant), LeaseDone, Commit —
// across 64 ranks on a 10 M sample epoch with 256-position shards.
func BenchmarkCoordinator(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Samples, cfg.Epochs = 10_000_000, 1000
	c, err := NewCoordinator(cfg)
	if err != nil {
		b.Fatal(err)
	}
	const nodes, perNode = 16, 4
	type rk struct {
		id      string
		session Fence
		through map[int]int64
		off     map[int]int64
	}
	var ranks []*rk
	for n := range nodes {
		var ids []string
		for i := range perNode {
			ids = append(ids, fmt.Sprintf("n%d/%d", n, i))
		}
		if err := c.Step(Join{Node: fmt.Sprint("n", n), Incarnation: 1, Ranks: ids}); err != nil {
			b.Fatal(err)
		}
	}
	for _, w := range c.Ready().Welcomes {
		for _, rs := range w.Ranks {
			ranks = append(ranks, &rk{id: rs.Rank, session: rs.Session, through: map[int]int64{}, off: map[int]int64{}})
		}
	}
	c.Advance()
	byID := map[string]*rk{}
	for _, r := range ranks {
		byID[r.id] = r
	}
	epoch := 0
	var events int
	for i := 0; b.Loop(); i++ {
		r := ranks[i%len(ranks)]
		r.through[epoch] += int64(cfg.ShardSize)
		err := c.Step(Request{Rank: r.id, Session: r.session, Epoch: epoch, Through: r.through[epoch]})
		events++
		if err != nil {
			b.Fatal(err)
		}
		rd := c.Ready()
		grants := append([]Lease(nil), rd.Grants...)
		ended := len(rd.Ends) > 0
		c.Advance()
		for _, l := range grants {
			o := byID[l.Rank]
			o.off[l.Epoch] += l.Len()
			if err := c.Step(LeaseDone{Rank: l.Rank, Session: l.Session, Lease: l.Fence, Through: l.End}); err != nil {
				b.Fatal(err)
			}
			if err := c.Step(Commit{Rank: l.Rank, Session: l.Session, Epoch: l.Epoch, Lease: l.Fence, Through: l.End, Offset: o.off[l.Epoch]}); err != nil && !errors.Is(err, ErrStale) {
				b.Fatal(err)
			}
			events += 2
			c.Advance()
		}
		if ended && c.Epoch(epoch).Complete {
			epoch++
		} else if ended {
			// This rank's quota is leased; let the others catch up.
			r.through[epoch] = 0
		}
	}
	b.ReportMetric(float64(c.Stats().Grants)/b.Elapsed().Seconds(), "leases/s")
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkMemory10M reports the coordinator's heap for a 10 M sample
// epoch with every shard leased (39 k leases: the most state an epoch
// holds) and each rank committed to the middle of its last lease, and the
// snapshot's size in ranges.
func BenchmarkMemory10M(b *testing.B) {
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		cfg := DefaultConfig()
		cfg.Samples = 10_000_000
		c, _ := NewCoordinator(cfg)
		const nodes, perNode = 16, 4
		for n := range nodes {
			var ids []string
			for i := range perNode {
				ids = append(ids, fmt.Sprintf("n%d/%d", n, i))
			}
			c.Step(Join{Node: fmt.Sprint("n", n), Incarnation: 1, Ranks: ids})
		}
		var sessions []RankSession
		for _, w := range c.Ready().Welcomes {
			sessions = append(sessions, w.Ranks...)
		}
		c.Advance()
		for _, rs := range sessions {
			c.Step(Request{Rank: rs.Rank, Session: rs.Session, Epoch: 0, Through: 1 << 40})
		}
		grants := c.Ready().Grants
		c.Advance()
		off := map[string]int64{}
		for _, l := range grants {
			c.Step(Commit{Rank: l.Rank, Session: l.Session, Epoch: 0, Lease: l.Fence, Through: l.Start + l.Len()/2 + 1, Offset: off[l.Rank] + l.Len()/2 + 1})
			off[l.Rank] += l.Len()
			c.Advance()
		}
		grants = nil
		runtime.GC()
		runtime.ReadMemStats(&after)
		snap := c.Snapshot()
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MiB")
		b.ReportMetric(float64(len(snap.Epochs[0].Committed)), "snapshot-ranges")
		b.ReportMetric(float64(c.Stats().Grants), "leases")
		runtime.KeepAlive(c)
	}
}

// TestShardsFollowWindows: with windows, no lease crosses a window, and
// with a shard size of at least a window no block is split between two
// leases (so no chunk is fetched by two nodes); with a smaller shard
// size leases are runs of it from each window's start.
func TestShardsFollowWindows(t *testing.T) {
	for _, tc := range []struct {
		n                    int64
		block, window, shard int
	}{
		{1000, 16, 4, 64},      // shard = window
		{1000, 16, 4, 1 << 20}, // shard > every window: a lease is a window
		{1003, 8, 3, 24},       // a short block
		{5000, 16, 128, 2048},  // the defaults for a packed dataset
		{1000, 16, 4, 24},      // shard < window: cut within windows
	} {
		t.Run(fmt.Sprintf("n=%d/block=%d/window=%d/shard=%d", tc.n, tc.block, tc.window, tc.shard), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Samples, cfg.Block, cfg.Window, cfg.ShardSize, cfg.Epochs, cfg.Balance = tc.n, tc.block, tc.window, tc.shard, 3, Dynamic
			h := newHarness(t, cfg)
			ids := h.join("a", 1, 3)
			wholeWindows := int64(tc.shard) >= int64(tc.block*tc.window)
			for e := range cfg.Epochs {
				for _, id := range ids {
					h.must(Request{Rank: id, Session: h.session[id], Epoch: e, Through: 1 << 40})
				}
				o := cfg.Order(e)
				owner := map[int64]Fence{} // block -> the lease holding it
				var covered int64
				for _, id := range ids {
					for _, l := range h.leases[id] {
						if l.Epoch != e || l.Pad {
							continue
						}
						covered += l.Len()
						w := o.WindowAt(l.Start)
						if l.End > w.End {
							t.Errorf("epoch %d: lease %+v crosses the end of window %v", e, l, w)
						}
						if want := min(w.Start+((l.Start-w.Start)/int64(tc.shard)+1)*int64(tc.shard), w.End); l.End > want {
							t.Errorf("epoch %d: lease %+v crosses a shard of window %v", e, l, w)
						}
						for p := l.Start; p < l.End; p++ {
							b := o.At(p) / int64(cfg.Block)
							if f, ok := owner[b]; ok && f != l.Fence && wholeWindows {
								t.Fatalf("epoch %d: block %d in leases %v and %v", e, b, f, l.Fence)
							}
							owner[b] = l.Fence
						}
					}
				}
				if covered != cfg.Samples {
					t.Fatalf("epoch %d: leases cover %d positions, want %d", e, covered, cfg.Samples)
				}
				for _, id := range ids {
					h.finish(id, e)
				}
			}
		})
	}
}

// TestShardsFollowBlocks: when the order's block divides the shard size,
// no block is split between two leases, whichever slot the short block
// lands in: a node reading a packed dataset fetches each block's chunk
// once. With a block that does not divide the shard size the plain grid
// stays.
func TestShardsFollowBlocks(t *testing.T) {
	for _, tc := range []struct {
		n            int64
		block, shard int
		aligned      bool
	}{
		{1000, 16, 32, true},
		{1000, 16, 16, true},
		{1003, 8, 64, true},
		{1024, 16, 32, true}, // no short block
		{1000, 16, 24, false},
	} {
		t.Run(fmt.Sprintf("n=%d/block=%d/shard=%d", tc.n, tc.block, tc.shard), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Samples, cfg.Block, cfg.Window, cfg.ShardSize, cfg.Epochs, cfg.Balance = tc.n, tc.block, 1, tc.shard, 4, Dynamic
			h := newHarness(t, cfg)
			ids := h.join("a", 1, 3)
			splits := 0
			for e := range cfg.Epochs {
				for _, id := range ids {
					h.must(Request{Rank: id, Session: h.session[id], Epoch: e, Through: 1 << 40})
				}
				o := NewOrder(cfg.Seed, e, cfg.Samples, cfg.Block, cfg.Window)
				owner := map[int64]Fence{} // block -> the lease holding it
				var covered int64
				for _, id := range ids {
					for _, l := range h.leases[id] {
						if l.Epoch != e || l.Pad {
							continue
						}
						covered += l.Len()
						if l.Len() > int64(cfg.ShardSize) {
							t.Errorf("epoch %d: lease %+v longer than a shard", e, l)
						}
						for p := l.Start; p < l.End; p++ {
							b := o.At(p) / int64(cfg.Block)
							if f, ok := owner[b]; ok && f != l.Fence {
								splits++
							}
							owner[b] = l.Fence
						}
					}
				}
				if covered != cfg.Samples {
					t.Fatalf("epoch %d: leases cover %d positions, want %d", e, covered, cfg.Samples)
				}
				for _, id := range ids {
					h.finish(id, e)
				}
			}
			if tc.aligned && splits > 0 {
				t.Errorf("%d block positions in a lease other than their block's first", splits)
			}
			if !tc.aligned && splits == 0 {
				t.Errorf("block %d does not divide shard %d, yet no block was split: is the test blind?", tc.block, tc.shard)
			}
		})
	}
}

// TestTrailKeepsCuts: where a node says its runs were cut (Commit.Cuts)
// goes into its session's trail, whichever commit said it and in
// whatever order they came, below the committed offset; a node that
// does not say leaves its trail without (CutsTold false).
func TestTrailKeepsCuts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Samples, cfg.ShardSize, cfg.Balance, cfg.BatchSize = 40, 10, Dynamic, 4
	h := newHarness(t, cfg)
	ids := h.join("a", 1, 2)
	trail := func(rank string) Trail {
		t.Helper()
		for _, tr := range h.c.Snapshot().Epochs[0].Trails {
			if tr.Rank == rank {
				return tr
			}
		}
		t.Fatalf("no trail of %s", rank)
		return Trail{}
	}
	id, s := ids[0], h.session[ids[0]]
	h.must(Request{Rank: id, Session: s, Epoch: 0, Through: 20})
	l0, l1 := h.leases[id][0], h.leases[id][1]
	// Steps 0-1 of 4 and 2 (a run's short batch ending at 10), 3 and 4
	// from 10: commits of steps 2 (offset 10) and 4 (18), then step 0's
	// late, and a cut past its commit's offset that no node would send.
	h.must(Commit{Rank: id, Session: s, Epoch: 0, Lease: l0.Fence, Through: l0.End, Offset: 10, Step: 2, Cuts: []int64{10}, CutsTold: true})
	if tr := trail(id); !tr.CutsTold || len(tr.Cuts) != 0 {
		t.Errorf("a cut at the commit's own offset: trail cuts %v told %v, want none yet, told", tr.Cuts, tr.CutsTold)
	}
	h.must(Commit{Rank: id, Session: s, Epoch: 0, Lease: l1.Fence, Through: l1.Start + 8, Offset: 18, Step: 4, Cuts: []int64{10, 19}, CutsTold: true})
	h.must(Commit{Rank: id, Session: s, Epoch: 0, Lease: l0.Fence, Through: l0.Start + 4, Offset: 4, Step: 0, CutsTold: true})
	tr := trail(id)
	if !tr.CutsTold || len(tr.Cuts) != 1 || tr.Cuts[0] != 10 {
		t.Fatalf("trail cuts %v told %v, want [10] told", tr.Cuts, tr.CutsTold)
	}
	steps, err := TrailSteps(tr, 4)
	want := []TrailStep{{0, 0, 4, false}, {1, 4, 4, false}, {2, 8, 2, false}, {3, 10, 4, false}, {4, 14, 4, false}}
	if err != nil || fmt.Sprint(steps) != fmt.Sprint(want) {
		t.Errorf("steps %v, %v; want %v", steps, err, want)
	}
	// An older node's commits say nothing of cuts.
	old, so := ids[1], h.session[ids[1]]
	h.must(Request{Rank: old, Session: so, Epoch: 0, Through: 10})
	lo := h.leases[old][0]
	h.must(Commit{Rank: old, Session: so, Epoch: 0, Lease: lo.Fence, Through: lo.Start + 4, Offset: 4, Step: 0})
	if tr := trail(old); tr.CutsTold || tr.Cuts != nil {
		t.Errorf("an older node's trail: cuts %v told %v, want none, untold", tr.Cuts, tr.CutsTold)
	}
}
