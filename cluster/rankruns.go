package cluster

import "fmt"

// RankRuns is one rank's node side for one node process life: the piece
// the node's actor drives between the coordinator's messages and the
// pipeline, and that the simulation drives the same way. It holds the
// current session's RankLeases, the rank's steps across sessions
// (RankSteps), the positions taken ahead of what the pipeline was given,
// and what the coordinator acknowledged, per session: the one owner of
// the rank's acknowledged offsets and steps, and of what its trainer is
// told of them (TakeAcks; the trainer's side reads a published copy).
//
// The pipeline asks for work with Fill; a Run is a piece of one epoch's
// stream in stream order (what actors.Work carries, less the samples: a
// Run names positions, and the shell maps each to its sample through the
// epoch's Order). The trainer commits a step; Commit turns it into the
// stream offset the coordinator needs.
//
// Pure; not safe for concurrent use.
type RankRuns struct {
	rank   string
	epochs int
	batch  int64
	rl     *RankLeases // the current session's; nil between sessions
	align  int         // SetAlign's, given to every session's RankLeases
	steps  *RankSteps  // nil until the first session
	ahead  []Position  // taken from rl, not yet given to the pipeline
	acked  map[int]int64
	// prev and prevAcked are the session before this one (the current
	// one's predecessor, or the last one while there is none): a Welcome
	// may acknowledge its last commit late.
	prev      Fence
	prevAcked map[int]int64
	buf       []Position // Fill's, reused

	// What the trainer is told of acknowledgements (TrainerAcks): the
	// newest acknowledged commit of this process life, the last
	// acknowledged commit of each epoch of the current and the previous
	// session, the epochs the coordinator completed in the current
	// session, the highest commit of each epoch still waiting for its
	// Ack, and the acknowledgements not yet taken (TakeAcks).
	last      *Ack
	stepAcks  map[Fence]map[int]Ack
	completed map[int]bool
	waiting   map[int]int64
	news      []Ack
	// inherited is the newest commit the coordinator holds from the
	// rank's sessions in another process life of this node (LateAcks),
	// kept while this process has acknowledged none (last nil): what a
	// trainer connecting to a restarted node is told its checkpoint is.
	// viewChanged: it changed since the last TakeAcks.
	inherited   *Ack
	viewChanged bool
	// CompletedToken, if set, turns the newest commit's resume token into
	// the one that stands for a commit of a completed epoch (its epoch and
	// step, the newest generation, which holds the epoch complete); unset,
	// such a commit carries the newest token as it is.
	CompletedToken func(tok string, epoch int, step int64) string
}

// Run is the next piece of an epoch's stream for the pipeline: Positions
// are stream offsets Start, Start+1, ... of epoch Epoch, and the run's
// first batch (the one holding offset Base) is step Step. RunEnd says
// the run ends after these positions (the pipeline ships a short last
// batch), StreamEnd that the epoch's stream, as planned, ends with it,
// and Last that the rank's work for the job is over.
type Run struct {
	Epoch     int
	Start     int64
	Base      int64 // stream offset of the run's first position
	Step      int64
	Positions []Position
	RunEnd    bool
	StreamEnd bool
	Last      bool
}

// NewRankRuns returns the node side of rank, between sessions.
func NewRankRuns(rank string) *RankRuns { return &RankRuns{rank: rank} }

// Rank is the rank's name.
func (r *RankRuns) Rank() string { return r.rank }

// Active reports whether the rank has a session.
func (r *RankRuns) Active() bool { return r.rl != nil }

// Session is the current session's fence; zero between sessions.
func (r *RankRuns) Session() Fence {
	if r.rl == nil {
		return Fence{}
	}
	return r.rl.Session()
}

// SetAlign sets the unit revoked leases stop at a whole number of
// (RankLeases.SetAlign: a mixture's round), for the current session and
// the ones after.
func (r *RankRuns) SetAlign(unit int) {
	r.align = unit
	if r.rl != nil {
		r.rl.SetAlign(unit)
	}
}

