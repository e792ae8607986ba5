package actors

import (
	"cmp"
	"fmt"
)

// This file is the pipeline's "pick" half: a plain state machine with no
// I/O, goroutines or clocks. The rank actor feeds it events (work arrived,
// a fetch or decode finished, a slot came back) and carries out the effects
// it returns (fetch this, decode that, ship a batch, want more work). Tests
// drive it directly.

type effectKind uint8

const (
	effWant   effectKind = iota + 1 // ask the Source for n items
	effFetch                        // fetcher worker: read item into buffer buf
	effDecode                       // decoder worker: decode buffer buf into (slot, idx)
	effFail                         // record a failed sample
	effShip                         // batch complete: hand slot to the uploader
	effDrop                         // batch complete but dropped (DropLast): slot is free again
	effEnd                          // every batch of the run was shipped
)

type effect struct {
	kind   effectKind
	n      int    // effWant
	worker int    // effFetch: fetcher; effDecode: decoder
	buf    int    // fetch buffer id
	slot   int    // batch slot
	idx    int    // sample index within the batch
	epoch  int    // of the item
	item   Item   // effFetch, effDecode, effFail
	stage  Stage  // effFail
	err    error  // effFail
	batch  *batch // effShip, effDrop
}

type sampleState uint8

const (
	samplePending sampleState = iota
	sampleOK
	sampleFailed
	sampleDiscarded // DropLast tail, never fetched
)

// run is one run of a Source's Works (see Work): where its batches lie
// and how they are numbered.
type run struct {
	epoch     int
	base      int64 // stream offset of its first position
	step      int64 // step of its first batch
	length    int64 // positions, once the run ended; -1 while open
	streamEnd bool  // the run ends the rank's stream of the epoch
}

// batch is one batch under assembly in a slot. It is reused for the slot's
// next batch once the slot comes back.
type batch struct {
	run      *run
	k        int64 // the run's k-th batch: offsets base+[k*B, (k+1)*B)
	epoch    int   // run.epoch
	step     int64 // run.step + k
	slot     int
	seq      int64 // delivery order: batches opened earlier ship earlier
	expected int   // samples: B until the epoch's length says fewer
	done     int   // samples finished (ok, failed or discarded)
	ok       int
	drop     bool
	items    []Item        // by index in the batch
	state    []sampleState // by index in the batch
}

// endOfStream reports whether b is the last batch of a run that ends
// its epoch's stream.
func (b *batch) endOfStream(batchSize int) bool {
	r := b.run
	return r.streamEnd && r.length >= 0 && (b.k+1)*int64(batchSize) >= r.length
}

// keep lists the indices of the samples that made it, in order: the
// batch's composition after compaction.
func (b *batch) keep(dst []int) []int {
	dst = dst[:0]
	for i := 0; i < b.expected; i++ {
		if b.state[i] == sampleOK {
			dst = append(dst, i)
		}
	}
	return dst
}

// rows lists, for each row of the delivered batch, the sample whose
// bytes and metadata it holds. Short (fill false): the samples that made
// it, in order (keep). Filled: one row per expected sample, a failed
// sample's row holding the next sample of the batch that made it, in
// batch order, wrapping -- deterministic, so a batch's pixels are the
// same on every run; a row i with b.state[i] != sampleOK is a filled
// one. Only failures are filled: a batch expecting fewer than B samples
// (an epoch's last) keeps its length. With no sample that made it there
// is nothing to fill with: no rows.
func (b *batch) rows(dst []int, fill bool) []int {
	dst = b.keep(dst)
	if !fill || len(dst) == 0 || len(dst) == b.expected {
		return dst
	}
	kept := len(dst)
	next := 0 // index in dst[:kept] of the first kept sample at or after i
	for i := 0; i < b.expected; i++ {
		for next < kept && dst[next] < i {
			next++
		}
		src := dst[next%kept]
		dst = append(dst, src)
	}
	return append(dst[:0], dst[kept:]...)
}

