package s3

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/longshore/longshore/internal/clock"
)

// TestProgressDeadlineFollowsLearning: a body whose GET started before
// the store had learnt its latency (the first GETs of a run, all sent at
// once) was held to ProgressTimeout, 2 s, even once the GETs answered
// since showed that a quarter of a second without a byte is a stall: in
// the fault mix of docs/faults.md nearly every run lost 1.5 to 1.9 s at
// its start to one such body holding its batch. A Read that is waiting
// must be abandoned as soon as it has waited the deadline in force now.
func TestProgressDeadlineFollowsLearning(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	var deadline atomic.Int64
	deadline.Store(int64(2 * time.Second)) // ProgressTimeout: nothing learnt yet
	pr, pw := io.Pipe()
	stalled := make(chan struct{}, 8)
	b := watchProgress(pr, func() time.Duration { return time.Duration(deadline.Load()) }, clk, func() {
		stalled <- struct{}{}
		pw.CloseWithError(ErrStalled) // as cancelling the request ends its Read
	})
	defer b.Close()
	read := make(chan error, 1)
	go func() {
		_, err := b.Read(make([]byte, 64))
		read <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := clk.BlockUntil(ctx, 1); err != nil {
		t.Fatal("the Read never armed its deadline")
	}
	clk.Advance(300 * time.Millisecond)
	deadline.Store(int64(300 * time.Millisecond)) // the store has learnt: 4 × a p99 of 75 ms
	// Let the clock run on in steps short of the old deadline.
	for i := 0; i < 6; i++ {
		select {
		case <-stalled:
			if err := <-read; err == nil {
				t.Fatal("the abandoned Read returned no error")
			}
			return
		case <-time.After(50 * time.Millisecond): // a backstop per step, not a measurement
		}
		clk.Advance(250 * time.Millisecond)
	}
	t.Fatalf("a Read waiting %v with a deadline of 300 ms now was not abandoned", clk.Since(time.Unix(1000, 0)))
}
