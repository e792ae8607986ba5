package node

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/dataset"
)

// fillRig drives nodeActor.fill for one rank with no actor system and no
// pipeline: it plays the coordinator (leases and stream ends, numbered as
// Coordinator.grant and sendEnd number them, delivered through
// nodeActor.mail) and the pipeline (a Want whose give records the Work).
// Every Work given is checked against what the pipeline accepts
// (actors.Intake) and against the streams granted: each stream
// offset exactly once, in order, mapped to the right sample.
type fillRig struct {
	t    *testing.T
	a    *nodeActor
	rs   *rankState
	sess cluster.Fence
	seq  uint64 // the coordinator's last fence

	streams map[int][]int64 // per epoch: the positions granted, in stream order
	leases  map[int]int     // per epoch: leases granted

	intake  actors.Intake
	next    map[int]int64 // per epoch: the stream offset the next item must have
	asked   int           // the outstanding Want's n; 0: none
	answers []actors.Work // given, not yet looked at
	// strict also fails a segment cut mid-batch while its epoch's next
	// position was already granted (and so held by the rank), and a
	// stream's last batch given complete before its end was known (Next
	// could not mark it EndOfStream). Both hold only without revokes.
	strict bool
}

const rigSamples = 64

func newFillRig(t *testing.T, batch int64, epochs int) *fillRig {
	t.Helper()
	ds := &dataset.Dataset{Classes: []string{"c"}}
	for i := range rigSamples {
		ds.Samples = append(ds.Samples, dataset.Sample{Key: fmt.Sprintf("s/%d", i)})
	}
	n := &Node{cfg: Config{Node: "n", Ranks: 1, Dataset: ds, Catalog: dataset.DatasetCatalog(ds)}, log: slog.New(slog.DiscardHandler)}
	r := &Rank{name: "n/0", node: n, deliv: cluster.NewRankDelivery()}
	r.mu.changed = make(chan struct{})
	r.mu.batch = batch
	n.ranks = []*Rank{r}
	g := &fillRig{t: t, streams: map[int][]int64{}, leases: map[int]int{}, next: map[int]int64{}}
	g.intake.BatchSize = int(batch)
	g.sess = g.fence()
	job := &wire.Job{Samples: rigSamples, Seed: 7, Block: 1, Epochs: int64(epochs), ShardSize: 8, BatchSize: batch}
	g.rs = &rankState{r: r, runs: cluster.NewRankRuns(r.name)}
	g.a = &nodeActor{n: n, job: job, ranks: []*rankState{g.rs}, byName: map[string]*rankState{r.name: g.rs}}
	// What startSession does, less the pipeline.
	g.rs.runs.StartSession(cluster.RankSession{Rank: r.name, Session: g.sess}, epochs, batch)
	r.mu.session = g.sess
	return g
}

func (g *fillRig) fence() cluster.Fence {
	g.seq++
	return cluster.Fence{Incarnation: 1, Seq: g.seq}
}

// lease issues the rank's next lease of epoch e, [start, end).
func (g *fillRig) lease(e int, start, end int64) cluster.Lease {
	l := cluster.Lease{Rank: "n/0", Session: g.sess, Fence: g.fence(), Epoch: e, Index: g.leases[e], Start: start, End: end, Pad: start >= rigSamples}
	g.leases[e]++
	for p := start; p < end; p++ {
		g.streams[e] = append(g.streams[e], p)
	}
	return l
}

// end says epoch e's stream is what was leased so far.
func (g *fillRig) end(e int) cluster.StreamEnd {
	return cluster.StreamEnd{Rank: "n/0", Session: g.sess, Epoch: e, Length: int64(len(g.streams[e])), Leases: g.leases[e], Fence: g.fence()}
}

// send delivers leases and stream ends in one NodeMail, then fills as
// the actor does after every message.
func (g *fillRig) send(msgs ...any) {
	g.t.Helper()
	m := &wire.NodeMail{}
	for _, x := range msgs {
		switch x := x.(type) {
		case cluster.Lease:
			m.Grants = append(m.Grants, wire.LeaseOf(x))
		case cluster.StreamEnd:
			m.Ends = append(m.Ends, wire.StreamEndOf(x))
		default:
			g.t.Fatalf("send: %T", x)
		}
	}
	g.a.mail(m)
	g.a.fill(g.rs)
}

// ask is the pipeline's Want(n); it reports the Work if it was answered
// at once, else the Want stays outstanding.
func (g *fillRig) ask(n int) (actors.Work, bool) {
	g.t.Helper()
	if g.asked != 0 {
		g.t.Fatalf("Want(%d) while Want(%d) is outstanding", n, g.asked)
	}
	g.asked = n
	g.rs.want = &wantMsg{n: n, session: g.sess, give: g.give}
	g.a.fill(g.rs)
	return g.answer()
}

func (g *fillRig) mustAsk(n int) actors.Work {
	g.t.Helper()
	w, ok := g.ask(n)
	if !ok {
		g.t.Fatalf("Want(%d) not answered", n)
	}
	return w
}

