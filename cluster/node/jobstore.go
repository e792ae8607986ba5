package node

import (
	"log/slog"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// AdoptJobOrder makes a packed dataset's store read chunks of the job's
// order: its Block and Window, which every node must share and which
// only the coordinator's job tells a cluster node (until then samples
// are read one by one). The store is the dataset's *dataset.PackedStore
// or a mixture's, whose packed sources each read chunks of their own
// orders' blocks, of the job's Block and Window too
// (dataset.PackedStores). It reports whether anything changed; a store
// that is not packed, or already reads the job's blocks, is left alone.
func AdoptJobOrder(store storage.Store, j Job) bool {
	changed := false
	for _, ps := range dataset.PackedStores(store) {
		if ps.Block() == j.Block && ps.Window() == j.Window {
			continue
		}
		ps.SetBlock(j.Block)
		ps.SetWindow(j.Window)
		changed = true
	}
	return changed
}

// StoreBudget applies the node's share of the job-wide store request
// budget, as the coordinator mails it, to the dataset's store
// (storage.SetRequestBudget): once per change, since the coordinator
// mails the same share again now and then. A mixture's store (a
// dataset.MixtureCatalog's) reads several stores, each with its own
// request rate: the share is split among the sources whose stores take
// a budget (S3), in proportion to their BudgetWeight (equal parts when
// none is set), so that together they keep to the node's share
// (splitBudget). A store with no request rate to limit (not S3; a
// mixture with no S3 source) is warned about. For Config.OnStoreBudget:
// the actor's goroutine only.
type StoreBudget struct {
	store  storage.Store
	ownCap float64 // the node's own budget (--store-rps), for the log
	logger *slog.Logger
	last   float64 // the share in force
}

// NewStoreBudget applies shares to store, logging to logger (nil: none).
func NewStoreBudget(store storage.Store, ownCap float64, logger *slog.Logger) *StoreBudget {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &StoreBudget{store: store, ownCap: ownCap, logger: logger}
}

// Apply applies a share of rps requests a second (0: none); a resend of
// the share in force changes nothing.
func (b *StoreBudget) Apply(rps float64) {
	if rps == b.last {
		return // a resend
	}
	b.last = rps
	if c := dataset.MixtureOf(b.store); c != nil {
		b.applyMixture(c, rps)
		return
	}
	if !storage.SetRequestBudget(b.store, rps) {
		b.logger.Warn("the coordinator gives a job-wide store budget, but this dataset's store has no request rate to limit (not S3)", "store_rps", rps)
		return
	}
	b.logger.Info("store budget: the job's share for this node", "store_rps", rps, "own_cap", b.ownCap)
}

// applyMixture splits the node's share among the mixture's sources that
// take a budget.
func (b *StoreBudget) applyMixture(c *dataset.MixtureCatalog, rps float64) {
	parts := c.RateParts(rps)
	if len(parts) == 0 {
		b.logger.Warn("the coordinator gives a job-wide store budget, but no source of this mixture has a request rate to limit (none is S3)", "store_rps", rps)
		return
	}
	for _, p := range parts {
		storage.SetRequestBudget(p.Source.Store, p.RPS)
	}
	b.logger.Info("store budget: the job's share for this node", "store_rps", rps, "own_cap", b.ownCap,
		"sources", dataset.FormatRateParts(parts))
}
