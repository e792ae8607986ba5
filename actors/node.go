package actors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/longshore/longshore/dataset"
)

// Node runs the pipelines of one machine's ranks in standalone mode: rank r
// of R takes positions r, r+R, ... of each epoch's order (DistributedSampler
// semantics, padded so every rank gets the same number of steps).
//
// The ranks share one actor system and one failure book (the budget is the
// node's). The decoder budget is shared by division: each rank gets
// ceil(Decoders/R) decoders, so R ranks do not start R×NumCPU decoders on
// NumCPU cores. A shared decoder pool serving every rank would balance
// better when ranks run at different speeds, but needs credits per rank at
// the pool; ranks fed the same amount of work run at the same speed, so
// division is as good here and much simpler.
type Node struct {
	cfg     Config
	ranks   []*Pipeline
	book    *failureBook
	sys     interface{ Shutdown() } // the actor system, if the node made it
	sysOnce sync.Once
}

// NewNode starts ranks pipelines over ds. cfg.Decoders is the node's total
// (see Node).
func NewNode(cfg Config, ds *dataset.Dataset, ranks int, deps Deps) (*Node, error) {
	if ds == nil {
		return nil, fmt.Errorf("actors: node: nil dataset")
	}
	return NewCatalogNode(cfg, dataset.DatasetCatalog(ds), ranks, deps)
}

// NewCatalogNode is NewNode over a catalog (NewCatalogFeeder).
func NewCatalogNode(cfg Config, cat dataset.Catalog, ranks int, deps Deps) (_ *Node, err error) {
	cfg = cfg.WithDefaults()
	if ranks < 1 {
		return nil, fmt.Errorf("actors: node with %d ranks: need at least 1", ranks)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rcfg := cfg
	rcfg.Decoders = (cfg.Decoders + ranks - 1) / ranks
	n := &Node{cfg: cfg, book: newFailureBook(cfg.MaxFailures, cfg.MaxFailureRecords)}
	if deps.System == nil {
		sys := newActorSystem(deps.Logger)
		deps.System = sys
		n.sys = sys
	}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	for r := 0; r < ranks; r++ {
		f, err := NewCatalogFeeder(cat, rcfg, r, ranks, deps.Order)
		if err != nil {
			return nil, err
		}
		n.book.addTotal(f.Total())
		p, err := newPipeline(rcfg, r, f, deps, n.book)
		if err != nil {
			return nil, err
		}
		n.ranks = append(n.ranks, p)
	}
	return n, nil
}

// Ranks is the number of ranks.
func (n *Node) Ranks() int { return len(n.ranks) }

// Rank returns rank r's pipeline, for a trainer that drives each rank's
// Next itself.
func (n *Node) Rank(r int) *Pipeline { return n.ranks[r] }

// Run consumes every rank concurrently, calling fn for each batch (from the
// rank's goroutine: fn must be safe for concurrent use across ranks) and
// releasing the batch when fn returns. It returns nil once every rank has
// delivered its last batch, or the first error (from a rank or from fn),
// after which the other ranks are stopped (Close the node to free them).
func (n *Node) Run(ctx context.Context, fn func(*Batch) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for _, p := range n.ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := drain(ctx, p, fn)
			if err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	return first
}

func drain(ctx context.Context, p *Pipeline, fn func(*Batch) error) error {
	for {
		b, err := p.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		err = fn(b)
		b.Release()
		if err != nil {
			return err
		}
	}
}

// Stats merges the ranks' stats (Rank -1): counts and task times are summed
// over ranks, occupancies averaged, Seconds is the longest rank's.
func (n *Node) Stats() Stats { return n.Counters().Stats() }

// Failures is the node's failure report.
func (n *Node) Failures() FailureReport { return n.book.report() }

// Close stops every rank; see Shutdown.
func (n *Node) Close() error { return n.Shutdown(context.Background()) }

// Shutdown stops every rank and then the shared actor system, returning
// ctx.Err() if ctx ends first.
func (n *Node) Shutdown(ctx context.Context) error {
	for _, p := range n.ranks {
		p.beginShutdown() // all ranks stop at once
	}
	var errs []error
	for _, p := range n.ranks {
		errs = append(errs, p.Shutdown(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if n.sys != nil {
		n.sysOnce.Do(n.sys.Shutdown)
	}
	return nil
}
