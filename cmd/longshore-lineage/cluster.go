package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/journal"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
	"github.com/longshore/longshore/storage/stores"
)

// openJournal reads the newest generation of a cluster job's journal.
func openJournal(ctx context.Context, o options) (storage.Store, *journal.Journal, journal.Entry, error) {
	sopts := s3.DefaultOptions()
	if o.s3Endpoint != "" {
		sopts.Endpoint = o.s3Endpoint
	}
	st, err := stores.Open(ctx, o.checkpoint, sopts)
	if err != nil {
		return nil, nil, journal.Entry{}, fmt.Errorf("--checkpoint %s: %w", o.checkpoint, err)
	}
	j, err := journal.Open(ctx, journal.Config{Store: st})
	if err != nil {
		storage.Close(st)
		return nil, nil, journal.Entry{}, fmt.Errorf("--checkpoint %s: %w", o.checkpoint, err)
	}
	e, err := j.Latest(ctx)
	if err != nil {
		storage.Close(st)
		return nil, nil, journal.Entry{}, fmt.Errorf("--checkpoint %s: %w", o.checkpoint, err)
	}
	return st, j, e, nil
}

// answerCluster answers for a cluster job from its journal: the order
// (seed, block, window), the batch size and, per epoch, what each rank
// session committed (its trails): a step is named by its rank and number,
// and comes with the session that delivered it. Only committed history
// is answered: steps delivered after a session's last commit were
// delivered again, under the same numbers, by a later session.
func answerCluster(ctx context.Context, o options) (*Answer, error) {
	jst, j, e, err := openJournal(ctx, o)
	if err != nil {
		return nil, err
	}
	defer storage.Close(jst)
	batch := int64(e.BatchSize)
	if batch == 0 { // a journal from before identities
		batch = int64(o.batchSize)
	}
	if o.mixture != "" {
		return answerClusterMixture(ctx, o, j, e, batch)
	}
	st, ds, err := openDataset(ctx, o)
	if err != nil {
		return nil, err
	}
	defer storage.Close(st)
	n := int64(len(ds.Samples))
	if n != e.State.Samples {
		return nil, usageError{fmt.Errorf("dataset %s has %d samples, the journal's job %d: give the coordinator's --dataset (and --exclude)", o.dataset, n, e.State.Samples)}
	}
	if e.Digest != "" {
		if d := dataset.ManifestDigest(ds); d != e.Digest {
			return nil, usageError{fmt.Errorf("dataset %s has digest %s, the journal's job %s: give the coordinator's --dataset (and --exclude)", o.dataset, d, e.Digest)}
		}
	}
	s := e.State
	a := &Answer{Job: Job{Mode: "cluster", Checkpoint: o.checkpoint, Generation: e.Gen, Dataset: o.dataset, Samples: n,
		Excluded: ds.Excluded, Packed: ds.Packed(), Seed: s.Seed, Block: s.Block, Window: cluster.EffectiveWindow(s.Block, s.Window),
		BatchSize: int(batch), Epochs: e.Epochs, Transform: o.transform, DType: o.dtype, Size: o.size, Media: o.media}}
	return answerClusterSteps(ctx, o, j, e, batch, a, clusterData{
		sampler: func(epoch int) cluster.Sampler { return cluster.NewOrder(s.Seed, epoch, n, s.Block, s.Window) },
		positions: func(epoch int, idx int64) []int64 {
			return []int64{cluster.NewOrder(s.Seed, epoch, n, s.Block, s.Window).PositionOf(idx)}
		},
		find: func(key string) (int64, error) {
			idx, err := findKey(ds, key)
			if err != nil {
				return 0, fmt.Errorf("dataset %s: %w", o.dataset, err)
			}
			return idx, nil
		},
		sample: func(tr *transformer, epoch int, _ cluster.Sampler, g cluster.LineageSample) Sample {
			return sampleOf(ctx, st, ds, tr, s.Seed, epoch, g)
		},
	})
}