// Leases is the current session's RankLeases (nil between sessions): the
// shell asks it for work (Request) and sends its Messages.
func (r *RankRuns) Leases() *RankLeases { return r.rl }

// Steps is the rank's step numbering (nil before its first session).
func (r *RankRuns) Steps() *RankSteps { return r.steps }

// StartSession starts session s of a job of epochs epochs with batch
// size batch, ending the current one first if there is one. Steps go on
// from the last acknowledged ones and from the last commits of the
// rank's earlier sessions the Welcome hands it (s.Committed): the
// coordinator holds those durable, so the trainer's steps of the epoch
// go on after them even when they were made in another process life of
// this node (a restarted node would otherwise number the epoch from 0
// again, and commit the same steps twice). If the batch size changed in
// this process life, steps start over (a job of another batch size has
// other steps); a new process cannot tell, and goes on from s.Committed.
func (r *RankRuns) StartSession(s RankSession, epochs int, batch int64) {
	if r.rl != nil {
		r.EndSession()
	}
	r.rl = NewRankLeases(s, epochs)
	r.rl.SetAlign(r.align)
	r.epochs, r.batch = epochs, batch
	otherBatch := r.steps != nil && r.steps.BatchSize() != batch
	if r.steps == nil || otherBatch {
		r.steps = NewRankSteps(batch)
	}
	for _, c := range s.Committed {
		if c.Rank == r.rank && !otherBatch {
			r.steps.Acked(c.Epoch, c.Step)
		}
	}
	r.steps.StartSession()
	r.acked = map[int]int64{}
	r.ahead = nil
	r.completed, r.waiting = map[int]bool{}, map[int]int64{}
	for f := range r.stepAcks {
		if f != r.prev {
			delete(r.stepAcks, f)
		}
	}
}

// EndSession drops the session's leases and what was taken ahead: what
// the rank delivered after its last acknowledged commit will be re-issued
// by the coordinator. The session stays known as the previous one, for
// late acknowledgements.
func (r *RankRuns) EndSession() {
	if r.rl == nil {
		return
	}
	r.prev, r.prevAcked = r.rl.Session(), r.acked
	r.rl, r.acked, r.ahead = nil, nil, nil
	r.completed, r.waiting = nil, nil
}

// Grant, Revoke and End apply the coordinator's messages to the current
// session (those of other sessions are ignored).
func (r *RankRuns) Grant(l Lease) {
	if r.rl != nil {
		r.rl.Grant(l)
	}
}

// Revoke: see Grant.
func (r *RankRuns) Revoke(rv Revoke) {
	if r.rl != nil {
		r.rl.Revoke(rv)
	}
}

// End applies a StreamEnd; it reports whether it says the epoch is
// complete cluster-wide for the current session.
func (r *RankRuns) End(e StreamEnd) bool {
	if r.rl == nil || e.Session != r.rl.Session() {
		return false
	}
	r.rl.End(e)
	if !e.EpochComplete {
		return false
	}
	// The coordinator acknowledges no more commits of the epoch: the one
	// waiting counts as acknowledged, and so will later ones (padding).
	r.completed[e.Epoch] = true
	if step, ok := r.waiting[e.Epoch]; ok {
		r.ackCompleted(e.Epoch, step)
	}
	return true
}

// Ack applies an acknowledged commit of the current session; it reports
// false (and changes nothing) for another session's.
func (r *RankRuns) Ack(a Ack) bool {
	if r.rl == nil || a.Session != r.rl.Session() || a.Rank != r.rank {
		return false
	}
	r.rl.Ack(a)
	r.acked[a.Epoch] = max(r.acked[a.Epoch], a.Offset)
	r.steps.Acked(a.Epoch, a.Step)
	if w, ok := r.waiting[a.Epoch]; ok && w <= a.Step {
		delete(r.waiting, a.Epoch)
	}
	r.noteAck(a)
	return true
}

