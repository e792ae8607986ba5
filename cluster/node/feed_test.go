package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/actorstest"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/coord"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/journal"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/delivery"
	"github.com/longshore/longshore/feed"
	"github.com/longshore/longshore/storage"
)

// clusterEnv is a coordinator and one node agent with two ranks in one
// actor system (memory store, pattern decoder), the node's ranks served
// by a feed Server in cluster mode: what longshore-node --sink feed runs,
// without gossip and remote.
type clusterEnv struct {
	t      *testing.T
	sys    *actor.ActorSystem
	ds     *dataset.Dataset
	st     storage.Store
	jstore storage.Store
	cfg    cluster.Config
	cf     *ClusterFeed
	nd     *Node
	srv    *delivery.Server
	dir    string // the feed server's
	// welcomed is closed when the node started last takes its first
	// welcome from the coordinator (its OnJob).
	welcomed chan struct{}
	// catalog, if set, makes the catalog the node reads its samples
	// through (newClusterEnvWith).
	catalog func(storage.Store, *dataset.Dataset) dataset.Catalog

	mu sync.Mutex
	co *coord.Coordinator
}

const clusterBatch = 4

func newClusterEnv(t *testing.T, samples, epochs int) *clusterEnv {
	t.Helper()
	return newClusterEnvWith(t, samples, epochs, nil)
}

// newClusterEnvWith is newClusterEnv whose node, when catalog is set,
// reads its samples through the catalog it makes of the store holding
// them (and the dataset the checks compare with), instead of the dataset.
func newClusterEnvWith(t *testing.T, samples, epochs int, catalog func(storage.Store, *dataset.Dataset) dataset.Catalog) *clusterEnv {
	t.Helper()
	e := newClusterEnvUnwelcomed(t, samples, epochs, catalog)
	e.introduce()
	return e
}

// newClusterEnvUnwelcomed is newClusterEnvWith before the coordinator
// and the node meet: the node has no welcome (and no job) until
// introduce.
func newClusterEnvUnwelcomed(t *testing.T, samples, epochs int, catalog func(storage.Store, *dataset.Dataset) dataset.Catalog) *clusterEnv {
	t.Helper()
	e := &clusterEnv{t: t, st: storage.NewMemStore("t"), jstore: storage.NewMemStore("journal"), catalog: catalog,
		sys: actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))}
	e.ds = &dataset.Dataset{Classes: []string{"a"}}
	for i := range samples {
		key := fmt.Sprintf("k%03d", i)
		if _, err := e.st.Put(context.Background(), key, []byte(key), storage.Cond{}); err != nil {
			t.Fatal(err)
		}
		e.ds.Samples = append(e.ds.Samples, dataset.Sample{Key: key})
	}
	e.cfg = cluster.DefaultConfig()
	e.cfg.Samples, e.cfg.Epochs, e.cfg.ShardSize, e.cfg.Seed = int64(samples), epochs, 8, 5
	jn := e.openJournal()
	if _, err := jn.Start(context.Background(), journal.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	e.startCoordinator(jn, nil)

	e.startNode(0)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		e.stopNode(ctx)
		e.mu.Lock()
		co := e.co
		e.mu.Unlock()
		co.Shutdown(ctx)
		e.sys.Shutdown()
	})
	return e
}