type pendingItem struct {
	run *run
	Item
}

type fetchedTask struct {
	slot, idx, buf int
}

// coreConfig sizes the core.
type coreConfig struct {
	batchSize   int
	slots       int
	fetchers    int
	decoders    int
	decodeQueue int
	dropLast    bool
	readAhead   int // items to hold pending; 0: slots*batchSize
}

// core is the scheduler state of one rank.
type core struct {
	cfg      coreConfig
	wantHigh int // pending items the core asks the source to keep it at

	// intake
	wantN int // items asked for; 0 when no Want is outstanding
	in    Intake
	cur   *run // the run the next Work continues; nil before the first

	pending ring[pendingItem]

	// slots and batches
	freeSlots []int
	open      ring[*batch] // in delivery order
	bySlot    []*batch

	// fetch
	idleFetchers []int
	fetchLimit   int // most fetches in flight (setFetchLimit); 0: every fetcher
	freeBufs     []int
	bufsMade     int
	maxBufs      int
	bufLimit     int // most buffers in use (setBufLimit: Config.FetchBytes); 0: maxBufs

	// the node's tuner (tune_core.go): decoders given work, slots used;
	// 0: all of them
	decLimit, slotLimit int

	// decode
	fetched fetchedSet
	decUsed []int
	seq     int64 // the next batch's delivery order

	// counters (read by the shell for stats)
	decodedOpen int // decoded samples in batches not yet complete
	attempted   int64
	failed      int64

	stopped bool
	ended   bool
	out     []effect
}

func newCore(cfg coreConfig) *core {
	c := &core{
		cfg:      cfg,
		wantHigh: cmp.Or(cfg.readAhead, cfg.slots*cfg.batchSize),
		bySlot:   make([]*batch, cfg.slots),
		maxBufs:  cfg.fetchers + cfg.decoders*cfg.decodeQueue,
		decUsed:  make([]int, cfg.decoders),
	}
	c.in.BatchSize = cfg.batchSize
	for s := cfg.slots - 1; s >= 0; s-- {
		c.freeSlots = append(c.freeSlots, s)
		c.bySlot[s] = &batch{slot: s, items: make([]Item, cfg.batchSize), state: make([]sampleState, cfg.batchSize)}
	}
	for f := cfg.fetchers - 1; f >= 0; f-- {
		c.idleFetchers = append(c.idleFetchers, f)
	}
	return c
}

func (c *core) take() []effect {
	out := c.out
	c.out = c.out[:0]
	return out
}

// start asks for the first work.
func (c *core) start() []effect {
	c.pump()
	return c.take()
}

// stop makes the core schedule nothing more (after a fatal error).
func (c *core) stop() { c.stopped = true }

// work takes a Source's answer. An error means the source broke the
// protocol; the pipeline must stop.
func (c *core) work(w Work) ([]effect, error) {
	asked := c.wantN
	c.wantN = 0
	if w.Err != nil {
		return nil, w.Err
	}
	if err := c.intake(w, asked); err != nil {
		return nil, fmt.Errorf("actors: bad work from source (epoch %d, start %d, %d items): %w", w.Epoch, w.Start, len(w.Items), err)
	}
	c.pump()
	return c.take(), nil
}

func (c *core) intake(w Work, asked int) error {
	if asked == 0 {
		return fmt.Errorf("work that was not asked for")
	}
	opens := !c.in.Open()
	if err := c.in.Take(w, asked); err != nil {
		return err
	}
	if opens {
		c.cur = &run{epoch: w.Epoch, base: w.Start, step: w.Step, length: -1}
	}
	for i := range w.Items {
		c.pending.push(pendingItem{run: c.cur, Item: w.Items[i]})
	}
	if w.ends() {
		c.endRun(c.cur, c.in.Pos()-c.cur.base, w.StreamEnd)
	}
	return nil
}