// noteAck records a as what the trainer is told: the newest
// acknowledged commit, and its session's epoch's.
func (r *RankRuns) noteAck(a Ack) {
	if r.stepAcks == nil {
		r.stepAcks = map[Fence]map[int]Ack{}
	}
	by := r.stepAcks[a.Session]
	if by == nil {
		by = map[int]Ack{}
		r.stepAcks[a.Session] = by
	}
	if old, ok := by[a.Epoch]; ok && old.Step >= a.Step {
		return
	}
	by[a.Epoch] = a
	r.last = &a
	r.news = append(r.news, a)
}

// ackCompleted acknowledges, for the trainer, the commit of step of the
// current session's completed epoch: the newest generation holds the
// epoch complete, so it restores this commit too.
func (r *RankRuns) ackCompleted(epoch int, step int64) {
	delete(r.waiting, epoch)
	a := Ack{Rank: r.rank, Session: r.rl.Session(), Epoch: epoch, Step: step, Completed: true}
	if r.last != nil {
		a.Token = r.last.Token
		if r.CompletedToken != nil {
			a.Token = r.CompletedToken(a.Token, epoch, step)
		}
	}
	if through, err := r.steps.Through(epoch, step); err == nil {
		a.Offset = through
	}
	r.noteAck(a)
}

// TrainerAcks is what the trainer may be told of the rank's
// acknowledgements: Last, the newest acknowledged commit of this process
// life (nil: none), which a trainer restores after a rollback; and
// Steps, the last acknowledged commit of each epoch of the current and
// the previous session. The shell publishes a copy after every change
// (TakeAcks) for the trainer's side to read.
type TrainerAcks struct {
	Last  *Ack
	Steps map[Fence]map[int]Ack
	// Inherited is the rank's newest commit the coordinator holds from an
	// earlier process life of this node (nil: none known): a restarted
	// node's trainer is told of it until this process acknowledges one
	// of its own (Last).
	Inherited *Ack
}

// Acked returns the last acknowledged commit of epoch of session s.
func (t *TrainerAcks) Acked(s Fence, epoch int) (Ack, bool) {
	if t == nil {
		return Ack{}, false
	}
	a, ok := t.Steps[s][epoch]
	return a, ok
}

// TakeAcks returns the acknowledgements recorded since the last call
// (from Ack, LateAcks, an epoch's completion and commits of completed
// epochs), in order, with a copy of TrainerAcks after them; nil, nil
// when nothing changed.
func (r *RankRuns) TakeAcks() ([]Ack, *TrainerAcks) {
	if len(r.news) == 0 && !r.viewChanged {
		return nil, nil
	}
	news := r.news
	r.news, r.viewChanged = nil, false
	t := &TrainerAcks{Steps: make(map[Fence]map[int]Ack, len(r.stepAcks))}
	if r.last != nil {
		l := *r.last
		t.Last = &l
	}
	if r.inherited != nil {
		l := *r.inherited
		t.Inherited = &l
	}
	for f, by := range r.stepAcks {
		c := make(map[int]Ack, len(by))
		for e, a := range by {
			c[e] = a
		}
		t.Steps[f] = c
	}
	return news, t
}

