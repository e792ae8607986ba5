package delivery

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/feed"
	"github.com/longshore/longshore/gpu"
)

// BatchSource is one rank's batches in order: *actors.Pipeline is one. Next,
// Config and Shutdown follow the Pipeline's contract; batches' Images must
// lie in memory from the allocator the stream was opened with.
type BatchSource interface {
	Next(ctx context.Context) (*actors.Batch, error)
	Config() actors.Config
	Shutdown(ctx context.Context) error
}

var _ BatchSource = (*actors.Pipeline)(nil)

// OpenFunc starts rank's stream so that its first batch is the one at
// from (or, when from.Step is past the end of its epoch, step 0 of the
// next epoch), with slot memory from alloc (set it as Deps.Allocator).
// The server calls it once per rank at start and again when a trainer
// resumes from a commit the running stream has gone past.
type OpenFunc func(rank int, from feed.Cursor, alloc gpu.Allocator) (BatchSource, error)

// Standalone opens ranks' streams over ds the way actors.NewNode splits
// them (rank r of world takes positions r, r+world, ...; decoders divided
// among ranks), starting anywhere: the feeder seeks to the cursor's
// offset before the pipeline starts, so nothing before it is fetched or
// decoded, and batches carry their true Step and Positions. Unlike
// NewNode, each rank has its own failure budget.
func Standalone(cfg actors.Config, ds *dataset.Dataset, world int, deps actors.Deps) OpenFunc {
	return StandaloneCatalog(cfg, dataset.DatasetCatalog(ds), world, deps)
}

// StandaloneCatalog is Standalone over a catalog (actors.NewCatalogFeeder):
// a dataset in memory or read lazily through its manifest index.
func StandaloneCatalog(cfg actors.Config, cat dataset.Catalog, world int, deps actors.Deps) OpenFunc {
	cfg = cfg.WithDefaults()
	return func(rank int, from feed.Cursor, alloc gpu.Allocator) (BatchSource, error) {
		rcfg := cfg
		rcfg.Decoders = (cfg.Decoders + world - 1) / world
		f, err := actors.NewCatalogFeeder(cat, rcfg, rank, world, deps.Order)
		if err != nil {
			return nil, err
		}
		end := cfg.FirstEpoch + cfg.Epochs
		if from.Epoch < cfg.FirstEpoch || from.Step < 0 {
			from = feed.Cursor{Epoch: cfg.FirstEpoch}
		}
		b := int64(cfg.BatchSize)
		steps := epochSteps(cfg, f.StreamLen())
		if from.Step >= steps {
			from = feed.Cursor{Epoch: from.Epoch + 1}
		}
		if from.Epoch >= end || steps == 0 {
			return endedStream{cfg: rcfg}, nil
		}
		if err := f.Seek(from.Epoch, from.Step*b); err != nil {
			return nil, fmt.Errorf("feed: open rank %d: %w", rank, err)
		}
		d := deps
		d.Allocator = alloc
		held := &heldSource{src: f}
		p, err := actors.NewPipeline(rcfg, rank, held, d)
		if err != nil {
			return nil, fmt.Errorf("feed: open rank %d at epoch %d step %d: %w", rank, from.Epoch, from.Step, err)
		}
		return &HeldPipeline{Pipeline: p, src: held}, nil
	}
}

// HeldPipeline is a rank's pipeline (StandaloneCatalog) that reads
// nothing until Start or its first Next: a standalone rank opens its
// first stream at the start and starts it when a trainer attaches there,
// and reopens it (started at once) where a trainer's token resumes, so a
// resumed node never fetches what the resume skips.
type HeldPipeline struct {
	*actors.Pipeline
	src *heldSource
}

// Start lets the pipeline take work: it fetches from now on. Calling it
// again does nothing.
func (p *HeldPipeline) Start() { p.src.start() }

// Next starts the pipeline (a stream wrapped in another that does not
// pass Start on starts when its first batch is asked for) and returns
// its next batch.
func (p *HeldPipeline) Next(ctx context.Context) (*actors.Batch, error) {
	p.src.start()
	return p.Pipeline.Next(ctx)
}

// heldSource is a pipeline's source that holds the pipeline's requests
// for work until start, then gives them to src in order.
type heldSource struct {
	src     actors.Source
	mu      sync.Mutex
	started bool
	pending []heldWant
}

type heldWant struct {
	n    int
	give func(actors.Work)
}

func (h *heldSource) Want(n int, give func(actors.Work)) {
	h.mu.Lock()
	if !h.started {
		h.pending = append(h.pending, heldWant{n, give})
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	h.src.Want(n, give)
}

// start gives the requests held to src; a Want meanwhile waits for them
// (the lock), so src sees them in order.
func (h *heldSource) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started {
		return
	}
	h.started = true
	for _, w := range h.pending {
		h.src.Want(w.n, w.give)
	}
	h.pending = nil
}

// Total is the source's, for the pipeline's failure budget.
func (h *heldSource) Total() int64 {
	if t, ok := h.src.(interface{ Total() int64 }); ok {
		return t.Total()
	}
	return 0
}

// startStream starts st if it is held (HeldPipeline, or a wrapper that
// passes Start on).
func startStream(st BatchSource) {
	if h, ok := st.(interface{ Start() }); ok {
		h.Start()
	}
}

// StandaloneSteps is how many batches each epoch of a rank's stream has
// when StandaloneCatalog(cfg, cat, world, ...) opens it: what
// Config.EpochSteps says in the welcome (the trainer's len(loader)).
func StandaloneSteps(cfg actors.Config, cat dataset.Catalog, world int) func(rank int) int64 {
	cfg = cfg.WithDefaults()
	n := cat.Len()
	var l int64 // samples per rank and epoch, as actors.Feeder.StreamLen
	if n > 0 && world > 0 {
		l = (n + int64(world) - 1) / int64(world)
	}
	steps := epochSteps(cfg, l)
	return func(rank int) int64 { return steps }
}

// epochSteps is how many batches an epoch of l samples makes.
func epochSteps(cfg actors.Config, l int64) int64 {
	b := int64(cfg.BatchSize)
	if b <= 0 {
		return 0
	}
	if cfg.DropLast {
		return l / b
	}
	return (l + b - 1) / b
}

// endedStream is a stream opened at or past the end of the run.
type endedStream struct{ cfg actors.Config }

func (e endedStream) Next(ctx context.Context) (*actors.Batch, error) { return nil, io.EOF }
func (e endedStream) Config() actors.Config                           { return e.cfg }
func (e endedStream) Shutdown(ctx context.Context) error              { return nil }
