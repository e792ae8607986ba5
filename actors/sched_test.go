package actors

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"testing/quick"
)

// simResult is what a simulated run of the core delivered.
type simResult struct {
	batches [][]int64 // dataset indices per shipped batch, in order
	shipped []shippedBatch
	failed  []int64
	maxOpen int
}

// shippedBatch is a shipped batch's numbering.
type shippedBatch struct {
	epoch       int
	step        int64
	positions   []int64
	endOfStream bool
}

// nexter is what simulate takes work from: a Feeder, or a script.
type nexter interface{ Next(n int) Work }

// simulate drives the core with no actors: fetch and decode completions in
// an order chosen by rng, the consumer releasing each slot after a random
// number of events. fail(index) says which samples fail and where.
func simulate(t *testing.T, cfg coreConfig, feeder nexter, rng *rand.Rand, fail func(int64) (Stage, bool)) simResult {
	t.Helper()
	c := newCore(cfg)
	type task struct {
		e effect
	}
	var inflight []task // fetches and decodes, completed in random order
	var shipped []int   // slots held by the consumer
	var res simResult
	var wants []int
	exec := func(effs []effect) {
		for _, e := range effs {
			switch e.kind {
			case effWant:
				wants = append(wants, e.n)
			case effFetch, effDecode:
				inflight = append(inflight, task{e})
			case effFail:
				res.failed = append(res.failed, e.item.Index)
			case effShip:
				var idx, pos []int64
				for _, i := range e.batch.keep(nil) {
					idx = append(idx, e.batch.items[i].Index)
					pos = append(pos, e.batch.items[i].Pos)
				}
				res.batches = append(res.batches, idx)
				res.shipped = append(res.shipped, shippedBatch{epoch: e.batch.epoch, step: e.batch.step, positions: pos,
					endOfStream: e.batch.endOfStream(cfg.batchSize)})
				shipped = append(shipped, e.slot)
			}
		}
	}
	exec(c.start())
	for steps := 0; ; steps++ {
		if steps > 1e6 {
			t.Fatal("simulation does not finish")
		}
		res.maxOpen = max(res.maxOpen, c.open.len())
		// Credits: each fetcher holds at most one read, each decoder at
		// most decodeQueue tasks (their mailbox bounds), buffers at most
		// fetchers + decoders*decodeQueue.
		perFetcher := make([]int, cfg.fetchers)
		perDecoder := make([]int, cfg.decoders)
		for _, x := range inflight {
			if x.e.kind == effFetch {
				if perFetcher[x.e.worker]++; perFetcher[x.e.worker] > 1 {
					t.Fatalf("fetcher %d given a second read", x.e.worker)
				}
			} else if perDecoder[x.e.worker]++; perDecoder[x.e.worker] > cfg.decodeQueue {
				t.Fatalf("decoder %d given %d tasks, credit %d", x.e.worker, perDecoder[x.e.worker], cfg.decodeQueue)
			}
		}
		if len(inflight) > c.maxBufs {
			t.Fatalf("%d tasks in flight with %d buffers", len(inflight), c.maxBufs)
		}
		if c.bufsMade > c.maxBufs {
			t.Fatalf("%d buffers", c.bufsMade)
		}
		switch {
		case len(wants) > 0 && rng.IntN(3) == 0:
			n := wants[0]
			wants = wants[1:]
			effs, err := c.work(feeder.Next(n))
			if err != nil {
				t.Fatal(err)
			}
			exec(effs)
		case len(shipped) > 0 && rng.IntN(4) == 0:
			i := rng.IntN(len(shipped))
			s := shipped[i]
			shipped = append(shipped[:i], shipped[i+1:]...)
			exec(c.release(s))
		case len(inflight) > 0:
			i := rng.IntN(len(inflight))
			e := inflight[i].e
			inflight = append(inflight[:i], inflight[i+1:]...)
			st, bad := fail(e.item.Index)
			var err error
			if e.kind == effFetch {
				if bad && st == StageFetch {
					err = errors.New("fetch failed")
				}
				exec(c.fetchDone(e.worker, e.slot, e.idx, e.buf, err))
			} else {
				if bad && st == StageDecode {
					err = errors.New("corrupt")
				}
				exec(c.decodeDone(e.worker, e.slot, e.idx, e.buf, err))
			}
		case len(wants) > 0:
			continue
		case len(shipped) > 0:
			continue
		default:
			if !c.ended {
				t.Fatalf("stuck: pending %d open %d fetched %d free slots %d", c.pending.len(), c.open.len(), c.fetched.len(), len(c.freeSlots))
			}
			return res
		}
	}
}

