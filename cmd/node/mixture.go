package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"strings"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/node"
	"github.com/longshore/longshore/cmd/internal/config"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/observe"
	"github.com/longshore/longshore/storage"
)

// mixtureFlags are --mixture, --mixture-schedule and --mixture-round: a
// weighted mixture of datasets in place of --dataset (docs/mixtures.md),
// standalone or in cluster mode (the coordinator's flags the same).
type mixtureFlags struct {
	spec     string // --mixture name=URL[:weight or :N/epoch],... or FILE.yaml
	schedule string // --mixture-schedule
	// round is --mixture-round, after parse the mixture's (a file's
	// round: or the flag); 0: the batch size (in cluster mode the job's).
	round    int
	roundSet bool // --mixture-round was given (not its default)
	sources  []cluster.MixFlagSource
	sched    []cluster.MixPhase
}

func (m *mixtureFlags) on() bool { return m.spec != "" }

const mixtureUsage = "a weighted mixture of datasets in place of --dataset: FILE.yaml (sources, schedule and round; docs/mixtures.md) or name=DATASET:WEIGHT,... (DATASET a directory, file://DIR or s3://bucket/prefix, each with its own layout; WEIGHT a decimal or a fraction, the weights counting as shares of their sum), e.g. web=s3://b/web:0.7,books=/data/books:0.3, or counts per epoch, name=DATASET:N/epoch or :all/epoch (every source's, no schedule), e.g. books=/data/books:all/epoch,web=s3://b/web:100000/epoch; every round of --mixture-round samples holds each source in its exact largest-remainder count and each source's samples come exactly once per that source's epoch; in cluster mode give the coordinator and every node the same (docs/mixtures.md)"

// parse reads --mixture and checks it with the schedule and the round (a
// file's round: and a --mixture-round given must agree).
func (m *mixtureFlags) parse() error {
	if m.spec == "" {
		if m.schedule != "" || m.round != 0 {
			return errors.New("--mixture-schedule and --mixture-round need --mixture")
		}
		return nil
	}
	if m.round < 0 {
		return fmt.Errorf("--mixture-round %d: need at least 1 (0: --batch-size)", m.round)
	}
	mix, err := config.ParseMixture(config.MixtureFlags{Spec: m.spec, Schedule: m.schedule, Round: m.round, RoundGiven: m.roundSet})
	if err != nil {
		return err
	}
	m.sources, m.sched, m.round = mix.Sources, mix.Phases, mix.Round
	return nil
}

// exclusions splits --exclude, a list of the mixture's keys
// ("<source>/<key>", as --quarantine writes them), into each source's
// own: every source is opened with its share (an empty one without
// --exclude).
func (m *mixtureFlags) exclusions(o options) (map[string]dataset.Exclusions, error) {
	ex, err := o.faults.exclusions()
	if err != nil {
		return nil, err
	}
	names := make([]string, len(m.sources))
	for i, s := range m.sources {
		names[i] = s.Name
	}
	out, err := dataset.SplitMixtureExclusions(ex, names)
	if err != nil {
		return nil, fmt.Errorf("--exclude %s: %w", o.faults.exclude, err)
	}
	return out, nil
}

// phases is the schedule: --mixture-schedule's, else --mixture's weights
// from sample 0 on.
func (m *mixtureFlags) phases() ([]cluster.MixPhase, error) { return m.sched, nil }

// openMixture opens every source of --mixture as --dataset is opened
// (openStandalone: a packed source read in chunks of its own order's
// blocks, an indexed manifest piece by piece) and joins them: one index
// space (dataset.MixtureCatalog) drawn by the mixture (cluster.Mixture)
// with the run's seed, block and window.
func openMixture(ctx context.Context, o options, logger *slog.Logger) (standaloneData, error) {
	var parts []standaloneData
	closeAll := func() {
		for _, p := range parts {
			p.close()
		}
	}
	var srcs []dataset.MixtureSource
	var sizes []cluster.MixSource
	anyPacked := false
	excl, err := o.mixture.exclusions(o)
	if err != nil {
		return standaloneData{}, err
	}
	for _, s := range o.mixture.sources {
		so := o
		so.dataset = s.Dataset
		so.mixture = mixtureFlags{}
		so.faults.exclude, so.faults.excludeKeys = "", excl[s.Name]
		d, err := openStandalone(ctx, so, logger)
		if err != nil {
			closeAll()
			return standaloneData{}, fmt.Errorf("--mixture source %s: %w", s.Name, err)
		}
		parts = append(parts, d)
		srcs = append(srcs, dataset.MixtureSource{Name: s.Name, Catalog: d.cat, Store: d.store})
		sizes = append(sizes, cluster.MixSource{Name: s.Name, Samples: d.cat.Len()})
		anyPacked = anyPacked || d.packed()
	}
	phases, err := o.mixture.phases()
	if err != nil {
		closeAll()
		return standaloneData{}, err
	}
	block := o.orderBlock(anyPacked)
	round := o.mixture.round
	if round == 0 {
		round = o.batchSize
	}
	mix, err := cluster.NewMixture(cluster.MixSpec{Seed: o.seed, Block: block, Window: cluster.EffectiveWindow(block, o.window),
		Round: round, Sources: sizes, Phases: phases})
	if err != nil {
		closeAll()
		return standaloneData{}, fmt.Errorf("--mixture: %w", err)
	}
	for i, w := range budgetWeights(phases, sizes) {
		srcs[i].BudgetWeight = w // the split of --store-rps (capMixture)
	}
	cat, err := dataset.NewMixtureCatalog(srcs, mix.Identity())
	if err != nil {
		closeAll()
		return standaloneData{}, fmt.Errorf("--mixture: %w", err)
	}
	capMixture(cat, o.faults.maxRequestRate, logger)
	return standaloneData{store: cat.Store(), cat: mixturePositions{cat, mix.Len()}, mix: mix, parts: parts, mixPacked: anyPacked}, nil
}

