package delivery

import (
	"context"
	"fmt"
	"io"

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
		p, err := actors.NewPipeline(rcfg, rank, f, d)
		if err != nil {
			return nil, fmt.Errorf("feed: open rank %d at epoch %d step %d: %w", rank, from.Epoch, from.Step, err)
		}
		return p, nil
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