func simFeeder(t *testing.T, n, epochs int, dropLast bool) *Feeder {
	_, ds := makeDataset(t, n, 3, 1)
	f, err := NewFeeder(ds, Config{Epochs: epochs, Seed: 7, DropLast: dropLast}, 0, 1, testOrder)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestCoreCompositionIsIndependentOfCompletionOrder: for random sizes and
// many completion orders, the core ships the same batches: position runs
// [kB, (k+1)B) of the stream, failures left out, in order.
func TestCoreCompositionIsIndependentOfCompletionOrder(t *testing.T) {
	check := func(nRaw, bRaw, slotsRaw, fRaw, dRaw, qRaw uint8, dropLast bool, seed uint64) bool {
		n, b := int(nRaw)%90+1, int(bRaw)%9+1
		cfg := coreConfig{batchSize: b, slots: int(slotsRaw)%4 + 1, fetchers: int(fRaw)%5 + 1,
			decoders: int(dRaw)%3 + 1, decodeQueue: int(qRaw)%3 + 1, dropLast: dropLast,
			readAhead: int(seed % 11)} // 0: the default; 1 and up: any read-ahead ships the same batches
		fail := func(i int64) (Stage, bool) { return Stage(i % 2), i%7 == 3 }
		// The reference: the feeder's order cut into batches, directly.
		ref := simFeeder(t, n, 2, dropLast)
		var want [][]int64
		for e := 0; e < 2; e++ {
			w := ref.Next(n)
			for k := 0; k*b < len(w.Items); k++ {
				items := w.Items[k*b : min((k+1)*b, len(w.Items))]
				if dropLast && len(items) < b {
					continue
				}
				batch := []int64{}
				for _, it := range items {
					if _, bad := fail(it.Index); !bad {
						batch = append(batch, it.Index)
					}
				}
				want = append(want, batch)
			}
		}
		for r := 0; r < 3; r++ {
			rng := rand.New(rand.NewPCG(seed, uint64(r)))
			got := simulate(t, cfg, simFeeder(t, n, 2, dropLast), rng, fail)
			if len(got.batches) == 0 && len(want) == 0 {
				continue
			}
			if !reflect.DeepEqual(normalize(got.batches), normalize(want)) {
				t.Logf("cfg %+v n %d seed %d:\n got %v\nwant %v", cfg, n, seed, got.batches, want)
				return false
			}
			if got.maxOpen > cfg.slots {
				t.Logf("%d batches open with %d slots", got.maxOpen, cfg.slots)
				return false
			}
		}
		return true
	}
	if err := quick.Check(check, &quick.Config{MaxCount: 300}); err != nil {
		t.Fatal(err)
	}
}

func normalize(b [][]int64) [][]int64 {
	out := make([][]int64, len(b))
	for i, x := range b {
		out[i] = append([]int64{}, x...)
	}
	return out
}

// TestCoreRejectsBadWork: the source protocol is checked.
func TestCoreRejectsBadWork(t *testing.T) {
	it := func(pos int64) Item { return Item{Pos: pos, Key: fmt.Sprint(pos)} }
	cases := []struct {
		name string
		seq  []Work
	}{
		{"unasked", nil},
		{"gap", []Work{{Items: []Item{it(0), it(2)}}}},
		{"start", []Work{{Start: 1, Items: []Item{it(2)}}}},
		{"empty", []Work{{}}},
		{"too many", []Work{{Items: make([]Item, 1000)}}},
		{"epoch jump", []Work{{Items: []Item{it(0)}}, {Epoch: 1, Items: []Item{it(0)}}}},
		{"run goes back", []Work{{Items: []Item{it(0), it(1)}, RunEnd: true}, {Start: 1, Items: []Item{it(1)}}}},
		{"step goes back", []Work{{Items: []Item{it(0), it(1), it(2), it(3), it(4)}, RunEnd: true}, {Start: 5, Step: 1, Items: []Item{it(5)}}}},
		{"negative step", []Work{{Step: -1, Items: []Item{it(0)}}}},
		{"err", []Work{{Err: errors.New("boom")}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCore(coreConfig{batchSize: 4, slots: 2, fetchers: 2, decoders: 1, decodeQueue: 1})
			if tc.seq == nil {
				if _, err := c.work(Work{Items: []Item{it(0)}}); err == nil {
					t.Fatal("accepted work that was not asked for")
				}
				return
			}
			c.start()
			var err error
			for _, w := range tc.seq {
				c.wantN = max(c.wantN, 8) // as if asked
				if _, err = c.work(w); err != nil {
					break
				}
			}
			if err == nil {
				t.Fatal("accepted")
			}
			t.Log(err)
		})
	}
}

// TestCoreStallsWithoutSlots: with every slot held, nothing more is
// fetched and no more work is asked for.
func TestCoreStallsWithoutSlots(t *testing.T) {
	f := simFeeder(t, 100, 1, false)
	c := newCore(coreConfig{batchSize: 4, slots: 2, fetchers: 3, decoders: 1, decodeQueue: 2})
	var want int
	var queue []effect
	handle := func(effs []effect) {
		for _, e := range effs {
			switch e.kind {
			case effWant:
				want = e.n
			case effFetch, effDecode:
				queue = append(queue, e)
			}
		}
	}
	handle(c.start())
	shipped := 0
	for rounds := 0; rounds < 1000; rounds++ {
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
			break
		}
		e := queue[0]
		queue = queue[1:]
		var effs []effect
		if e.kind == effFetch {
			effs = c.fetchDone(e.worker, e.slot, e.idx, e.buf, nil)
		} else {
			effs = c.decodeDone(e.worker, e.slot, e.idx, e.buf, nil)
		}
		for _, x := range effs {
			if x.kind == effShip {
				shipped++
			}
		}
		handle(effs)
	}
	if shipped != 2 {
		t.Fatalf("shipped %d batches with 2 slots never released", shipped)
	}
	if c.attempted != 8 {
		t.Fatalf("fetched %d samples with 2 slots of 4 never released", c.attempted)
	}
	if c.pending.len() > c.wantHigh+4 {
		t.Fatalf("%d items pending", c.pending.len())
	}
}

