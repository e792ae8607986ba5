package delivery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/feed"
	"github.com/longshore/longshore/gpu"
)

// standaloneRank is a standalone rank as a SessionStream: the trivial
// session, one that never fences (no rollback; era 0 on the wire). Its
// cluster.RankDelivery decides, as a cluster rank's does, where a
// connecting trainer resumes (Resume) and which commits are valid; each
// stream it opens is a session of its own (Opened). It carries the
// decisions out: it reopens the stream (OpenFunc) when a trainer resumes
// from a cursor the stream has gone past, and its Committer makes the
// tokens (the commit's Ack).
type standaloneRank struct {
	rank  int
	open  OpenFunc
	alloc gpu.Allocator
	job   string
	cmt   Committer // nil: LocalCommitter{job, the stream's batch size}
	mu    struct {
		sync.Mutex
		stream BatchSource
		d      *cluster.RankDelivery
		// session is the open stream's session in d: one per stream
		// opened (zero is no session).
		session cluster.Fence
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
	r.mu.stream, r.mu.d = st, cluster.NewRankDelivery()
	r.openedLocked(cfg.Start)
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
// it from now on. Batches are the open stream's (the server voids those
// of a stream Attach reopened: Reset), which RankDelivery delivers.
func (r *standaloneRank) Sent(d Batch) {
	r.mu.Lock()
	r.mu.d.Arrive(cluster.BatchAt{Session: r.mu.session, Epoch: d.Batch.Epoch, Step: d.Batch.Step}, nil)
	r.mu.Unlock()
}

// openedLocked records that the stream now starts at at, as a new
// session.
func (r *standaloneRank) openedLocked(at feed.Cursor) {
	r.mu.session.Seq++
	r.mu.d.Opened(r.mu.session, cluster.Cursor{Epoch: at.Epoch, Step: at.Step})
}

// Attach resumes after the token's commit when the trainer brings one
// (a checkpoint restores its own data cursor, even one older than the
// last commit), else after the last commit, and reopens the stream there
// if it has run past it (Reset).
func (r *standaloneRank) Attach(ctx context.Context, token []byte) (Attachment, error) {
	var tok *cluster.Cursor
	if len(token) > 0 {
		e, k, err := r.committer().Resume(ctx, r.rank, token)
		if err != nil {
			return Attachment{}, err
		}
		c := cluster.CursorAfter(e, k)
		tok = &c
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.stream == nil {
		return Attachment{}, pipelineError{ErrServerClosed}
	}
	res := r.mu.d.Resume(tok) // no commit waits: Commit answers each at once
	at := feed.Cursor{Epoch: res.At.Epoch, Step: res.At.Step}
	if !res.Reopen {
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
		r.mu.stream = endedStream{} // nothing to serve; the next hello retries (nothing Opened)
		return Attachment{}, pipelineError{fmt.Errorf("feed: rank %d: reopen at epoch %d step %d: %w", r.rank, at.Epoch, at.Step, err)}
	}
	r.mu.stream = st
	r.openedLocked(at)
	return Attachment{Resume: at, Reset: true}, nil
}

// Commit asks RankDelivery whether the commit is valid, makes its token
// at once and acknowledges it (the Ack that answers it); era is ignored
// (the wire's standalone era is 0, one that never ends).
func (r *standaloneRank) Commit(ctx context.Context, _ uint64, epoch int, step int64) (<-chan CommitResult, error) {
	r.mu.Lock()
	dec := r.mu.d.Commit(0, epoch, step, nil)
	r.mu.Unlock()
	switch dec.Verdict {
	case cluster.CommitWait:
	case cluster.CommitGoesBack:
		return nil, fmt.Errorf("feed: commit of epoch %d step %d goes back before the last commit (epoch %d step %d)",
			epoch, step, dec.LastEpoch, dec.Last)
	default: // not delivered; rolled back: no stream is open (a reopen failed)
		return nil, fmt.Errorf("feed: commit of epoch %d step %d, which was not delivered", epoch, step)
	}
	ch := make(chan CommitResult, 1)
	tok, err := r.committer().Commit(ctx, r.rank, epoch, step)
	r.mu.Lock()
	if err != nil {
		r.mu.d.Cancel(dec.ID)
	} else {
		r.mu.d.Ack(dec.Session, cluster.Ack{Session: dec.Session, Epoch: epoch, Step: step, Token: string(tok)})
	}
	r.mu.Unlock()
	if err != nil {
		ch <- CommitResult{Err: fmt.Errorf("feed: commit epoch %d step %d: %v", epoch, step, err)}
		return ch, nil
	}
	ch <- CommitResult{Token: tok}
	return ch, nil
}

// isPipeline reports whether an Attach error is the stream's.
func isPipeline(err error) bool {
	var pe pipelineError
	return errors.As(err, &pe)
}