// clusterData is how a cluster job's positions become samples: one
// dataset's order, or a mixture's epochs (a cluster.Sampler each).
type clusterData struct {
	sampler func(epoch int) cluster.Sampler
	find    func(key string) (int64, error) // a key's index
	// positions are the epoch's positions that hold sample idx, padding
	// aside.
	positions func(epoch int, idx int64) []int64
	sample    func(tr *transformer, epoch int, s cluster.Sampler, g cluster.LineageSample) Sample
}

// answerClusterSteps answers the question from the journal's trails,
// the positions mapped to samples by d.
func answerClusterSteps(ctx context.Context, o options, j *journal.Journal, e journal.Entry, batch int64, a *Answer, d clusterData) (*Answer, error) {
	s := e.State
	lineageOf := func(epoch int) (cluster.EpochLineage, error) {
		ts, err := j.Trails(ctx, e, epoch)
		return cluster.EpochLineage{Batch: batch, Trails: ts}, err
	}
	started := len(s.Epochs)
	if o.epochSet && (o.epoch < 0 || o.epoch >= max(started, e.Epochs)) {
		return nil, usageError{fmt.Errorf("--epoch %d: the job has epochs 0..%d (%d started)", o.epoch, max(started, e.Epochs)-1, started)}
	}

	if o.key != "" {
		idx, err := d.find(o.key)
		if err != nil {
			return nil, usageError{err}
		}
		a.Key, a.Index = o.key, &idx
		first, last := 0, started-1
		if o.epochSet {
			first, last = o.epoch, o.epoch
		}
		var notes []string
		uncertain := false
		for ep := first; ep <= last; ep++ {
			l, err := lineageOf(ep)
			if errors.Is(err, journal.ErrNoLineage) && !o.epochSet {
				// The other epochs are answered; this one is said to be
				// missing (asked about alone, it fails).
				a.UnrecordedEpochs = append(a.UnrecordedEpochs, ep)
				continue
			}
			if err != nil {
				return nil, err
			}
			if u, ok := untraced(e, ep, l.Trails); ok {
				// Answered from the trails; the positions without one
				// are said to be left out, and the key's among them
				// named.
				u.KeyPositions = untracedPositions(cluster.EpochCommitted(s.Epochs[ep], s.Samples), l.Trails, d.positions(ep, idx))
				a.UntracedEpochs = append(a.UntracedEpochs, u)
			}
			hits, err := l.Find(d.sampler(ep), idx)
			if err != nil {
				return nil, err
			}
			for _, h := range hits {
				uncertain = uncertain || h.Uncertain
				a.Appearances = append(a.Appearances, Appearance{Epoch: ep, Rank: -1, RankName: h.Rank, Session: h.Session.String(),
					Step: h.Step, Slot: h.Slot, Offset: h.Offset, Pad: h.Pad, Uncertain: h.Uncertain})
			}
		}
		if uncertain {
			notes = append(notes, uncertainNote)
		}
		if len(a.UntracedEpochs) > 0 {
			n := untracedNote(a.UntracedEpochs) + ". The key's places among them are not answered"
			var at []string
			for _, u := range a.UntracedEpochs {
				for _, p := range u.KeyPositions {
					at = append(at, fmt.Sprintf("epoch %d position %d", u.Epoch, p))
				}
			}
			if len(at) > 0 {
				n += fmt.Sprintf(" (it was committed at %s, in a step with no trail)", strings.Join(at, ", "))
			}
			notes = append(notes, n)
		}
		if n := len(a.UnrecordedEpochs); n > 0 {
			notes = append(notes, fmt.Sprintf("the journal holds no record of which steps held what in epoch(s) %s (generation %d: a journal written before it recorded lineage, or the epoch's archive is gone): the key's places there are not answered",
				joinInts(a.UnrecordedEpochs), e.Gen))
		}
		for _, n := range notes {
			a.addNote(n)
		}
		return a, nil
	}

	l, err := lineageOf(o.epoch)
	if err != nil {
		return nil, err
	}
	smp := d.sampler(o.epoch)
	steps, err := l.Steps(smp, o.rankName, o.steps.First, o.steps.Last)
	if err != nil {
		return nil, err
	}
	if u, ok := untraced(e, o.epoch, l.Trails); ok {
		// A step asked about that no trail holds may be among the
		// positions committed without one: not answered, and not left
		// out in silence either.
		if missing := untracedSteps(s.Epochs[o.epoch], o.rankName, o.steps, steps); len(missing) > 0 {
			return nil, fmt.Errorf("epoch %d rank %s: step(s) %s are in no trail of the journal (generation %d) and may have held committed positions that have none: %s",
				o.epoch, o.rankName, joinRanges(missing), e.Gen, untracedNote([]UntracedEpoch{u}))
		}
		a.addNote(untracedNote([]UntracedEpoch{u}) + ". The steps answered are all in trails")
	}
	if len(steps) == 0 {
		ranks := l.Ranks()
		for _, r := range ranks {
			if r == o.rankName {
				return nil, usageError{fmt.Errorf("epoch %d rank %s: no committed step in %d-%d (generation %d)", o.epoch, o.rankName, o.steps.First, o.steps.Last, e.Gen)}
			}
		}
		return nil, usageError{fmt.Errorf("epoch %d: rank %q committed nothing (generation %d); ranks that did: %s", o.epoch, o.rankName, e.Gen, strings.Join(ranks, ", "))}
	}
	tr, err := openTransformer(o, a)
	if err != nil {
		return nil, err
	}
	if tr != nil {
		defer tr.close()
	}
	for _, cs := range steps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		step := Step{Epoch: o.epoch, Rank: -1, RankName: cs.Rank, Session: cs.Session.String(), Step: cs.Step, Uncertain: cs.Uncertain}
		if cs.Uncertain {
			a.addNote(uncertainNote)
		}
		for _, g := range cs.Samples {
			step.Samples = append(step.Samples, d.sample(tr, o.epoch, smp, g))
		}
		a.Steps = append(a.Steps, step)
	}
	return a, nil
}

