package actors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/storage"
)

// rankActor is the rank's scheduler and batcher: it owns the core (what to
// do next), the fetch buffers and the slots' metadata, and carries out the
// core's effects by messaging its children. It is the parent of every
// other actor of the rank, so stopping it stops them all.
type rankActor struct {
	p        *Pipeline
	core     *core
	fetchers []*actor.PID
	tuner    *fetchTuner // Config.FetchAuto or ReadAheadAuto; nil: neither
	decoders []*actor.PID
	uploader *actor.PID
	self     *actor.PID

	bufs     [][]byte    // fetch buffers by id, reused
	fb       fetchBufs   // their memory (Config.FetchBytes)
	openedAt []time.Time // by slot: when its batch's first fetch started
	meta     []slotMeta  // by slot
	keep     []int
	dead     bool // the run ended; nothing more is scheduled
	tuned    bool // the node's tuner set the fetch limit: the fetch tuner's is not applied
	active   int  // decoders given work (Pipeline.Retune); 0 before the first
}

type slotMeta struct {
	labels    []int32
	keys      []string
	indices   []int64
	positions []int64
	pads      []bool
	short     []bool // by sample region while decoding, compacted by assemble
	filled    []bool // by row, set by assemble
}

func (a *rankActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		a.start(c)
	case *workMsg:
		if ss, ok := a.p.deps.Store.(storage.SampleStore); ok {
			for i := range m.w.Items {
				ss.PrefetchSample(m.w.Items[i].Index)
			}
		}
		effs, err := a.core.work(m.w)
		if err != nil {
			a.fatal(c, fmt.Errorf("actors: rank %d: %w", a.p.rank, err))
			return
		}
		a.run(c, effs)
	case *fetchedMsg:
		a.setBuf(m.buf, m.data)
		if m.err == nil {
			a.fetched(c, len(m.data))
		} else {
			a.freeing(m.buf)
		}
		a.p.rec.task(StageFetch, m.dur, m.err != nil)
		a.run(c, a.core.fetchDone(m.fetcher, m.slot, m.idx, m.buf, m.err))
		if a.tuner != nil {
			n, moved := a.tuner.done(a.p.clock.Now(), m.dur)
			if moved && a.p.cfg.FetchAuto && !a.tuned {
				a.setFetchLimit(c, n)
			}
			if ahead := a.tuner.readAhead(a.p.cfg.ReadAhead); a.p.cfg.ReadAheadAuto && ahead != a.core.wantHigh {
				a.p.rec.readAhead.Store(int64(ahead))
				a.run(c, a.core.setReadAhead(ahead))
			}
		}
	case *decodedMsg:
		if m.abandoned {
			a.setBuf(m.buf, nil) // a stuck decoder still reads it
		}
		a.freeing(m.buf)
		a.p.rec.task(StageDecode, m.dur, m.err != nil)
		a.meta[m.slot].short[m.idx] = m.err == nil && m.short
		a.run(c, a.core.decodeDone(m.decoder, m.slot, m.idx, m.buf, m.err))
		a.retireIdle(c)
	case *releaseMsg:
		a.run(c, a.core.release(m.slot))
	case *fatalMsg:
		a.fatal(c, m.err)
	case *tuneMsg:
		a.retune(c, m)
	}
}

