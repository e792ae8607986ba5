package delivery

import (
	"context"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/feed"
)

// SessionStream is a Stream whose position the server does not choose:
// a cluster rank, where the coordinator decides what the rank gets and a
// session can end under the trainer (ClusterFeed's streams are the
// implementation). The server uses NextDelivery instead of Next, Attach
// instead of its ledger and Committer, and Commit instead of a Committer.
// NextDelivery and Attach are called from one goroutine at a time (the
// connected trainer's writer, or a connecting trainer before its writer
// starts); Commit from the reader, concurrently with NextDelivery.
type SessionStream interface {
	Stream
	// NextDelivery is Next with the batch's era and end-of-stream flag.
	// A rollback is an error wrapping *RollbackError; then call again.
	NextDelivery(ctx context.Context) (Delivery, error)
	// Attach is called when a trainer connects, with its hello token
	// (nil: none). When the rank delivered batches after its last
	// acknowledged commit it resets the rank (they are delivered again)
	// and says so: batches taken from NextDelivery before are void.
	Attach(token []byte) (Attachment, error)
	// Commit sends the commit of the trainer's batch (era, epoch, step)
	// and returns a channel that answers once: with the journal's token
	// when the coordinator acknowledges it, or an error (errors.Is
	// ErrRolledBack when its era ended first). An error returned at once
	// means the commit is invalid and was not sent.
	Commit(era uint64, epoch int, step int64) (<-chan CommitResult, error)
}

// Delivery is a batch with what a session stream knows about it.
type Delivery struct {
	Batch       *actors.Batch
	Era         uint64
	EndOfStream bool
}

// Attachment is where a connecting trainer starts.
type Attachment struct {
	Resume    feed.Cursor
	Era       uint64
	Committed *feed.Rollback // the last acknowledged commit; nil: none known
	Reset     bool
}

// CommitResult answers a SessionStream commit.
type CommitResult struct {
	Token []byte
	Err   error
}
