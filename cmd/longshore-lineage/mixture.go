package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cmd/internal/config"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/storage"
)

// mixtureJob is a standalone --mixture job as the node opens it
// (cmd/node's openMixture): every source opened as --dataset is, with its
// share of --exclude; one index space over them (dataset.MixtureCatalog)
// drawn by the mixture (cluster.Mixture) with the job's seed, block,
// window and round.
type mixtureJob struct {
	mix    *cluster.Mixture
	cat    *dataset.MixtureCatalog
	srcs   []*dataset.Dataset // in the mixture's order
	seed   uint64
	block  int
	window int // effective
}

// mixParams are what draws a mixture besides its sources: a standalone
// job's from its flags, a cluster job's from its journal.
type mixParams struct {
	seed          uint64
	block, window int
	blockSet      bool // block given; else cluster.DefaultBlock of the sources
	round         int  // 0: batch
	batch         int
}

func openMixtureJob(ctx context.Context, o options, mp mixParams) (*mixtureJob, error) {
	parsed, err := config.ParseMixture(config.MixtureFlags{Spec: o.mixture, Schedule: o.mixtureSchedule, Round: o.mixtureRound, RoundGiven: o.mixtureRoundSet})
	if err != nil {
		return nil, usageError{err}
	}
	flagSrcs, phases := parsed.Sources, parsed.Phases
	ex, err := readExclusions(o)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(flagSrcs))
	for i, s := range flagSrcs {
		names[i] = s.Name
	}
	split, err := dataset.SplitMixtureExclusions(ex, names)
	if err != nil {
		return nil, fmt.Errorf("--exclude %s: %w", o.exclude, err)
	}
	m := &mixtureJob{}
	var msrcs []dataset.MixtureSource
	var sizes []cluster.MixSource
	packed := false
	for _, s := range flagSrcs {
		st, ds, err := openSource(ctx, o, s.Dataset, split[s.Name])
		if err != nil {
			for _, ms := range msrcs {
				storage.Close(ms.Store)
			}
			return nil, fmt.Errorf("--mixture source %s: %w", s.Name, err)
		}
		m.srcs = append(m.srcs, ds)
		msrcs = append(msrcs, dataset.MixtureSource{Name: s.Name, Catalog: dataset.DatasetCatalog(ds), Store: st})
		sizes = append(sizes, cluster.MixSource{Name: s.Name, Samples: int64(len(ds.Samples))})
		packed = packed || ds.Packed()
	}
	closeAll := func() {
		for _, ms := range msrcs {
			storage.Close(ms.Store)
		}
	}
	m.block = mp.block
	if !mp.blockSet {
		m.block = cluster.DefaultBlock(packed) // the node's orderBlock
	}
	round := parsed.Round // a file's round: or --mixture-round
	if round == 0 {
		round = mp.batch
	}
	m.seed, m.window = mp.seed, cluster.EffectiveWindow(m.block, mp.window)
	if m.mix, err = cluster.NewMixture(cluster.MixSpec{Seed: m.seed, Block: m.block, Window: m.window,
		Round: round, Sources: sizes, Phases: phases}); err != nil {
		closeAll()
		return nil, usageError{fmt.Errorf("--mixture: %w", err)}
	}
	if m.cat, err = dataset.NewMixtureCatalog(msrcs, m.mix.Identity()); err != nil {
		closeAll()
		return nil, usageError{fmt.Errorf("--mixture: %w", err)}
	}
	return m, nil
}

// job is the Job line of a mixture job.
func (m *mixtureJob) job(o options) Job {
	jm := &JobMixture{Spec: o.mixture, Schedule: o.mixtureSchedule, Round: m.mix.Round(), Positions: m.mix.Len()}
	excluded := 0
	for s, ms := range m.cat.Sources() {
		ds := m.srcs[s]
		jm.Sources = append(jm.Sources, JobSource{Name: ms.Name, Dataset: ms.Store.String(), Samples: m.mix.Size(s),
			Excluded: ds.Excluded, Offset: m.mix.Offset(s), Packed: ds.Packed()})
		excluded += ds.Excluded
	}
	return Job{Mode: "standalone", Samples: m.mix.Indices(), Excluded: excluded, Packed: slices.ContainsFunc(m.srcs, (*dataset.Dataset).Packed),
		Seed: m.seed, Block: m.block, Window: m.window, Ranks: o.ranks, BatchSize: o.batchSize,
		Epochs: o.epochs, DropLast: o.dropLast, Transform: o.transform, DType: o.dtype, Size: o.size, Media: o.media, Mixture: jm}
}

// findKey returns the global index of a mixture key, <source>/<key>
// (the key as the source's own findKey takes it).
func (m *mixtureJob) findKey(key string) (int64, error) {
	s, local, ok := m.cat.SourceOfKey(key)
	if !ok {
		names := make([]string, 0, m.mix.Sources())
		for i := range m.mix.Sources() {
			names = append(names, m.mix.Name(i))
		}
		return 0, fmt.Errorf("key %q names no source of the mixture: a mixture's key is <source>/<key>, sources %v", key, names)
	}
	i, err := findKey(m.srcs[s], local)
	if err != nil {
		return 0, fmt.Errorf("source %s: %w", m.mix.Name(s), err)
	}
	return m.mix.Offset(s) + i, nil
}

