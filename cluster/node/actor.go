package node

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/journal"
	"github.com/longshore/longshore/cluster/wire"
)

// nodeActor owns every rank's lease state. All of it is touched only from
// Receive.
type nodeActor struct {
	n      *Node
	inc    uint64
	coord  *actor.PID
	job    *wire.Job
	done   bool // the coordinator said the job is done
	ranks  []*rankState
	byName map[string]*rankState
	out    []*wire.Event
	report *wire.NodeReport // for the status page, sent with the next events
	orders map[int]sampler
	mix    *cluster.Mixture // the job's, with Config.Mixture
	digest string           // the dataset digest the job must carry
	bad    error            // fatal: the job cannot be served

	// The link to the coordinator life the node follows (cluster.Link):
	// coordLife is its incarnation; retired are the lives followed before,
	// never followed again. A new life of this node gets a new link.
	coordLife uint64
	link      *cluster.Link[*wire.NodeEvents, *wire.NodeMail]
	retired   map[uint64]bool
	linkNow   int64
	hello     bool // send a NodeEvents even with nothing in it
}

// rankState is one rank as the actor sees it: its pure node side (leases,
// steps, acknowledged state) and the pipeline of its current session.
type rankState struct {
	r    *Rank
	runs *cluster.RankRuns
	pipe *actors.Pipeline // nil between sessions
	want *wantMsg
}

func (a *nodeActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
	case *actor.Stopping:
		for _, rs := range a.ranks {
			a.endSession(rs)
		}
		if a.link != nil {
			a.link.Close() // off the process's link metrics
		}
		return
	case coordMsg:
		a.coord = m.pid
		if a.coord == nil {
			a.coord = actor.NewPID(m.addr, wire.CoordinatorActor)
		}
	case *wire.NodeMail:
		a.linkMail(m)
	case linkTickMsg:
		a.linkNow++
		a.resend(ctx)
		return
	case wantMsg:
		rs := a.ranks[m.rank]
		if !rs.runs.Active() || m.session != rs.runs.Session() {
			m.give(actors.Work{Err: ErrRolledBack})
			return
		}
		rs.want = &m
	case commitMsg:
		a.commit(m)
	case resetMsg:
		if rs := a.ranks[m.rank]; rs.runs.Active() && rs.runs.Session() == m.session {
			a.n.log.Info("trainer reset; ending the session", "rank", rs.r.name, "session", m.session.String())
			we, _ := wire.EventOf(cluster.Reset{Rank: rs.r.name, Session: m.session})
			a.out = append(a.out, we)
			a.endSession(rs)
		}
	case tickMsg:
		active := false
		for _, rs := range a.ranks {
			if rl := rs.runs.Leases(); rl != nil {
				rl.Request(a.lookahead(), true)
				active = true
			}
		}
		// A life without sessions says hello now and then: a coordinator
		// that knows a later life of this node answers with it (an
		// Eviction naming that life), and this one joins above it.
		a.hello = !active && !a.done && a.bad == nil
		if a.n.cfg.Report != nil {
			a.report = a.n.cfg.Report().Bound()
		}
	case rejoinedMsg:
		if m.err != nil {
			a.n.log.Warn("rejoin failed; gossip will retry on the next eviction", "incarnation", m.inc, "err", m.err)
		}
	default:
		return
	}
	for _, rs := range a.ranks {
		a.pump(rs)
	}
	a.send(ctx)
}

func (a *nodeActor) lookahead() int64 {
	if a.job == nil {
		return 0
	}
	return int64(a.n.cfg.Lookahead) * a.job.ShardSize
}