// answer returns the Work given since the last look, if any.
func (g *fillRig) answer() (actors.Work, bool) {
	g.t.Helper()
	switch len(g.answers) {
	case 0:
		return actors.Work{}, false
	case 1:
		w := g.answers[0]
		g.answers = nil
		return w, true
	}
	g.t.Fatalf("%d answers to one Want", len(g.answers))
	return actors.Work{}, false
}

// drain asks for n at a time until a Want stays unanswered or the last
// work was given.
func (g *fillRig) drain(n int) []actors.Work {
	g.t.Helper()
	var out []actors.Work
	for !g.intake.Last() {
		w, ok := g.ask(n)
		if !ok {
			break
		}
		out = append(out, w)
	}
	return out
}

func (g *fillRig) give(w actors.Work) {
	g.t.Helper()
	asked := g.asked
	g.asked = 0
	if asked == 0 {
		g.t.Fatalf("work given with no Want outstanding: %s", workString(w))
	}
	if err := g.intake.Take(w, asked); err != nil {
		g.t.Fatalf("the pipeline would refuse %s: %v", workString(w), err)
	}
	p, ok := g.seg(w)
	if !ok && len(w.Items) > 0 {
		g.t.Fatalf("%s: no segment holds it", workString(w))
	}
	var sg cluster.StepRun
	if ok {
		sg = g.rs.runs.Steps().Runs()[p]
		if w.Step != sg.FirstStep {
			g.t.Fatalf("%s: step %d, its segment starts at step %d", workString(w), w.Step, sg.FirstStep)
		}
		if w.StreamEnd != (w.RunEnd && sg.StreamEnd) {
			g.t.Fatalf("%s: StreamEnd %v, segment %+v", workString(w), w.StreamEnd, sg)
		}
	}
	for _, it := range w.Items {
		e, off := w.Epoch, it.Pos
		if off != g.next[e] {
			g.t.Fatalf("%s: epoch %d stream offset %d given, want %d (each offset once, in order)", workString(w), e, off, g.next[e])
		}
		g.next[e]++
		if off >= int64(len(g.streams[e])) {
			g.t.Fatalf("%s: epoch %d stream offset %d was never granted", workString(w), e, off)
		}
		j := g.a.job
		idx, pad := cluster.NewOrder(j.Seed, e, rigSamples, int(j.Block), cluster.EffectiveWindow(int(j.Block), int(j.Window))).Sample(g.streams[e][off])
		if it.Index != idx || it.Pad != pad || it.Key != fmt.Sprintf("s/%d", idx) {
			g.t.Fatalf("%s: epoch %d offset %d (position %d) is %+v, want sample %d pad %v", workString(w), e, off, g.streams[e][off], it, idx, pad)
		}
	}
	if g.strict && w.RunEnd && ok {
		e, b := sg.Epoch, g.a.job.BatchSize
		if sg.Length%b != 0 && g.next[e] < int64(len(g.streams[e])) {
			g.t.Fatalf("%s: epoch %d's segment cut after %d positions (mid-batch) while offset %d was held", workString(w), e, sg.Length, g.next[e])
		}
		if sg.StreamEnd && len(w.Items) == 0 && sg.Length > 0 && sg.Length%b == 0 {
			g.t.Fatalf("%s: epoch %d's last batch was complete before the stream's end was known", workString(w), e)
		}
	}
	g.answers = append(g.answers, w)
}

// seg returns the number of the segment that holds w: the session's
// segment of w's epoch whose offsets include w's first item, or, for an
// end alone, the epoch's last segment.
func (g *fillRig) seg(w actors.Work) (int, bool) {
	found := -1
	for p, sg := range g.rs.runs.Steps().Runs() {
		if sg.Epoch != w.Epoch {
			continue
		}
		if len(w.Items) == 0 || (w.Start >= sg.Base && w.Start < sg.Base+sg.Length) {
			found = p
		}
	}
	return found, found >= 0
}

// segs lists the session's segments in the order they opened.
func (g *fillRig) segs() []cluster.StepRun { return g.rs.runs.Steps().Runs() }

// endOfStream reports whether segment p's batch k is its epoch stream's
// last: the pipeline marks it EndOfStream (a run's last batch, when its
// Work said StreamEnd).
func (g *fillRig) endOfStream(p int, k int64) bool {
	g.t.Helper()
	sg := g.rs.runs.Steps().Runs()[p]
	return sg.Ended && sg.StreamEnd && (k+1)*g.a.job.BatchSize >= sg.Length
}

// checkAllGiven fails the test unless every granted position of every
// epoch was given.
func (g *fillRig) checkAllGiven() {
	g.t.Helper()
	for e, s := range g.streams {
		if g.next[e] != int64(len(s)) {
			g.t.Errorf("epoch %d: %d of %d granted positions given", e, g.next[e], len(s))
		}
	}
}

func workString(w actors.Work) string {
	pos := make([]int64, len(w.Items))
	for i, it := range w.Items {
		pos[i] = it.Pos
	}
	return fmt.Sprintf("Work{Epoch: %d, Start: %d, Step: %d, Pos: %v, RunEnd: %v, StreamEnd: %v, Last: %v}", w.Epoch, w.Start, w.Step, pos, w.RunEnd, w.StreamEnd, w.Last)
}
