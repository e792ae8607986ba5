package actors

import "testing"

// runCore answers c's wants from f and completes every fetch and decode
// it starts, in order, until nothing is left to do: the core is quiet
// and whatever it would ever do with the slots it holds, it has done.
// It returns the batches shipped.
func runCore(t *testing.T, c *core, f nexter, effs []effect) []effect {
	t.Helper()
	var want int
	var queue, shipped []effect
	handle := func(effs []effect) {
		for _, e := range effs {
			switch e.kind {
			case effWant:
				want = e.n
			case effFetch, effDecode:
				queue = append(queue, e)
			case effShip:
				shipped = append(shipped, e)
			}
		}
	}
	handle(effs)
	for rounds := 0; ; rounds++ {
		if rounds > 100000 {
			t.Fatal("the core never went quiet")
		}
		if want > 0 {
			n := want
			want = 0
			effs, err := c.work(f.Next(n))
			if err != nil {
				t.Fatal(err)
			}
			handle(effs)
			continue
		}
		if len(queue) == 0 {
			return shipped
		}
		e := queue[0]
		queue = queue[1:]
		if e.kind == effFetch {
			handle(c.fetchDone(e.worker, e.slot, e.idx, e.buf, nil))
		} else {
			handle(c.decodeDone(e.worker, e.slot, e.idx, e.buf, nil))
		}
	}
}

// TestCoreSlotLimit: a slot limit below the slots allocated holds the
// batches in the making under it. With 2 of 4 slots allowed and both
// shipped batches held, the core ships no third batch however long it
// runs (it runs here until it has nothing left to do); releasing one
// lets exactly one more through, and raising the limit lets the rest.
func TestCoreSlotLimit(t *testing.T) {
	f := simFeeder(t, 100, 1, false)
	c := newCore(coreConfig{batchSize: 4, slots: 4, fetchers: 3, decoders: 1, decodeQueue: 2})
	effs := c.setSlots(2)
	effs = append(effs, c.start()...)
	shipped := runCore(t, c, f, effs)
	if len(shipped) != 2 {
		t.Fatalf("shipped %d batches with a limit of 2 slots, both held", len(shipped))
	}
	if used := c.cfg.slots - len(c.freeSlots); used != 2 {
		t.Fatalf("%d slots in use under a limit of 2", used)
	}
	shipped = runCore(t, c, f, c.release(shipped[0].slot))
	if len(shipped) != 1 {
		t.Fatalf("shipped %d batches after one slot came back, want 1", len(shipped))
	}
	shipped = runCore(t, c, f, c.setSlots(4))
	if len(shipped) != 2 {
		t.Fatalf("shipped %d batches after the limit rose to 4 (3 held), want 2", len(shipped))
	}
}
