package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/storage"
)

// Deps are a pipeline's collaborators: what a config file cannot name.
type Deps struct {
	// Store is where objects are read from. Required.
	Store storage.Store
	// NewDecoder makes each decoder actor's decoder. Required.
	NewDecoder DecoderFactory
	// SampleSeed derives per-sample transform seeds. Required: a
	// missing one would give other pixels than the decoder's own seed
	// function, so it is an error, not a fallback. ffdecode.Use sets
	// decode.SampleSeed with the real decoder.
	SampleSeed SampleSeedFunc
	// Order is the epoch order for standalone feeders (NewLoader,
	// NewNode), required by them: pass a wrapper of cluster.NewOrder so
	// standalone and cluster runs agree.
	Order OrderFunc
	// Allocator provides slot memory; nil: gpu.DefaultAllocator().
	Allocator gpu.Allocator
	// NewUploader makes rank's uploader for the pipeline's slot pool
	// (gpu.NewDeviceUploader with a device, for one); nil:
	// gpu.HostUploader. The pipeline closes it right before it frees the
	// pool: after every batch has been released.
	NewUploader func(rank int, pool *gpu.HostPool) (gpu.Uploader, error)
	// NewBatchStage, if set, makes rank's batch stage (BatchStage): the
	// optional stage between assembly and upload, for batch GPU decoding
	// and batch augmentation; spec is the pipeline's sample spec. nil:
	// assembled batches go straight to the uploader.
	NewBatchStage func(rank int, spec Shape) (BatchStage, error)
	// System is the actor system to spawn into; nil: the pipeline makes
	// its own and shuts it down on Close.
	System *actor.ActorSystem
	// Clock times stages and the fetch retries' backoff; nil: the system
	// clock.
	Clock clock.Clock
	// DeadlineClock times the decode deadline (Config.DecodeDeadline);
	// nil: the system clock. It is apart from Clock because the deadline
	// bounds real work, which a fake Clock that a test advances for
	// stage timings does not do; a test of the deadline itself gives it
	// a fake to fire a deadline when the decode it means is running.
	DeadlineClock clock.Clock
	// Logger receives the actor system's logs when the pipeline makes
	// its own system; nil: discarded.
	Logger *slog.Logger
	// OnFailure, if set, is called with every sample failure as it is
	// recorded (a quarantine list), from the rank's actor: it must not
	// block for long.
	OnFailure func(Failure)
}

// Batch is one delivered batch: a view over a slot. Images, Labels, Keys,
// Indices, Positions and Pads are valid until Release; the trainer's pace
// is the back-pressure (an unreleased batch holds its slot).
type Batch struct {
	Rank int
	// Epoch is the job's epoch.
	Epoch int
	// Step is the batch's step in the epoch, as its run numbers it (see
	// Work): standalone, it holds the stream offsets
	// [Step*BatchSize, (Step+1)*BatchSize), minus the samples that failed.
	Step int64
	// Images is the samples' bytes, Shape long in Spec's DType: for
	// images uint8 RGB [N,3,H,W] (NCHW) or [N,H,W,3], which Dims also
	// holds; for video [N,T,3,H,W] or [N,T,H,W,3] uint8; for audio
	// [N,C,S] float32 (Dims is zero for those: they have no 4 dimensions).
	Images []byte
	Dims   [4]int
	Layout Layout
	// Spec is the pipeline's sample spec (Config.Sample).
	Spec Shape
	// Shape is the batch's dimensions, Spec.BatchDims(Len()).
	Shape []int
	// Short marks samples shorter than their window (a clip or waveform
	// that ended early): audio zero-padded, video padded by repeating its
	// last frame. Always false for images.
	Short  []bool
	Labels []int32
	Keys   []string
	// Indices are the samples' dataset indices.
	Indices []int64
	// Positions are the samples' offsets in the rank's stream.
	Positions []int64
	// Pads marks repeated samples that even out ranks' shares.
	Pads []bool
	// EndOfStream says this is the last batch of the rank's stream of
	// Epoch as the Source planned it (Work.StreamEnd).
	EndOfStream bool
	// Failed is how many of the batch's samples failed. By default
	// their rows are filled (see Filled) and the batch keeps its size;
	// with Config.ShortBatches they are left out (the rest compacted in
	// order).
	Failed int
	// Filled marks rows that hold no sample of their own: a failed
	// sample's place, filled with a copy (pixels and metadata) of the
	// next row of the batch that is not filled, wrapping. A trainer
	// masks them out of its loss (or trains on the duplicate); they are
	// not deliveries of the sample they copy. Never true with
	// Config.ShortBatches. An epoch's last batch keeps its shorter length
	// (only failures are filled); a batch whose every sample failed is
	// empty.
	Filled []bool
	// Device is where the batch also lies on a device, after an uploader
	// that leaves it there (gpu.DeviceLocator); nil: host memory only.
	// Valid, like Images, until Release.
	Device *BatchDevice

	p        *Pipeline
	slot     int
	released atomic.Bool
}

