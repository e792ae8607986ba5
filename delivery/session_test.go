package delivery

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/feed"
	"github.com/longshore/longshore/gpu"
)

// fakeSessions is a SessionStream that decides nothing itself: a
// rollback before its second batch, eras from Attach, commits that wait
// until the test answers them.
type fakeSessions struct {
	cfg     actors.Config
	mu      sync.Mutex
	era     uint64
	step    int64
	sent    []int64
	commits chan chan CommitResult
}

func (f *fakeSessions) Config() actors.Config              { return f.cfg }
func (f *fakeSessions) Shutdown(ctx context.Context) error { return nil }
func (f *fakeSessions) Next(ctx context.Context) (*actors.Batch, error) {
	d, err := f.NextDelivery(ctx)
	return d.Batch, err
}

func (f *fakeSessions) NextDelivery(ctx context.Context) (Batch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.step == 1 && f.era == 7 {
		f.era = 8
		return Batch{}, &feed.RollbackError{Rollback: feed.Rollback{Era: 8, Epoch: 0, Step: 0, Token: []byte("t0"), Committed: true}}
	}
	b := &actors.Batch{Epoch: 0, Step: f.step}
	f.step++
	return Batch{Batch: b, Era: f.era}, nil
}

func (f *fakeSessions) Sent(d Batch) {
	f.mu.Lock()
	f.sent = append(f.sent, d.Batch.Step)
	f.mu.Unlock()
}

func (f *fakeSessions) Attach(ctx context.Context, token []byte) (Attachment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.era = 7
	return Attachment{Era: 7, Committed: &feed.Rollback{Epoch: 0, Step: -1}}, nil
}

func (f *fakeSessions) Commit(ctx context.Context, era uint64, epoch int, step int64) (<-chan CommitResult, error) {
	ch := make(chan CommitResult, 1)
	f.commits <- ch
	return ch, nil
}

// TestNewSessionsServesTheStream: NewSessions serves a SessionStream as
// it is, in the cluster mode it names (no type assertion picks the
// mode): the welcome says cluster and the Attach's era, batches carry
// their era and are reported Sent, a rollback reaches the trainer as a
// rollback message, and a commit is answered when the stream answers it.
func TestNewSessionsServesTheStream(t *testing.T) {
	dir, err := os.MkdirTemp("", "lsf")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	f := &fakeSessions{cfg: actors.Config{BatchSize: 2, Slots: 2}.WithDefaults(), commits: make(chan chan CommitResult, 1)}
	s, err := NewSessions(Config{Dir: dir, Ranks: 1, Job: "fake"}, func(rank int, _ gpu.Allocator) (SessionStream, error) { return f, nil })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	c := dial(t, s.SocketPath(0), nil)
	defer c.Close()
	if w := c.Welcome(); w.Mode != "cluster" || w.Era != 7 {
		t.Fatalf("welcome mode %q era %d, want cluster era 7", w.Mode, w.Era)
	}
	b := next(t, c)
	if b.Era != 7 || b.Step != 0 {
		t.Fatalf("first batch era %d step %d", b.Era, b.Step)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a failure backstop only
	defer cancel()
	done := make(chan error, 1)
	var tok []byte
	go func() {
		var err error
		tok, err = c.Commit(ctx, 0, 0)
		done <- err
	}()
	ch := <-f.commits
	ch <- CommitResult{Token: []byte("t0")}
	if err := <-done; err != nil || string(tok) != "t0" {
		t.Fatalf("commit: %q, %v", tok, err)
	}
	b.Release()
	var rb *feed.RollbackError
	if _, err := c.Next(ctx); !errors.As(err, &rb) || rb.Rollback.Era != 8 || string(rb.Rollback.Token) != "t0" {
		t.Fatalf("after the stream rolled back: %v", err)
	}
	if b := next(t, c); b.Era != 8 || b.Step != 1 {
		t.Fatalf("after the rollback: era %d step %d", b.Era, b.Step)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sent) < 2 || f.sent[0] != 0 || f.sent[1] != 1 { // the writer goes on sending: nothing holds it back
		t.Fatalf("sent %v, want 0, 1, ...", f.sent)
	}
}
