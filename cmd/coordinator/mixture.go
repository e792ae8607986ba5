package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cmd/internal/config"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
)

// mixtureFlags are --mixture, --mixture-schedule and --mixture-round: a
// weighted mixture of datasets in place of --dataset (docs/mixtures.md),
// which every node is given too.
type mixtureFlags struct {
	spec, schedule string
	// round is --mixture-round, after check the mixture's (a file's
	// round: or the flag); 0: --batch-size.
	round   int
	sources []cluster.MixFlagSource
	phases  []cluster.MixPhase
}

func (m *mixtureFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.spec, "mixture", "", "a weighted mixture of datasets in place of --dataset: FILE.yaml (its sources, schedule and round, docs/mixtures.md) or name=DATASET:WEIGHT,... (DATASET a directory, file://DIR or s3://bucket/prefix; WEIGHT a decimal or a fraction, the weights counting as shares of their sum), or counts per epoch, name=DATASET:N/epoch or :all/epoch (every source's, no schedule); every node is given the same --mixture, --mixture-schedule and --mixture-round; leases are whole rounds, so every global batch holds each source in its exact count (docs/mixtures.md)")
	fs.StringVar(&m.schedule, "mixture-schedule", "", "with --mixture: weights that change during the job, phases separated by ';', each name:weight,...@SAMPLE (SAMPLE counted over the job's stream, epoch x the epoch's positions + offset; the first phase's @0 may be left out; '@SAMPLE linear' ramps to the phase's weights from the previous phase's start, each round exact); the weights then come from here, not --mixture; not with a mixture file, which holds its schedule")
	fs.IntVar(&m.round, "mixture-round", 0, "with --mixture: positions per round, each holding every source in its exact largest-remainder count; leases and quotas are whole rounds (0: --batch-size, so every rank's batch, and so every global batch, is exact); a mixture file may give it (round: N): then leave it out or give the same")
}

func (m *mixtureFlags) on() bool { return m.spec != "" }

// check parses the flags: a file's round: and a --mixture-round given
// (o.given: the command line, the environment or --config) must agree.
func (m *mixtureFlags) check(o *options) []error {
	if !m.on() {
		if m.schedule != "" || m.round != 0 {
			return []error{errors.New("--mixture-schedule and --mixture-round need --mixture")}
		}
		return nil
	}
	var errs []error
	if o.dataset != "" {
		errs = append(errs, errors.New("--mixture is in place of --dataset: give one of them"))
	}
	if o.manifest != "" {
		errs = append(errs, errors.New("--manifest with --mixture: each source finds its own manifest"))
	}
	if m.round < 0 {
		errs = append(errs, fmt.Errorf("--mixture-round %d: need at least 1 (0: --batch-size)", m.round))
	}
	mix, err := config.ParseMixture(config.MixtureFlags{Spec: m.spec, Schedule: m.schedule, Round: m.round, RoundGiven: o.given["mixture-round"]})
	if err != nil {
		return append(errs, err)
	}
	m.sources, m.phases, m.round = mix.Sources, mix.Phases, mix.Round
	return errs
}

// roundOf is the mixture's round: a file's round: or --mixture-round,
// else --batch-size.
func (m *mixtureFlags) roundOf(batch int) int {
	if m.round > 0 {
		return m.round
	}
	return batch
}

// jobSource is what the coordinator read of the job's data: a dataset's
// facts (datasetFacts), or a mixture's over its sources.
type jobSource struct {
	name   string // for the log and the status page
	close  func()
	facts  jobData
	round  int // a mixture's round; 0 for a dataset
	sizes  []cluster.MixSource
	phases []cluster.MixPhase
	digest []dataset.MixtureDigestSource
}

// openJobData reads the facts of --dataset, or of every source of
// --mixture (each as --dataset would be read), without their sample
// lists. A mixture's samples are its positions per epoch (whole rounds),
// its digest dataset.MixtureDigest of its identity and the sources'.
func openJobData(ctx context.Context, o options, sopts s3.Options, dopts dataset.DiscoverOptions, logger *slog.Logger) (jobSource, error) {
	if !o.mixture.on() {
		store, facts, err := datasetFacts(ctx, o, sopts, dopts, logger)
		if err != nil {
			return jobSource{}, err
		}
		return jobSource{name: store.String(), close: func() { storage.Close(store) }, facts: facts}, nil
	}
	js := jobSource{round: o.mixture.roundOf(o.batchSize), phases: o.mixture.phases}
	var stores []storage.Store
	js.close = func() {
		for _, s := range stores {
			storage.Close(s)
		}
	}
	var names []string
	for _, src := range o.mixture.sources {
		names = append(names, src.Name)
	}
	// --exclude lists the mixture's keys, <source>/<key>: each source
	// leaves out its share, as each node's does.
	excl, err := dataset.SplitMixtureExclusions(dopts.Exclude, names)
	if err != nil {
		return jobSource{}, fmt.Errorf("--exclude %s: %w", o.exclude, err)
	}
	names = nil
	for _, src := range o.mixture.sources {
		so := o
		so.dataset = src.Dataset
		sd := dopts
		sd.Exclude = excl[src.Name]
		store, facts, err := datasetFacts(ctx, so, sopts, sd, logger)
		if err != nil {
			js.close()
			return jobSource{}, fmt.Errorf("--mixture source %s: %w", src.Name, err)
		}
		stores = append(stores, store)
		names = append(names, src.Name+"="+store.String())
		js.sizes = append(js.sizes, cluster.MixSource{Name: src.Name, Samples: facts.samples})
		js.digest = append(js.digest, dataset.MixtureDigestSource{Name: src.Name, Samples: facts.samples, Digest: facts.digest})
		js.facts.packed = js.facts.packed || facts.packed
		logger.Info("mixture source", "source", src.Name, "dataset", store.String(), "samples", facts.samples, "packed", facts.packed, "digest", facts.digest)
	}
	js.name = "mixture(" + strings.Join(names, ", ") + ")"
	// The identity (and Len) do not depend on the seed, block or window.
	m, err := js.mixture(0, 1, 1)
	if err != nil {
		js.close()
		return jobSource{}, err
	}
	js.facts.samples = m.Len()
	js.facts.digest = dataset.MixtureDigest(m.Identity(), js.digest)
	counts, _, _ := m.Counts(0)
	logger.Info("mixture", "sources", len(js.sizes), "round", js.round, "positions_per_epoch", m.Len(), "samples", m.Indices(),
		"first_round_counts", fmt.Sprint(counts), "phases", len(o.mixture.phases), "digest", js.facts.digest)
	return js, nil
}

// mixture is the job's mixture under seed, block and window.
func (js jobSource) mixture(seed uint64, block, window int) (*cluster.Mixture, error) {
	return cluster.NewMixture(cluster.MixSpec{Seed: seed, Block: block, Window: window, Round: js.round, Sources: js.sizes, Phases: js.phases})
}

// alignShard fits the job's shard size to the mixture's rounds
// (cluster.Config.Align): a shard size not given is rounded up to whole
// rounds, one given must be whole rounds already.
func (js jobSource) alignShard(shard int, given bool) (int, error) {
	if js.round <= 1 || shard%js.round == 0 {
		return shard, nil
	}
	if given {
		return 0, fmt.Errorf("--shard-size %d with --mixture: leases are whole rounds of %d positions; give a multiple of it", shard, js.round)
	}
	return (shard + js.round - 1) / js.round * js.round, nil
}