// sample is what lineage says of one sample of a step of epoch e, whose
// positions are ep: the catalog's record of it (its mixture key, label
// and object), its source, its index there and its draw's source epoch,
// its fields (its source's), its seed and, with tr, its transform.
func (m *mixtureJob) sample(ctx context.Context, ep *cluster.MixEpoch, tr *transformer, seed uint64, epoch int, g cluster.LineageSample) Sample {
	out := Sample{Slot: g.Slot, Offset: g.Offset, OrderPos: g.OrderPos, Index: g.Index, Pad: g.Pad, Seed: decode.SampleSeed(seed, epoch, g.Index)}
	d := ep.DrawAt(g.OrderPos % ep.Len()) // a cluster's padding lies past Len, on the epoch's start
	local, se := d.Local, d.SourceEpoch(m.mix)
	out.Source, out.SourceIndex, out.SourceEpoch = m.mix.Name(d.Source), &local, &se
	smp, object, err := m.cat.Sample(ctx, g.Index)
	if err != nil {
		out.Error = fmt.Sprintf("catalog: %v", err)
		return out
	}
	out.Key, out.Label, out.Bytes = smp.Key, smp.Label, smp.Size
	if classes := m.cat.Classes(); int(smp.Label) >= 0 && int(smp.Label) < len(classes) {
		out.Class = classes[smp.Label]
	}
	if object != "" {
		out.Object, out.ObjectOffset = object, smp.Offset
	}
	out.Fields = fieldsOf(m.srcs[d.Source], local)
	if tr != nil {
		tr.fill(ctx, m.cat.Store(), g.Index, smp.Key, &out)
	}
	return out
}

// answerMixture answers for a standalone --mixture job: the feeders take
// an epoch's positions (cluster.Mixture.Epoch, Len positions) as they
// take an order's, so cluster.Lineage over those positions gives each
// step; a key's places are the positions that drew it (a source drawn
// beyond its share repeats samples within an epoch, one drawn below it
// leaves some out: cluster.Mixture.PositionsOf, the draws inverted),
// each delivered where cluster.Lineage.Hits says.
func answerMixture(ctx context.Context, o options) (*Answer, error) {
	m, err := openMixtureJob(ctx, o, mixParams{seed: o.seed, block: o.block, blockSet: o.blockSet, window: o.window, batch: o.batchSize})
	if err != nil {
		return nil, err
	}
	defer m.cat.Close()
	l := cluster.Lineage{Samples: m.mix.Len(), World: o.ranks, Batch: int64(o.batchSize), DropLast: o.dropLast}
	a := &Answer{Job: m.job(o)}
	a.Job.StreamLen, a.Job.Steps = l.StreamLen(), l.Steps()

	if o.key != "" {
		idx, err := m.findKey(o.key)
		if err != nil {
			return nil, usageError{fmt.Errorf("--mixture: %w", err)}
		}
		a.Key, a.Index = o.key, &idx
		first, last := 0, o.epochs-1
		if o.epochSet {
			first, last = o.epoch, o.epoch
		}
		for e := first; e <= last; e++ {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			var hits []Appearance
			for _, p := range m.mix.PositionsOf(e, idx) {
				for _, h := range l.Hits(p) {
					hits = append(hits, Appearance{Epoch: e, Rank: h.Rank, Step: h.Step, Slot: h.Slot, Offset: h.Offset, Pad: h.Pad})
				}
			}
			slices.SortFunc(hits, func(x, y Appearance) int {
				return cmp.Or(cmp.Compare(x.Step, y.Step), cmp.Compare(x.Rank, y.Rank), cmp.Compare(x.Slot, y.Slot))
			})
			a.Appearances = append(a.Appearances, hits...)
		}
		return a, nil
	}

	if o.steps.Last >= l.Steps() {
		return nil, usageError{fmt.Errorf("steps %d-%d: each rank has steps 0..%d of an epoch (%d samples a rank, batch size %d%s)",
			o.steps.First, o.steps.Last, l.Steps()-1, l.StreamLen(), o.batchSize, map[bool]string{true: ", last short batch dropped"}[o.dropLast])}
	}
	tr, err := openTransformer(o, a)
	if err != nil {
		return nil, err
	}
	if tr != nil {
		defer tr.close()
	}
	ep := m.mix.Epoch(o.epoch)
	for s := o.steps.First; s <= o.steps.Last; s++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		got, err := l.Step(ep, o.rank, s)
		if err != nil {
			return nil, err
		}
		step := Step{Epoch: o.epoch, Rank: o.rank, Step: s}
		for _, g := range got {
			step.Samples = append(step.Samples, m.sample(ctx, ep, tr, o.seed, o.epoch, g))
		}
		a.Steps = append(a.Steps, step)
	}
	return a, nil
}
