package node

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestClusterFeedNodeRestart: the node process is stopped mid-epoch,
// with both trainers' fifth batches committed and their sixth trained
// but not, and a new process life of the node starts; the trainers
// restore their checkpoints and reconnect with their tokens. Each one's
// steps of the epoch go on right after its checkpoint (docs/feed-protocol.md,
// "Steps"), and the job ends exactly once in committed history. Before
// the new process numbered its sessions' steps on from the commits its
// welcome hands it, the trainers got epoch 0's steps from 0 again.
func TestClusterFeedNodeRestart(t *testing.T) {
	e := newClusterEnv(t, 61, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const at = 6
	var stopped sync.WaitGroup
	stopped.Add(2)
	restarted := make(chan struct{})
	go func() {
		stopped.Wait()
		sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
		defer scancel()
		inc := e.nd.Incarnation()
		e.stopNode(sctx)
		e.startNode(inc + 1)
		e.introduce()
		select { // the coordinator's welcome names the rank's commits
		case <-e.welcomed:
		case <-sctx.Done():
			t.Error("the restarted node was not welcomed")
		}
		close(restarted)
	}()
	firstAfter := map[int]entry{}
	var mu sync.Mutex
	e.runTrainers(ctx, func(tr *trainer, n int) bool {
		if n == at+1 {
			mu.Lock()
			firstAfter[tr.rank] = tr.m.hist[len(tr.m.hist)-1]
			mu.Unlock()
		}
		if n != at {
			return true
		}
		// Batch n is trained, not committed; the node goes away.
		tr.c.Abort()
		tr.c.Close()
		tr.restore()
		stopped.Done()
		select {
		case <-restarted:
		case <-ctx.Done():
			t.Error("the node did not restart")
			return false
		}
		if err := tr.dial(tr.m.token); err != nil {
			t.Errorf("rank %d: reconnect to the restarted node: %v", tr.rank, err)
			return false
		}
		// The new node process acknowledged nothing yet, but the
		// coordinator's welcome told it the rank's last commit: the
		// trainer's welcome names it (a trainer whose last ack the old
		// process never delivered learns its checkpoint moved).
		if c := tr.c.Welcome().Committed; c == nil || !c.Committed || c.Epoch != 0 || c.Step != at-2 || string(c.Token) != string(tr.m.token) {
			t.Errorf("rank %d: the restarted node's welcome names the last commit %+v, want epoch 0 step %d token %s", tr.rank, c, at-2, tr.m.token)
		}
		return false
	})
	for rank := range 2 {
		if got := firstAfter[rank]; got.epoch != 0 || got.step != at-1 {
			t.Errorf("rank %d: first batch from the restarted node is epoch %d step %d, want epoch 0 step %d (after the checkpoint's step %d)", rank, got.epoch, got.step, at-1, at-2)
		}
	}
	e.waitFinished(ctx)
}
