package node

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/wire"
)

// served lists a Work's items as stream offsets of its epoch, with the
// number of its segment (the pipeline's run) and its end flag: what a
// test expects of it.
type served struct {
	P       int // segment, in the order the session opened them
	Epoch   int // job epoch
	Offsets []int64
	RunEnd  bool
}

func (g *fillRig) served(w actors.Work) served {
	g.t.Helper()
	p, ok := g.seg(w)
	if !ok {
		g.t.Fatalf("%s: no segment", workString(w))
	}
	out := served{P: p, Epoch: w.Epoch, RunEnd: w.RunEnd}
	for _, it := range w.Items {
		out.Offsets = append(out.Offsets, it.Pos)
	}
	return out
}

func offsets(from, to int64) []int64 {
	var out []int64
	for o := from; o < to; o++ {
		out = append(out, o)
	}
	return out
}

func checkSegs(t *testing.T, g *fillRig, want []cluster.StepRun) {
	t.Helper()
	if got := g.segs(); !reflect.DeepEqual(got, want) {
		t.Errorf("segments:\n got %+v\nwant %+v", got, want)
	}
}

func checkSteps(t *testing.T, g *fillRig, want map[int]int64) {
	t.Helper()
	got := map[int]int64{}
	for e := range want {
		got[e] = g.rs.runs.Steps().NextStep(e)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("next step per epoch = %v, want %v", got, want)
	}
}

// TestFillFinishesBatchBeforeOlderEpoch: the rank is mid-batch in epoch 1
// when epoch 0's stream grows (a departed rank's work is re-granted to
// it). It finishes the batch from epoch 1's leases, then serves epoch 0's
// new positions as a segment of their own, then goes back to epoch 1: no
// partial batch, so epoch 1 takes 16/4 steps like every other rank's 16
// positions would. Whatever the pipeline's Want size, the segments are the
// same.
func TestFillFinishesBatchBeforeOlderEpoch(t *testing.T) {
	for _, n := range []int{1, 2, 3, 8} {
		t.Run(fmt.Sprintf("want=%d", n), func(t *testing.T) {
			g := newFillRig(t, 4, 2)
			g.strict = true
			g.send(g.lease(0, 0, 8), g.end(0), g.lease(1, 8, 16), g.lease(1, 24, 32), g.end(1))
			if w := g.served(g.mustAsk(100)); !reflect.DeepEqual(w, served{0, 0, offsets(0, 8), true}) {
				t.Fatalf("epoch 0: %+v", w)
			}
			if w := g.served(g.mustAsk(5)); !reflect.DeepEqual(w, served{1, 1, offsets(0, 5), false}) {
				t.Fatalf("epoch 1 start: %+v", w)
			}
			// 5 of epoch 1's positions are given, 2 more taken ahead:
			// the batch [4, 8) needs offset 7, which only TakeFrom gets
			// once epoch 0's new positions are next in Take's order.
			g.send(g.lease(0, 40, 44), g.end(0))
			var ws []served
			for _, w := range g.drain(n) {
				ws = append(ws, g.served(w))
			}
			if n >= 3 {
				want := []served{{1, 1, offsets(5, 8), true}}
				if !reflect.DeepEqual(ws[:1], want) {
					t.Errorf("after the growth: %+v, want %+v", ws[:1], want)
				}
			}
			g.checkAllGiven()
			checkSegs(t, g, []cluster.StepRun{
				{Epoch: 0, FirstStep: 0, Base: 0, Length: 8, Ended: true, StreamEnd: true},
				{Epoch: 1, FirstStep: 0, Base: 0, Length: 8, Ended: true, StreamEnd: false},
				{Epoch: 0, FirstStep: 2, Base: 8, Length: 4, Ended: true, StreamEnd: true},
				{Epoch: 1, FirstStep: 2, Base: 8, Length: 8, Ended: true, StreamEnd: true},
			})
			checkSteps(t, g, map[int]int64{0: 3, 1: 4})
			if g.endOfStream(1, 1) {
				t.Error("epoch 1's batch cut for epoch 0's growth says EndOfStream")
			}
			if !g.endOfStream(2, 0) || !g.endOfStream(3, 1) {
				t.Error("the streams' last batches do not say EndOfStream")
			}
		})
	}
}