// mail applies what the coordinator sent, in the order NodeMail lists.
func (a *nodeActor) mail(m *wire.NodeMail) {
	for _, w := range m.Welcomes {
		a.welcome(w)
	}
	for _, e := range m.Evictions {
		if e.Node != a.n.cfg.Node || e.Incarnation < a.inc || a.done {
			continue // about a life already over, or the job is
		}
		if e.Incarnation > a.inc {
			// The coordinator knows a later life of this node than this
			// one (a process before this one got further; the start time
			// this life took its incarnation from is no guide, a clock
			// may step back): join above it.
			a.n.log.Warn("the coordinator knows a later life of this node; joining above it", "incarnation", a.inc, "known", e.Incarnation)
			a.inc = e.Incarnation
		} else {
			a.n.log.Warn("evicted; rolling back and rejoining", "incarnation", a.inc)
		}
		for _, rs := range a.ranks {
			a.endSession(rs)
		}
		a.inc++
		a.newLink() // a new life, a new link
		inc := a.inc
		a.n.wg.Add(1)
		go func() {
			defer a.n.wg.Done()
			var err error
			if a.n.cfg.Rejoin != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err = a.n.cfg.Rejoin(ctx, inc)
				cancel()
			}
			a.n.sys.Root.Send(a.n.pid, rejoinedMsg{inc: inc, err: err})
		}()
	}
	for _, f := range m.Fenced {
		for _, rs := range a.ranks {
			if rs.runs.Active() && rs.runs.Session() == f.Cluster() {
				a.n.log.Warn("session fenced by the coordinator; rolling back", "rank", rs.r.name, "session", f.Cluster().String())
				a.endSession(rs)
			}
		}
	}
	for _, l := range m.Grants {
		if rs := a.byName[l.Rank]; rs != nil && rs.runs.Active() {
			rs.runs.Grant(l.Cluster())
			a.prefetch(l.Cluster())
		}
	}
	for _, rv := range m.Revokes {
		if rs := a.byName[rv.Rank]; rs != nil {
			rs.runs.Revoke(rv.Cluster())
		}
	}
	for _, e := range m.Ends {
		if rs := a.byName[e.Rank]; rs != nil {
			ce := e.Cluster()
			rs.runs.End(ce)
			a.flushAcks(rs)
		}
	}
	for _, ack := range m.Acks {
		if rs := a.byName[ack.Rank]; rs != nil {
			rs.runs.Ack(ack.Cluster())
			a.flushAcks(rs)
		}
	}
	if m.Done && !a.done {
		a.n.log.Info("job done")
		a.done = true
	}
	if b := m.GetStoreBudget(); b != nil && a.n.cfg.OnStoreBudget != nil {
		a.n.cfg.OnStoreBudget(b.Rps)
	}
}

func (a *nodeActor) welcome(w *wire.Welcome) {
	if w.Node != a.n.cfg.Node || w.Incarnation != a.inc {
		return // for an earlier life of this node
	}
	if err := a.jobMixture(w.Job); err != nil {
		a.fail(err)
		return
	}
	if err := a.checkJob(w.Job); err != nil {
		a.fail(err)
		return
	}
	a.job = w.Job
	ranks := w.Cluster().Ranks
	for i, s := range ranks {
		if rs := a.byName[s.Rank]; rs != nil {
			a.lateAcks(rs, w.Ranks[i].GetCommitted())
		}
	}
	if a.n.cfg.OnJob != nil {
		a.n.cfg.OnJob(jobOf(w.Job)) // a trainer told of the job is told of these acks too
	}
	for _, s := range ranks {
		rs := a.byName[s.Rank]
		if rs == nil {
			continue
		}
		if rs.runs.Active() {
			if cur := rs.runs.Session(); cur == s.Session || s.Session.Less(cur) {
				continue // duplicate, or late from an older coordinator life
			}
			a.endSession(rs) // a new coordinator life took over
		}
		a.startSession(rs, s)
	}
}

// lateAcks acknowledges to the trainer the commits of its current or
// previous session that the coordinator holds durable but whose Acks never
// arrived: the coordinator died between its journal write and the Ack,
// or the Ack reached a session already over. The trainer's last
// acknowledged commit — what it restores after ErrRolledBack — must be
// the one the coordinator will resume from, or the steps between would be
// neither re-issued nor in its model's history.
func (a *nodeActor) lateAcks(rs *rankState, committed []*wire.Ack) {
	cs := make([]cluster.Ack, len(committed))
	for i, wa := range committed {
		cs[i] = wa.Cluster()
	}
	for _, ca := range rs.runs.LateAcks(cs) {
		a.n.log.Info("commit acknowledged late", "rank", rs.r.name, "session", ca.Session.String(), "epoch", ca.Epoch, "step", ca.Step)
	}
	a.flushAcks(rs)
}

