package cluster

import (
	"fmt"
	"slices"
	"sort"
)

// Trail is what one rank session committed of one epoch's stream: the
// order positions its stream held, in stream order, through its last
// commit (Segs: the leases it was granted, cut where that commit ends;
// positions at or past the epoch's Samples are padding, Order.Sample),
// and its commits: each trainer step it committed with the stream offset
// that commit reached (Commits, in order; the journal may leave out a
// commit that the ones around it imply, see TrimCommits).
//
// With them, which positions each committed step held is a pure
// function (TrailSteps): a session's stream counts from offset 0, and its
// steps are the pipeline's batches of it (RankSteps) — full batches,
// except the last batch of a stream as it was planned, which the trainer
// commits (the feed marks it end_of_stream: "commit it"). So between two
// commits the steps are full batches, the last maybe short; the first
// commit fixes the session's first step.
//
// The coordinator keeps a trail per rank session and epoch with the
// epoch's state (EpochState.Trails) while the epoch is open and, for the
// epoch that completed last, after; the journal archives a completed
// epoch's trails (cluster/journal).
type Trail struct {
	Rank    string
	Session Fence
	Segs    []Range
	Commits []TrailCommit
	// Ends are the stream lengths the session was told its stream of the
	// epoch ended at (StreamEnd), below its last commit, ascending: the
	// only offsets where a short batch can have ended. TrailSteps needs
	// them where a commit of a stream's end never reached the
	// coordinator (its session was over first).
	Ends []int64
	// Cuts are where the session's node cut its runs of the epoch below
	// its last commit: the stream offsets, ascending, at which a run
	// ended with a short batch, as its commits told them (Commit.Cuts).
	// CutsTold says they did (nodes from before they did, and journals
	// from before version 6, do not); then TrailSteps numbers every step
	// exactly, Ends aside.
	Cuts     []int64
	CutsTold bool
}

// TrailCommit is one commit of a trail: step Step was committed, which
// took the session's stream through offset Offset.
type TrailCommit struct {
	Step   int64
	Offset int64
}

// Committed is the stream offset the trail's commits reach.
func (t Trail) Committed() int64 {
	if len(t.Commits) == 0 {
		return 0
	}
	return t.Commits[len(t.Commits)-1].Offset
}

// trail returns the stream's trail: its segments through the committed
// offset (adjacent ones merged) and its commits.
func (st *stream) trail(rank string, session Fence) Trail {
	t := Trail{Rank: rank, Session: session, Commits: append([]TrailCommit(nil), st.commits...), CutsTold: st.cutsTold}
	for _, e := range st.ends {
		if e < st.committed {
			t.Ends = append(t.Ends, e)
		}
	}
	for _, x := range st.cuts {
		if x < st.committed {
			t.Cuts = append(t.Cuts, x)
		}
	}
	var off int64
	for _, seg := range st.segs {
		if off >= st.committed {
			break
		}
		end := min(seg.end, seg.start+st.committed-off)
		off += end - seg.start
		if end <= seg.start {
			continue
		}
		if n := len(t.Segs); n > 0 && t.Segs[n-1].End == seg.start {
			t.Segs[n-1].End = end
		} else {
			t.Segs = append(t.Segs, Range{seg.start, end})
		}
	}
	return t
}

// trailsOf returns ep's trails: of the sessions that are gone, then of
// the live ones that committed, sorted by rank and session.
func (c *Coordinator) trailsOf(ep *epoch) []Trail {
	out := append([]Trail(nil), ep.trails...)
	for _, r := range c.rankOrder {
		if st := r.streams[ep.n]; st != nil && st.committed > 0 {
			out = append(out, st.trail(r.id, r.session))
		}
	}
	sortTrails(out)
	return out
}

func sortTrails(ts []Trail) {
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].Rank != ts[j].Rank {
			return ts[i].Rank < ts[j].Rank
		}
		return ts[i].Session.Less(ts[j].Session)
	})
}

// keepTrail records r's session's trail of ep, if it committed, for after
// its stream is gone.
func (ep *epoch) keepTrail(r *rank, st *stream) {
	if st.committed > 0 {
		ep.trails = append(ep.trails, st.trail(r.id, r.session))
	}
}