// BatchDevice is where a batch lies on a device: its slot's device
// buffer (the first len(Images) bytes), and, when the uploader exports
// its buffers to other processes, the export they lie in (shared by the
// pipeline's batches; read-only).
type BatchDevice struct {
	gpu.DeviceSlot
	Export *gpu.DeviceExport
}

// Len is the number of rows in the batch, filled ones included (0 if
// every sample failed).
func (b *Batch) Len() int { return len(b.Labels) }

// Release gives the batch's slot back to the pipeline. Calling it more than
// once is harmless; touching the batch's slices after it is a bug.
func (b *Batch) Release() {
	if b == nil || b.p == nil || !b.released.CompareAndSwap(false, true) {
		return
	}
	b.p.release(b.slot)
}

// Pipeline is one rank's loader: work in, batches out through Next.
// Next, Stats, Failures, Close and Shutdown are safe for concurrent use.
type Pipeline struct {
	cfg    Config
	rank   int
	src    Source
	deps   Deps
	clock  clock.Clock
	seedFn SampleSeedFunc

	sys    *actor.ActorSystem
	ownSys bool
	root   *actor.RootContext
	pid    *actor.PID

	disp     *poolDispatcher
	pool     *gpu.HostPool
	decoders []SampleDecoder
	ranged   bool // the decoders read their objects (ObjectDecoder): the fetchers read nothing
	uploader gpu.Uploader
	stage    BatchStage // nil: none
	rec      *recorder
	book     *failureBook

	ctx    context.Context // canceled by Close: aborts fetches and uploads
	cancel context.CancelFunc

	ready    chan *Batch   // feed -> Next; capacity Slots, so never full
	done     chan struct{} // closed once the end (io.EOF or an error) is known
	closedCh chan struct{} // closed by Close
	stopped  chan struct{} // closed once every actor has stopped
	actorsWG sync.WaitGroup

	endOnce sync.Once
	endErr  error // set before done is closed

	life struct {
		sync.Mutex
		closed     bool
		actorsDown bool
		held       int // batches delivered and not released
		freed      bool
	}
	finishOnce sync.Once

	bufsMade atomic.Int64 // fetch buffers ever made (for tests and stats)
	// fetchBufBytes is what the fetch buffers hold now (their capacity),
	// fetchBufPeak the most they held (Config.FetchBytes; FetchBufferBytes).
	fetchBufBytes, fetchBufPeak atomic.Int64
	abandoned                   atomic.Int64 // decoders left running past the decode deadline
	// cores holds a token for each decode running in C (deadline.go),
	// abandoned ones included: at most Decoders at once.
	cores chan struct{}
}

// NewPipeline starts rank's pipeline, fed by src. cfg zero fields take
// their defaults.
func NewPipeline(cfg Config, rank int, src Source, deps Deps) (*Pipeline, error) {
	cfg = cfg.WithDefaults()
	book := newFailureBook(cfg.MaxFailures, cfg.MaxFailureRecords)
	if t, ok := src.(interface{ Total() int64 }); ok {
		book.addTotal(t.Total())
	}
	return newPipeline(cfg, rank, src, deps, book)
}