// flushAcks publishes what the trainer may be told of rs's
// acknowledgements (RankRuns.TakeAcks, Rank.Acks) and calls OnAck with
// each new one. The actor calls it right after every change, before any
// end of a session shows in Next: a trainer rolled back then restores
// the commit the coordinator resumes from.
func (a *nodeActor) flushAcks(rs *rankState) {
	news, view := rs.runs.TakeAcks()
	if view == nil {
		return
	}
	rs.r.setAcks(view)
	if a.n.cfg.OnAck != nil {
		for _, ack := range news {
			a.n.cfg.OnAck(rs.r.name, ack.Session, ack)
		}
	}
}

func (a *nodeActor) checkJob(j *wire.Job) error {
	switch {
	case j == nil:
		return fmt.Errorf("%w: the welcome carries no job", ErrJobMismatch)
	case j.Samples != a.samples() || j.ManifestDigest != a.digest:
		return fmt.Errorf("%w: coordinator has %d samples (manifest %s), this node %d (%s): point both at the same dataset (and the same --exclude list)",
			ErrJobMismatch, j.Samples, j.ManifestDigest, a.samples(), a.digest)
	case j.BatchSize < 1 || j.Epochs < 1 || j.Block < 1 || j.ShardSize < 1 || j.Window < 0:
		return fmt.Errorf("%w: unusable job %v", ErrJobMismatch, j)
	}
	return nil
}

// fail stops serving: every rank's Next returns err.
func (a *nodeActor) fail(err error) {
	a.n.log.Error("cannot serve the job", "err", err)
	a.bad = err
	for _, rs := range a.ranks {
		a.endSession(rs)
		rs.r.mu.Lock()
		rs.r.mu.err = err
		rs.r.changedLocked()
		rs.r.mu.Unlock()
	}
}

func (a *nodeActor) startSession(rs *rankState, s cluster.RankSession) {
	j := a.job
	cfg := a.n.cfg.Pipeline
	cfg.BatchSize = int(j.BatchSize)
	cfg.Seed = j.Seed
	cfg.Epochs = int(j.Epochs)
	cfg.FirstEpoch = 0
	cfg.DropLast = false
	cfg.ReadAheadAuto = false // what a rank took cannot be handed to an idle one: see below
	if cfg.ReadAhead == 0 {
		// What a rank has taken from its leases cannot be split off for
		// an idle rank: take no more than keeps the fetchers busy (with
		// FetchAuto, what the tuner starts at; the rank asks for more as
		// its fetchers take it, a local round trip).
		f := cfg.WithDefaults().FetchConcurrency
		if cfg.FetchAuto {
			f = min(f, 16)
		}
		cfg.ReadAhead = max(cfg.BatchSize, f)
	}
	deps := a.n.cfg.Deps
	if a.n.cfg.RankDeps != nil {
		deps = a.n.cfg.RankDeps(rs.r.index)
	}
	p, err := actors.NewPipeline(cfg, rs.r.index, source{n: a.n, rank: rs.r.index, session: s.Session}, deps)
	if err != nil {
		a.fail(fmt.Errorf("agent: rank %s: pipeline: %w", rs.r.name, err))
		return
	}
	// A mixture's leases are whole rounds (cluster.Config.Align), and a
	// revoked one (--balance dynamic) stops at a round's end too.
	align := 0
	if a.mix != nil {
		align = a.mix.Round()
	}
	rs.runs.SetAlign(align)
	rs.runs.StartSession(s, int(j.Epochs), j.BatchSize)
	rs.pipe = p
	rs.r.tally.Use(p)
	a.n.log.Info("session started", "rank", rs.r.name, "session", s.Session.String(), "first_epoch", s.FirstEpoch)
	rs.r.mu.Lock()
	rs.r.mu.session = s.Session
	rs.r.mu.pipe = p
	rs.r.mu.batch = j.BatchSize
	rs.r.changedLocked()
	rs.r.mu.Unlock()
	rs.runs.Leases().Request(a.lookahead(), false)
}

