package cluster

import (
	"cmp"
	"slices"
)

// RankDelivery is one rank's delivery decisions, between the batches the
// rank's sessions produce (RankRuns fills them) and the trainer that
// takes them: which batch the trainer gets and in which era, when a
// session change is a rollback the trainer must hear of first, which
// batches a reset voids, which commits are valid and which wait for the
// coordinator's Ack, and which waiting commits a rollback answers.
//
// An era is the trainer's view of one unbroken run of batches: it starts
// at 1 and each rollback (the rank's session changed under the trainer)
// or reset (a trainer reconnected after batches it never saw
// acknowledged) starts the next. Commits name the era of their batch, so
// a commit of an era that ended can never be taken for a later batch
// with the same step.
//
// Events in: Arrive (a batch of the rank's live session is ready),
// Attach (a trainer connects, with its token), Reset, Commit, Ack and
// Cancel; for a rank whose delivery the node decides alone (standalone:
// nothing fences its one stream), Resume (a trainer connects, with its
// checkpoint's cursor) and Opened (its stream was opened at a cursor). Outputs out: the verdict on each batch, the Rollback the
// trainer is told, the session a reset ends (the shell tells the actor),
// the commits to send (CommitDecision.Wait) and the answers to commits
// (CommitAnswer). What the coordinator acknowledged is an input: the
// TrainerAcks view RankRuns publishes.
//
// A standalone rank is the trivial case: each stream the shell opens is
// a session of its own, which never changes under the trainer (no
// Hold), and each commit is acknowledged by the shell as soon as its
// token is made (Ack). A trainer may resume from a checkpoint older than
// the last commit: Resume says where it starts and whether the stream
// must be reopened there (the stream ran past it), which ends the era.
//
// The shells that drive it: node.Rank.Next (a trainer in the node's
// process), the feed's cluster rank (a trainer on a socket) and the
// delivery server's standalone rank. The
// shell keeps the batch a Hold verdict holds back and gives it to Arrive
// again after the trainer heard of the rollback.
//
// Pure; not safe for concurrent use.
type RankDelivery struct {
	era     uint64
	cur     Fence // the session of this era's batches; zero: none yet
	dropped Fence // the session a reset ended: its batches are void
	// sent is what a commit may name: per epoch of session cur, the
	// steps delivered this era (or the one Opened lets the trainer
	// commit again). It holds no epoch before the commit floor's
	// (committed): a commit of one goes back, whatever it names. An era
	// that ends empties it (its batches' commits are rolled back, and
	// its session never returns), so it keeps the epochs between the
	// floor and the last batch of one session: one or two while the
	// trainer commits, however many sessions and epochs the job runs.
	sent map[int]sentSteps
	// lastSent is the last batch delivered this era; nil: none.
	lastSent *BatchAt
	waiters  map[uint64]BatchAt // commits waiting for their Ack, by id
	nextID   uint64
	// committed is the cursor after the last commit acknowledged this
	// era (or where Resume put the trainer); nil: none. No commit may go
	// back before it, in any epoch.
	committed *Cursor
	// next is the cursor after the last batch delivered from the stream
	// Opened (where it continues); open: a stream is open (Opened, and
	// no Resume reopened it since).
	next Cursor
	open bool
}

// Cursor is where a rank's batches continue: the next is step Step of
// epoch Epoch. Made from a batch by CursorAfter and never normalized
// across an epoch's end (the delivery knows no epoch lengths): two made
// the same way from the same batch are equal, which is all Resume needs.
type Cursor struct {
	Epoch int
	Step  int64
}

// CursorAfter is the cursor following batch (epoch, step).
func CursorAfter(epoch int, step int64) Cursor { return Cursor{Epoch: epoch, Step: step + 1} }

// Less orders cursors (epoch, then step).
func (c Cursor) Less(d Cursor) bool {
	return c.Epoch < d.Epoch || c.Epoch == d.Epoch && c.Step < d.Step
}

// BatchAt is a batch's place: its session, epoch and step.
type BatchAt struct {
	Session Fence
	Epoch   int
	Step    int64
}

// sentSteps are the first and last steps of an epoch of the session
// that were delivered.
type sentSteps struct{ first, last int64 }

