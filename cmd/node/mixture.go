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
	"github.com/longshore/longshore/dataset"
)

// mixtureFlags are --mixture, --mixture-schedule and --mixture-round: a
// weighted mixture of datasets in place of --dataset (docs/mixtures.md).
type mixtureFlags struct {
	spec     string // --mixture name=URL[:weight],...
	schedule string // --mixture-schedule
	round    int    // --mixture-round; 0: --batch-size
	sources  []mixtureSourceFlag
}

// mixtureSourceFlag is one source of --mixture.
type mixtureSourceFlag struct {
	name, url, weight string // weight "" when --mixture-schedule gives them
}

func (m *mixtureFlags) on() bool { return m.spec != "" }

const mixtureUsage = "a weighted mixture of datasets in place of --dataset: name=DATASET:WEIGHT,... (DATASET a directory, file://DIR or s3://bucket/prefix, each with its own layout; WEIGHT a decimal or a fraction, the weights counting as shares of their sum), e.g. web=s3://b/web:0.7,books=/data/books:0.3; every round of --mixture-round samples holds each source in its exact largest-remainder count and each source's samples come exactly once per that source's epoch (docs/mixtures.md)"

// parse reads --mixture and checks it with the schedule; names are the
// sources' in order.
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
	m.sources = nil
	for _, part := range strings.Split(m.spec, ",") {
		name, rest, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || name == "" || rest == "" {
			return fmt.Errorf("--mixture %q: %q: want name=DATASET:WEIGHT", m.spec, part)
		}
		src := mixtureSourceFlag{name: name, url: rest}
		if i := strings.LastIndex(rest, ":"); i >= 0 {
			if _, ok := new(big.Rat).SetString(rest[i+1:]); ok {
				src.url, src.weight = rest[:i], rest[i+1:]
			}
		}
		if src.url == "" {
			return fmt.Errorf("--mixture: source %q names no dataset", name)
		}
		if m.schedule == "" && src.weight == "" {
			return fmt.Errorf("--mixture: source %q has no weight (name=DATASET:WEIGHT), and there is no --mixture-schedule", name)
		}
		if m.schedule != "" && src.weight != "" {
			return fmt.Errorf("--mixture: source %q has a weight and --mixture-schedule gives the weights: give them in one place", name)
		}
		m.sources = append(m.sources, src)
	}
	_, err := m.phases()
	return err
}

func (m *mixtureFlags) names() []string {
	out := make([]string, len(m.sources))
	for i, s := range m.sources {
		out[i] = s.name
	}
	return out
}

// phases is the schedule: --mixture-schedule's, else --mixture's weights
// from sample 0 on.
func (m *mixtureFlags) phases() ([]cluster.MixPhase, error) {
	if m.schedule != "" {
		p, err := cluster.ParseMixSchedule(m.schedule, m.names())
		if err != nil {
			return nil, fmt.Errorf("--mixture-schedule: %w", err)
		}
		return p, nil
	}
	w := make([]string, len(m.sources))
	for i, s := range m.sources {
		w[i] = s.weight
	}
	return []cluster.MixPhase{{At: 0, Weights: w}}, nil
}

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
	for _, s := range o.mixture.sources {
		so := o
		so.dataset = s.url
		so.mixture = mixtureFlags{}
		d, err := openStandalone(ctx, so, logger)
		if err != nil {
			closeAll()
			return standaloneData{}, fmt.Errorf("--mixture source %s: %w", s.name, err)
		}
		parts = append(parts, d)
		srcs = append(srcs, dataset.MixtureSource{Name: s.name, Catalog: d.cat, Store: d.store})
		sizes = append(sizes, cluster.MixSource{Name: s.name, Samples: d.cat.Len()})
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
	cat, err := dataset.NewMixtureCatalog(srcs, mix.Identity())
	if err != nil {
		closeAll()
		return standaloneData{}, fmt.Errorf("--mixture: %w", err)
	}
	return standaloneData{store: cat.Store(), cat: cat, mix: mix, parts: parts, mixPacked: anyPacked}, nil
}

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