// LateAcks takes the commits a Welcome says the coordinator holds durable
// and returns those of the current or the previous session whose Acks
// never arrived: the coordinator died between its journal write and the
// Ack, or the Ack reached a session already over. The trainer's last
// acknowledged commit, what it restores after a rollback, must be the one
// the coordinator will resume from, or the steps between would be
// neither re-issued nor in its model's history. Call it before
// StartSession with the Welcome's session.
func (r *RankRuns) LateAcks(committed []Ack) []Ack {
	var out []Ack
	for _, ca := range committed {
		var acked map[int]int64
		switch {
		case r.rl != nil && ca.Session == r.rl.Session():
			acked = r.acked
		case !r.prev.IsZero() && ca.Session == r.prev:
			acked = r.prevAcked
		default:
			// A session of another process life of this node: nothing
			// to acknowledge to this one's trainer, but while this
			// process has acknowledged nothing, the newest such commit
			// is what the rank's trainer last checkpointed as far as
			// the coordinator knows (TrainerAcks.Inherited).
			if r.last == nil && ca.Token != "" && (r.inherited == nil || r.inherited.Epoch < ca.Epoch ||
				r.inherited.Epoch == ca.Epoch && r.inherited.Step < ca.Step) {
				c := ca
				r.inherited, r.viewChanged = &c, true
			}
			continue
		}
		if ca.Offset <= acked[ca.Epoch] {
			continue
		}
		acked[ca.Epoch] = ca.Offset
		r.steps.Acked(ca.Epoch, ca.Step)
		if r.rl != nil && ca.Session == r.rl.Session() {
			if w, ok := r.waiting[ca.Epoch]; ok && w <= ca.Step {
				delete(r.waiting, ca.Epoch)
			}
		}
		r.noteAck(ca)
		out = append(out, ca)
	}
	return out
}

// Acked returns the offset of epoch's stream the current session's
// acknowledged commits reach.
func (r *RankRuns) Acked(epoch int) int64 { return r.acked[epoch] }

// Commit turns a trainer's commit of step of epoch into the stream offset
// it commits through and queues it (RankLeases.Commit). It fails for a
// step the session never gave the pipeline whole; between sessions it
// does nothing (the trainer hears of the rollback from Next).
func (r *RankRuns) Commit(epoch int, step int64) error {
	if r.rl == nil {
		return nil
	}
	through, err := r.steps.Through(epoch, step)
	if err != nil {
		return err
	}
	if r.completed[epoch] {
		// Acknowledged at once (TakeAcks): the coordinator acknowledges
		// no commit of a completed epoch.
		if a, ok := r.stepAcks[r.rl.Session()][epoch]; !ok || a.Step < step {
			r.ackCompleted(epoch, step)
		}
		return nil
	}
	if err := r.rl.Commit(epoch, through, step, r.steps.Cuts(epoch, through)); err != nil {
		return err
	}
	if w, ok := r.waiting[epoch]; !ok || w < step {
		r.waiting[epoch] = step
	}
	return nil
}

