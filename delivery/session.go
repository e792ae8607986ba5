package delivery

import (
	"context"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/feed"
	"github.com/longshore/longshore/gpu"
)

// SessionStream is one rank's batches as the server serves them, in
// either mode: the server asks it where a connecting trainer starts
// (Attach), takes batches from it (NextDelivery), tells it which it
// writes (Sent) and hands it commits (Commit). A standalone rank is the
// trivial session, one that never fences: New wraps each OpenFunc stream
// in one (its cluster.RankDelivery and Committer decide, era 0). A
// cluster rank is one whose position the coordinator decides, where a
// session can end under the trainer: NewSessions serves those (node.ClusterFeed's
// streams, which carry out cluster.RankDelivery's decisions).
// NextDelivery, Sent and Attach are called from one goroutine at a time
// (the connected trainer's writer, or a connecting trainer before its
// writer starts); Commit from the reader, concurrently with
// NextDelivery.
type SessionStream interface {
	BatchSource
	// NextDelivery is Next with the batch's era and end-of-stream flag.
	// A rollback is an error wrapping *RollbackError; then call again.
	NextDelivery(ctx context.Context) (Batch, error)
	// Sent says d is being written to the trainer (a batch taken and not
	// sent is kept for the next trainer): a commit may name it.
	Sent(d Batch)
	// Attach is called when a trainer connects, with its hello token
	// (nil: none), and says where it resumes. Reset says batches taken
	// from NextDelivery before are void (the rank was reset, or the
	// stream reopened). A refused token is an error wrapping
	// feed.ErrBadToken or feed.ErrStaleToken.
	Attach(ctx context.Context, token []byte) (Attachment, error)
	// Commit takes the commit of the trainer's batch (era, epoch, step)
	// and returns a channel that answers once: with the resume token
	// when it is durable, or an error (errors.Is ErrRolledBack when its
	// era ended first). An error returned at once means the commit is
	// invalid and was not taken.
	Commit(ctx context.Context, era uint64, epoch int, step int64) (<-chan CommitResult, error)
}

// SessionFunc returns rank's session stream, whose pipelines allocate
// slot memory from alloc: what NewSessions serves.
type SessionFunc func(rank int, alloc gpu.Allocator) (SessionStream, error)

// Batch is a batch with what a session stream knows about it.
type Batch struct {
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