// script is a Source of fixed Works, each cut to what is asked.
type script struct{ ws []Work }

func (s *script) Next(n int) Work {
	w := s.ws[0]
	if len(w.Items) <= n {
		s.ws = s.ws[1:]
		return w
	}
	head := Work{Epoch: w.Epoch, Start: w.Start, Step: w.Step, Items: w.Items[:n]}
	s.ws[0].Items = w.Items[n:]
	s.ws[0].Start = w.Items[n].Pos
	return head
}

// TestCoreRuns: runs start at any offset and step, an older epoch's
// stream may come back after another's, and batches carry the job's
// numbering: the run's step plus k, the stream offsets, EndOfStream on a
// stream's last batch only.
func TestCoreRuns(t *testing.T) {
	items := func(from, to int64) []Item {
		var out []Item
		for p := from; p < to; p++ {
			out = append(out, Item{Pos: p, Index: 100 + p, Key: fmt.Sprint(p)})
		}
		return out
	}
	want := []shippedBatch{
		{1, 3, []int64{6, 7, 8, 9}, false},
		{1, 4, []int64{10, 11, 12}, false}, // the run ends mid-batch: its epoch's stream grows later
		{0, 2, []int64{8, 9}, true},
		{1, 5, []int64{13, 14, 15, 16}, false},
		{1, 6, []int64{17}, true},
	}
	for seed := range uint64(50) {
		src := &script{ws: []Work{
			{Epoch: 1, Start: 6, Step: 3, Items: items(6, 13), RunEnd: true},
			{Epoch: 0, Start: 8, Step: 2, Items: items(8, 10), StreamEnd: true},
			{Epoch: 1, Start: 13, Step: 5, Items: items(13, 18), StreamEnd: true, Last: true},
		}}
		cfg := coreConfig{batchSize: 4, slots: 3, fetchers: 2, decoders: 2, decodeQueue: 2, readAhead: 3}
		res := simulate(t, cfg, src, rand.New(rand.NewPCG(seed, 1)), func(int64) (Stage, bool) { return 0, false })
		if !reflect.DeepEqual(res.shipped, want) {
			t.Fatalf("seed %d: shipped\n%v\nwant\n%v", seed, res.shipped, want)
		}
	}
}

// coreEffects collects what a core asks for, by kind.
type coreEffects struct {
	want             int // the last Want's count
	fetches, decodes []effect
}

func (r *coreEffects) handle(effs []effect) {
	for _, e := range effs {
		switch e.kind {
		case effWant:
			r.want = e.n
		case effFetch:
			r.fetches = append(r.fetches, e)
		case effDecode:
			r.decodes = append(r.decodes, e)
		}
	}
}

