package delivery

import (
	"fmt"

	"github.com/longshore/longshore/feed"
)

// ledger is one rank's delivery and commit bookkeeping: a plain state
// machine (no I/O, no goroutines) that the rank's server consults under
// its lock. It decides where a connecting trainer resumes and whether the
// rank's stream must be reopened there, and which commits are valid.
//
// Cursors are "after batch (e, k)" = (e, k+1), never normalized across
// epoch ends (the ledger does not know epoch lengths): two cursors made
// the same way from the same batch compare equal, which is all resume
// needs.
type ledger struct {
	// next is the cursor after the last batch delivered from the current
	// stream: where the stream continues.
	next feed.Cursor
	// committed is the cursor after the last commit: where a trainer
	// without a token resumes.
	committed feed.Cursor
	// lastStep is the last step delivered in each epoch of the current
	// stream (a commit must name a delivered batch).
	lastStep map[int]int64
}

func newLedger(start feed.Cursor) *ledger {
	l := &ledger{}
	l.reopened(start)
	l.committed = start
	return l
}

// resume returns where a connecting trainer starts — after the token's
// commit when it brings one (a checkpoint restores its own data cursor,
// even one older than the last commit), else after the last commit — and
// whether the stream must be reopened there (it has run past it).
func (l *ledger) resume(token *feed.Cursor) (at feed.Cursor, reopen bool) {
	at = l.committed
	if token != nil {
		at = *token
		l.committed = at
	}
	return at, at != l.next
}

// reopened records that the stream now starts at at.
func (l *ledger) reopened(at feed.Cursor) {
	l.next = at
	l.lastStep = make(map[int]int64)
	if at.Step > 0 {
		l.lastStep[at.Epoch] = at.Step - 1
	}
}

// delivered records that batch (epoch, step) was sent to the trainer.
func (l *ledger) delivered(epoch int, step int64) {
	l.next = feed.After(epoch, step)
	if s, ok := l.lastStep[epoch]; !ok || step > s {
		l.lastStep[epoch] = step
	}
}

// checkCommit says whether (epoch, step) may be committed: a delivered
// batch, not before the last commit.
func (l *ledger) checkCommit(epoch int, step int64) error {
	last, ok := l.lastStep[epoch]
	if !ok || step > last {
		return fmt.Errorf("feed: commit of epoch %d step %d, which was not delivered", epoch, step)
	}
	if feed.After(epoch, step).Less(l.committed) {
		return fmt.Errorf("feed: commit of epoch %d step %d goes back before the last commit (next is epoch %d step %d)",
			epoch, step, l.committed.Epoch, l.committed.Step)
	}
	return nil
}

// commit records a successful commit of (epoch, step).
func (l *ledger) commit(epoch int, step int64) { l.committed = feed.After(epoch, step) }
