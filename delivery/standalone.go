package delivery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/feed"
	"github.com/longshore/longshore/gpu"
)

// standaloneRank is a standalone rank as a SessionStream: the trivial
// session, one that never fences (no rollback, era 0). Its ledger decides
// where a connecting trainer resumes and which commits are valid; it
// reopens the stream (OpenFunc) when a trainer resumes from a commit the
// stream has gone past, and its Committer makes the tokens.
type standaloneRank struct {
	rank  int
	open  OpenFunc
	alloc gpu.Allocator
	job   string
	cmt   Committer // nil: LocalCommitter{job, the stream's batch size}
	mu    struct {
		sync.Mutex
		stream BatchSource
		ledger *ledger
	}
}

var _ SessionStream = (*standaloneRank)(nil)

// pipelineError is an Attach that failed on the stream, not the token.
type pipelineError struct{ error }

func (e pipelineError) Unwrap() error { return e.error }

func newStandaloneRank(cfg Config, open OpenFunc, rank int, alloc gpu.Allocator) (*standaloneRank, error) {
	st, err := open(rank, cfg.Start, alloc)
	if err != nil {
		return nil, err
	}
	r := &standaloneRank{rank: rank, open: open, alloc: alloc, job: cfg.Job, cmt: cfg.Committer}
	r.mu.stream, r.mu.ledger = st, newLedger(cfg.Start)
	return r, nil
}

func (r *standaloneRank) stream() BatchSource {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.stream
}

func (r *standaloneRank) committer() Committer {
	if r.cmt != nil {
		return r.cmt
	}
	return LocalCommitter{Job: r.job, BatchSize: r.stream().Config().BatchSize}
}

func (r *standaloneRank) Next(ctx context.Context) (*actors.Batch, error) {
	return r.stream().Next(ctx)
}
func (r *standaloneRank) Config() actors.Config { return r.stream().Config() }

func (r *standaloneRank) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	st := r.mu.stream
	r.mu.stream = nil
	r.mu.Unlock()
	if st == nil {
		return nil
	}
	return st.Shutdown(ctx)
}

// NextDelivery is the stream's next batch; era 0: a standalone session
// never ends under the trainer.
func (r *standaloneRank) NextDelivery(ctx context.Context) (Batch, error) {
	st := r.stream()
	if st == nil {
		return Batch{}, ErrServerClosed
	}
	b, err := st.Next(ctx)
	return Batch{Batch: b}, err
}

// Sent records that d is being written to the trainer: a commit may name
// it from now on.
func (r *standaloneRank) Sent(d Batch) {
	r.mu.Lock()
	r.mu.ledger.delivered(d.Batch.Epoch, d.Batch.Step)
	r.mu.Unlock()
}

// Attach resumes after the token's commit when the trainer brings one
// (a checkpoint restores its own data cursor, even one older than the
// last commit), else after the last commit, and reopens the stream there
// if it has run past it (Reset).
func (r *standaloneRank) Attach(ctx context.Context, token []byte) (Attachment, error) {
	var tok *feed.Cursor
	if len(token) > 0 {
		e, k, err := r.committer().Resume(ctx, r.rank, token)
		if err != nil {
			return Attachment{}, err
		}
		c := feed.After(e, k)
		tok = &c
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.stream == nil {
		return Attachment{}, pipelineError{ErrServerClosed}
	}
	at, reopen := r.mu.ledger.resume(tok)
	if !reopen {
		return Attachment{Resume: at}, nil
	}
	// Shutting the old stream down waits for its actors (a decode in
	// progress finishes): milliseconds. Its slot memory is freed when its
	// last batch is released, which has happened: the only holder was the
	// previous session (the server releases the batch it kept: Reset).
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := r.mu.stream.Shutdown(sctx)
	cancel()
	if err != nil {
		return Attachment{}, pipelineError{fmt.Errorf("feed: rank %d: stop stream to resume: %w", r.rank, err)}
	}
	st, err := r.open(r.rank, at, r.alloc)
	if err != nil {
		r.mu.stream = endedStream{} // nothing to serve; the next hello retries
		r.mu.ledger.next = feed.Cursor{Epoch: -1}
		return Attachment{}, pipelineError{fmt.Errorf("feed: rank %d: reopen at epoch %d step %d: %w", r.rank, at.Epoch, at.Step, err)}
	}
	r.mu.stream = st
	r.mu.ledger.reopened(at)
	return Attachment{Resume: at, Reset: true}, nil
}

// Commit checks the commit against the ledger and makes its token at
// once; era is ignored (a standalone session has one).
func (r *standaloneRank) Commit(ctx context.Context, _ uint64, epoch int, step int64) (<-chan CommitResult, error) {
	r.mu.Lock()
	err := r.mu.ledger.checkCommit(epoch, step)
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	ch := make(chan CommitResult, 1)
	tok, err := r.committer().Commit(ctx, r.rank, epoch, step)
	if err != nil {
		ch <- CommitResult{Err: fmt.Errorf("feed: commit epoch %d step %d: %v", epoch, step, err)}
		return ch, nil
	}
	r.mu.Lock()
	r.mu.ledger.commit(epoch, step)
	r.mu.Unlock()
	ch <- CommitResult{Token: tok}
	return ch, nil
}

// isPipeline reports whether an Attach error is the stream's.
func isPipeline(err error) bool {
	var pe pipelineError
	return errors.As(err, &pe)
}