func (a *rankActor) start(c actor.Context) {
	p := a.p
	a.self = c.Self()
	a.bufs = make([][]byte, a.core.maxBufs)
	a.openedAt = make([]time.Time, p.cfg.Slots)
	a.meta = make([]slotMeta, p.cfg.Slots)
	for i := range a.meta {
		b := p.cfg.BatchSize
		a.meta[i] = slotMeta{labels: make([]int32, b), keys: make([]string, b), indices: make([]int64, b),
			positions: make([]int64, b), pads: make([]bool, b), short: make([]bool, b), filled: make([]bool, b)}
	}
	feed := c.Spawn(p.props("feed", func() actor.Actor { return &feedActor{p: p} }))
	a.uploader = c.Spawn(p.props("uploader", func() actor.Actor { return &uploaderActor{p: p, feed: feed} }))
	for i := 0; i < p.cfg.FetchConcurrency; i++ {
		a.fetchers = append(a.fetchers, c.Spawn(p.props("fetcher", func() actor.Actor { return &fetcherActor{p: p, id: i} })))
	}
	for i, d := range p.decoders {
		a.decoders = append(a.decoders, c.Spawn(p.props("decoder", func() actor.Actor { return &decoderActor{p: p, id: i, dec: d} })))
	}
	if p.cfg.FetchAuto || p.cfg.ReadAheadAuto {
		a.tuner = newFetchTuner(p.cfg.FetchConcurrency)
	}
	p.rec.readAhead.Store(int64(a.core.wantHigh))
	if p.cfg.FetchAuto {
		a.core.fetchLimit = a.tuner.limit
		p.rec.setWorkers(StageFetch, a.tuner.limit)
	}
	a.run(c, a.core.start())
}

// setFetchLimit applies the fetch tuner's new limit.
func (a *rankActor) setFetchLimit(c actor.Context, n int) {
	a.p.rec.setWorkers(StageFetch, n)
	a.run(c, a.core.setFetchLimit(n))
}

// fatal ends the run with err: nothing more is scheduled, and the consumer
// gets err after the batches already shipped.
func (a *rankActor) fatal(c actor.Context, err error) {
	if a.dead {
		return
	}
	a.dead = true
	a.core.stop()
	c.Send(a.uploader, &endMsg{err: err})
}

func (a *rankActor) run(c actor.Context, effs []effect) {
	p := a.p
	for i := range effs {
		e := &effs[i]
		switch e.kind {
		case effWant:
			self, root := a.self, p.root
			p.src.Want(e.n, func(w Work) { root.Send(self, &workMsg{w: w}) })
		case effFetch:
			if a.openedAt[e.slot].IsZero() {
				a.openedAt[e.slot] = p.clock.Now()
			}
			p.book.attempt(1)
			c.Send(a.fetchers[e.worker], &fetchMsg{buf: e.buf, slot: e.slot, idx: e.idx, index: e.item.Index, key: e.item.Key, data: a.bufs[e.buf]})
		case effDecode:
			sb := p.cfg.Sample.SampleBytes()
			dst := p.pool.Slot(e.slot).Bytes()[e.idx*sb : (e.idx+1)*sb : (e.idx+1)*sb]
			c.Send(a.decoders[e.worker], &decodeMsg{buf: e.buf, slot: e.slot, idx: e.idx, data: a.bufs[e.buf], dst: dst, key: e.item.Key,
				seed: p.seedFn(p.cfg.Seed, e.epoch, e.item.Index)})
		case effFail:
			if p.ctx.Err() != nil {
				continue // closing: canceled reads are not the data's fault
			}
			f := Failure{Rank: p.rank, Epoch: e.epoch, Index: e.item.Index, Key: e.item.Key, Stage: e.stage,
				Class: classify(e.stage, e.err), Reason: e.err.Error()}
			p.rec.failure(f.Stage, f.Class)
			if p.deps.OnFailure != nil {
				p.deps.OnFailure(f)
			}
			if p.book.record(f) && !a.dead {
				a.fatal(c, &BudgetError{Report: p.book.report()})
			}
		case effShip:
			if a.dead {
				// A failure earlier in these effects ended the run: its
				// error went to the uploader already, and a batch after
				// it would reach the consumer past the end (a second
				// Next returning a batch after the budget error).
				continue
			}
			a.batchDone(e.slot)
			p.rec.queueAdd(StageBatch, +1)
			c.Send(a.uploader, &uploadMsg{b: a.assemble(e.batch)})
		case effDrop:
			a.batchDone(e.slot)
		case effEnd:
			if !a.dead {
				a.dead = true
				c.Send(a.uploader, &endMsg{err: io.EOF})
			}
		}
	}
	// A node's ranks share one failure book: another rank's breach stops
	// this one too.
	if !a.dead && p.book.breached() {
		a.fatal(c, &BudgetError{Report: p.book.report()})
	}
	queued := a.core.fetched.len()
	for _, u := range a.core.decUsed {
		queued += max(u-1, 0)
	}
	p.bufsMade.Store(int64(a.core.bufsMade))
	p.rec.slotsUsed.Store(int64(p.cfg.Slots - len(a.core.freeSlots)))
	p.rec.schedQueues(p.clock.Now(), queued, a.core.decodedOpen)
}

