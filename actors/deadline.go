package actors

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/longshore/longshore/internal/clock"
)

// The decode deadline (Config.DecodeDeadline). A C decoder cannot be
// interrupted, so a decode that runs past its deadline is abandoned: the
// sample fails as decode/timeout, the decoder goes on alone on its worker
// goroutine until it returns (then closes), and the decoder actor carries
// on with a fresh one. The worker decodes into a buffer of its own, which
// the actor copies into the slot only when the decode finished in time,
// so an abandoned decode can never write into a batch; the fetch buffer
// it still reads is dropped by the rank actor (decodedMsg.abandoned) and
// never reused. A pipeline's Close or Shutdown waits for a decode in
// progress (up to its deadline), as without one; only an abandoned decode
// outlives its pipeline, until it returns. The deadline is on
// Deps.DeadlineClock (the system clock unless a test gives one), not the
// pipeline's Clock: it bounds real work, which a fake clock advanced for
// stage timings does not do. So is the wait for a core token below.
//
// An abandoned decode still runs on a core until its C call returns, so
// replacing its decoder must not add a decode: every decode takes one of
// the pipeline's Decoders core tokens (Pipeline.cores) before it starts
// and its worker gives it back when the call returns, abandoned or not.
// While a decode is stuck, the pipeline decodes with one decoder fewer
// instead of oversubscribing the cores it was sized for; a decode that
// had to wait for a token is counted (DecodeCores), and so are the
// decodes abandoned and still running.

// Process-wide counts of DecodeCores (every pipeline's).
var (
	decodesAbandoned atomic.Int64
	decodeCoreWaits  atomic.Int64
)

// DecodeCores reports, over every pipeline of the process, the decodes
// abandoned at their deadline that are still running (each holding a
// core and its decoder's token), and how many decodes so far had to
// wait for a token one of those held.
func DecodeCores() (abandoned, waits int64) {
	return decodesAbandoned.Load(), decodeCoreWaits.Load()
}

// maxAbandoned is how many abandoned decoders a pipeline tolerates at
// once before it stops: one hostile file is bad data, a decoder that
// hangs on sample after sample is a broken decoder, and every abandoned
// one holds its memory until it returns.
const maxAbandoned = 4

type decodeJob struct {
	data []byte
	seed uint64
	key  string
	size int64
}

type decodeResult struct {
	short bool
	err   error
}

// decodeWorker runs one SampleDecoder on a goroutine of its own.
type decodeWorker struct {
	dec     SampleDecoder
	jobs    chan decodeJob
	results chan decodeResult // buffered: an abandoned worker never blocks on it
	exited  chan struct{}
	scratch []byte
	// waited is the decode in progress's waits on the store (its ranged
	// reads' retries): they hold its deadline back.
	waited storeWaits
}

func newDecodeWorker(p *Pipeline, dec SampleDecoder) *decodeWorker {
	w := &decodeWorker{
		dec: dec, jobs: make(chan decodeJob), results: make(chan decodeResult, 1), exited: make(chan struct{}),
		scratch: make([]byte, p.cfg.Sample.SampleBytes()),
	}
	go w.run(p)
	return w
}

func (w *decodeWorker) run(p *Pipeline) {
	defer close(w.exited)
	defer w.dec.Close()
	for j := range w.jobs {
		short, err := safeDecode(p, w.dec, j.key, j.size, j.data, j.seed, w.scratch, &w.waited)
		<-p.cores // the call returned: its core is free
		w.results <- decodeResult{short, err}
	}
}

// safeDecode runs dec, turning a panic on hostile input into a
// per-sample failure; short is a WindowDecoder's answer. In a ranged
// pipeline the ObjectDecoder reads key (of size bytes) by ranges,
// through the fetch stage's retries; waited adds up their waits.
func safeDecode(p *Pipeline, dec SampleDecoder, key string, size int64, data []byte, seed uint64, dst []byte, waited *storeWaits) (short bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			short, err = false, WithFailureClass(fmt.Errorf("decoder panicked: %v", r), "panic")
		}
	}()
	if od, ok := dec.(ObjectDecoder); ok && p.ranged {
		return od.DecodeObject(p.ctx, Object{Key: key, Size: size, Ranges: retryRanges{p: p, waited: waited}}, seed, dst)
	}
	if wd, ok := dec.(WindowDecoder); ok {
		return wd.DecodeWindow(data, seed, dst)
	}
	return false, dec.Decode(data, seed, dst)
}