// endRun records a run's length and shortens its last batch if it is
// already open.
func (c *core) endRun(r *run, length int64, streamEnd bool) {
	r.length, r.streamEnd = length, streamEnd
	for i := 0; i < c.open.len(); i++ {
		if b := c.open.at(i); b.run == r {
			c.shorten(b)
		}
	}
}

// shorten sets how many samples b expects from its run's length; a short
// last batch of an epoch's stream is dropped under DropLast.
func (c *core) shorten(b *batch) {
	bs := int64(c.cfg.batchSize)
	if n := b.run.length - b.k*bs; n < bs {
		b.expected = int(n)
		if c.cfg.dropLast && b.run.streamEnd {
			b.drop = true
		}
	}
}

// fetching is the number of fetches in flight.
func (c *core) fetching() int { return c.cfg.fetchers - len(c.idleFetchers) }

// setFetchLimit lets at most n fetches be in flight (at least 1, at
// most the fetchers): the fetch tuner's choice. Fetches in flight above a
// lowered limit finish; no new one starts until they are under it.
// setReadAhead makes n the pending items the core keeps (its wantHigh):
// it asks the source for more at once when it holds half of them.
func (c *core) setReadAhead(n int) []effect {
	c.wantHigh = max(n, 1)
	c.pump()
	return c.take()
}

func (c *core) setFetchLimit(n int) []effect {
	c.fetchLimit = min(max(n, 1), c.cfg.fetchers)
	c.pump()
	return c.take()
}

// fetched takes a fetcher's result: the sample's bytes are in buf, or err.
func (c *core) fetchDone(fetcher, slot, idx, buf int, err error) []effect {
	c.idleFetchers = append(c.idleFetchers, fetcher)
	b := c.bySlot[slot]
	if err != nil {
		c.freeBufs = append(c.freeBufs, buf)
		c.failSample(b, idx, StageFetch, err)
	} else if b.drop {
		c.freeBufs = append(c.freeBufs, buf)
		c.discard(b, idx)
	} else {
		c.fetched.push(fetchedTask{slot: slot, idx: idx, buf: buf})
	}
	c.pump()
	return c.take()
}

// decodeDone takes a decoder's result: the sample is in its slot region, or
// err.
func (c *core) decodeDone(decoder, slot, idx, buf int, err error) []effect {
	c.decUsed[decoder]--
	c.freeBufs = append(c.freeBufs, buf)
	b := c.bySlot[slot]
	if err != nil {
		c.failSample(b, idx, StageDecode, err)
	} else {
		b.state[idx] = sampleOK
		b.ok++
		b.done++
		c.decodedOpen++
	}
	c.pump()
	return c.take()
}

// release takes back a slot the consumer is done with.
func (c *core) release(slot int) []effect {
	c.freeSlots = append(c.freeSlots, slot)
	c.pump()
	return c.take()
}

func (c *core) failSample(b *batch, idx int, stage Stage, err error) {
	b.state[idx] = sampleFailed
	b.done++
	c.failed++
	c.out = append(c.out, effect{kind: effFail, slot: b.slot, idx: idx, epoch: b.epoch, item: b.items[idx], stage: stage, err: err})
}

func (c *core) discard(b *batch, idx int) {
	b.state[idx] = sampleDiscarded
	b.done++
}

// tailDropped says whether offset pos of run r lies in a short last batch
// that DropLast drops.
func (c *core) tailDropped(r *run, pos int64) bool {
	if !c.cfg.dropLast || !r.streamEnd || r.length < 0 {
		return false
	}
	bs := int64(c.cfg.batchSize)
	return pos-r.base >= r.length/bs*bs
}

// lastOpen returns the newest open batch if it is run r's k-th, else nil.
func (c *core) lastOpen(r *run, k int64) *batch {
	if c.open.len() > 0 {
		if b := c.open.at(c.open.len() - 1); b.run == r && b.k == k {
			return b
		}
	}
	return nil
}