// mixturePositions is a mixture's catalog whose Len is the mixture's
// epoch, whole rounds (cluster.Mixture.Len): what the feeders and the
// feed count an epoch's positions by. Its samples are the catalog's: the
// mixture maps every position to a global index below the sources'
// samples together.
type mixturePositions struct {
	*dataset.MixtureCatalog
	n int64
}

func (p mixturePositions) Len() int64 { return p.n }

// describeMixture prints the mixture's sources and its first round.
func describeMixture(w io.Writer, d standaloneData) {
	m := d.mix
	counts, _, _ := m.Counts(0)
	for s := 0; s < m.Sources(); s++ {
		fmt.Fprintf(w, "longshore-node: mixture source %s: %s: %d samples (indices [%d, %d)), %d of each round of %d at the start\n",
			m.Name(s), d.parts[s].store, m.Size(s), m.Offset(s), m.Offset(s)+m.Size(s), counts[s], m.Round())
	}
}

// mixtureOrder is the mixture's epochs as the feeders' order.
func mixtureOrder(m *cluster.Mixture) actors.OrderFunc {
	return func(_ uint64, epoch int, n int64) actors.Order {
		if n != m.Len() {
			panic(fmt.Sprintf("longshore-node: a mixture of %d samples asked for an order of %d", m.Len(), n))
		}
		return m.Epoch(epoch)
	}
}

// clusterMixture is a cluster node's --mixture: its sources opened as
// --dataset is in cluster mode, one catalog over them; the mixture
// itself is made for the coordinator's job (its seed, block, window and,
// without --mixture-round, batch size), whose digest must be the
// catalog's under that mixture's identity.
type clusterMixture struct {
	cat    *dataset.MixtureCatalog
	sizes  []cluster.MixSource
	phases []cluster.MixPhase
	round  int // --mixture-round (or a file's round:); 0: the job's batch size
}

// openClusterData opens the node's dataset in cluster mode: --dataset
// (openData; mix nil) or every source of --mixture, each as --dataset
// would be (mix set, store its catalog's store, ds and indexed nil).
// Until the job's order is known a packed source's samples are read one
// by one; then each packed source reads chunks of its own order's blocks,
// of the job's block and window (node.AdoptJobOrder, through the
// mixture's store).
func openClusterData(ctx context.Context, o options, logger *slog.Logger) (storage.Store, *dataset.Dataset, *dataset.IndexedManifest, dataset.PackPlan, *clusterMixture, error) {
	if !o.mixture.on() {
		store, ds, indexed, plan, err := openData(ctx, o, 0, 0, logger)
		return store, ds, indexed, plan, nil, err
	}
	var srcs []dataset.MixtureSource
	m := &clusterMixture{phases: o.mixture.sched, round: o.mixture.round}
	closeAll := func() {
		for _, s := range srcs {
			if x, ok := s.Catalog.(*dataset.IndexedManifest); ok {
				x.Close()
			}
			storage.Close(s.Store)
		}
	}
	excl, err := o.mixture.exclusions(o)
	if err != nil {
		return nil, nil, nil, dataset.PackPlan{}, nil, err
	}
	for _, s := range o.mixture.sources {
		so := o
		so.dataset, so.mixture = s.Dataset, mixtureFlags{}
		so.faults.exclude, so.faults.excludeKeys = "", excl[s.Name]
		store, ds, indexed, _, err := openData(ctx, so, 0, 0, logger)
		if err != nil {
			closeAll()
			return nil, nil, nil, dataset.PackPlan{}, nil, fmt.Errorf("--mixture source %s: %w", s.Name, err)
		}
		var cat dataset.Catalog = indexed
		if indexed == nil {
			cat = dataset.DatasetCatalog(ds)
		}
		srcs = append(srcs, dataset.MixtureSource{Name: s.Name, Catalog: cat, Store: store})
		m.sizes = append(m.sizes, cluster.MixSource{Name: s.Name, Samples: cat.Len()})
		logger.Info("mixture source", "source", s.Name, "dataset", store.String(), "samples", cat.Len())
	}
	for i, w := range budgetWeights(o.mixture.sched, m.sizes) {
		srcs[i].BudgetWeight = w // the split of the coordinator's budget (node.StoreBudget) and of --store-rps (capMixture)
	}
	// The identity is the job's mixture's (mixture); the catalog's own
	// digest is not the one checked.
	cat, err := dataset.NewMixtureCatalog(srcs, "")
	if err != nil {
		closeAll()
		return nil, nil, nil, dataset.PackPlan{}, nil, fmt.Errorf("--mixture: %w", err)
	}
	capMixture(cat, o.faults.maxRequestRate, logger)
	m.cat = cat
	return cat.Store(), nil, nil, dataset.PackPlan{}, m, nil
}

