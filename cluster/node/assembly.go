package node

import (
	"errors"
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/quarantine"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/delivery"
)

// AssemblyConfig is what a node's ranks' pipelines are built from, in
// every mode: standalone or in a cluster, delivering to an in-process
// sink or to trainers over the feed.
type AssemblyConfig struct {
	// Ranks is how many trainer ranks the node serves, >= 1.
	Ranks int
	// Pipeline configures every rank's pipeline.
	Pipeline actors.Config
	// Deps are the pipelines' collaborators: Store (required),
	// NewUploader, ... The assembly sets System (one actor system for
	// every pipeline) and OnFailure (the quarantine).
	Deps actors.Deps
	// UseDecoder sets the pipelines' decoders and sample spec for the
	// node's media (required).
	UseDecoder func(*actors.Config, *actors.Deps) error
	// Quarantine is the --quarantine file ("": none).
	Quarantine string
	// Logger receives the node's own lines (the store budget, the job's
	// order); nil discards them.
	Logger *slog.Logger
}

// Assembly is a node's ranks' pipelines, assembled once from an
// AssemblyConfig for every mode. The modes differ only in where the
// ranks' work comes from (the source: the standalone feeder over the
// catalog in its order, or the cluster's lease requester) and where
// their batches go (the sink: an in-process one, or the feed server):
//
//	standalone, in-process sink: a.StandaloneNode
//	standalone, feed:            a.StandaloneFeed
//	cluster (either sink):       a.ClusterConfig, then Start (the feed
//	                             through ClusterFeed)
type Assembly struct {
	// Pipeline and Deps are what every rank's pipelines are made with:
	// the config's, with the decoders, the actor system and the
	// quarantine.
	Pipeline actors.Config
	Deps     actors.Deps
	// Quarantine is the --quarantine file, or nil.
	Quarantine *quarantine.File

	ranks  int
	logger *slog.Logger
	sys    *actor.ActorSystem
}

// Assemble builds a node's assembly: it opens the quarantine, starts the
// pipelines' one actor system (one each held about 2.8 MB) and sets the
// decoders. Close it after every pipeline has closed.
func Assemble(c AssemblyConfig) (*Assembly, error) {
	if c.Ranks < 1 || c.Deps.Store == nil || c.UseDecoder == nil {
		return nil, errors.New("node: an assembly needs Ranks >= 1, a Store and UseDecoder")
	}
	q, err := quarantine.Open(c.Quarantine)
	if err != nil {
		return nil, err
	}
	a := &Assembly{Pipeline: c.Pipeline, Deps: c.Deps, Quarantine: q, ranks: c.Ranks, logger: c.Logger}
	if a.logger == nil {
		a.logger = slog.New(slog.DiscardHandler)
	}
	a.sys = actors.NewSystem(nil)
	a.Deps.System = a.sys
	a.Deps.OnFailure = q.OnFailure()
	if err := c.UseDecoder(&a.Pipeline, &a.Deps); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// Close closes the quarantine and shuts the pipelines' actor system
// down; it returns how many keys this run quarantined and the
// quarantine's error, if any.
func (a *Assembly) Close() (int, error) {
	n, err := a.Quarantine.Close()
	a.sys.Shutdown()
	return n, err
}

// StandaloneNode is the standalone source for an in-process sink: every
// rank's pipeline over cat in the order order makes, one failure budget
// for the node (actors.Node.Run delivers).
func (a *Assembly) StandaloneNode(cat dataset.Catalog, order actors.OrderFunc) (*actors.Node, error) {
	d := a.Deps
	d.Order = order
	return actors.NewCatalogNode(a.Pipeline, cat, a.ranks, d)
}

// StandaloneFeed is the standalone source for the feed: it opens a
// rank's pipeline over cat in the order order makes, from the cursor a
// trainer resumes at (delivery.StandaloneCatalog), and says how many
// steps each epoch of a rank has (delivery.Config.EpochSteps).
func (a *Assembly) StandaloneFeed(cat dataset.Catalog, order actors.OrderFunc) (delivery.OpenFunc, func(rank int) int64) {
	d := a.Deps
	d.Order = order
	return delivery.StandaloneCatalog(a.Pipeline, cat, a.ranks, d), delivery.StandaloneSteps(a.Pipeline, cat, a.ranks)
}

// clusterPipeline is a cluster rank's pipeline config: the node's
// decoders shared out among its ranks.
func (a *Assembly) clusterPipeline() actors.Config {
	p := a.Pipeline
	p.Decoders = max(1, p.Decoders/a.ranks)
	return p
}

// ClusterConfig is the cluster source, the lease requester: c (the
// node's id, catalog, callbacks) with the assembly's ranks and
// pipelines, the node's decoders shared out among its ranks, and the
// job's policies on the dataset's store: the packed store reads chunks
// of the job's order (AdoptJobOrder, logged with describe's detail;
// describe may be nil), and the coordinator's share of the job-wide
// store budget is applied (StoreBudget, beside the node's own cap
// ownCap). c's OnJob and OnStoreBudget, if set, are called after.
func (a *Assembly) ClusterConfig(c Config, ownCap float64, describe func() string) Config {
	c.Ranks = a.ranks
	c.Pipeline = a.clusterPipeline()
	c.Deps = a.Deps
	store := a.Deps.Store
	onJob := c.OnJob
	c.OnJob = func(j Job) {
		if AdoptJobOrder(store, j) {
			args := []any{"block", j.Block, "window", j.Window}
			if describe != nil {
				args = append(args, "detail", describe())
			}
			a.logger.Info("reading chunks of the job's order blocks", args...)
		}
		if onJob != nil {
			onJob(j)
		}
	}
	budget := NewStoreBudget(store, ownCap, a.logger)
	onBudget := c.OnStoreBudget
	c.OnStoreBudget = func(rps float64) {
		budget.Apply(rps)
		if onBudget != nil {
			onBudget(rps)
		}
	}
	return c
}