// NewRankDelivery returns a rank's delivery state at era 1, nothing
// delivered.
func NewRankDelivery() *RankDelivery {
	return &RankDelivery{era: 1, sent: map[int]sentSteps{}, waiters: map[uint64]BatchAt{}}
}

// Era is the current era.
func (d *RankDelivery) Era() uint64 { return d.era }

// Session is the session of this era's batches; zero when no batch was
// delivered since the era began. A trainer's commits count in it.
func (d *RankDelivery) Session() Fence { return d.cur }

// Waiting is how many commits wait for their Ack.
func (d *RankDelivery) Waiting() int { return len(d.waiters) }

// retained is how many entries d keeps (delivered-step records and
// waiting commits): what TestRankDeliveryBounded bounds.
func (d *RankDelivery) retained() int { return len(d.sent) + len(d.waiters) }

// BatchVerdict is what the shell does with a batch that arrived.
type BatchVerdict int

const (
	// Deliver: give the batch to the trainer, in Arrival.Era.
	Deliver BatchVerdict = iota
	// Drop: the batch is of a session a reset ended: release it.
	Drop
	// Hold: the batch is of a new session; the trainer's session ended
	// under it. Tell the trainer Arrival.Rollback, keep the batch, and
	// give it to Arrive again when the trainer asks for the next one.
	Hold
)

func (v BatchVerdict) String() string {
	switch v {
	case Deliver:
		return "deliver"
	case Drop:
		return "drop"
	case Hold:
		return "hold"
	}
	return "verdict?"
}

// TrainerRollback is what a trainer is told when its era ends under it:
// the new era and the rank's last acknowledged commit (nil: none in this
// node process), which it restores.
type TrainerRollback struct {
	Era  uint64
	Last *Ack
}

// Arrival is the decision on one batch.
type Arrival struct {
	Verdict BatchVerdict
	// Era is the era the batch is delivered in (Deliver).
	Era uint64
	// Rollback is what the trainer is told (Hold).
	Rollback TrainerRollback
	// Answers answer rolled back the commits that waited (Hold).
	Answers []CommitAnswer
}

// Arrive decides on batch b of the rank's live session; acks is what
// the coordinator acknowledged (the trainer restores its Last after a
// rollback). A delivered batch counts as sent: a commit may name it,
// and a trainer that reconnects without its commit makes the rank reset.
func (d *RankDelivery) Arrive(b BatchAt, acks *TrainerAcks) Arrival {
	if !d.dropped.IsZero() && b.Session == d.dropped {
		return Arrival{Verdict: Drop}
	}
	if !d.cur.IsZero() && b.Session != d.cur {
		ans := d.newEra()
		return Arrival{Verdict: Hold, Rollback: TrainerRollback{Era: d.era, Last: lastOf(acks)}, Answers: ans}
	}
	d.cur = b.Session
	if st, ok := d.sent[b.Epoch]; ok {
		d.sent[b.Epoch] = sentSteps{first: st.first, last: max(st.last, b.Step)}
	} else {
		d.sent[b.Epoch] = sentSteps{first: b.Step, last: b.Step}
	}
	at := b
	d.lastSent = &at
	d.next = CursorAfter(b.Epoch, b.Step)
	return Arrival{Verdict: Deliver, Era: d.era}
}

// newEra ends the era: the next batch starts a session of the trainer's
// and every waiting commit is answered rolled back.
func (d *RankDelivery) newEra() []CommitAnswer {
	d.era++
	d.cur = Fence{}
	d.lastSent = nil
	d.committed = nil
	clear(d.sent)
	return d.failWaiters()
}

// setFloor makes c the commit floor and forgets the epochs before its:
// no commit may name them any more.
func (d *RankDelivery) setFloor(c Cursor) {
	d.committed = &c
	for e := range d.sent {
		if e < c.Epoch {
			delete(d.sent, e)
		}
	}
}

func (d *RankDelivery) failWaiters() []CommitAnswer {
	if len(d.waiters) == 0 {
		return nil
	}
	out := make([]CommitAnswer, 0, len(d.waiters))
	for id, w := range d.waiters {
		out = append(out, CommitAnswer{ID: id, Epoch: w.Epoch, Step: w.Step, RolledBack: true})
		delete(d.waiters, id)
	}
	sortAnswers(out)
	return out
}