// endSession drops a rank's leases and pipeline: what it delivered after
// its last acknowledged commit will be re-issued by the coordinator.
func (a *nodeActor) endSession(rs *rankState) {
	// Next must see the session gone before the old pipeline can fail:
	// an error from a pipeline that is still the rank's current one is
	// the trainer's to see, one from a replaced pipeline is not.
	rs.r.mu.Lock()
	rs.r.mu.session = cluster.Fence{}
	rs.r.mu.pipe = nil
	rs.r.changedLocked()
	rs.r.mu.Unlock()
	if rs.want != nil {
		rs.want.give(actors.Work{Err: ErrRolledBack})
	}
	rs.r.tally.Use(nil)
	a.n.closePipeline(rs.pipe)
	rs.runs.EndSession()
	rs.pipe, rs.want = nil, nil
}

// pump gives the pipeline what it asked for, asks for more work, and
// collects the messages to send. It also tells Next when a rank without a
// session has nothing left to do.
func (a *nodeActor) pump(rs *rankState) {
	rl := rs.runs.Leases()
	if rl == nil {
		if a.done && a.bad == nil {
			rs.r.mu.Lock()
			if !rs.r.mu.finished {
				rs.r.mu.finished = true
				rs.r.changedLocked()
			}
			rs.r.mu.Unlock()
		}
		return
	}
	a.fill(rs)
	rl.Request(a.lookahead(), false)
	for _, ev := range rl.Messages() {
		we, err := wire.EventOf(ev)
		if err != nil {
			panic(err) // RankLeases queues only rank events
		}
		a.out = append(a.out, we)
	}
}

// fill answers the pipeline's outstanding Want with the rank's next run
// (cluster.RankRuns.Fill), telling the coordinator how far the rank took
// its leases.
func (a *nodeActor) fill(rs *rankState) {
	if rs.want == nil {
		return
	}
	run, ok := rs.runs.Fill(rs.want.n, a.done)
	if !ok {
		return // wait for grants
	}
	for _, ev := range rs.runs.Progress(run) {
		we, _ := wire.EventOf(ev)
		a.out = append(a.out, we)
	}
	w := actors.Work{Epoch: run.Epoch, Start: run.Start, Step: run.Step,
		RunEnd: run.RunEnd, StreamEnd: run.StreamEnd, Last: run.Last, Items: make([]actors.Item, 0, len(run.Positions))}
	for _, p := range run.Positions {
		it, err := a.item(p)
		if err != nil {
			a.fail(err)
			return
		}
		w.Items = append(w.Items, it)
	}
	give := rs.want.give
	rs.want = nil
	give(w)
}

// sampler maps an epoch's positions to global indices, positions past
// its end to padding: cluster.Order, or a mixture's cluster.MixEpoch.
type sampler interface {
	Sample(pos int64) (index int64, pad bool)
}

func (a *nodeActor) order(epoch int) sampler {
	o, ok := a.orders[epoch]
	if !ok {
		if a.orders == nil {
			a.orders = map[int]sampler{}
		}
		if a.mix != nil {
			o = a.mix.Epoch(epoch)
		} else {
			o = cluster.NewOrder(a.job.Seed, epoch, a.job.Samples, int(a.job.Block), cluster.EffectiveWindow(int(a.job.Block), int(a.job.Window)))
		}
		a.orders[epoch] = o
	}
	return o
}