func (a *rankActor) batchDone(slot int) {
	if !a.openedAt[slot].IsZero() {
		a.p.rec.task(StageBatch, a.p.clock.Now().Sub(a.openedAt[slot]), false)
		a.openedAt[slot] = time.Time{}
	}
}

// assemble turns a complete batch into a Batch, in the slot itself (see
// batch.rows): by default a failed sample's row is filled with a copy of
// another sample of the batch and marked in Filled; with ShortBatches
// failed samples are left out and the rest compacted in order.
func (a *rankActor) assemble(b *batch) *Batch {
	p := a.p
	sb := p.cfg.Sample.SampleBytes()
	mem := p.pool.Slot(b.slot).Bytes()
	m := &a.meta[b.slot]
	fill := !p.cfg.ShortBatches
	a.keep = b.rows(a.keep, fill)
	for j, i := range a.keep {
		// Compacting, j <= i: region i is read before it is overwritten.
		// Filling, i is a sample that made it, whose region no row
		// overwrites.
		if i != j {
			copy(mem[j*sb:(j+1)*sb], mem[i*sb:(i+1)*sb])
		}
		it := &b.items[i]
		m.labels[j], m.keys[j], m.indices[j], m.positions[j], m.pads[j] = it.Label, it.Key, it.Index, it.Pos, it.Pad
		m.short[j] = m.short[i]
		m.filled[j] = fill && b.state[j] != sampleOK
	}
	n := len(a.keep)
	return &Batch{
		Rank: p.rank, Epoch: b.epoch, Step: b.step,
		Images: mem[: n*sb : n*sb], Dims: p.cfg.Sample.Dims(n), Layout: p.cfg.Sample.Layout,
		Spec: p.cfg.Sample, Shape: p.cfg.Sample.BatchDims(n), Short: m.short[:n:n],
		Labels: m.labels[:n:n], Keys: m.keys[:n:n], Indices: m.indices[:n:n], Positions: m.positions[:n:n], Pads: m.pads[:n:n],
		Filled:      m.filled[:n:n],
		EndOfStream: b.endOfStream(p.cfg.BatchSize), Failed: b.expected - b.ok, p: p, slot: b.slot,
	}
}

// fetcherActor reads one object at a time into the buffer it is given.
// A blocking read in Receive is the point: one fetcher = one read in flight.
type fetcherActor struct {
	p  *Pipeline
	id int
}

func (f *fetcherActor) Receive(c actor.Context) {
	m, ok := c.Message().(*fetchMsg)
	if !ok {
		return
	}
	t0 := f.p.clock.Now()
	data, err := f.get(m)
	c.Send(c.Parent(), &fetchedMsg{fetcher: f.id, buf: m.buf, slot: m.slot, idx: m.idx, data: data, err: err, dur: f.p.clock.Now().Sub(t0)})
}

// get reads the object, trying again with backoff (0.25 s doubling to 8 s,
// on the pipeline's clock) while the store does not answer, for up to
// Config.StoreOutage.
func (f *fetcherActor) get(m *fetchMsg) ([]byte, error) {
	var deadline time.Time
	wait := 250 * time.Millisecond
	for {
		data, err := f.read(m)
		if err == nil || !storeDown(err) || f.p.ctx.Err() != nil || f.p.cfg.StoreOutage < 0 {
			return data, err
		}
		now := f.p.clock.Now()
		if deadline.IsZero() {
			deadline = now.Add(f.p.cfg.StoreOutage)
		}
		if now.Add(wait).After(deadline) {
			return data, fmt.Errorf("store did not answer for %v: %w", f.p.cfg.StoreOutage, err)
		}
		f.p.rec.storeRetries.Add(1)
		t, fire := f.p.clock.NewTimer(wait)
		select {
		case <-fire:
		case <-f.p.ctx.Done():
			t.Stop()
			return data, err
		}
		wait = min(2*wait, 8*time.Second)
	}
}