// TestFillHoldsRunEndUntilStreamEndKnown: when the rank holds nothing
// more of its current epoch and does not know yet whether its stream
// ends there, an older epoch's growth does not cut the run: its open
// batch waits until the stream grows or ends. Cut, the run's last batch
// would ship without EndOfStream while it might be the stream's last,
// and a trainer that commits at the end of a stream would never commit
// it (found by the simulation, which drives this code).
func TestFillHoldsRunEndUntilStreamEndKnown(t *testing.T) {
	g := newFillRig(t, 4, 2)
	g.strict = true
	g.send(g.lease(0, 0, 8), g.end(0), g.lease(1, 8, 15))
	g.mustAsk(100)
	if w := g.served(g.mustAsk(5)); !reflect.DeepEqual(w, served{1, 1, offsets(0, 5), false}) {
		t.Fatalf("epoch 1 start: %+v", w)
	}
	g.send(g.lease(0, 40, 44), g.end(0))
	if w := g.served(g.mustAsk(100)); !reflect.DeepEqual(w, served{1, 1, offsets(5, 7), false}) {
		t.Fatalf("before the end is known: %+v", w)
	}
	if w, ok := g.ask(100); ok {
		t.Fatalf("epoch 1's run was cut before its stream's end was known: %s", workString(w))
	}
	// Epoch 1 grows by one and ends: the outstanding Want gets the
	// batch's last position, with the end.
	g.send(g.lease(1, 50, 51), g.end(1))
	w, ok := g.answer()
	if !ok {
		t.Fatal("the Want is still unanswered after epoch 1's end")
	}
	if got := g.served(w); !reflect.DeepEqual(got, served{1, 1, offsets(7, 8), true}) || !w.StreamEnd {
		t.Fatalf("epoch 1's end: %s", workString(w))
	}
	if w := g.served(g.mustAsk(100)); !reflect.DeepEqual(w, served{2, 0, offsets(8, 12), true}) {
		t.Fatalf("epoch 0's growth: %+v", w)
	}
	checkSegs(t, g, []cluster.StepRun{
		{Epoch: 0, FirstStep: 0, Base: 0, Length: 8, Ended: true, StreamEnd: true},
		{Epoch: 1, FirstStep: 0, Base: 0, Length: 8, Ended: true, StreamEnd: true},
		{Epoch: 0, FirstStep: 2, Base: 8, Length: 4, Ended: true, StreamEnd: true},
	})
	checkSteps(t, g, map[int]int64{0: 3, 1: 2})
	if !g.endOfStream(1, 1) {
		t.Error("epoch 1's last batch does not say EndOfStream")
	}
}

// TestFillEndsHeldRunWithAnEndAlone: as above, but epoch 1's stream
// ends where the rank stopped; the run's open batch ships with an end
// that carries no item.
func TestFillEndsHeldRunWithAnEndAlone(t *testing.T) {
	g := newFillRig(t, 4, 2)
	g.strict = true
	g.send(g.lease(0, 0, 8), g.end(0), g.lease(1, 8, 14))
	g.mustAsk(100)
	if w := g.served(g.mustAsk(5)); !reflect.DeepEqual(w, served{1, 1, offsets(0, 5), false}) {
		t.Fatalf("epoch 1 start: %+v", w)
	}
	g.send(g.lease(0, 40, 44), g.end(0))
	if w := g.served(g.mustAsk(100)); !reflect.DeepEqual(w, served{1, 1, offsets(5, 6), false}) {
		t.Fatalf("before the end is known: %+v", w)
	}
	if w, ok := g.ask(100); ok {
		t.Fatalf("epoch 1's run was cut before its stream's end was known: %s", workString(w))
	}
	g.send(g.end(1))
	w, ok := g.answer()
	if !ok {
		t.Fatal("the Want is still unanswered after epoch 1's end")
	}
	if len(w.Items) != 0 || !w.RunEnd || !w.StreamEnd || w.Epoch != 1 {
		t.Fatalf("epoch 1's end: %s, want the end alone", workString(w))
	}
	if w := g.served(g.mustAsk(100)); !reflect.DeepEqual(w, served{2, 0, offsets(8, 12), true}) {
		t.Fatalf("epoch 0's growth: %+v", w)
	}
	if !g.endOfStream(1, 1) {
		t.Error("epoch 1's last batch does not say EndOfStream")
	}
}

