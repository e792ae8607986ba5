package delivery

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/feed"
	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/internal/clock"
)

// trainerClock is the trainer's clock in these tests: a fake one that
// also counts its readings, so that a delayed stream can hold a batch
// back until the trainer has asked for it (the client reads the clock
// once when Next is called and once when it has the batch).
type trainerClock struct {
	*clock.Fake
	reads chan struct{}
}

func (c *trainerClock) Now() time.Time {
	t := c.Fake.Now()
	c.reads <- struct{}{}
	return t
}

// delayedStream is a slow node: batch k is handed to the server only
// after the trainer asked for it (its clock's 2k+1st reading), and
// delay later on the trainer's clock.
type delayedStream struct {
	BatchSource
	clk   *trainerClock
	delay time.Duration
	mu    sync.Mutex
	k     int // batches handed out
	seen  int // clock readings consumed
}

func (d *delayedStream) Next(ctx context.Context) (*actors.Batch, error) {
	b, err := d.BatchSource.Next(ctx)
	if err != nil {
		return b, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.seen < 2*d.k+1 {
		select {
		case <-d.clk.reads:
			d.seen++
		case <-ctx.Done():
			b.Release()
			return nil, ctx.Err()
		}
	}
	d.k++
	d.clk.Advance(d.delay)
	return b, nil
}

// trainWithClock runs a trainer that computes for compute (on clk) on
// each batch, against a node whose every batch comes delay after the
// trainer asked for it (0: at once), and returns the node's accounting
// of the rank and the client's own.
func trainWithClock(t *testing.T, compute, delay time.Duration) (TrainerWait, feed.Stall, int) {
	e := newEnv(t, 40) // 5 steps an epoch, 2 epochs
	clk := &trainerClock{Fake: clock.NewFake(time.Unix(1000, 0)), reads: make(chan struct{}, 1<<10)}
	open := Standalone(e.cfg, e.ds, 1, e.deps)
	if delay > 0 {
		base := open
		open = func(rank int, from feed.Cursor, alloc gpu.Allocator) (BatchSource, error) {
			st, err := base(rank, from, alloc)
			if err != nil {
				return nil, err
			}
			return &delayedStream{BatchSource: st, clk: clk, delay: delay}, nil
		}
	}
	dir, err := os.MkdirTemp("", "lsf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s, err := New(Config{Dir: dir, Ranks: 1, Job: "test"}, open)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a failure backstop only
	defer cancel()
	defer s.Shutdown(ctx)
	c, err := feed.DialContext(ctx, s.SocketPath(0), feed.DialConfig{Clock: clk, StallEvery: 3})
	if err != nil {
		t.Fatal(err)
	}
	batches := 0
	for {
		b, err := c.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		batches++
		clk.Advance(compute) // the trainer's step
		b.Release()
	}
	mine := c.Stall()
	c.Close()
	select {
	case <-s.Finished(): // the trainer left: its reports are in
	case <-ctx.Done():
		t.Fatal("the server did not finish")
	}
	return s.TrainerWait()[0], mine, batches
}

func TestTrainerWaitFastNode(t *testing.T) {
	w, mine, n := trainWithClock(t, 10*time.Millisecond, 0)
	if n != 10 {
		t.Fatalf("%d batches, want 10", n)
	}
	if w.Steps != int64(n) || w.Compute != time.Duration(n)*10*time.Millisecond || w.Wait != 0 {
		t.Fatalf("node's account: %d steps, wait %v, compute %v; want %d steps, wait 0, compute %v", w.Steps, w.Wait, w.Compute, n, time.Duration(n)*10*time.Millisecond)
	}
	if w.Share() != 0 || w.Buckets[0] != uint64(n) {
		t.Fatalf("share %v, buckets %v: want 0 and every step in the first", w.Share(), w.Buckets)
	}
	if mine.Steps != w.Steps || mine.Wait != w.Wait || mine.Compute != w.Compute {
		t.Fatalf("client's account %+v differs from the node's %+v", mine, w)
	}
}

func TestTrainerWaitSlowNode(t *testing.T) {
	w, mine, n := trainWithClock(t, 10*time.Millisecond, 90*time.Millisecond)
	if w.Steps != int64(n) || w.Wait != time.Duration(n)*90*time.Millisecond || w.Compute != time.Duration(n)*10*time.Millisecond {
		t.Fatalf("node's account: %d steps, wait %v, compute %v; want %d steps of 90 ms waiting and 10 ms computing", w.Steps, w.Wait, w.Compute, n)
	}
	if got := w.Share(); got < 0.8999 || got > 0.9001 {
		t.Fatalf("stall share %v, want 0.9", got)
	}
	// every wait is 90 ms: above the 50 ms bucket, within the 100 ms one
	for i, ub := range WaitBuckets {
		want := uint64(0)
		if ub >= 0.1 {
			want = uint64(n)
		}
		if w.Buckets[i] != want {
			t.Fatalf("bucket <= %v s: %d steps, want %d (%v)", ub, w.Buckets[i], want, w.Buckets)
		}
	}
	if mine.Share() != w.Share() {
		t.Fatalf("client's share %v, node's %v", mine.Share(), w.Share())
	}
}
