package delivery

import (
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/longshore/longshore/dataset"
)

// TestWelcomeEpochSteps: the welcome says how many batches each epoch of
// the rank's stream has (the trainer's len(loader)), and it is what the
// stream delivers, with and without DropLast.
func TestWelcomeEpochSteps(t *testing.T) {
	for _, drop := range []bool{false, true} {
		e := newEnv(t, 37) // 2 ranks: 19 samples each, batches of 8
		e.cfg.DropLast = drop
		want := int64(3)
		if drop {
			want = 2
		}
		dir, err := os.MkdirTemp("", "lsf")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		s, err := New(Config{Dir: dir, Ranks: 2, Job: "test", EpochSteps: StandaloneSteps(e.cfg, dataset.DatasetCatalog(e.ds), 2)},
			Standalone(e.cfg, e.ds, 2, e.deps))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Shutdown(context.Background())
		c := dial(t, s.SocketPath(1), nil)
		defer c.Close()
		if got := c.Welcome().EpochSteps; got != want {
			t.Fatalf("drop last %v: welcome epoch_steps %d, want %d", drop, got, want)
		}
		steps := map[int]int64{}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a failure backstop only
		for {
			b, err := c.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			steps[b.Epoch]++
			b.Release()
		}
		cancel()
		for ep := 0; ep < e.cfg.Epochs; ep++ {
			if steps[ep] != want {
				t.Fatalf("drop last %v: epoch %d delivered %d batches, the welcome said %d", drop, ep, steps[ep], want)
			}
		}
	}
}

// TestWelcomeEpochStepsUnknown: without Config.EpochSteps the field is
// absent (0), as from an older node.
func TestWelcomeEpochStepsUnknown(t *testing.T) {
	e := newEnv(t, 20)
	s := e.serve(t, 1)
	c := dial(t, s.SocketPath(0), nil)
	defer c.Close()
	if got := c.Welcome().EpochSteps; got != 0 {
		t.Fatalf("epoch_steps %d without Config.EpochSteps", got)
	}
}