// TestFillSecuresNextBeforeCompletingBatch: a batch-completing position
// is given, with another epoch's position next, only once its stream's
// next position is taken, not merely held: a held one may be revoked,
// and the batch already shipped would be the stream's last without
// saying so.
func TestFillSecuresNextBeforeCompletingBatch(t *testing.T) {
	g := newFillRig(t, 4, 2)
	g.strict = true
	g.send(g.lease(0, 0, 8), g.end(0), g.lease(1, 8, 11))
	g.mustAsk(100)
	if w := g.served(g.mustAsk(3)); !reflect.DeepEqual(w, served{1, 1, offsets(0, 3), false}) {
		t.Fatalf("epoch 1 start: %+v", w)
	}
	l := g.lease(1, 20, 30)
	g.send(l, g.lease(0, 40, 44), g.end(0))
	// Offset 3 completes the batch, and the run is cut there for epoch
	// 0's growth; offset 4 was taken with it, so the revoke stops the
	// lease after it and epoch 1's stream goes on past the cut.
	if w := g.served(g.mustAsk(1)); !reflect.DeepEqual(w, served{1, 1, offsets(3, 4), true}) {
		t.Fatalf("the batch's last: %+v", w)
	}
	rv := cluster.Revoke{Rank: "n/0", Session: g.sess, Lease: l.Fence, From: 20}
	g.a.mail(&wire.NodeMail{Revokes: []*wire.Revoke{wire.RevokeOf(rv)}})
	found := false
	for _, m := range g.rs.runs.Leases().Messages() {
		if d, ok := m.(cluster.LeaseDone); ok && d.Lease == l.Fence {
			found = true
			if d.Through != 22 {
				t.Fatalf("revoke stopped the lease at %d, want 22 (two positions taken)", d.Through)
			}
		}
	}
	if !found {
		t.Fatal("no LeaseDone answers the revoke")
	}
}

// TestFillTakeFromKeepsStreamOrder: finishing a batch from the current
// epoch must give that epoch's next offset, also when the rank already
// took it ahead, behind a position of another epoch.
func TestFillTakeFromKeepsStreamOrder(t *testing.T) {
	t.Run("growing epoch is the segment's", func(t *testing.T) {
		// Epoch 0 ended at 6 (mid-batch, its last batch); the rank took
		// epoch 1's first position ahead. Epoch 0 grows: offset 6 is
		// taken behind epoch 1's, and the batch [4, 8) wants it next.
		g := newFillRig(t, 4, 2)
		g.send(g.lease(0, 0, 6), g.end(0), g.lease(1, 8, 16), g.end(1))
		if w := g.served(g.mustAsk(5)); !reflect.DeepEqual(w, served{0, 0, offsets(0, 5), false}) {
			t.Fatalf("epoch 0: %+v", w)
		}
		g.send(g.lease(0, 40, 44), g.end(0))
		g.drain(100)
		g.checkAllGiven()
	})
	t.Run("growing epoch is older", func(t *testing.T) {
		// Epoch 0 grows by one position: after it, Take goes back to
		// epoch 1, so epoch 1's offset 7 is taken behind epoch 0's.
		g := newFillRig(t, 4, 2)
		g.send(g.lease(0, 0, 8), g.end(0), g.lease(1, 8, 16), g.lease(1, 24, 32), g.end(1))
		g.mustAsk(100)
		g.mustAsk(5)
		g.send(g.lease(0, 40, 41), g.end(0))
		g.drain(100)
		g.checkAllGiven()
	})
}