// Fill answers the pipeline's Want of up to want positions; done says the
// coordinator declared the job done. ok is false when there is nothing to
// give yet (wait for grants, and call Fill again after the next message).
// run.Positions is valid until the next call.
//
// It keeps one position taken ahead of what it gives, so it knows whether
// the position it gives ends the run before the pipeline could ship that
// batch: a batch that completes with the run's last position must carry
// the end.
func (r *RankRuns) Fill(want int, done bool) (run Run, ok bool) {
	if r.rl == nil {
		return Run{}, false // the shell answers a Want between sessions
	}
	b := r.batch
	seg := r.steps.Current()
	run.Positions = r.buf[:0]
	defer func() { r.buf = run.Positions[:0] }()
	for {
		for len(r.ahead) < 2 {
			p, ok := r.rl.Take()
			if !ok {
				break
			}
			r.ahead = append(r.ahead, p)
		}
		if len(r.ahead) == 0 || len(run.Positions) == want {
			break
		}
		p := r.ahead[0]
		if seg == nil {
			r.steps.Open(p.Epoch, p.Offset)
			seg = r.steps.Current()
		}
		if p.Epoch != seg.Epoch && seg.Length%b != 0 && r.resume() {
			// An older epoch's stream grew (a departed rank's work came
			// back) while this run is mid-batch: finish the batch from
			// this epoch's leases first if they hold more, so the cut
			// costs no partial batch (which would be one step more than
			// the other ranks take).
			continue
		}
		if p.Epoch != seg.Epoch {
			break // the run ends here: an older epoch's stream grew
		}
		inBatch := (p.Offset - seg.Base) % b
		if len(r.ahead) == 1 && inBatch == b-1 && !r.rl.Ended(p.Epoch) {
			break // it would complete a batch that may be the stream's last: wait to know
		}
		if len(r.ahead) > 1 && r.ahead[1].Epoch != p.Epoch && inBatch == b-1 && !r.rl.Ended(p.Epoch) {
			// p completes a batch and another epoch's position is next:
			// give it only once its stream's next position is taken (a
			// position only held may still be revoked) or the stream is
			// known to end with it. Else the stream's last batch could
			// ship without its end, and a trainer that commits at the
			// end of a stream would never commit it (the epoch would
			// never complete). The position taken waits behind the
			// other epoch's (resume finds it).
			if q, ok := r.rl.TakeFrom(p.Epoch); ok {
				r.ahead = append(r.ahead, q)
			} else if !r.rl.Ended(p.Epoch) {
				break
			}
		}
		run.Positions = append(run.Positions, p)
		r.ahead = r.ahead[1:]
		r.steps.Give(1)
	}
	if seg != nil {
		run.Epoch = seg.Epoch
		run.Base = seg.Base
		run.Start = seg.Base + seg.Length - int64(len(run.Positions))
		run.Step = seg.FirstStep
		switch {
		case len(r.ahead) > 0 && r.ahead[0].Epoch != seg.Epoch:
			if seg.Length%b != 0 && r.resume() {
				// The Want ran out as another epoch's position came
				// first mid-batch: the next fill finishes the batch.
				break
			}
			if seg.Length%b != 0 && !r.rl.Ended(seg.Epoch) {
				// The run's last batch is open and may be its stream's
				// last: keep it open until that is known, so it carries
				// the end (a zero-item run end does).
				break
			}
			// Another epoch's position is next: this one's stream ended
			// (the usual case), or grew after the rank moved on.
			run.RunEnd = true
			run.StreamEnd = r.rl.Ended(seg.Epoch)
		case len(r.ahead) == 0 && r.rl.Ended(seg.Epoch):
			run.RunEnd, run.StreamEnd = true, true
		}
	}
	if run.RunEnd && done && len(r.ahead) == 0 {
		run.Last = true
	}
	if seg == nil && done && len(r.ahead) == 0 {
		// Nothing open, nothing held, and every epoch is committed: the
		// coordinator sent this rank's last grants before Done.
		run.RunEnd, run.Last = true, true
	}
	if len(run.Positions) == 0 && !run.RunEnd {
		return Run{}, false
	}
	if run.RunEnd && seg != nil {
		r.steps.End(run.StreamEnd)
	}
	return run, true
}

// resume puts the open run's epoch's next position first in r.ahead: the
// one already taken behind another epoch's, else the next its leases
// hold. It reports false when there is none.
func (r *RankRuns) resume() bool {
	epoch := r.steps.Current().Epoch
	for i, q := range r.ahead {
		if q.Epoch == epoch {
			copy(r.ahead[1:i+1], r.ahead[:i])
			r.ahead[0] = q
			return true
		}
	}
	if q, ok := r.rl.TakeFrom(epoch); ok {
		r.ahead = append([]Position{q}, r.ahead...)
		return true
	}
	return false
}

// Progress returns the Progress events that tell the coordinator how far
// the rank has taken the leases of run's positions: they are the
// pipeline's now, so a split can only take what lies beyond (RankLeases
// stops a revoked lease there), and the coordinator picks steal victims
// by what is really left. One event per lease, for its last position.
func (r *RankRuns) Progress(run Run) []Event {
	var out []Event
	ps := run.Positions
	for i, p := range ps {
		if i+1 < len(ps) && ps[i+1].Lease == p.Lease {
			continue
		}
		out = append(out, Progress{Rank: r.rank, Session: r.Session(), Lease: p.Lease, Through: p.Pos + 1})
	}
	return out
}

// String describes the rank's state, for logs and failing tests.
func (r *RankRuns) String() string {
	if r.rl == nil {
		return fmt.Sprintf("%s: no session (previous %v)", r.rank, r.prev)
	}
	return fmt.Sprintf("%s: session %v, ahead %+v, open run %+v", r.rank, r.rl.Session(), r.ahead, r.steps.Current())
}
