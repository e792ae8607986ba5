package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// RunRanks runs run(ctx, i) for each of a node's ranks at once (names[i]
// is rank i's name) and returns once every one has returned.
//
// A rank that stops on an error (the node's failure budget, a dataset
// that cannot be read) stops the node: the other ranks' context is
// cancelled with the error as its cause, and RunRanks returns it, naming
// the rank. Its leases would otherwise stay with a live node that no
// longer reads them, and the job would never end; the node leaves and
// the coordinator gives its work to the others. The stop is logged as
// "rank stopped" with the rank and the error.
//
// If ctx ended because the node gave up on its coordinator (its cause is
// ErrGaveUp), that cause is returned. An error of a rank after ctx ended
// is not a rank's failure but the stop's echo: the ranks' errors are
// returned then, joined. nil when every rank returned nil.
func RunRanks(ctx context.Context, names []string, run func(ctx context.Context, i int) error, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	rctx, stopRanks := context.WithCancelCause(ctx)
	defer stopRanks(nil)
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = run(rctx, i)
			if errs[i] != nil && context.Cause(rctx) == nil {
				logger.Error("rank stopped", "rank", names[i], "err", errs[i])
				stopRanks(fmt.Errorf("rank %s: %w", names[i], errs[i]))
			}
		}()
	}
	wg.Wait()
	if cause := context.Cause(ctx); errors.Is(cause, ErrGaveUp) {
		return cause
	}
	if cause := context.Cause(rctx); cause != nil && ctx.Err() == nil {
		return cause // a rank's error, not the others' cancellation
	}
	return errors.Join(errs...)
}