// start starts c and answers its first Want from f.
func (r *coreEffects) start(t *testing.T, c *core, f nexter) {
	t.Helper()
	r.handle(c.start())
	effs, err := c.work(f.Next(r.want))
	if err != nil {
		t.Fatal(err)
	}
	r.handle(effs)
}

// TestCoreFetchLimit: with a fetch limit the core keeps at most that many
// fetches in flight whatever its fetchers; a fetch done lets one more
// start, and raising the limit starts the difference at once.
func TestCoreFetchLimit(t *testing.T) {
	f := simFeeder(t, 200, 1, false)
	c := newCore(coreConfig{batchSize: 8, slots: 8, fetchers: 64, decoders: 1, decodeQueue: 64})
	c.fetchLimit = 16
	var r coreEffects
	r.start(t, c, f)
	if len(r.fetches) != 16 || c.fetching() != 16 {
		t.Fatalf("%d r.fetches started (%d in flight) with a limit of 16 and 64 fetchers", len(r.fetches), c.fetching())
	}
	e := r.fetches[0]
	r.handle(c.fetchDone(e.worker, e.slot, e.idx, e.buf, nil))
	if len(r.fetches) != 17 || c.fetching() != 16 {
		t.Fatalf("after one fetch done: %d started, %d in flight; want 17 and 16", len(r.fetches), c.fetching())
	}
	r.handle(c.setFetchLimit(24))
	if c.fetching() != 24 {
		t.Fatalf("raised to 24: %d in flight", c.fetching())
	}
	r.handle(c.setFetchLimit(4))
	if c.fetching() != 24 {
		t.Fatalf("lowered to 4: %d in flight; the ones started finish", c.fetching())
	}
	started := len(r.fetches)
	for _, e := range r.fetches[1:21] {
		r.handle(c.fetchDone(e.worker, e.slot, e.idx, e.buf, nil))
	}
	if c.fetching() != 4 || len(r.fetches) != started {
		t.Fatalf("after 20 done under a limit of 4: %d in flight, %d started anew", c.fetching(), len(r.fetches)-started)
	}
}

// TestCoreDecodesNextBatchFirst: when fetches finish out of order (a
// later batch's reads before the next batch's last ones), the decoders
// take the samples of the batch that ships first, not the ones fetched
// first.
func TestCoreDecodesNextBatchFirst(t *testing.T) {
	f := simFeeder(t, 8, 1, false)
	c := newCore(coreConfig{batchSize: 4, slots: 2, fetchers: 8, decoders: 1, decodeQueue: 1})
	var r coreEffects
	r.start(t, c, f)
	if len(r.fetches) != 8 {
		t.Fatalf("%d r.fetches started, want both batches' 8", len(r.fetches))
	}
	first := r.fetches[0].slot
	// The second batch's reads finish first, then the first batch's.
	var order []effect
	for _, e := range r.fetches {
		if e.slot != first {
			order = append(order, e)
		}
	}
	for _, e := range r.fetches {
		if e.slot == first {
			order = append(order, e)
		}
	}
	for _, e := range order {
		r.handle(c.fetchDone(e.worker, e.slot, e.idx, e.buf, nil))
	}
	// The one decoder took the first read to finish; every decode after
	// it must be the first batch's until that batch is whole.
	for len(r.decodes) < 8 {
		d := r.decodes[len(r.decodes)-1]
		r.handle(c.decodeDone(d.worker, d.slot, d.idx, d.buf, nil))
	}
	for i, d := range r.decodes[1:5] {
		if d.slot != first {
			t.Fatalf("decode %d was of the second batch (slot %d, sample %d) while the first batch (slot %d) waited for its samples", i+2, d.slot, d.idx, first)
		}
		if d.idx != i {
			t.Errorf("decode %d: sample %d of the first batch, want %d (in order)", i+2, d.idx, i)
		}
	}
}

// TestCoreSetReadAhead: raising the read-ahead asks the source at once
// for the difference; lowering it asks for nothing until the pending
// items fall to half of it.
func TestCoreSetReadAhead(t *testing.T) {
	f := simFeeder(t, 5000, 1, false)
	c := newCore(coreConfig{batchSize: 8, slots: 2, fetchers: 4, decoders: 1, decodeQueue: 2, readAhead: 16})
	var want int
	handle := func(effs []effect) {
		for _, e := range effs {
			if e.kind == effWant {
				want = e.n
			}
		}
	}
	handle(c.start())
	if want != 16 {
		t.Fatalf("first want %d, want 16", want)
	}
	effs, err := c.work(f.Next(want))
	if err != nil {
		t.Fatal(err)
	}
	want = 0
	handle(effs)
	held := c.pending.len()
	handle(c.setReadAhead(1000))
	if want != 1000-held {
		t.Fatalf("raised to 1000 with %d pending: asked for %d, want %d", held, want, 1000-held)
	}
	effs, err = c.work(f.Next(want))
	if err != nil {
		t.Fatal(err)
	}
	want = 0
	handle(effs)
	if c.pending.len() != 1000 {
		t.Fatalf("%d pending after the answer, want 1000", c.pending.len())
	}
	handle(c.setReadAhead(16))
	if want != 0 {
		t.Fatalf("lowered to 16 with 1000 pending: asked for %d more", want)
	}
}