// jobMixture makes the mixture of the job (Config.Mixture) and the
// digest the job must carry; without a mixture, the Digest configured.
func (a *nodeActor) jobMixture(j *wire.Job) error {
	a.digest = a.n.cfg.Digest
	if a.n.cfg.Mixture == nil || j == nil {
		return nil
	}
	m, digest, err := a.n.cfg.Mixture(jobOf(j))
	if err != nil {
		return fmt.Errorf("%w: the mixture for the coordinator's job: %v", ErrJobMismatch, err)
	}
	if a.mix == nil || a.mix.Identity() != m.Identity() {
		a.orders = nil // a mixture of another identity is refused below; never mix orders
	}
	a.mix, a.digest = m, digest
	return nil
}

// jobOf is the Job a Welcome's job tells.
func jobOf(j *wire.Job) Job {
	return Job{Samples: j.Samples, Seed: j.Seed, Epochs: int(j.Epochs), BatchSize: int(j.BatchSize),
		Block: int(j.Block), Window: cluster.EffectiveWindow(int(j.Block), int(j.Window))}
}

// item maps a leased position to its sample (actors.ItemAt). With a
// Catalog that reads the manifest lazily it may wait for a piece of it;
// a lookup that fails (the store down past its retries, a stale index)
// stops the node with the error, as a dataset that cannot be read at
// start would.
func (a *nodeActor) item(p cluster.Position) (actors.Item, error) {
	idx, pad := a.order(p.Epoch).Sample(p.Pos)
	return actors.ItemAt(a.n.ctx, a.n.cfg.Catalog, p.Offset, idx, pad || p.Pad)
}

// samples is the dataset's size as this node sees it: a mixture's
// positions per epoch (whole rounds), else the catalog's samples.
func (a *nodeActor) samples() int64 {
	if a.mix != nil {
		return a.mix.Len()
	}
	return a.n.cfg.Catalog.Len()
}

// prefetch tells the catalog the samples of a lease just granted: the
// order keeps blocks of consecutive indices together, so a lease's
// samples lie in a few runs of the manifest, one per block, each in one
// piece of the index when the block divides the index's pieces.
func (a *nodeActor) prefetch(l cluster.Lease) {
	c := a.n.cfg.Catalog
	if a.job == nil || a.job.Samples == 0 {
		return
	}
	o := a.order(l.Epoch)
	block := max(a.job.Block, 1)
	seen := map[int64]bool{}
	for pos := l.Start; pos < l.End; pos++ {
		idx, _ := o.Sample(pos)
		if lo := idx / block * block; !seen[lo] {
			seen[lo] = true
			c.Prefetch(lo, lo+block)
		}
	}
}

// commit turns a trainer's step into a stream offset for RankLeases.
func (a *nodeActor) commit(m commitMsg) {
	rs := a.ranks[m.rank]
	if !rs.runs.Active() || rs.runs.Session() != m.session {
		return // the session is over; Next tells the trainer
	}
	if err := rs.runs.Commit(m.epoch, m.step); err != nil {
		a.n.log.Error("commit refused", "rank", rs.r.name, "epoch", m.epoch, "step", m.step, "err", err)
	}
	a.flushAcks(rs) // a commit of a completed epoch is acknowledged at once
}

// send flushes the queued events to the coordinator in one message: on
// the link, numbered and kept until acknowledged, once the node follows a
// coordinator life.
func (a *nodeActor) send(ctx actor.Context) {
	if a.coord == nil {
		return
	}
	ack := a.link != nil && a.link.AckDue()
	if len(a.out) == 0 && a.report == nil && !ack && !a.hello {
		return
	}
	a.hello = false
	m := &wire.NodeEvents{Node: a.n.cfg.Node, Incarnation: a.inc, Events: a.out, Report: a.report, Coordinator: a.coordLife}
	lost := false
	if a.link != nil && len(a.out) > 0 {
		lost = !a.link.Lost()
		f := a.link.Send(&wire.NodeEvents{Node: m.Node, Incarnation: m.Incarnation, Events: a.out, Coordinator: a.coordLife}, a.linkNow)
		m.Seq = f.Seq // 0 once the link lost its peer: best effort
		lost = lost && a.link.Lost()
	}
	if a.link != nil {
		m.Ack = a.link.Ack()
	}
	// As a request, so the coordinator can answer a node gossip has not
	// introduced to it yet (a restarted coordinator, coord.nodeEvents).
	ctx.Request(a.coord, m)
	a.out, a.report = nil, nil
	if lost {
		// The link to the coordinator went over its bound
		// (cluster.Link Send): end this life and rejoin as a new one,
		// as if the coordinator had evicted it.
		a.n.log.Warn("the control link to the coordinator kept too much unacknowledged; ending this life", "incarnation", a.inc)
		a.mail(&wire.NodeMail{Evictions: []*wire.Eviction{wire.EvictionOf(cluster.Eviction{Node: a.n.cfg.Node, Incarnation: a.inc})}})
	}
}