// TrimCommits returns t's commits less those the others imply for batch
// size batch: a commit (not the first or the last) whose steps since the
// previous one were all full batches, when no stream end lies between
// its neighbours. What TrailSteps answers does not change; a trail of a
// job that commits every step shrinks to a few commits per stream end.
func TrimCommits(t Trail, batch int64) []TrailCommit {
	cs := t.Commits
	if batch < 1 || len(cs) <= 2 {
		return cs
	}
	out := []TrailCommit{cs[0]}
	for i := 1; i < len(cs)-1; i++ {
		lo, hi := cs[i-1].Offset, cs[i+1].Offset
		k := sort.Search(len(t.Ends), func(k int) bool { return t.Ends[k] > lo })
		endBetween := k < len(t.Ends) && t.Ends[k] < hi
		if endBetween || cs[i].Offset-cs[i-1].Offset != batch*(cs[i].Step-cs[i-1].Step) {
			out = append(out, cs[i])
		}
	}
	return append(out, cs[len(cs)-1])
}

// TrailStep is one committed step of a trail: its number and the stream
// offsets [Offset, Offset+Len) it held. Uncertain marks a step whose
// share of the positions between two commits is not known: a stream end
// lies between them whose commit never reached the coordinator, and the
// steps fit the positions both with a short batch there and without.
type TrailStep struct {
	Step      int64
	Offset    int64
	Len       int64
	Uncertain bool
}

// maxEndsInSpan bounds the stream ends TrailSteps weighs between two
// commits (it tries each subset as the places short batches ended).
const maxEndsInSpan = 12

// spanLayouts returns the distinct ways batches of size batch can cover
// stream offsets [lo, hi) when a short batch may have ended at any of
// ends (inside the span): each as its steps' first offsets, the layout
// without short batches first.
func spanLayouts(lo, hi int64, ends []int64, batch int64) [][]int64 {
	if len(ends) > maxEndsInSpan {
		ends = nil // too many to weigh: the layout without, marked uncertain by the caller
	}
	seen := map[string]bool{}
	var out [][]int64
	for mask := 0; mask < 1<<len(ends); mask++ {
		var starts []int64
		a := lo
		cut := func(b int64) {
			for o := a; o < b; o += batch {
				starts = append(starts, o)
			}
			a = b
		}
		for k, e := range ends {
			if mask&(1<<k) != 0 {
				cut(e)
			}
		}
		cut(hi)
		key := fmt.Sprint(starts)
		if !seen[key] {
			seen[key] = true
			out = append(out, starts)
		}
	}
	return out
}

// cutLayout returns the first offsets of the steps that cover stream
// offsets [lo, hi) in batches of size batch, a short batch ending at
// each of cuts that lies inside.
func cutLayout(lo, hi int64, cuts []int64, batch int64) []int64 {
	var starts []int64
	a := lo
	k := sort.Search(len(cuts), func(k int) bool { return cuts[k] > lo })
	for ; ; k++ {
		b := hi
		if k < len(cuts) && cuts[k] < hi {
			b = cuts[k]
		}
		for o := a; o < b; o += batch {
			starts = append(starts, o)
		}
		if a = b; b == hi {
			return starts
		}
	}
}

