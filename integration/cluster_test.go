package integration

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/longshore/longshore/storage/miniotest"
)

func (c *cluster) history(keys []string) *history {
	c.t.Helper()
	h, err := readHistory(c.nodeLogs, filepath.Join(c.dir, "coord.acks"))
	if err != nil {
		c.t.Fatal(err)
	}
	if ps := h.check(keys, c.job.epochs); len(ps) > 0 {
		c.t.Errorf("the promise is broken:\n  %s", strings.Join(ps, "\n  "))
	}
	return h
}

// checkEqualSteps checks every rank of epoch e ran the same number of steps.
func checkEqualSteps(t *testing.T, h *history, e, ranks int) {
	t.Helper()
	st := h.steps(e)
	if len(st) != ranks {
		t.Errorf("epoch %d: %d rank sessions delivered, want %d: %v", e, len(st), ranks, st)
	}
	var want int64 = -1
	for _, n := range st {
		if want >= 0 && n != want {
			t.Errorf("epoch %d: unequal steps per rank: %v", e, st)
			return
		}
		want = n
	}
}

// TestClusterEqualSteps: coordinator + 3 nodes × 2 ranks, a stable
// membership, two epochs: exactly once in committed history and the same
// number of steps on every rank. It also reports the epoch wall time with
// 1, 2 and 3 nodes (all sharing this machine's cores).
func TestClusterEqualSteps(t *testing.T) {
	dir, keys := makeDataset(t, 300)
	for _, nodes := range []int{3, 2, 1} {
		c := startCluster(t, job{dataset: dir, epochs: 2, batch: 8, shard: 16, balance: "equal",
			commit: 2, minRanks: 2 * nodes, stepTime: 10 * time.Millisecond})
		for range nodes {
			c.addNode()
		}
		c.finish()
		h := c.history(keys)
		for e := range 2 {
			checkEqualSteps(t, h, e, 2*nodes)
		}
		for _, ev := range c.coordEvents("epoch complete") {
			t.Logf("%d node(s) × 2 ranks, 10 ms/step trainers: epoch %s took %.2f s", nodes, ev["epoch"], seconds(ev))
		}
	}
}

// TestClusterKillNode: kill -9 one of three nodes mid-epoch. The epoch
// completes on the survivors and the logs keep the promise. Reports the
// time from the kill to the failure being noticed and to the first lease
// re-issued.
func TestClusterKillNode(t *testing.T) {
	dir, keys := makeDataset(t, 300)
	killRun(t, job{dataset: dir, epochs: 2}, keys)
}

// TestClusterKillNodeMinIO is TestClusterKillNode with the dataset in a
// MinIO bucket.
func TestClusterKillNodeMinIO(t *testing.T) {
	srv := miniotest.Start(t)
	dir, keys := makeDataset(t, 300)
	bucket := srv.NewBucket(t)
	cl := srv.Client(t)
	for _, k := range keys {
		if _, err := cl.FPutObject(t.Context(), bucket, "ds/"+k, filepath.Join(dir, k), minioPutOptions()); err != nil {
			t.Fatal(err)
		}
	}
	killRun(t, job{dataset: srv.URL(bucket, "ds"), env: srv.Env(), epochs: 2}, keys)
}

func killRun(t *testing.T, j job, keys []string) {
	j.batch, j.shard, j.balance, j.commit, j.minRanks = 8, 16, "equal", 2, 6
	j.stepTime = 60 * time.Millisecond
	c := startCluster(t, j)
	for range 3 {
		c.addNode()
	}
	victim := c.nodes[2]
	// Mid-epoch: once the victim delivered a few batches of epoch 0.
	waitLines(t, c.nodeLogs[2], regexp.MustCompile(`(?m)^0\tn3/\d\t2\t`), 1, time.Minute)
	killed := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-victim.done
	c.finish(victim)
	c.history(keys)

	fails := c.coordEvents("node failed")
	if len(fails) == 0 {
		t.Fatalf("the coordinator never noticed the kill:\n%s", tail(c.coord.stderr, 20))
	}
	detect := slogTime(t, fails[0]).Sub(killed)
	var reassign time.Duration = -1
	for _, ev := range c.coordEvents("reassigned") {
		if at := slogTime(t, ev); at.After(killed) {
			reassign = at.Sub(killed)
			break
		}
	}
	t.Logf("kill -9 → failure noticed %.2f s, → first lease re-issued %.2f s (local gossip profile)", detect.Seconds(), reassign.Seconds())
	if reassign < 0 {
		t.Errorf("no lease was re-issued after the kill")
	}
	for _, ev := range c.coordEvents("epoch complete") {
		t.Logf("epoch %s: %.2f s", ev["epoch"], seconds(ev))
	}
}