// uncertainNote explains an uncertain step or appearance.
const uncertainNote = "a step marked uncertain lies between two commits with a stream end between them whose commit never reached the coordinator, in a trail of a node that did not say where it cut its runs (or of a journal from before it recorded that): the positions between the commits are exact, their split into those steps one of the ways that fit (docs/lineage.md)"

// untraced returns how epoch's trails ts (of journal entry e) fall
// short of its committed positions, ok when they do not hold exactly
// them.
func untraced(e journal.Entry, epoch int, ts []cluster.Trail) (UntracedEpoch, bool) {
	s := e.State
	if epoch < 0 || epoch >= len(s.Epochs) {
		return UntracedEpoch{}, false
	}
	cv := cluster.CoverTrails(cluster.EpochCommitted(s.Epochs[epoch], s.Samples), s.Samples, ts)
	return UntracedEpoch{Epoch: epoch, Untraced: cv.Untraced, Committed: cv.Committed, Stray: cv.Stray}, cv.Untraced > 0 || cv.Stray > 0
}

// untracedWhy says why committed positions have no trail.
const untracedWhy = "committed before the coordinator recorded trails (as where one took over the epoch from a journal of version 4 or older, which records none), so which rank's steps held them is not known (docs/lineage.md)"

// untracedCount says how many of u's epoch's committed positions have
// no trail (and how many its trails hold that it did not commit).
func untracedCount(u UntracedEpoch) string {
	p := fmt.Sprintf("%d of its %d committed positions have no trail", u.Untraced, u.Committed)
	if u.Stray > 0 {
		p += fmt.Sprintf(", and its trails hold %d positions it did not commit (the journal disagrees with itself)", u.Stray)
	}
	return p
}

// untracedNote names the epochs of us and their positions without a
// trail, and why.
func untracedNote(us []UntracedEpoch) string {
	var parts []string
	for _, u := range us {
		parts = append(parts, fmt.Sprintf("epoch %d: %s", u.Epoch, untracedCount(u)))
	}
	return strings.Join(parts, ", ") + ": " + untracedWhy
}