// TrailSteps returns the committed steps of trail t for batch size
// batch, in order. Between two commits the steps are the pipeline's
// batches: full ones, except where a run of the stream ended with a
// short batch, which the trainer commits. Where the node told where its
// runs were cut (CutsTold) that is known, and every step is exact. A
// trail without (an older node's, or an older journal's) knows only
// where its stream ends were (Ends): where a stream end's commit is
// missing and the steps fit the positions more than one way, the steps
// are marked Uncertain. It fails for a trail no session of that batch
// size leaves.
func TrailSteps(t Trail, batch int64) ([]TrailStep, error) {
	if batch < 1 {
		return nil, fmt.Errorf("cluster: trail: batch size %d", batch)
	}
	var out []TrailStep
	var off int64
	var step int64 = -1 // the step before the next span's first
	for i, c := range t.Commits {
		lo, hi := off, c.Offset
		k0 := sort.Search(len(t.Ends), func(k int) bool { return t.Ends[k] > lo })
		k1 := sort.Search(len(t.Ends), func(k int) bool { return t.Ends[k] >= hi })
		var ends []int64
		if k0 < k1 {
			ends = t.Ends[k0:k1]
		}
		var layouts [][]int64
		if t.CutsTold {
			// The node said where its runs were cut: one layout.
			ends = nil
			layouts = [][]int64{cutLayout(lo, hi, t.Cuts, batch)}
		} else {
			layouts = spanLayouts(lo, hi, ends, batch)
		}
		var fit [][]int64
		for _, l := range layouts {
			// The first span's steps are known by its commit only: any
			// layout whose first step is not negative fits.
			if i == 0 && int64(len(l)) <= c.Step+1 || i > 0 && int64(len(l)) == c.Step-step {
				fit = append(fit, l)
			}
		}
		if hi <= lo || len(fit) == 0 {
			return nil, fmt.Errorf("cluster: trail of %s session %v: commit of step %d at offset %d after step %d at offset %d: %d positions are not %d steps of batch size %d",
				t.Rank, t.Session, c.Step, c.Offset, step, lo, hi-lo, c.Step-step, batch)
		}
		starts := fit[0]
		unsure := len(fit) > 1 || len(ends) > maxEndsInSpan
		first := c.Step - int64(len(starts)) + 1
		for k, o := range starts {
			end := hi
			if k+1 < len(starts) {
				end = starts[k+1]
			}
			out = append(out, TrailStep{Step: first + int64(k), Offset: o, Len: end - o, Uncertain: unsure})
		}
		off, step = c.Offset, c.Step
	}
	var held int64
	for _, r := range t.Segs {
		held += r.Len()
	}
	if held != off {
		return nil, fmt.Errorf("cluster: trail of %s session %v holds %d positions, its commits reach offset %d", t.Rank, t.Session, held, off)
	}
	return out, nil
}

// TrailPosition returns the order position at stream offset off of trail
// t (off below t.Committed()).
func TrailPosition(t Trail, off int64) (int64, error) {
	for _, r := range t.Segs {
		if off < r.Len() {
			return r.Start + off, nil
		}
		off -= r.Len()
	}
	return 0, fmt.Errorf("cluster: trail of %s session %v: offset past its positions", t.Rank, t.Session)
}

// restoreTrails loads an epoch's trails from a State.
func (ep *epoch) restoreTrails(ts []Trail) error {
	for _, t := range ts {
		if t.Rank == "" || len(t.Commits) == 0 {
			return fmt.Errorf("%w: epoch %d: unusable trail of rank %q session %v", ErrState, ep.n, t.Rank, t.Session)
		}
		var held int64
		for _, r := range t.Segs {
			if r.Start < 0 || r.Len() <= 0 {
				return fmt.Errorf("%w: epoch %d: trail of rank %q holds range %v", ErrState, ep.n, t.Rank, r)
			}
			held += r.Len()
		}
		if held != t.Committed() {
			return fmt.Errorf("%w: epoch %d: trail of rank %q session %v holds %d positions, its commits reach %d", ErrState, ep.n, t.Rank, t.Session, held, t.Committed())
		}
		for k, x := range t.Cuts {
			if x <= 0 || x >= held || k > 0 && x <= t.Cuts[k-1] {
				return fmt.Errorf("%w: epoch %d: trail of rank %q session %v: cuts %v are not ascending in (0, %d)", ErrState, ep.n, t.Rank, t.Session, t.Cuts, held)
			}
		}
	}
	ep.trails = append([]Trail(nil), ts...)
	return nil
}

// Sampler maps an epoch's positions to dataset indices: an Order (see
// Order.Sample), or a mixture's draws.
type Sampler interface {
	Sample(pos int64) (index int64, pad bool)
}

// EpochLineage is a cluster job's lineage of one epoch: what each rank
// session committed (its trails, from the journal) and the job's batch
// size. Step and Find answer from them alone.
type EpochLineage struct {
	Batch  int64
	Trails []Trail
}