// Attachment is where a connecting trainer starts.
type Attachment struct {
	// Stale: the trainer's token is not the rank's last acknowledged
	// commit, and a running cluster cannot go back. Refuse it; nothing
	// else changed. Last is that commit.
	Stale bool
	// Era is the era the trainer's batches are in.
	Era uint64
	// Last is the rank's last acknowledged commit (nil: none known): the
	// trainer resumes after it. A node process that acknowledged none
	// names the coordinator's newest commit of the rank from its earlier
	// life (TrainerAcks.Inherited), if it was told one.
	Last *Ack
	// Reset: the last trainer got batches after that commit; they are
	// delivered again. Release the batch held back (Hold) and any batch
	// taken and not delivered, and tell the actor to end session
	// ResetSession (zero: none live).
	Reset        bool
	ResetSession Fence
	// Answers answer rolled back the commits that waited (Reset).
	Answers []CommitAnswer
}

// Attach decides where a trainer that connects with token (empty: none)
// starts; live is the rank's live session (a reset ends it). A token
// other than the last acknowledged commit is stale, unless this node
// process acknowledged nothing for the rank (it restarted: the
// coordinator's state is the authority).
func (d *RankDelivery) Attach(token string, acks *TrainerAcks, live Fence) Attachment {
	last := lastOf(acks)
	if token != "" && last != nil && token != last.Token {
		return Attachment{Stale: true, Era: d.era, Last: last}
	}
	at := Attachment{Last: last}
	if ls := d.lastSent; ls != nil && (last == nil || *ls != (BatchAt{last.Session, last.Epoch, last.Step})) {
		at.Reset, at.ResetSession, at.Answers = true, live, d.Reset(live)
	}
	if last == nil && acks != nil && acks.Inherited != nil {
		l := *acks.Inherited
		at.Last = &l
	}
	at.Era = d.era
	return at
}

// Reset ends the era because the trainer went back to its last
// acknowledged commit: batches of live, the session the shell now ends,
// are void from here (Arrive drops them), and waiting commits are
// answered rolled back.
func (d *RankDelivery) Reset(live Fence) []CommitAnswer {
	d.dropped = live
	return d.newEra()
}

// CommitVerdict is the decision on a trainer's commit.
type CommitVerdict int

const (
	// CommitWait: send the commit (Session, Epoch, Step) to the actor;
	// the Ack answers it (Ack), or a rollback does.
	CommitWait CommitVerdict = iota
	// CommitAnswered: already acknowledged: answer Token now.
	CommitAnswered
	// CommitRolledBack: the commit names a batch of an era that ended.
	CommitRolledBack
	// CommitNotDelivered: the commit names a batch never delivered.
	CommitNotDelivered
	// CommitGoesBack: the commit goes back before the last acknowledged
	// commit (step Last of epoch LastEpoch), or before where the stream
	// was opened.
	CommitGoesBack
)

func (v CommitVerdict) String() string {
	switch v {
	case CommitWait:
		return "wait"
	case CommitAnswered:
		return "answered"
	case CommitRolledBack:
		return "rolled back"
	case CommitNotDelivered:
		return "not delivered"
	case CommitGoesBack:
		return "goes back"
	}
	return "commit?"
}

// CommitDecision is what to do with a commit.
type CommitDecision struct {
	Verdict CommitVerdict
	// ID names the waiting commit (CommitWait) in its CommitAnswer.
	ID uint64
	// Session is the session to send the commit in (CommitWait).
	Session Fence
	// Token answers the commit (CommitAnswered).
	Token string
	// Last is the last acknowledged step, of epoch LastEpoch
	// (CommitGoesBack).
	Last      int64
	LastEpoch int
}

// CommitAnswer answers a waiting commit: with its Ack's token, or rolled
// back.
type CommitAnswer struct {
	ID         uint64
	Epoch      int
	Step       int64
	Token      string
	RolledBack bool
}