// untracedPositions returns the positions of ps that committed holds
// and no trail of ts does.
func untracedPositions(committed []cluster.Range, ts []cluster.Trail, ps []int64) []int64 {
	in := func(rs []cluster.Range, p int64) bool {
		for _, r := range rs {
			if r.Start <= p && p < r.End {
				return true
			}
		}
		return false
	}
	var out []int64
	for _, p := range ps {
		if !in(committed, p) {
			continue
		}
		traced := false
		for _, t := range ts {
			traced = traced || in(t.Segs, p)
		}
		if !traced {
			out = append(out, p)
		}
	}
	return out
}

// untracedSteps returns the steps of rank in want that got (its
// committed steps the trails hold) lacks and that rank may have
// committed: through its last commit in the epoch where the journal
// keeps the ranks' last commits (an open epoch, or the one completed
// last), else all of them.
func untracedSteps(es cluster.EpochState, rank string, want stepRange, got []cluster.ClusterStep) []int64 {
	last := want.Last
	if len(es.Commits) > 0 {
		last = -1
		for _, rc := range es.Commits {
			if rc.Rank == rank {
				last = min(want.Last, rc.Step)
			}
		}
	}
	held := map[int64]bool{}
	for _, cs := range got {
		held[cs.Step] = true
	}
	var out []int64
	for st := want.First; st <= last; st++ {
		if !held[st] {
			out = append(out, st)
		}
	}
	return out
}

// joinRanges is ascending ns as "0-3, 5".
func joinRanges(ns []int64) string {
	var parts []string
	for i := 0; i < len(ns); {
		k := i
		for k+1 < len(ns) && ns[k+1] == ns[k]+1 {
			k++
		}
		if k == i {
			parts = append(parts, strconv.FormatInt(ns[i], 10))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ns[i], ns[k]))
		}
		i = k + 1
	}
	return strings.Join(parts, ", ")
}

// joinInts is ns as "0, 2, 5".
func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

// answerClusterMixture answers for a cluster --mixture job: its sources
// opened as the node opens them, the mixture drawn with the journal's
// seed, block, window and (without --mixture-round or a file's round:)
// batch size, which must give the journal's positions and dataset digest
// (the digest covers the mixture's identity: sources, sizes, round,
// schedule).
func answerClusterMixture(ctx context.Context, o options, j *journal.Journal, e journal.Entry, batch int64) (*Answer, error) {
	s := e.State
	m, err := openMixtureJob(ctx, o, mixParams{seed: s.Seed, block: s.Block, blockSet: true, window: s.Window, batch: int(batch)})
	if err != nil {
		return nil, err
	}
	defer m.cat.Close()
	if m.mix.Len() != s.Samples {
		return nil, usageError{fmt.Errorf("--mixture: an epoch of %d positions, the journal's job %d: give the coordinator's --mixture, --mixture-schedule and --mixture-round", m.mix.Len(), s.Samples)}
	}
	if e.Digest != "" && m.cat.Digest() != e.Digest {
		return nil, usageError{fmt.Errorf("--mixture has digest %s, the journal's job %s: give the coordinator's --mixture, --mixture-schedule, --mixture-round (and --exclude)", m.cat.Digest(), e.Digest)}
	}
	a := &Answer{Job: m.job(o)}
	a.Job.Mode, a.Job.Checkpoint, a.Job.Generation = "cluster", o.checkpoint, e.Gen
	a.Job.Ranks, a.Job.BatchSize, a.Job.Epochs, a.Job.DropLast = 0, int(batch), e.Epochs, false
	return answerClusterSteps(ctx, o, j, e, batch, a, clusterData{
		sampler:   func(epoch int) cluster.Sampler { return m.mix.Epoch(epoch) },
		positions: m.mix.PositionsOf,
		find:      m.findKey,
		sample: func(tr *transformer, epoch int, smp cluster.Sampler, g cluster.LineageSample) Sample {
			return m.sample(ctx, smp.(*cluster.MixEpoch), tr, s.Seed, epoch, g)
		},
	})
}