// startNode starts the node agent (process life inc; 0: a random one)
// and the feed server of its ranks.
func (e *clusterEnv) startNode(inc uint64) {
	t := e.t
	e.cf = NewClusterFeed(2)
	welcomed, once := make(chan struct{}), sync.Once{}
	e.welcomed = welcomed
	pcfg := actors.Config{Sample: actors.Shape{Height: 4, Width: 4}, Decoders: 1, FetchConcurrency: 2, Slots: 2}
	deps := actors.Deps{Store: e.st, SampleSeed: actorstest.SampleSeed, NewDecoder: func() (actors.SampleDecoder, error) { return actorstest.PatternDecoder{}, nil }}
	name := "n0"
	ds, cat := e.ds, dataset.Catalog(nil)
	if e.catalog != nil {
		ds, cat = nil, e.catalog(e.st, e.ds)
	}
	nd, err := Start(e.sys, Config{
		Node: name, Ranks: 2, Dataset: ds, Catalog: cat, Pipeline: pcfg, Deps: deps,
		Incarnation: inc,
		RankDeps:    e.cf.RankDeps(deps),
		OnAck:       e.cf.OnAck,
		OnJob: func(j Job) {
			e.cf.OnJob(j)
			once.Do(func() { close(welcomed) })
		},
		RequestEvery: 20 * time.Millisecond,
		Logger:       testLogger(),
		Rejoin: func(_ context.Context, inc uint64) error {
			e.mu.Lock()
			co := e.co
			e.mu.Unlock()
			co.Membership(gossip.Event{Kind: gossip.Joined, Name: name, Meta: gossip.Meta{
				ID: name, Role: gossip.RoleNode, Ranks: []string{name + "/0", name + "/1"}, Incarnation: inc}})
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.nd = nd
	dir, err := os.MkdirTemp("", "lsc")
	if err != nil {
		t.Fatal(err)
	}
	e.dir = dir
	srv, err := delivery.NewSessions(delivery.Config{Dir: dir, Ranks: 2, Job: "cluster-test", Allocator: e.cf.Allocator}, e.cf.Open(nd, pcfg))
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
}

// stopNode shuts the feed server and the node agent down.
func (e *clusterEnv) stopNode(ctx context.Context) {
	if err := e.srv.Shutdown(ctx); err != nil {
		e.t.Errorf("feed shutdown: %v", err)
	}
	if err := e.nd.Shutdown(ctx); err != nil {
		e.t.Errorf("node shutdown: %v", err)
	}
	os.RemoveAll(e.dir)
}

func (e *clusterEnv) openJournal() *journal.Journal {
	j, err := journal.Open(context.Background(), journal.Config{Store: e.jstore})
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

func (e *clusterEnv) startCoordinator(jn *journal.Journal, restore *cluster.State) {
	cfg := e.cfg
	cfg.Incarnation = jn.Incarnation()
	cc := coord.Config{Cluster: cfg, BatchSize: clusterBatch, Digest: dataset.ManifestDigest(e.ds),
		TickEvery: 20 * time.Millisecond, Journal: jn, Restore: restore}
	if restore == nil {
		cc.Cluster.MinRanks = 2
	}
	co, err := coord.Start(e.sys, cc)
	if err != nil {
		e.t.Fatal(err)
	}
	e.mu.Lock()
	e.co = co
	e.mu.Unlock()
}

// introduce does what gossip would.
func (e *clusterEnv) introduce() {
	e.mu.Lock()
	co := e.co
	e.mu.Unlock()
	e.nd.SetCoordinatorPID(co.PID())
	co.SetNodePID(e.nd.Name(), e.nd.PID())
	co.Membership(gossip.Event{Kind: gossip.Joined, Name: e.nd.Name(), Meta: gossip.Meta{
		ID: e.nd.Name(), Role: gossip.RoleNode, Ranks: e.nd.RankNames(), Incarnation: e.nd.Incarnation()}})
}

// restartCoordinator stops the coordinator (as if killed) and starts its
// next life from the journal's newest generation.
func (e *clusterEnv) restartCoordinator(ctx context.Context) {
	e.mu.Lock()
	co := e.co
	e.mu.Unlock()
	if err := co.Shutdown(ctx); err != nil {
		e.t.Error(err)
	}
	jn := e.openJournal()
	last, err := jn.Start(ctx, journal.StartOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.startCoordinator(jn, &last.State)
	e.introduce()
}

// entry is one batch in a simulated model's history.
type entry struct {
	epoch int
	step  int64
	keys  []string
}

// model is a trainer's model as far as data goes: the batches it trained
// on, of which the first committed are in its last acknowledged
// checkpoint. A rollback truncates it to those.
type model struct {
	hist      []entry
	committed int
	token     []byte
	rollbacks int
	// received counts the batches the trainer got, rolled back or not.
	received int
	// rolledBackIn is the epoch of the last rollback's checkpoint (-1:
	// none); ownStepTokens counts the commits checked in it.
	rolledBackIn  int
	ownStepTokens int
}

// trainer drives one rank through the feed with the Go client. hooks may
// act after each batch (n counts batches, from 1): return commit false to
// skip the commit, or reconnect a replacement client.
type trainer struct {
	t    *testing.T
	e    *clusterEnv
	rank int
	m    model
	// after, if set, runs after batch n is trained on and before it is
	// committed; it returns whether to commit it.
	after func(tr *trainer, n int) bool
	c     *feed.Client
}

func (tr *trainer) dial(tok []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := feed.DialContext(ctx, tr.e.srv.SocketPath(tr.rank), feed.DialConfig{Token: tok})
	if err != nil {
		return err
	}
	tr.c = c
	return nil
}

// restore truncates the model to its checkpoint: what a trainer does
// when it restarts or rolls back.
func (tr *trainer) restore() { tr.m.hist = tr.m.hist[:tr.m.committed] }

func (tr *trainer) run(ctx context.Context) error {
	if err := tr.dial(nil); err != nil {
		return err
	}
	defer func() { tr.c.Close() }()
	for n := 1; ; n++ {
		b, err := tr.c.Next(ctx)
		var rb *feed.RollbackError
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.As(err, &rb):
			if !errors.Is(err, feed.ErrRolledBack) {
				return fmt.Errorf("rollback error does not match ErrRolledBack")
			}
			tr.m.rollbacks++
			tr.m.rolledBackIn = -1
			if rb.Committed {
				tr.m.rolledBackIn = rb.Epoch
			}
			// It names the checkpoint the trainer has: its last ack.
			if tr.m.committed > 0 {
				last := tr.m.hist[tr.m.committed-1]
				if !rb.Committed || rb.Epoch != last.epoch || rb.Step != last.step || string(rb.Token) != string(tr.m.token) {
					return fmt.Errorf("rank %d: rollback to %+v, but the last ack was epoch %d step %d token %s", tr.rank, rb.Rollback, last.epoch, last.step, tr.m.token)
				}
			} else if rb.Committed {
				return fmt.Errorf("rank %d: rollback to a commit %+v the trainer never had acknowledged", tr.rank, rb.Rollback)
			}
			tr.restore()
			n--
			continue
		case err != nil:
			return fmt.Errorf("rank %d: next: %w", tr.rank, err)
		}
		// Zero copy: the pixels lie inside a region mapped from the memfd.
		if len(b.Images) > 0 && !tr.c.Mapped(b.Images) {
			return fmt.Errorf("rank %d batch %d/%d: images not inside the shared mapping", tr.rank, b.Epoch, b.Step)
		}
		var keys []string
		for i, k := range b.Keys {
			if !b.Pads[i] {
				keys = append(keys, k)
			}
		}
		tr.m.hist = append(tr.m.hist, entry{b.Epoch, b.Step, keys})
		tr.m.received++
		epoch, step := b.Epoch, b.Step
		b.Release()
		if tr.after != nil && !tr.after(tr, n) {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		tok, err := tr.c.Commit(cctx, epoch, step)
		cancel()
		switch {
		case errors.Is(err, feed.ErrRolledBack):
			continue // Next reports the rollback
		case err != nil:
			tr.e.mu.Lock()
			co := tr.e.co
			tr.e.mu.Unlock()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			st, serr := co.Status(sctx)
			cancel()
			return fmt.Errorf("rank %d: commit %d/%d: %w (coordinator: %+v %v)", tr.rank, epoch, step, err, st.Stats, serr)
		}
		jt, err := journal.ParseToken(string(tok))
		if err != nil {
			return fmt.Errorf("rank %d: commit token: %w", tr.rank, err)
		}
		if tr.m.rollbacks > 0 && epoch == tr.m.rolledBackIn && step > 0 {
			// In the epoch it rolled back in, the new session's step 0
			// is past the trainer's 0: the token must carry the
			// trainer's step, not the session's.
			if jt.Epoch != epoch || jt.Step != step {
				return fmt.Errorf("rank %d: commit of epoch %d step %d returned a token of epoch %d step %d", tr.rank, epoch, step, jt.Epoch, jt.Step)
			}
			tr.m.ownStepTokens++
		}
		tr.m.committed, tr.m.token = len(tr.m.hist), tok
	}
}

// runTrainers runs both ranks' trainers to the end of the job and checks
// the promise on their models.
func (e *clusterEnv) runTrainers(ctx context.Context, after func(tr *trainer, n int) bool) []*trainer {
	trs := []*trainer{{t: e.t, e: e, rank: 0, after: after}, {t: e.t, e: e, rank: 1, after: after}}
	var wg sync.WaitGroup
	errs := make([]error, len(trs))
	for i, tr := range trs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = tr.run(ctx) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			e.t.Fatal(err)
		}
	}
	e.check(trs)
	return trs
}

// check: every sample is in the ranks' committed histories exactly once
// per epoch, and each rank's steps of an epoch are 0, 1, 2, ... in its
// history (continuous across rollbacks and resets).
func (e *clusterEnv) check(trs []*trainer) {
	e.t.Helper()
	for _, tr := range trs {
		if tr.m.committed != len(tr.m.hist) {
			e.t.Errorf("rank %d: %d batches trained after its last commit at the end", tr.rank, len(tr.m.hist)-tr.m.committed)
		}
		next := map[int]int64{}
		for _, en := range tr.m.hist {
			if en.step != next[en.epoch] {
				e.t.Errorf("rank %d epoch %d: step %d follows step %d in the model's history", tr.rank, en.epoch, en.step, next[en.epoch]-1)
			}
			next[en.epoch] = en.step + 1
		}
	}
	for ep := range e.cfg.Epochs {
		seen := map[string]int{}
		for _, tr := range trs {
			for _, en := range tr.m.hist[:tr.m.committed] {
				if en.epoch == ep {
					for _, k := range en.keys {
						seen[k]++
					}
				}
			}
		}
		for _, s := range e.ds.Samples {
			if seen[s.Key] != 1 {
				e.t.Errorf("epoch %d: %s in committed history %d times", ep, s.Key, seen[s.Key])
			}
		}
	}
}

func (e *clusterEnv) waitFinished(ctx context.Context) {
	select {
	case <-e.srv.Finished():
	case <-ctx.Done():
		e.t.Error("feed server not finished after the job and the trainers' goodbyes")
	}
}

// TestClusterFeed: trainers that commit every batch get the whole job
// through the feed, exactly once in committed history, zero copy.
func TestClusterFeed(t *testing.T) {
	e := newClusterEnv(t, 61, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	trs := e.runTrainers(ctx, nil)
	for _, tr := range trs {
		if len(tr.m.hist) == 0 || tr.m.rollbacks != 0 {
			t.Errorf("rank %d: %d batches, %d rollbacks", tr.rank, len(tr.m.hist), tr.m.rollbacks)
		}
	}
	// Cluster mode says no epoch_steps (len(loader) raises): the
	// coordinator's equal-steps share is not fixed by the job
	// (cluster.TestEqualStepsNotKnownAtWelcome).
	for _, tr := range trs {
		if w := tr.c.Welcome(); w.Mode != "cluster" || w.EpochSteps != 0 {
			t.Errorf("rank %d: welcome mode %q, epoch_steps %d; want cluster mode without epoch_steps", tr.rank, w.Mode, w.EpochSteps)
		}
	}
	e.waitFinished(ctx)
	// The node's counters say what the trainers got.
	for _, tr := range trs {
		if d := e.nd.Rank(tr.rank).Counters().Delivered(); d.Batches != int64(tr.m.received) {
			t.Errorf("rank %d: counters say %d batches delivered, the trainer got %d", tr.rank, d.Batches, tr.m.received)
		}
	}
}

// TestClusterFeedIndexed is TestClusterFeed with the node reading the
// manifest through its index, a piece of 4 samples at a time, into a
// cache that holds about one piece: the job is exactly once all the
// same, and the node never held more than its bound.
func TestClusterFeedIndexed(t *testing.T) {
	var m *dataset.IndexedManifest
	e := newClusterEnvWith(t, 61, 2, func(st storage.Store, ds *dataset.Dataset) dataset.Catalog {
		ctx := context.Background()
		var text strings.Builder
		for _, s := range ds.Samples {
			fmt.Fprintf(&text, "%s,%d\n", s.Key, s.Label)
		}
		if _, err := st.Put(ctx, "manifest.csv", []byte(text.String()), storage.Cond{}); err != nil {
			t.Fatal(err)
		}
		if _, err := dataset.WriteManifestIndex(ctx, st, "manifest.csv", 4, nil); err != nil {
			t.Fatal(err)
		}
		var err error
		if m, err = dataset.OpenIndexedManifest(ctx, st, "manifest.csv", dataset.IndexedConfig{CacheBytes: 300}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e.runTrainers(ctx, nil)
	e.waitFinished(ctx)
	st := m.Stats()
	// A piece off the heap takes at least a page, more than the 300-byte
	// bound: the cache then holds the one piece last read.
	if st.Reads < 16 || st.Prefetches == 0 || st.Pieces > 1 || st.CacheBytes > int64(2*os.Getpagesize()) {
		t.Errorf("catalog: %+v; want every one of the 16 pieces read, some prefetched, at most one piece held (the 300-byte bound is less than a piece)", st)
	}
}

// TestClusterFeedReconnect: a trainer that crashes mid-epoch with
// uncommitted batches and reconnects (with its checkpoint's token, or
// with none) gets them delivered again; an older token is refused with
// stale_token.
func TestClusterFeedReconnect(t *testing.T) {
	e := newClusterEnv(t, 61, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var firstTok []byte
	crashes := 0
	trs := e.runTrainers(ctx, func(tr *trainer, n int) bool {
		if tr.rank != 0 {
			return true
		}
		if n == 2 {
			firstTok = tr.m.token // the commit of batch 1
		}
		if n != 6 && n != 13 {
			return true
		}
		// Batch n is trained but not committed: crash (no bye).
		tr.c.Abort()
		tr.c.Close()
		tr.restore()
		crashes++
		tok := tr.m.token
		if n == 6 {
			if err := tr.dial(firstTok); !isCode(err, feed.CodeStaleToken) {
				t.Errorf("reconnect with an older token: %v, want a stale_token error", err)
			}
			if err := tr.dial([]byte("garbage")); !isCode(err, feed.CodeBadToken) {
				t.Errorf("reconnect with a garbage token: %v, want bad_token", err)
			}
		} else {
			tok = nil // the node knows the rank's last commit
		}
		if err := tr.dial(tok); err != nil {
			t.Errorf("reconnect: %v", err)
			return false
		}
		w := tr.c.Welcome()
		last := tr.m.hist[tr.m.committed-1]
		if w.Mode != "cluster" || w.Resume != feed.After(last.epoch, last.step) || w.Committed == nil || string(w.Committed.Token) != string(tr.m.token) {
			t.Errorf("welcome after reconnect: %+v; last commit %d/%d %s", w, last.epoch, last.step, tr.m.token)
		}
		return false
	})
	if crashes != 2 {
		t.Errorf("%d crashes, want 2", crashes)
	}
	e.waitFinished(ctx)
	// Rank 0's counters add up its sessions: at least what its trainer
	// got (a replaced session's last batches may never reach it).
	if d := e.nd.Rank(0).Counters().Delivered(); d.Batches < int64(trs[0].m.received) || trs[0].rank != 0 {
		t.Errorf("rank 0: counters say %d batches delivered over its sessions, its trainer got %d", d.Batches, trs[0].m.received)
	}
}

// TestClusterFeedForeignToken: a trainer's token of another job is
// refused whenever it arrives. One of another dataset at once, even
// before the node's welcome (the node's digest is the job's); one of
// another seed presented before the welcome as soon as the welcome
// brings the job, and at once after it. The job's own trainers then run
// it exactly once, the batch the refused trainer's session took included.
func TestClusterFeedForeignToken(t *testing.T) {
	e := newClusterEnvUnwelcomed(t, 61, 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	id := journal.Identity{Digest: dataset.ManifestDigest(e.ds), Seed: e.cfg.Seed, Block: e.cfg.Block, Window: e.cfg.Window,
		BatchSize: clusterBatch, Epochs: e.cfg.Epochs}
	otherData, otherSeed := id, id
	otherData.Digest = "61:0123456789abcdef"
	otherSeed.Seed++
	dataTok := journal.Token{Job: 1, Gen: 2, Step: 3, Ident: otherData}.String()
	seedTok := journal.Token{Job: 1, Gen: 2, Step: 3, Ident: otherSeed}.String()

	tr := &trainer{t: t, e: e, rank: 1}
	if err := tr.dial([]byte(dataTok)); !isCode(err, feed.CodeBadToken) || !strings.Contains(err.Error(), "dataset digest 61:0123456789abcdef in the token") {
		t.Fatalf("before the welcome, a token of another dataset: %v, want bad_token naming the digest", err)
	}
	if err := tr.dial([]byte(seedTok)); err != nil {
		t.Fatalf("before the welcome, a token the node cannot check yet: %v", err)
	}
	e.introduce()
	b, err := tr.c.Next(ctx)
	if err == nil {
		b.Release()
		t.Fatalf("a token of another seed, presented before the welcome, was served batch %d/%d", b.Epoch, b.Step)
	}
	if !isCode(err, feed.CodeBadToken) || !strings.Contains(err.Error(), "seed 6 in the token, 5 in this job") {
		t.Fatalf("after the welcome: %v, want bad_token naming the seed", err)
	}
	tr.c.Close()
	if err := tr.dial([]byte(seedTok)); !isCode(err, feed.CodeBadToken) || !strings.Contains(err.Error(), "seed") {
		t.Fatalf("after the welcome, a token of another seed: %v, want bad_token", err)
	}
	e.runTrainers(ctx, nil)
	e.waitFinished(ctx)
}

// TestClusterFeedCoordinatorRestart: the coordinator restarts under the
// trainers; each sees a rollback naming its last acknowledged commit,
// restores it, and continues right after it.
func TestClusterFeedCoordinatorRestart(t *testing.T) {
	e := newClusterEnv(t, 61, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var once sync.Once
	restarted := make(chan struct{})
	trs := e.runTrainers(ctx, func(tr *trainer, n int) bool {
		if tr.rank == 0 && n == 5 {
			once.Do(func() {
				e.restartCoordinator(ctx)
				close(restarted)
			})
		}
		return true
	})
	<-restarted
	for _, tr := range trs {
		// Rank 0 restarted the coordinator after its 5th batch, mid
		// epoch 0, so it commits again in the epoch it rolled back in.
		// Rank 1 may have been anywhere, even at its epoch's last step.
		if tr.rank == 0 && tr.m.ownStepTokens == 0 {
			t.Errorf("rank %d: no commit after the rollback, in its epoch, to check the token's step of", tr.rank)
		}
		if tr.m.rollbacks == 0 {
			t.Errorf("rank %d: no rollback surfaced after the coordinator restart", tr.rank)
		}
	}
	e.waitFinished(ctx)
}

func testLogger() *slog.Logger {
	if os.Getenv("LONGSHORE_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil))
}

func isCode(err error, code string) bool {
	var re *feed.RemoteError
	return errors.As(err, &re) && re.Code == code
}