// capMixture splits the node's own cap, --store-rps (--max-request-rate;
// 0: none), among the mixture's S3 sources by their weights
// (dataset.MixtureCatalog.RateParts), so that the node keeps to it
// together: each source was opened as --dataset is, with the whole cap
// (the few requests of opening it were made under that).
func capMixture(cat *dataset.MixtureCatalog, rps float64, logger *slog.Logger) {
	if rps <= 0 {
		return
	}
	parts := cat.RateParts(rps)
	for _, p := range parts {
		storage.SetRequestCap(p.Source.Store, p.RPS)
	}
	if len(parts) > 0 {
		logger.Info("store cap: --store-rps split among the mixture's S3 sources", "store_rps", rps, "sources", dataset.FormatRateParts(parts))
	}
}

// mixture is node.Config.Mixture: the job's mixture, and the digest the
// coordinator's job must carry for it.
func (m *clusterMixture) mixture(j node.Job) (*cluster.Mixture, string, error) {
	round := m.round
	if round == 0 {
		round = j.BatchSize
	}
	mix, err := cluster.NewMixture(cluster.MixSpec{Seed: j.Seed, Block: max(j.Block, 1), Window: max(j.Window, 1),
		Round: round, Sources: m.sizes, Phases: m.phases})
	if err != nil {
		return nil, "", fmt.Errorf("--mixture: %w", err)
	}
	return mix, m.cat.DigestFor(mix.Identity()), nil
}

// mixtureCounts reads the per-source counts of the mixture store reads,
// for the metrics (longshore_mixture_samples_total); nil without one.
func mixtureCounts(store storage.Store) func() []observe.SourceCount {
	c := dataset.MixtureOf(store)
	if c == nil {
		return nil
	}
	return func() []observe.SourceCount {
		var out []observe.SourceCount
		for _, m := range c.Counts() {
			out = append(out, observe.SourceCount{Source: m.Source, Samples: m.Samples})
		}
		return out
	}
}

// mixtureSummary is the summary's per-source counts; nil without a
// mixture.
func mixtureSummary(store storage.Store) []dataset.MixtureCount {
	if c := dataset.MixtureOf(store); c != nil {
		return c.Counts()
	}
	return nil
}

// printMixture prints the summary's per-source counts and shares.
func printMixture(w io.Writer, counts []dataset.MixtureCount) {
	var total int64
	for _, c := range counts {
		total += c.Samples
	}
	for _, c := range counts {
		share := 0.0
		if total > 0 {
			share = 100 * float64(c.Samples) / float64(total)
		}
		fmt.Fprintf(w, "  mixture       %s: %d samples (%.1f%%)\n", c.Source, c.Samples, share)
	}
}

// budgetWeights are the sources' parts of the node's share of the job's
// store request budget (dataset.MixtureSource.BudgetWeight): each
// source's largest share of the draws over the schedule's phases (its
// weight, or its count per epoch, over their sum), so that a source
// that a later phase draws more of has its part from the start. They
// need not sum to 1: the budget is split in proportion to them. Nil if
// a weight does not read (the mixture's own checks report it).
func budgetWeights(phases []cluster.MixPhase, sizes []cluster.MixSource) []float64 {
	var out []float64
	for _, ph := range phases {
		if len(ph.Weights) != len(sizes) {
			return nil
		}
		w := make([]float64, len(sizes))
		var total float64
		for i, x := range ph.Weights {
			if cluster.IsMixCount(x) {
				n, err := cluster.ParseMixCount(x)
				if err != nil {
					return nil
				}
				if n == cluster.CountAll {
					n = sizes[i].Samples
				}
				w[i] = float64(n)
			} else {
				r, ok := new(big.Rat).SetString(strings.TrimSpace(x))
				if !ok {
					return nil
				}
				w[i], _ = r.Float64()
			}
			total += max(w[i], 0)
		}
		if total <= 0 {
			continue
		}
		if out == nil {
			out = make([]float64, len(sizes))
		}
		for i := range w {
			out[i] = max(out[i], max(w[i], 0)/total)
		}
	}
	return out
}
