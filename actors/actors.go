package actors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/internal/clock"
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
	next     *actor.PID // where assembled batches go: the batch stage, else the uploader
	self     *actor.PID

	bufs     [][]byte    // fetch buffers by id, reused
	sizes    []int64     // by fetch buffer: its object's size (what a ranged fetch stated)
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
		a.sizes[m.buf] = m.size
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
	a.sizes = make([]int64, a.core.maxBufs)
	a.openedAt = make([]time.Time, p.cfg.Slots)
	a.meta = make([]slotMeta, p.cfg.Slots)
	for i := range a.meta {
		b := p.cfg.BatchSize
		a.meta[i] = slotMeta{labels: make([]int32, b), keys: make([]string, b), indices: make([]int64, b),
			positions: make([]int64, b), pads: make([]bool, b), short: make([]bool, b), filled: make([]bool, b)}
	}
	feed := c.Spawn(p.props("feed", func() actor.Actor { return &feedActor{p: p} }))
	a.uploader = c.Spawn(p.props("uploader", func() actor.Actor { return &uploaderActor{p: p, feed: feed} }))
	a.next = a.uploader
	if p.stage != nil {
		up := a.uploader
		a.next = c.Spawn(p.props("stage", func() actor.Actor { return &stageActor{p: p, uploader: up} }))
	}
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
	c.Send(a.next, &endMsg{err: err})
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
			c.Send(a.decoders[e.worker], &decodeMsg{buf: e.buf, slot: e.slot, idx: e.idx, data: a.bufs[e.buf], dst: dst, key: e.item.Key, size: a.sizes[e.buf],
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
			c.Send(a.next, &uploadMsg{b: a.assemble(e.batch)})
		case effDrop:
			a.batchDone(e.slot)
		case effEnd:
			if !a.dead {
				a.dead = true
				c.Send(a.next, &endMsg{err: io.EOF})
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
	data, size, err := f.get(m)
	c.Send(c.Parent(), &fetchedMsg{fetcher: f.id, buf: m.buf, slot: m.slot, idx: m.idx, data: data, size: size, err: err, dur: f.p.clock.Now().Sub(t0)})
}

// get reads the object (or, ranged, states it), trying again while the
// store does not answer (Pipeline.retry).
func (f *fetcherActor) get(m *fetchMsg) (data []byte, size int64, err error) {
	data = m.data
	err = f.p.retry(f.p.ctx, nil, func() error {
		data, size, err = f.read(m)
		return err
	})
	return data, size, err
}

// retry runs op, trying again with backoff (0.25 s doubling to 8 s, on
// the pipeline's clock) while the store does not answer (storeDown), for
// up to Config.StoreOutage; each try again counts in StoreRetries. The
// fetch stage's whole-object reads and stats, and the ranged reads an
// ObjectDecoder makes through it, all go through here. waited, if set,
// adds the time spent waiting, on the deadline clock (a decode's store
// waits do not count against its deadline).
func (p *Pipeline) retry(ctx context.Context, waited *storeWaits, op func() error) error {
	var deadline time.Time
	wait := 250 * time.Millisecond
	for {
		err := op()
		if err == nil || !storeDown(err) || ctx.Err() != nil || p.cfg.StoreOutage < 0 {
			return err
		}
		now := p.clock.Now()
		if deadline.IsZero() {
			deadline = now.Add(p.cfg.StoreOutage)
		}
		if now.Add(wait).After(deadline) {
			return fmt.Errorf("store did not answer for %v: %w", p.cfg.StoreOutage, err)
		}
		p.rec.storeRetries.Add(1)
		dc := clock.Or(p.deps.DeadlineClock)
		t0 := dc.Now()
		if waited != nil {
			waited.waiting.Add(1)
		}
		t, fire := p.clock.NewTimer(wait)
		select {
		case <-fire:
		case <-ctx.Done():
			t.Stop()
		}
		if waited != nil { // the time first, then the flag: the deadline sees one or the other
			waited.d.Add(int64(dc.Now().Sub(t0)))
			waited.waiting.Add(-1)
		}
		if ctx.Err() != nil {
			return err
		}
		wait = min(2*wait, 8*time.Second)
	}
}

// read reads the sample once: by index when the store addresses samples
// so (a packed dataset: no key lookup), else by key; an object over
// Config.MaxObjectBytes is refused before it is read. Ranged (the
// decoders read by ranges), it states the object instead: its size, and
// whether it is there.
func (f *fetcherActor) read(m *fetchMsg) ([]byte, int64, error) {
	if f.p.ranged {
		info, err := f.p.deps.Store.Stat(f.p.ctx, m.key)
		if err != nil {
			return m.data[:0], 0, fmt.Errorf("stat %s: %w", m.key, err)
		}
		return m.data[:0], info.Size, nil
	}
	limit := f.p.cfg.MaxObjectBytes
	var data []byte
	var err error
	if ss, ok := f.p.deps.Store.(storage.SampleStore); ok {
		data, err = storage.GetSampleLimit(f.p.ctx, ss, m.index, m.key, limit, m.data)
	} else {
		data, err = storage.GetLimit(f.p.ctx, f.p.deps.Store, m.key, limit, m.data)
	}
	return data, int64(len(data)), err
}

// storeWaits are a decode's waits on the store (its ranged reads'
// retries): while waiting is above zero one is under way, and d is the
// time they took, on the deadline clock.
type storeWaits struct {
	waiting atomic.Int32
	d       atomic.Int64
}

// retryRanges is an Object's ranged reads: the store's GetRange under
// the fetch stage's retries.
type retryRanges struct {
	p      *Pipeline
	waited *storeWaits // the decode's (nil: no deadline)
}

func (r retryRanges) GetRange(ctx context.Context, key string, off, length int64, dst []byte) ([]byte, error) {
	var out []byte
	err := r.p.retry(ctx, r.waited, func() error {
		var err error
		out, err = r.p.deps.Store.GetRange(ctx, key, off, length, dst)
		return err
	})
	return out, err
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