// TestFillWaitsToKnowStreamEnd: a position that would complete a batch
// while nothing is taken behind it may be the stream's last; it is held
// until a StreamEnd or more positions say which, so the Work that carries
// it can say RunEnd and Next can mark that batch EndOfStream.
func TestFillWaitsToKnowStreamEnd(t *testing.T) {
	t.Run("end arrives", func(t *testing.T) {
		g := newFillRig(t, 4, 1)
		g.send(g.lease(0, 0, 8))
		if w := g.served(g.mustAsk(100)); !reflect.DeepEqual(w, served{0, 0, offsets(0, 7), false}) {
			t.Fatalf("first Want: %+v, want offset 7 held", w)
		}
		if w, ok := g.ask(100); ok {
			t.Fatalf("second Want answered before the stream's end is known: %s", workString(w))
		}
		g.send(g.end(0))
		w, ok := g.answer()
		if !ok {
			t.Fatal("StreamEnd did not answer the outstanding Want")
		}
		if got := g.served(w); !reflect.DeepEqual(got, served{0, 0, offsets(7, 8), true}) {
			t.Fatalf("after StreamEnd: %+v", got)
		}
		checkSegs(t, g, []cluster.StepRun{{Epoch: 0, Length: 8, Ended: true, StreamEnd: true}})
		checkSteps(t, g, map[int]int64{0: 2})
		if g.endOfStream(0, 0) || !g.endOfStream(0, 1) {
			t.Error("EndOfStream not on the last batch alone")
		}
	})
	t.Run("stream grows", func(t *testing.T) {
		g := newFillRig(t, 4, 1)
		g.send(g.lease(0, 0, 8))
		g.mustAsk(100)
		if _, ok := g.ask(100); ok {
			t.Fatal("answered before the stream's end is known")
		}
		g.send(g.lease(0, 16, 24))
		w, ok := g.answer()
		if !ok {
			t.Fatal("a grant did not answer the outstanding Want")
		}
		if got := g.served(w); !reflect.DeepEqual(got, served{0, 0, offsets(7, 15), false}) {
			t.Fatalf("after the grant: %+v, want offsets 7-14, 15 held", got)
		}
		if _, ok := g.ask(100); ok {
			t.Fatal("offset 15 not held")
		}
		g.send(g.end(0))
		if w, ok := g.answer(); !ok || !reflect.DeepEqual(g.served(w), served{0, 0, offsets(15, 16), true}) {
			t.Fatalf("after StreamEnd: %s, %v", workString(w), ok)
		}
		checkSegs(t, g, []cluster.StepRun{{Epoch: 0, Length: 16, Ended: true, StreamEnd: true}})
	})
	t.Run("batch left open", func(t *testing.T) {
		// Offset 6 does not complete a batch: it goes at once, and the
		// end comes alone, in a Work with no items.
		g := newFillRig(t, 4, 1)
		g.send(g.lease(0, 0, 7))
		if w := g.served(g.mustAsk(100)); !reflect.DeepEqual(w, served{0, 0, offsets(0, 7), false}) {
			t.Fatalf("first Want: %+v", w)
		}
		if _, ok := g.ask(100); ok {
			t.Fatal("answered with nothing to give")
		}
		g.send(g.end(0))
		w, ok := g.answer()
		if !ok || len(w.Items) != 0 || !w.RunEnd || w.Epoch != 0 || w.Start != 7 {
			t.Fatalf("after StreamEnd: %s, %v; want an empty RunEnd at 7", workString(w), ok)
		}
		checkSegs(t, g, []cluster.StepRun{{Epoch: 0, Length: 7, Ended: true, StreamEnd: true}})
		checkSteps(t, g, map[int]int64{0: 2})
		if !g.endOfStream(0, 1) {
			t.Error("the short last batch does not say EndOfStream")
		}
	})
	t.Run("end known", func(t *testing.T) {
		g := newFillRig(t, 4, 1)
		g.send(g.lease(0, 0, 8), g.end(0))
		if w := g.served(g.mustAsk(100)); !reflect.DeepEqual(w, served{0, 0, offsets(0, 8), true}) {
			t.Fatalf("%+v", w)
		}
	})
}