// batchFor returns the open batch that offset pos of run r belongs to,
// opening it on a free slot if needed; nil when no slot is free.
func (c *core) batchFor(r *run, pos int64) *batch {
	k := (pos - r.base) / int64(c.cfg.batchSize)
	if b := c.lastOpen(r, k); b != nil {
		return b
	}
	if len(c.freeSlots) == 0 || c.slotsHeld() {
		return nil
	}
	s := c.freeSlots[len(c.freeSlots)-1]
	c.freeSlots = c.freeSlots[:len(c.freeSlots)-1]
	b := c.bySlot[s]
	b.run, b.k, b.epoch, b.step, b.seq = r, k, r.epoch, r.step+k, c.seq
	c.seq++
	b.expected, b.done, b.ok, b.drop = c.cfg.batchSize, 0, 0, false
	clear(b.state)
	clear(b.items)
	if r.length >= 0 {
		c.shorten(b)
	}
	c.open.push(b)
	return b
}

// haveBuf reports whether a fetch may take a buffer: the buffers in use
// (reads in flight and samples fetched, waiting for a decoder) stay
// within the fetch limit plus what the decoders queue, so when decoding
// sets the pace the rank does not fill every buffer with samples that
// wait (the fetch limit follows the store's latency), and within
// bufLimit.
func (c *core) haveBuf() bool {
	inUse := c.bufsMade - len(c.freeBufs)
	if c.bufLimit > 0 && inUse >= c.bufLimit {
		return false
	}
	if c.fetchLimit > 0 && inUse >= c.fetchLimit+c.cfg.decoders*c.cfg.decodeQueue {
		return false
	}
	return len(c.freeBufs) > 0 || c.bufsMade < c.maxBufs
}

// setBufLimit bounds the fetch buffers in use (reads in flight and
// samples waiting for a decoder) to n, at least 1: the shell sets it from
// Config.FetchBytes and the sizes it has read.
func (c *core) setBufLimit(n int) []effect {
	c.bufLimit = min(max(n, 1), c.maxBufs)
	c.pump()
	return c.take()
}

func (c *core) takeBuf() int {
	if n := len(c.freeBufs); n > 0 {
		buf := c.freeBufs[n-1]
		c.freeBufs = c.freeBufs[:n-1]
		return buf
	}
	c.bufsMade++
	return c.bufsMade - 1
}

// pump schedules everything the current state allows.
func (c *core) pump() {
	if c.stopped {
		return
	}
	for c.pumpOnce() {
		// A dropped batch freed its slot: go round again.
	}
	if c.wantN == 0 && !c.in.Last() && c.pending.len() <= c.wantHigh/2 {
		c.wantN = c.wantHigh - c.pending.len()
		c.out = append(c.out, effect{kind: effWant, n: c.wantN})
	}
	if c.in.Last() && !c.ended && c.pending.len() == 0 && c.open.len() == 0 {
		c.ended = true
		c.out = append(c.out, effect{kind: effEnd})
	}
}