// TestBatchRows: a batch's rows are its samples in order; a failed
// sample's row is filled with the next sample that made it (in batch
// order, wrapping), unless short batches leave it out. The last batch of
// an epoch stays as long as it is (expected < B): only failures are
// filled. A batch where every sample failed has no rows.
func TestBatchRows(t *testing.T) {
	const ok, bad = sampleOK, sampleFailed
	for _, tc := range []struct {
		name     string
		state    []sampleState
		expected int
		short    []int // rows with short batches
		fill     []int // rows filled
	}{
		{"none failed", []sampleState{ok, ok, ok, ok}, 4, []int{0, 1, 2, 3}, []int{0, 1, 2, 3}},
		{"middle", []sampleState{ok, bad, ok, ok}, 4, []int{0, 2, 3}, []int{0, 2, 2, 3}},
		{"first", []sampleState{bad, ok, ok, ok}, 4, []int{1, 2, 3}, []int{1, 1, 2, 3}},
		{"last wraps", []sampleState{ok, ok, ok, bad}, 4, []int{0, 1, 2}, []int{0, 1, 2, 0}},
		{"run", []sampleState{ok, bad, bad, ok}, 4, []int{0, 3}, []int{0, 3, 3, 3}},
		{"only one left", []sampleState{bad, bad, ok, bad}, 4, []int{2}, []int{2, 2, 2, 2}},
		{"every one failed", []sampleState{bad, bad, bad, bad}, 4, []int{}, []int{}},
		{"short last batch", []sampleState{ok, bad, ok, 0}, 3, []int{0, 2}, []int{0, 2, 2}},
		{"short last batch wraps", []sampleState{ok, ok, bad, 0}, 3, []int{0, 1}, []int{0, 1, 0}},
	} {
		b := &batch{state: tc.state, expected: tc.expected}
		if got := append([]int{}, b.rows(nil, false)...); !reflect.DeepEqual(got, tc.short) {
			t.Errorf("%s: short rows %v, want %v", tc.name, got, tc.short)
		}
		if got := append([]int{}, b.rows(nil, true)...); !reflect.DeepEqual(got, tc.fill) {
			t.Errorf("%s: filled rows %v, want %v", tc.name, got, tc.fill)
		}
	}
}

// TestCoreFetchedWaitWithinFetchLimit: when decoding sets the pace (the
// decoders never finish here), the samples fetched and waiting for a
// decoder stay within the fetch limit plus the decoders' queue: before,
// every fetch buffer (fetchers + decoders×decodeQueue, 66 a rank with
// --fetch-concurrency auto) filled with waiting samples, the node's
// memory growing with its ranks.
func TestCoreFetchedWaitWithinFetchLimit(t *testing.T) {
	f := simFeeder(t, 400, 1, false)
	c := newCore(coreConfig{batchSize: 8, slots: 8, fetchers: 64, decoders: 1, decodeQueue: 2})
	c.fetchLimit = 4
	var r coreEffects
	r.start(t, c, f)
	for i := 0; i < len(r.fetches); i++ { // every read completes at once, none is decoded
		e := r.fetches[i]
		r.handle(c.fetchDone(e.worker, e.slot, e.idx, e.buf, nil))
	}
	inUse := c.bufsMade - len(c.freeBufs)
	if want := 4 + 1*2; inUse != want || c.fetched.len() != 4 {
		t.Errorf("%d buffers in use (%d fetched waiting, %d reads started), want %d: the fetch limit 4 + 1 decoder x 2",
			inUse, c.fetched.len(), len(r.fetches), want)
	}
	// A decode done frees a buffer for one more read.
	d := r.decodes[0]
	n := len(r.fetches)
	r.handle(c.decodeDone(d.worker, d.slot, d.idx, d.buf, nil))
	if len(r.fetches) != n+1 {
		t.Errorf("a decode done started %d reads, want 1", len(r.fetches)-n)
	}
}