// NewLoader is the single-rank standalone loader over ds: NewPipeline fed
// by a Feeder for rank 0 of 1.
func NewLoader(cfg Config, ds *dataset.Dataset, deps Deps) (*Pipeline, error) {
	f, err := NewFeeder(ds, cfg, 0, 1, deps.Order)
	if err != nil {
		return nil, err
	}
	return NewPipeline(cfg, 0, f, deps)
}

func newPipeline(cfg Config, rank int, src Source, deps Deps, book *failureBook) (_ *Pipeline, err error) {
	cfg = cfg.WithDefaults()
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if deps.Store == nil {
		errs = append(errs, errors.New("actors: Deps.Store is nil"))
	}
	if deps.NewDecoder == nil {
		errs = append(errs, errors.New("actors: Deps.NewDecoder is nil"))
	}
	if deps.SampleSeed == nil {
		errs = append(errs, errors.New("actors: Deps.SampleSeed is nil: pass the decoder's seed function (ffdecode.Use sets decode.SampleSeed)"))
	}
	if src == nil {
		errs = append(errs, errors.New("actors: nil Source"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	p := &Pipeline{
		cfg: cfg, rank: rank, src: src, deps: deps, clock: clock.Or(deps.Clock), seedFn: deps.SampleSeed, book: book,
		ready: make(chan *Batch, cfg.Slots), done: make(chan struct{}),
		closedCh: make(chan struct{}), stopped: make(chan struct{}), cores: newCores(cfg.Decoders),
	}
	defer func() {
		if err != nil {
			p.closeResources()
		}
	}()
	if p.pool, err = gpu.NewHostPool(deps.Allocator, cfg.Slots, cfg.SlotBytes()); err != nil {
		return nil, fmt.Errorf("actors: rank %d: %w", rank, err)
	}
	for i := 0; i < cfg.Decoders; i++ {
		d, err := deps.NewDecoder()
		if err != nil {
			return nil, fmt.Errorf("actors: rank %d: make decoder %d: %w", rank, i, err)
		}
		p.decoders = append(p.decoders, d)
	}
	_, packed := deps.Store.(storage.SampleStore)
	p.ranged = !packed
	for _, d := range p.decoders {
		if _, ok := d.(ObjectDecoder); !ok {
			p.ranged = false
		}
	}
	if deps.NewUploader != nil {
		if p.uploader, err = deps.NewUploader(rank, p.pool); err != nil {
			return nil, fmt.Errorf("actors: rank %d: make uploader: %w", rank, err)
		}
	} else {
		p.uploader = gpu.HostUploader{}
	}
	if deps.NewBatchStage != nil {
		if p.stage, err = deps.NewBatchStage(rank, cfg.Sample); err != nil {
			return nil, fmt.Errorf("actors: rank %d: make batch stage: %w", rank, err)
		}
	}

	var workers, caps [numStages]int
	workers[StageFetch], caps[StageFetch] = cfg.FetchConcurrency, cfg.Decoders*cfg.DecodeQueue
	workers[StageDecode], caps[StageDecode] = cfg.Decoders, cfg.Slots*cfg.BatchSize
	workers[StageBatch], caps[StageBatch] = cfg.Slots, cfg.Slots
	workers[StageUpload], caps[StageUpload] = 1, cfg.Slots
	workers[StageFeed], caps[StageFeed] = 1, cfg.Slots
	p.rec = newRecorder(p.clock, workers, caps)

	p.sys = deps.System
	if p.sys == nil {
		p.sys, p.ownSys = newActorSystem(deps.Logger), true
	}
	p.root = p.sys.Root
	p.disp = newPoolDispatcher(300) // protoactor's default throughput
	p.ctx, p.cancel = context.WithCancel(context.Background())

	ra := &rankActor{p: p, core: newCore(coreConfig{
		batchSize: cfg.BatchSize, slots: cfg.Slots, fetchers: cfg.FetchConcurrency,
		decoders: cfg.Decoders, decodeQueue: cfg.DecodeQueue, dropLast: cfg.DropLast, readAhead: cfg.ReadAhead,
	})}
	p.pid = p.root.Spawn(p.props("rank", func() actor.Actor { return ra }))
	return p, nil
}

// NewSystem is the actor system a process's pipelines share (set it as
// Deps.System; shut it down after the last pipeline is closed): each
// system holds protoactor's process registry, about 2.8 MB, so a node of
// many ranks makes one, not one per rank. Logs go to logger (or nowhere).
func NewSystem(logger *slog.Logger) *actor.ActorSystem { return newActorSystem(logger) }

// systemsMade counts the actor systems this process has made
// (SystemsMade).
var systemsMade atomic.Int64

// SystemsMade is how many actor systems NewSystem, NewNode and the
// pipelines without Deps.System have made in this process: what a test
// reads to check that a node's ranks share one.
func SystemsMade() int64 { return systemsMade.Load() }

// newActorSystem makes a quiet actor system: logs go to logger (or
// nowhere), and the dead-letter throttle's timer goroutine lives briefly.
func newActorSystem(logger *slog.Logger) *actor.ActorSystem {
	systemsMade.Add(1)
	c := actor.Configure(actor.WithDeadLetterThrottleInterval(100 * time.Millisecond))
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c.LoggerFactory = func(*actor.ActorSystem) *slog.Logger { return logger }
	return actor.NewActorSystemWithConfig(c)
}

// props wraps an actor the way all pipeline actors are made: the default
// unbounded mailbox (credits bound it; protoactor's Bounded mailbox spins
// the sender) and a middleware that turns a panic into a pipeline error
// delivered to the consumer, instead of a silent restart that would lose
// the scheduler's state. Every actor counts itself in actorsWG until it
// has stopped, so Close can wait for all of them.
func (p *Pipeline) props(role string, produce func() actor.Actor) *actor.Props {
	p.actorsWG.Add(1)
	var mw []actor.MailboxMiddleware
	if testMailboxMiddleware != nil {
		mw = append(mw, testMailboxMiddleware(role))
	}
	return actor.PropsFromProducer(produce,
		actor.WithMailbox(actor.Unbounded(mw...)),
		actor.WithDispatcher(p.disp),
		actor.WithReceiverMiddleware(func(next actor.ReceiverFunc) actor.ReceiverFunc {
			return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
				defer func() {
					if r := recover(); r != nil {
						p.end(fmt.Errorf("actors: rank %d: internal error in %s handling %T: %v", p.rank, c.Self().Id, env.Message, r))
					}
					if _, ok := env.Message.(*actor.Stopped); ok {
						p.actorsWG.Done()
					}
				}()
				next(c, env)
			}
		}))
}

// testMailboxMiddleware, set only by tests, observes every actor's mailbox.
var testMailboxMiddleware func(role string) actor.MailboxMiddleware

// end records the run's end (io.EOF or an error) for Next. First wins.
func (p *Pipeline) end(err error) {
	p.endOnce.Do(func() {
		p.endErr = err
		close(p.done)
	})
}

// Next returns the next batch in order. It blocks until one is ready, the
// run ends (io.EOF after the last batch; a *BudgetError or another error
// if the run stopped), ctx is done, or the pipeline is closed (ErrClosed).
func (p *Pipeline) Next(ctx context.Context) (*Batch, error) {
	t0 := p.clock.Now()
	var b *Batch
	ready := true
	select {
	case b = <-p.ready:
	default:
		ready = false
		select {
		case b = <-p.ready:
		case <-p.done:
			select {
			case b = <-p.ready:
			default:
				p.finishStats()
				return nil, p.endErr
			}
		case <-p.closedCh:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var wait time.Duration
	if !ready {
		wait = p.clock.Now().Sub(t0)
	}
	p.life.Lock()
	if p.life.closed {
		p.life.Unlock()
		return nil, ErrClosed
	}
	p.life.held++
	p.life.Unlock()
	p.rec.queueAdd(StageUpload, -1)
	p.rec.queueAdd(StageFeed, +1)
	p.rec.delivered(b, wait, ready)
	return b, nil
}

func (p *Pipeline) release(slot int) {
	p.rec.queueAdd(StageFeed, -1)
	if r, ok := p.uploader.(gpu.SlotReleaser); ok {
		r.ReleaseSlot(slot) // before the slot can be refilled
	}
	p.life.Lock()
	p.life.held--
	closed := p.life.closed
	free := closed && p.life.actorsDown && p.life.held == 0 && !p.life.freed
	if free {
		p.life.freed = true
	}
	p.life.Unlock()
	if free {
		p.freeSlots()
	}
	if !closed {
		p.root.Send(p.pid, &releaseMsg{slot: slot})
	}
}

func (p *Pipeline) finishStats() { p.finishOnce.Do(p.rec.finish) }

// Rank is the pipeline's rank.
func (p *Pipeline) Rank() int { return p.rank }

// Config is the pipeline's configuration, defaults filled in.
func (p *Pipeline) Config() Config { return p.cfg }

// FetchBufferBytes returns the bytes the rank's fetch buffers hold now
// (their capacity: in reads in flight, in samples waiting for a decoder,
// and kept for reuse) and the most they have held (Config.FetchBytes).
func (p *Pipeline) FetchBufferBytes() (now, peak int64) {
	return p.fetchBufBytes.Load(), p.fetchBufPeak.Load()
}

// Stats returns a snapshot of the pipeline's stats.
func (p *Pipeline) Stats() Stats { return p.rec.raw(p.rank).stats() }

// Failures returns the failure report so far (shared by a node's ranks).
func (p *Pipeline) Failures() FailureReport { return p.book.report() }

// Close stops the pipeline and waits for every actor to stop; see
// Shutdown.
func (p *Pipeline) Close() error { return p.Shutdown(context.Background()) }

// Shutdown stops the pipeline: Next returns ErrClosed, in-flight reads are
// canceled, and every actor stops (a decode in progress finishes first).
// Batches still held stay valid until released; the slot memory is freed
// when the last one is. It returns ctx.Err() if ctx ends before the actors
// have stopped (they still stop, in the background). Safe to call more than
// once.
func (p *Pipeline) Shutdown(ctx context.Context) error {
	p.beginShutdown()
	select {
	case <-p.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// beginShutdown starts stopping the pipeline without waiting.
func (p *Pipeline) beginShutdown() {
	p.life.Lock()
	first := !p.life.closed
	p.life.closed = true
	p.life.Unlock()
	if !first {
		return
	}
	close(p.closedCh)
	p.cancel()
	p.end(ErrClosed)
	go func() {
		p.root.Stop(p.pid)
		p.actorsWG.Wait()
		p.closeResources()
		close(p.stopped)
	}()
}

// closeResources runs once no actor is running (or none was started).
func (p *Pipeline) closeResources() {
	var errs []error
	if p.pid == nil { // never started: the actors did not take ownership
		for _, d := range p.decoders {
			errs = append(errs, d.Close())
		}
	}
	if p.stage != nil { // no actor runs: no Process runs or follows
		errs = append(errs, p.stage.Close())
	}
	if p.disp != nil {
		p.disp.close()
	}
	if p.ownSys && p.sys != nil {
		p.sys.Shutdown()
	}
	if p.rec != nil {
		p.finishStats()
	}
	p.life.Lock()
	p.life.closed = true
	p.life.actorsDown = true
	free := p.life.held == 0 && !p.life.freed
	if free {
		p.life.freed = true
	}
	p.life.Unlock()
	if free {
		errs = append(errs, p.freeSlots())
	}
	_ = errors.Join(errs...) // close errors of decoders are not actionable here
}

// freeSlots runs once, when no actor runs and no batch is held: the
// uploader first (its device buffers and the registration of the pool's
// memory), then the pool.
func (p *Pipeline) freeSlots() error {
	var errs []error
	if p.uploader != nil {
		errs = append(errs, p.uploader.Close())
	}
	if p.pool != nil {
		errs = append(errs, p.pool.Close())
	}
	return errors.Join(errs...)
}