// ClusterStep is one committed step of a rank: the session that
// delivered it and its samples in batch order (Offset is the stream
// offset in that session's stream, OrderPos the epoch position; Pad a
// position past the epoch's samples).
type ClusterStep struct {
	Rank      string
	Session   Fence
	Step      int64
	Uncertain bool // see TrailStep
	Samples   []LineageSample
}

// ClusterHit is one place a sample appeared in committed history.
type ClusterHit struct {
	Rank      string
	Session   Fence
	Step      int64
	Slot      int
	Offset    int64
	Pad       bool
	Uncertain bool // see TrailStep
}

// Ranks returns the ranks that committed any step, sorted.
func (l EpochLineage) Ranks() []string {
	var out []string
	for _, t := range l.Trails {
		if len(out) == 0 || out[len(out)-1] != t.Rank {
			out = append(out, t.Rank)
		}
	}
	return out
}

// Steps returns rank's committed steps first..last, in step order. A
// rank's steps of an epoch go on across its sessions, a restarted
// node's included (RankRuns.StartSession), so each step has one session;
// a journal written before they did may hold a step of a node restarted
// in the epoch twice: it comes once per session, in session order.
func (l EpochLineage) Steps(s Sampler, rank string, first, last int64) ([]ClusterStep, error) {
	var out []ClusterStep
	for _, t := range l.Trails {
		if t.Rank != rank {
			continue
		}
		steps, err := TrailSteps(t, l.Batch)
		if err != nil {
			return nil, err
		}
		for _, st := range steps {
			if st.Step < first || st.Step > last {
				continue
			}
			cs := ClusterStep{Rank: t.Rank, Session: t.Session, Step: st.Step, Uncertain: st.Uncertain}
			for k := int64(0); k < st.Len; k++ {
				p, err := TrailPosition(t, st.Offset+k)
				if err != nil {
					return nil, err
				}
				idx, pad := s.Sample(p)
				cs.Samples = append(cs.Samples, LineageSample{Slot: int(k), Offset: st.Offset + k, OrderPos: p, Index: idx, Pad: pad})
			}
			out = append(out, cs)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Step < out[j].Step })
	return out, nil
}

// Find returns every place sample index appeared in the epoch's
// committed history, padding included, by rank, session and step.
func (l EpochLineage) Find(s Sampler, index int64) ([]ClusterHit, error) {
	var out []ClusterHit
	for _, t := range l.Trails {
		steps, err := TrailSteps(t, l.Batch)
		if err != nil {
			return nil, err
		}
		var off int64
		for _, r := range t.Segs {
			for p := r.Start; p < r.End; p, off = p+1, off+1 {
				idx, pad := s.Sample(p)
				if idx != index {
					continue
				}
				k := sort.Search(len(steps), func(i int) bool { return steps[i].Offset+steps[i].Len > off })
				st := steps[k]
				out = append(out, ClusterHit{Rank: t.Rank, Session: t.Session, Step: st.Step, Slot: int(off - st.Offset), Offset: off, Pad: pad, Uncertain: st.Uncertain})
			}
		}
	}
	return out, nil
}

// noteCuts records where commit ev says its session's runs were cut.
// A session's runs, once ended, stay as they are, so every commit of
// it tells the same cuts up to its offset: they are merged, whatever
// the order the commits arrive in.
func (st *stream) noteCuts(ev Commit) {
	if !ev.CutsTold {
		return
	}
	st.cutsTold = true
	for _, x := range ev.Cuts {
		if x <= 0 || x > ev.Offset {
			continue
		}
		if i, found := slices.BinarySearch(st.cuts, x); !found {
			st.cuts = slices.Insert(st.cuts, i, x)
		}
	}
}