// pumpOnce fetches, decodes and ships what it can; it reports whether a
// slot was freed on the way (so another round may fetch more).
func (c *core) pumpOnce() (freed bool) {
	// Fetch in stream order, into open batches, while a fetcher, a buffer
	// and (for a new batch) a slot are free.
	for c.pending.len() > 0 {
		it := c.pending.front()
		bs := int64(c.cfg.batchSize)
		if c.tailDropped(it.run, it.Pos) {
			c.pending.pop()
			if b := c.lastOpen(it.run, (it.Pos-it.run.base)/bs); b != nil {
				idx := int(it.Pos - it.run.base - b.k*bs)
				b.items[idx] = it.Item
				c.discard(b, idx)
			}
			continue
		}
		if len(c.idleFetchers) == 0 || (c.fetchLimit > 0 && c.fetching() >= c.fetchLimit) || !c.haveBuf() {
			break
		}
		b := c.batchFor(it.run, it.Pos)
		if b == nil {
			break
		}
		c.pending.pop()
		idx := int(it.Pos - it.run.base - b.k*bs)
		b.items[idx] = it.Item
		c.attempted++
		f := c.idleFetchers[len(c.idleFetchers)-1]
		c.idleFetchers = c.idleFetchers[:len(c.idleFetchers)-1]
		c.out = append(c.out, effect{kind: effFetch, worker: f, buf: c.takeBuf(), slot: b.slot, idx: idx, epoch: b.epoch, item: it.Item})
	}
	// Decode fetched samples on the least loaded decoder with credit, the
	// batch to ship soonest first: fetches finish out of order (a slow
	// read, a fetcher scheduled late), and in the order they finished a
	// later batch's samples would take the decoders while the next
	// batch to ship waited for its last few -- at start the first batch
	// took 2.5x as long as its samples' decoding did on two cores.
	for c.fetched.len() > 0 {
		d := -1
		for i, u := range c.decUsed[:c.activeDecoders()] {
			if u < c.cfg.decodeQueue && (d < 0 || u < c.decUsed[d]) {
				d = i
			}
		}
		if d < 0 {
			break
		}
		t := c.fetched.popFirst(c.bySlot)
		c.decUsed[d]++
		b := c.bySlot[t.slot]
		c.out = append(c.out, effect{kind: effDecode, worker: d, buf: t.buf, slot: t.slot, idx: t.idx, epoch: b.epoch, item: b.items[t.idx]})
	}
	// Ship complete batches in order.
	for c.open.len() > 0 {
		b := c.open.front()
		if b.done < b.expected {
			break
		}
		c.open.pop()
		c.decodedOpen -= b.ok
		if b.drop {
			c.freeSlots = append(c.freeSlots, b.slot)
			c.out = append(c.out, effect{kind: effDrop, slot: b.slot, batch: b})
			freed = c.pending.len() > 0
			continue
		}
		c.out = append(c.out, effect{kind: effShip, slot: b.slot, epoch: b.epoch, batch: b})
	}
	return freed
}

// fetchedSet holds the fetched samples waiting for a decoder: a few
// dozen at most (fetchers plus the decoders' queues, the buffers there
// are), so a scan finds the first to decode.
type fetchedSet struct{ tasks []fetchedTask }

func (f *fetchedSet) len() int { return len(f.tasks) }

func (f *fetchedSet) push(t fetchedTask) { f.tasks = append(f.tasks, t) }

// popFirst removes and returns the task of the batch that ships first
// (the lowest seq; in it, the lowest index).
func (f *fetchedSet) popFirst(bySlot []*batch) fetchedTask {
	best := 0
	for i := 1; i < len(f.tasks); i++ {
		a, b := f.tasks[i], f.tasks[best]
		if sa, sb := bySlot[a.slot].seq, bySlot[b.slot].seq; sa < sb || (sa == sb && a.idx < b.idx) {
			best = i
		}
	}
	t := f.tasks[best]
	last := len(f.tasks) - 1
	f.tasks[best] = f.tasks[last]
	f.tasks = f.tasks[:last]
	return t
}

// ring is a FIFO on a growable circular buffer.
type ring[T any] struct {
	buf        []T
	head, size int
}

func (r *ring[T]) len() int { return r.size }

func (r *ring[T]) push(v T) {
	if r.size == len(r.buf) {
		nb := make([]T, max(8, 2*len(r.buf)))
		for i := 0; i < r.size; i++ {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.size)%len(r.buf)] = v
	r.size++
}

func (r *ring[T]) front() T { return r.buf[r.head] }

func (r *ring[T]) at(i int) T { return r.buf[(r.head+i)%len(r.buf)] }

func (r *ring[T]) pop() T {
	var zero T
	v := r.buf[r.head]
	r.buf[r.head] = zero
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	return v
}