// TestClusterJoinMidEpoch: a node that joins while an epoch runs starts
// taking leases, and the promise holds.
func TestClusterJoinMidEpoch(t *testing.T) {
	dir, keys := makeDataset(t, 600)
	c := startCluster(t, job{dataset: dir, epochs: 2, batch: 8, shard: 16, balance: "equal", commit: 2,
		minRanks: 4, stepTime: 100 * time.Millisecond})
	c.addNode()
	c.addNode()
	waitLines(t, c.nodeLogs[0], regexp.MustCompile(`(?m)^0\tn1/\d\t2\t`), 1, time.Minute)
	c.addNode()
	c.finish()
	h := c.history(keys)
	got := 0
	for k, ss := range h.delivered {
		if strings.HasPrefix(k.rank, "n3/") && k.epoch == 0 {
			got += len(ss)
		}
	}
	if got == 0 {
		t.Errorf("the node that joined mid-epoch 0 delivered nothing of it")
	}
	t.Logf("the joiner delivered %d samples of epoch 0", got)
	for _, ev := range c.coordEvents("epoch complete") {
		t.Logf("epoch %s: %.2f s", ev["epoch"], seconds(ev))
	}
}

// TestClusterStraggler: with dynamic balance, one rank training 5× slower
// than the others does not hold the epoch back by its full share: its
// leases are split and the others take the tail. What it has already
// taken (its slots and read-ahead, a few of its steps) it keeps, a fixed
// tail whatever the epoch's length, so the epoch is long enough (4,800
// samples, ~5 s) for the share to show.
//
// The checks are about work, which the machine's load cannot change: the
// straggler spends 120 ms more per step than the others whatever else
// runs, so with splitting it ends with fewer samples than each of them
// (without, every rank's share is the same), and the coordinator asked
// for splits. The epoch's wall time against an even run, which a loaded
// machine does move, is logged, not checked (ideal 1.25×; 1.6× was the
// bound this test once held it to).
func TestClusterStraggler(t *testing.T) {
	const n = 4800
	dir, keys := makeDataset(t, n)
	type result struct {
		seconds float64
		share   map[string]int // samples committed, by rank
		revokes int            // lease splits the coordinator asked for
	}
	run := func(slow bool) result {
		c := startCluster(t, job{dataset: dir, epochs: 1, batch: 8, shard: 16, balance: "dynamic", commit: 1,
			minRanks: 4, stealMin: 8, stepTime: 30 * time.Millisecond})
		if slow {
			c.addNode("--slow-ranks", "0", "--slow-factor", "5")
		} else {
			c.addNode()
		}
		c.addNode()
		c.finish()
		h := c.history(keys)
		ev := c.coordEvents("epoch complete")
		if len(ev) != 1 {
			t.Fatalf("epoch complete events: %v", ev)
		}
		done := c.coordEvents("job done")
		if len(done) != 1 {
			t.Fatalf("job done events: %v", done)
		}
		revokes, _ := strconv.Atoi(done[0]["revokes"])
		return result{seconds(ev[0]), h.samplesBy(0), revokes}
	}
	base := run(false)
	slow := run(true)
	ideal := base.seconds * 4 / 3.2 // three ranks at full speed, one at a fifth
	t.Logf("4 ranks, 30 ms/step: epoch %.2f s; with rank n1/0 at 150 ms/step: %.2f s = %.2f× (ideal with stealing %.2f s = 1.25×; without, %.2f s = 5×)",
		base.seconds, slow.seconds, slow.seconds/base.seconds, ideal, base.seconds*5)
	t.Logf("samples per rank: even %v (%d splits); with the straggler %v (%d splits)", base.share, base.revokes, slow.share, slow.revokes)
	const straggler = "n1/0"
	if len(slow.share) != 4 {
		t.Fatalf("with the straggler, %d ranks committed samples, want 4: %v", len(slow.share), slow.share)
	}
	for r, got := range slow.share {
		if r != straggler && got <= slow.share[straggler] {
			t.Errorf("rank %s committed %d samples, the straggler %s %d: nothing was taken from it", r, got, straggler, slow.share[straggler])
		}
	}
	if slow.share[straggler]*4 >= n {
		t.Errorf("the straggler consumed %d of %d samples: at least a full share, so nothing was taken from it", slow.share[straggler], n)
	}
	if slow.revokes == 0 {
		t.Errorf("the coordinator split no lease with a straggler (shares %v)", slow.share)
	}
}

func minioPutOptions() minio.PutObjectOptions {
	return minio.PutObjectOptions{ContentType: "image/jpeg"}
}