// noteCommit records commit c in the stream's trail, in offset order,
// once the stream is committed through it (earlier ones that waited
// come in too); a commit the trail holds, or one whose step and offset
// do not fall between its neighbours', is left out.
func (st *stream) noteCommit(c TrailCommit, batch int64) {
	if c.Offset > st.committed {
		st.early = append(st.early, c)
		return
	}
	st.insertCommit(c)
	st.trimCommits(batch)
	keep := st.early[:0]
	for _, e := range st.early {
		if e.Offset <= st.committed {
			st.insertCommit(e)
		} else {
			keep = append(keep, e)
		}
	}
	st.early = keep
}

// trimCommits drops the commit before the last when the ones around it
// imply it (TrimCommits' rule). Stream ends sent later lie at or past
// the committed offset, so none can come to lie between them after.
func (st *stream) trimCommits(batch int64) {
	n := len(st.commits)
	if batch < 1 || n < 3 {
		return
	}
	a, b, c := st.commits[n-3], st.commits[n-2], st.commits[n-1]
	k := sort.Search(len(st.ends), func(k int) bool { return st.ends[k] > a.Offset })
	if b.Offset-a.Offset != batch*(b.Step-a.Step) || k < len(st.ends) && st.ends[k] < c.Offset {
		return
	}
	st.commits[n-2] = c
	st.commits = st.commits[:n-1]
}

// insertCommit inserts c in order.
func (st *stream) insertCommit(c TrailCommit) {
	cs := st.commits
	i := sort.Search(len(cs), func(i int) bool { return cs[i].Offset >= c.Offset })
	switch {
	case c.Offset <= 0 || i < len(cs) && cs[i] == c:
		return
	case i < len(cs) && (cs[i].Offset == c.Offset || cs[i].Step <= c.Step):
		return // contradicts the commit after it
	case i > 0 && cs[i-1].Step >= c.Step:
		return // or the one before
	}
	st.commits = slices.Insert(cs, i, c)
}

// EpochCommitted returns the real positions epoch es of a job of
// samples positions has committed, merged and sorted: its Committed
// ranges while it is open; once it is complete (Committed is then
// empty), every position of [0, samples) it did not drop.
func EpochCommitted(es EpochState, samples int64) []Range {
	if !es.Complete {
		return mergeRanges(append([]Range(nil), es.Committed...))
	}
	var out []Range
	var at int64
	for _, d := range mergeRanges(append([]Range(nil), es.Dropped...)) {
		if e := min(d.Start, samples); e > at {
			out = append(out, Range{at, e})
		}
		at = max(at, d.End)
	}
	if at < samples {
		out = append(out, Range{at, samples})
	}
	return out
}

// TrailCoverage is how an epoch's trails cover the positions it
// committed (CoverTrails).
type TrailCoverage struct {
	// Committed is how many real positions the epoch committed.
	Committed int64
	// Untraced are the committed positions no trail holds: committed
	// before the coordinator recorded trails (a journal of version 4 or
	// older that a newer coordinator took over in the epoch), so which
	// rank's step held them is not known.
	Untraced int64
	// Stray are the real positions trails hold that the epoch does not
	// count as committed (none, in a journal the coordinator wrote).
	Stray int64
}

// CoverTrails compares the real positions (below samples; padding
// aside) that trails hold with committed, an epoch's committed positions
// (EpochCommitted): the trails of an epoch whose whole committed history
// was recorded hold exactly them.
func CoverTrails(committed []Range, samples int64, trails []Trail) TrailCoverage {
	var held []Range
	for _, t := range trails {
		for _, r := range t.Segs {
			if r.End = min(r.End, samples); r.Len() > 0 {
				held = append(held, r)
			}
		}
	}
	held = mergeRanges(held)
	committed = mergeRanges(append([]Range(nil), committed...))
	var cv TrailCoverage
	var nHeld, both int64
	for _, r := range committed {
		cv.Committed += r.Len()
	}
	for _, r := range held {
		nHeld += r.Len()
	}
	for i, k := 0, 0; i < len(committed) && k < len(held); {
		a, b := committed[i], held[k]
		if lo, hi := max(a.Start, b.Start), min(a.End, b.End); hi > lo {
			both += hi - lo
		}
		if a.End < b.End {
			i++
		} else {
			k++
		}
	}
	cv.Untraced, cv.Stray = cv.Committed-both, nHeld-both
	return cv
}