// newLink starts a new link to the coordinator life followed.
func (a *nodeActor) newLink() {
	if a.link != nil {
		a.link.Close()
	}
	a.link = &cluster.Link[*wire.NodeEvents, *wire.NodeMail]{Resend: 2, MaxPending: a.n.cfg.LinkMaxPending, Meter: &cluster.Links, Size: eventsSize}
}

// eventsSize is a NodeEvents' size, for the link's bound in bytes.
func eventsSize(m *wire.NodeEvents) int { return proto.Size(m) }

// linkMail takes the coordinator's mail off the link: a new coordinator
// life is followed at once (cluster.NewerCoordinator), ending the sessions
// of the old one, whose fences the new life may reuse when it has no
// journal; mail of a life followed before is dropped; the rest is applied
// in the coordinator's order, each once.
func (a *nodeActor) linkMail(m *wire.NodeMail) {
	if m.Coordinator == 0 || m.Node != a.inc {
		// Not on a link (or for another life of this node: the mail's
		// Welcomes and Evictions name their life and are ignored).
		a.mail(m)
		return
	}
	if m.Coordinator != a.coordLife {
		if a.retired[m.Coordinator] || !cluster.NewerCoordinator(a.coordLife, m.Coordinator) {
			return // a life followed before, or older than the one followed
		}
		if a.coordLife != 0 {
			if a.retired == nil {
				a.retired = map[uint64]bool{}
			}
			a.retired[a.coordLife] = true
			a.n.log.Info("a new coordinator life; ending the sessions of the old one", "old", a.coordLife, "new", m.Coordinator)
			for _, rs := range a.ranks {
				if rs.runs.Active() {
					a.endSession(rs)
				}
			}
		}
		a.coordLife = m.Coordinator
		a.out = nil    // for the old life
		a.done = false // the new life says whether its job is done
		a.newLink()
	}
	a.link.Acked(m.Ack, a.linkNow)
	if m.Seq == 0 {
		a.mail(m) // unnumbered: an ack, or best effort
		return
	}
	for _, mm := range a.link.Accept(cluster.LinkFrame[*wire.NodeMail]{Seq: m.Seq, Body: m}) {
		a.mail(mm)
	}
}

// resend sends again the events the coordinator has not acknowledged
// for long enough.
func (a *nodeActor) resend(ctx actor.Context) {
	if a.link == nil || a.coord == nil {
		return
	}
	for _, f := range a.link.Due(a.linkNow) {
		out := proto.Clone(f.Body).(*wire.NodeEvents)
		out.Seq, out.Ack = f.Seq, a.link.Ack()
		ctx.Request(a.coord, out)
	}
	a.send(ctx) // an acknowledgement due
}

// completedToken returns the journal token tok naming (epoch, step): the
// token that stands for a commit of an epoch the coordinator completed,
// which it acknowledges no more (RankRuns.CompletedToken). The
// generation (what restores) is tok's, and it holds the epoch complete.
// tok unchanged if it does not parse ("" without a journal).
func completedToken(tok string, epoch int, step int64) string {
	t, err := journal.ParseToken(tok)
	if err != nil {
		return tok
	}
	t.Epoch, t.Step = epoch, step
	return t.String()
}