// TestFillGivesEachPositionOnceInOrder follows one rank through leases
// that arrive out of Index order, padding, a StreamEnd mid-batch, an
// older epoch's growth and Wants of many sizes: every Work is one the
// pipeline accepts, and each epoch's stream offsets are given once, in
// order, mapped to their samples (the rig checks that on every Work).
func TestFillGivesEachPositionOnceInOrder(t *testing.T) {
	g := newFillRig(t, 3, 2)
	var ws []served
	ask := func(n int) {
		t.Helper()
		if w, ok := g.ask(n); ok {
			ws = append(ws, g.served(w))
		}
	}
	send := func(msgs ...any) {
		t.Helper()
		g.send(msgs...)
		if w, ok := g.answer(); ok {
			ws = append(ws, g.served(w))
		}
	}
	l0, l1 := g.lease(0, 0, 5), g.lease(0, 16, 20)
	send(l1) // lease 1 before lease 0: nothing can be taken
	ask(4)
	send(l0)
	ask(1)
	ask(2)
	send(g.lease(0, 64, 66), g.end(0), g.lease(1, 0, 4)) // padding ends epoch 0
	ask(5)
	ask(2)
	send(g.lease(0, 30, 32), g.end(0), g.lease(1, 4, 8)) // epoch 0 grows
	ask(4)
	ask(10)
	send(g.end(1))
	ask(10)
	want := []served{
		{0, 0, offsets(0, 4), false},
		{0, 0, offsets(4, 5), false},
		{0, 0, offsets(5, 7), false},
		{0, 0, offsets(7, 11), true},
		{1, 1, offsets(0, 2), false},
		{1, 1, offsets(2, 6), true},
		{2, 0, offsets(11, 13), true},
		{3, 1, offsets(6, 8), true},
	}
	if !reflect.DeepEqual(ws, want) {
		t.Errorf("served:\n got %+v\nwant %+v", ws, want)
	}
	g.checkAllGiven()
	checkSegs(t, g, []cluster.StepRun{
		{Epoch: 0, FirstStep: 0, Base: 0, Length: 11, Ended: true, StreamEnd: true},
		{Epoch: 1, FirstStep: 0, Base: 0, Length: 6, Ended: true},
		{Epoch: 0, FirstStep: 4, Base: 11, Length: 2, Ended: true, StreamEnd: true},
		{Epoch: 1, FirstStep: 2, Base: 6, Length: 2, Ended: true, StreamEnd: true},
	})
	checkSteps(t, g, map[int]int64{0: 5, 1: 3})
}

// TestFillFollowsTheJobsWindows: the node maps positions to samples with
// the job's block and window (the order the coordinator leased), and
// with window 0, from a coordinator before windows, with none (the rig
// checks the samples on every Work).
func TestFillFollowsTheJobsWindows(t *testing.T) {
	for _, w := range []int64{0, 3} {
		g := newFillRig(t, 4, 1)
		g.a.job.Block, g.a.job.Window = 4, w
		g.send(g.lease(0, 0, rigSamples), g.end(0))
		for {
			if _, ok := g.ask(8); !ok || g.next[0] == rigSamples {
				break
			}
		}
		g.checkAllGiven()
	}
	a, b := cluster.NewOrder(7, 0, rigSamples, 4, 1), cluster.NewOrder(7, 0, rigSamples, 4, 3)
	same := 0
	for p := range int64(rigSamples) {
		if a.At(p) == b.At(p) {
			same++
		}
	}
	if same > rigSamples/4 {
		t.Errorf("windows 1 and 3 agree at %d of %d positions: the test cannot tell them apart", same, rigSamples)
	}
}

// TestFillRandomized feeds fill seeded random grants (to any epoch,
// older ones included), stream ends and Wants, and checks on every Work
// what the rig checks (pipeline contract; each offset once, in order; the
// right sample) and that no segment is cut mid-batch while its epoch's
// next position is held; at the end every granted position was given.
func TestFillRandomized(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			b := int64(1 + rng.IntN(4))
			const epochs = 3
			g := newFillRig(t, b, epochs)
			g.strict = true
			var next [epochs]int64 // per Epoch: the next position to lease
			for range 80 {
				switch r := rng.IntN(100); {
				case r < 35:
					e := rng.IntN(epochs)
					k := 1 + rng.Int64N(6)
					g.send(g.lease(e, next[e], next[e]+k))
					next[e] += k
				case r < 50:
					if e := rng.IntN(epochs); g.leases[e] > 0 {
						g.send(g.end(e))
					}
				default:
					if g.asked == 0 {
						g.ask(1 + rng.IntN(int(2*b+1)))
					}
				}
				g.answer()
			}
			for e := range epochs {
				if g.leases[e] > 0 {
					g.send(g.end(e))
					g.answer()
				}
			}
			if g.asked == 0 { // else nothing was left to answer it with
				g.drain(1 + int(b))
			}
			g.checkAllGiven()
			// Each epoch's steps are its segments' batches, and every
			// segment ended.
			steps := map[int]int64{}
			for p, sg := range g.segs() {
				if !sg.Ended {
					t.Errorf("segment %d open: %+v", p, sg)
				}
				if sg.FirstStep != steps[sg.Epoch] {
					t.Errorf("segment %d starts at step %d, want %d", p, sg.FirstStep, steps[sg.Epoch])
				}
				steps[sg.Epoch] += (sg.Length + b - 1) / b
			}
			for e, n := range steps {
				if got := g.rs.runs.Steps().NextStep(e); got != n {
					t.Errorf("epoch %d: next step %d, segments add up to %d", e, got, n)
				}
			}
		})
	}
}
