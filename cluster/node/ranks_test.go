package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
)

// TestRunRanksOneFailingRankStopsTheNode: a rank that stops on an error
// stops the others (they see their context end with its error) and the
// node returns that error, naming the rank; it is logged once.
func TestRunRanksOneFailingRankStopsTheNode(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	boom := errors.New("failure budget exceeded")
	var stopped atomic.Int32
	err := RunRanks(context.Background(), []string{"n/0", "n/1", "n/2"}, func(ctx context.Context, i int) error {
		if i == 1 {
			return boom
		}
		<-ctx.Done() // a healthy rank runs until the node stops it
		if errors.Is(context.Cause(ctx), boom) {
			stopped.Add(1)
		}
		return ctx.Err()
	}, logger)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "rank n/1") {
		t.Errorf("RunRanks: %v; want rank n/1's error", err)
	}
	if stopped.Load() != 2 {
		t.Errorf("%d other ranks were stopped by the failing rank's error; want 2", stopped.Load())
	}
	if n := strings.Count(logs.String(), "rank stopped"); n != 1 || !strings.Contains(logs.String(), "rank=n/1") {
		t.Errorf("logs:\n%s\nwant one \"rank stopped\" for n/1", logs.String())
	}
}

// TestRunRanksEnds: ranks that all finish return nil; a node stopped
// from outside returns the ranks' errors, not a rank's failure, and logs
// none; a node that gave up on its coordinator says so.
func TestRunRanksEnds(t *testing.T) {
	names := []string{"n/0", "n/1"}
	if err := RunRanks(context.Background(), names, func(context.Context, int) error { return nil }, nil); err != nil {
		t.Errorf("every rank done: %v", err)
	}
	var logs bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := RunRanks(ctx, names, func(ctx context.Context, i int) error { <-ctx.Done(); return ctx.Err() }, slog.New(slog.NewTextHandler(&logs, nil)))
	if !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "rank n/") || logs.Len() > 0 {
		t.Errorf("stopped from outside: %v, logs %q; want the cancellation, no rank's failure", err, logs.String())
	}
	gctx, giveUp := context.WithCancelCause(context.Background())
	giveUp(fmt.Errorf("%w: no coordinator", ErrGaveUp))
	if err := RunRanks(gctx, names, func(ctx context.Context, i int) error { <-ctx.Done(); return ctx.Err() }, nil); !errors.Is(err, ErrGaveUp) {
		t.Errorf("gave up: %v; want ErrGaveUp", err)
	}
}