// read reads the sample once: by index when the store addresses samples
// so (a packed dataset: no key lookup), else by key; an object over
// Config.MaxObjectBytes is refused before it is read.
func (f *fetcherActor) read(m *fetchMsg) ([]byte, error) {
	if f.p.ranged {
		return m.data[:0], nil // the decoder reads the object by ranges
	}
	limit := f.p.cfg.MaxObjectBytes
	if ss, ok := f.p.deps.Store.(storage.SampleStore); ok {
		return storage.GetSampleLimit(f.p.ctx, ss, m.index, m.key, limit, m.data)
	}
	return storage.GetLimit(f.p.ctx, f.p.deps.Store, m.key, limit, m.data)
}

// storeDown reports whether a Get error says the store is unreachable or
// failing, rather than answering about the object. (A deadline is the
// store's own timing out while the pipeline runs: get checks the
// pipeline's context first.)
func storeDown(err error) bool {
	for _, answer := range []error{storage.ErrNotFound, storage.ErrAccess, storage.ErrInvalidKey, storage.ErrRange,
		storage.ErrPrecondition, storage.ErrTooLarge, context.Canceled} {
		if errors.Is(err, answer) {
			return false
		}
	}
	return true
}

// decoderActor owns one SampleDecoder and decodes into slot regions;
// with a DecodeDeadline its decoder runs on a worker (deadline.go).
type decoderActor struct {
	p   *Pipeline
	id  int
	dec SampleDecoder
	w   *decodeWorker
}

func (d *decoderActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *decodeMsg:
		t0 := d.p.clock.Now()
		abandoned, short, err := d.decodeGuarded(c, m)
		c.Send(c.Parent(), &decodedMsg{decoder: d.id, buf: m.buf, slot: m.slot, idx: m.idx, err: err, dur: d.p.clock.Now().Sub(t0), abandoned: abandoned, short: short})
	case *actor.Stopped:
		d.stop()
	}
}

// uploaderActor hands full slots to the gpu.Uploader, in order.
type uploaderActor struct {
	p    *Pipeline
	feed *actor.PID
	dead bool
	dev  []BatchDevice // by slot, when the uploader leaves batches on a device
}

func (u *uploaderActor) Receive(c actor.Context) {
	p := u.p
	switch m := c.Message().(type) {
	case *uploadMsg:
		p.rec.queueAdd(StageBatch, -1)
		if u.dead {
			return
		}
		t0 := p.clock.Now()
		err := p.uploader.Upload(p.ctx, p.pool.Slot(m.b.slot), len(m.b.Images))
		p.rec.task(StageUpload, p.clock.Now().Sub(t0), err != nil)
		if err != nil {
			u.dead = true
			err = fmt.Errorf("actors: rank %d: upload batch %d of epoch %d: %w", p.rank, m.b.Step, m.b.Epoch, err)
			c.Send(c.Parent(), &fatalMsg{err: err})
			return
		}
		if u.dev != nil {
			m.b.Device = &u.dev[m.b.slot]
		}
		p.rec.queueAdd(StageUpload, +1)
		c.Send(u.feed, &readyMsg{b: m.b})
	case *endMsg:
		c.Send(u.feed, m)
	case *actor.Started:
		if loc, ok := p.uploader.(gpu.DeviceLocator); ok {
			var ex *gpu.DeviceExport
			if e, ok := loc.Export(); ok {
				ex = &e
			}
			for i := range p.pool.Len() {
				u.dev = append(u.dev, BatchDevice{DeviceSlot: loc.Slot(i), Export: ex})
			}
		}
	}
	// The pipeline closes the uploader when it frees the slots
	// (freeSlots): batches may outlive the actors.
}

// feedActor delivers batches to Next. The ready channel holds Slots
// batches, one per slot, so the send never blocks.
type feedActor struct{ p *Pipeline }

func (f *feedActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *readyMsg:
		f.p.ready <- m.b
	case *endMsg:
		f.p.end(m.err)
	}
}