// decodeGuarded decodes m under the deadline; abandoned says the decoder
// was left behind (and still reads m.data).
func (d *decoderActor) decodeGuarded(c actor.Context, m *decodeMsg) (abandoned, short bool, err error) {
	p := d.p
	if err := p.ctx.Err(); err != nil {
		return false, false, err
	}
	if d.dec == nil {
		return false, false, fmt.Errorf("actors: rank %d: decoder %d has no decoder", p.rank, d.id)
	}
	if p.cfg.DecodeDeadline < 0 {
		short, err := safeDecode(p, d.dec, m.key, m.size, m.data, m.seed, m.dst, nil)
		return false, short, err
	}
	if d.w == nil {
		d.w = newDecodeWorker(p, d.dec)
	}
	w := d.w
	if err := d.takeCore(c); err != nil {
		return false, false, err
	}
	w.waited.d.Store(0)
	w.jobs <- decodeJob{data: m.data, seed: m.seed, key: m.key, size: m.size}
	t, expired := clock.Or(p.deps.DeadlineClock).NewTimer(p.cfg.DecodeDeadline)
	defer t.Stop()
	for {
		select {
		case r := <-w.results:
			if r.err == nil {
				copy(m.dst, w.scratch)
			}
			return false, r.err == nil && r.short, r.err
		case <-expired:
			// Time spent waiting on the store (a ranged read's
			// retries) is the fetch stage's, not decoding: the
			// deadline does not fire during a wait, and moves by
			// the waits' time.
			if w.waited.waiting.Load() > 0 {
				t.Reset(p.cfg.DecodeDeadline)
				continue
			}
			if extra := time.Duration(w.waited.d.Swap(0)); extra > 0 {
				t.Reset(extra)
				continue
			}
			d.abandon(c)
			return true, false, WithFailureClass(fmt.Errorf("decode did not finish within %v (the decode deadline): the decoder was abandoned", p.cfg.DecodeDeadline), "timeout")
		}
	}
}

// takeCore takes a core token for a decode, waiting while abandoned
// decodes hold them. A decode not abandoned gives its token back within
// the deadline, so a wait that outlasts one (and at least a second, for
// the rank actor's turn on a loaded machine) with every token held by an
// abandoned decode would last as long as they hang: the run stops.
func (d *decoderActor) takeCore(c actor.Context) error {
	p := d.p
	select {
	case p.cores <- struct{}{}:
		return nil
	default: // every token taken: an abandoned decode holds one
	}
	decodeCoreWaits.Add(1)
	grace := max(p.cfg.DecodeDeadline, time.Second)
	t, expired := clock.Or(p.deps.DeadlineClock).NewTimer(grace)
	defer t.Stop()
	for {
		select {
		case p.cores <- struct{}{}:
			return nil
		case <-p.ctx.Done():
			return p.ctx.Err()
		case <-expired:
			if n := p.abandoned.Load(); n >= int64(p.cfg.Decoders) {
				err := fmt.Errorf("actors: rank %d: all %d decoder cores are held by decodes stuck past the decode deadline of %v: the decoder hangs on this data (raise --decode-deadline if decodes are only slow)", p.rank, n, p.cfg.DecodeDeadline)
				c.Send(c.Parent(), &fatalMsg{err: err})
				return err
			}
			t.Reset(grace)
		}
	}
}

// abandon leaves the worker to finish alone and makes a fresh decoder;
// too many abandoned at once stop the run.
func (d *decoderActor) abandon(c actor.Context) {
	p := d.p
	w := d.w
	d.w, d.dec = nil, nil
	close(w.jobs) // it exits once its decode returns
	n := p.abandoned.Add(1)
	decodesAbandoned.Add(1)
	go func() {
		<-w.exited
		p.abandoned.Add(-1)
		decodesAbandoned.Add(-1)
	}()
	if n > maxAbandoned {
		c.Send(c.Parent(), &fatalMsg{err: fmt.Errorf("actors: rank %d: %d decodes are stuck past the decode deadline of %v at once: the decoder hangs on this data (raise --decode-deadline if decodes are only slow)", p.rank, n, p.cfg.DecodeDeadline)})
		return
	}
	dec, err := p.deps.NewDecoder()
	if err != nil {
		c.Send(c.Parent(), &fatalMsg{err: fmt.Errorf("actors: rank %d: replace abandoned decoder %d: %w", p.rank, d.id, err)})
		return
	}
	d.dec = dec
}

// stop closes the decoder (through its worker, if it has one, waiting
// for the idle worker to exit).
func (d *decoderActor) stop() {
	if w := d.w; w != nil {
		d.w, d.dec = nil, nil
		close(w.jobs)
		<-w.exited
		return
	}
	if d.dec != nil {
		d.dec.Close()
		d.dec = nil
	}
}