// Commit decides on the trainer's commit of (epoch, step) of a batch of
// era (0: a trainer that knows no eras; then any era's). A commit that
// waits is counted until its answer or Cancel.
func (d *RankDelivery) Commit(era uint64, epoch int, step int64, acks *TrainerAcks) CommitDecision {
	if (era != 0 && era != d.era) || d.cur.IsZero() {
		return CommitDecision{Verdict: CommitRolledBack}
	}
	if c := d.committed; c != nil && epoch < c.Epoch {
		return CommitDecision{Verdict: CommitGoesBack, Last: c.Step - 1, LastEpoch: c.Epoch}
	}
	sent, ok := d.sent[epoch]
	if !ok || step > sent.last {
		return CommitDecision{Verdict: CommitNotDelivered}
	}
	if step < sent.first {
		return CommitDecision{Verdict: CommitGoesBack, Last: sent.first - 1, LastEpoch: epoch}
	}
	if c := d.committed; c != nil && CursorAfter(epoch, step).Less(*c) {
		return CommitDecision{Verdict: CommitGoesBack, Last: c.Step - 1, LastEpoch: c.Epoch}
	}
	if rec, ok := acks.Acked(d.cur, epoch); ok && step <= rec.Step {
		if step < rec.Step {
			return CommitDecision{Verdict: CommitGoesBack, Last: rec.Step, LastEpoch: epoch}
		}
		return CommitDecision{Verdict: CommitAnswered, Token: rec.Token}
	}
	d.nextID++
	d.waiters[d.nextID] = BatchAt{d.cur, epoch, step}
	return CommitDecision{Verdict: CommitWait, ID: d.nextID, Session: d.cur}
}

// Cancel forgets waiting commit id (the shell could not send it).
func (d *RankDelivery) Cancel(id uint64) { delete(d.waiters, id) }

// Ack answers the waiting commits of session and a's epoch that a
// covers. An Ack of this era's session is the floor later commits may
// not go back before, in any epoch.
func (d *RankDelivery) Ack(session Fence, a Ack) []CommitAnswer {
	if !session.IsZero() && session == d.cur {
		if c := CursorAfter(a.Epoch, a.Step); d.committed == nil || d.committed.Less(c) {
			d.setFloor(c)
		}
	}
	var out []CommitAnswer
	for id, w := range d.waiters {
		if w.Session == session && w.Epoch == a.Epoch && w.Step <= a.Step {
			out = append(out, CommitAnswer{ID: id, Epoch: w.Epoch, Step: w.Step, Token: a.Token})
			delete(d.waiters, id)
		}
	}
	sortAnswers(out)
	return out
}

// Resumption is where a standalone trainer starts.
type Resumption struct {
	// At is where the trainer resumes.
	At Cursor
	// Reopen: the stream is not at At (it ran past it, or none is open).
	// Shut it down and open one at At (then Opened); the era ended, and
	// batches taken from the old stream are void.
	Reopen bool
	// Answers answer rolled back the commits that waited (Reopen).
	Answers []CommitAnswer
}

// Resume decides where a trainer of a standalone rank that connects
// with its checkpoint's cursor from (nil: it brings no token) starts:
// at from, even one before the last commit (a checkpoint restores its
// own data cursor), else after the last commit; from then on commits
// may not go back before it.
func (d *RankDelivery) Resume(from *Cursor) Resumption {
	var at Cursor
	if d.committed != nil {
		at = *d.committed
	}
	if from != nil {
		at = *from
	}
	r := Resumption{At: at}
	if !d.open || at != d.next {
		d.dropped = d.cur
		r.Reopen, r.Answers = true, d.newEra()
		d.open = false
	}
	d.setFloor(at)
	return r
}

// Opened records that the rank's stream was opened at cursor at as
// session s (a standalone rank's first stream, or the one Resume
// reopened): its batches are this era's, and the batch just before at,
// which the trainer's checkpoint names, may be committed again.
func (d *RankDelivery) Opened(s Fence, at Cursor) {
	d.cur, d.next, d.open = s, at, true
	clear(d.sent) // the streams before it are void
	if at.Step > 0 {
		d.sent[at.Epoch] = sentSteps{first: at.Step - 1, last: at.Step - 1}
	}
	if d.committed == nil {
		d.setFloor(at)
	}
}

// lastOf is a copy of acks' last acknowledged commit, or nil.
func lastOf(acks *TrainerAcks) *Ack {
	if acks == nil || acks.Last == nil {
		return nil
	}
	l := *acks.Last
	return &l
}

// sortAnswers orders answers by id (commit order): the map's order is
// not the trainer's.
func sortAnswers(a []CommitAnswer) {
	slices.SortFunc(a, func(x, y CommitAnswer) int { return cmp.Compare(x.ID, y.ID) })
}
