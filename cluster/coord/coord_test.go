package coord_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/actorstest"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/coord"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/journal"
	"github.com/longshore/longshore/cluster/node"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/storage"
)

type zeroDecoder struct{}

func (zeroDecoder) Decode(data []byte, seed uint64, dst []byte) error { clear(dst); return nil }
func (zeroDecoder) Close() error                                      { return nil }

// TestInProcess runs the coordinator actor and two node agents in one
// actor system (no remote, no gossip: membership is handed in), with
// trainers that commit every batch, and checks the promise and that every
// goroutine they started is gone after Shutdown.
func TestInProcess(t *testing.T) {
	before := runtime.NumGoroutine()
	h := newHarness(t, 97)
	jstore := storage.NewMemStore("journal")
	co := h.startCoordinator(2, 2, openJournal(t, jstore), nil)
	// One node: agents are named actors, and two systems in one process
	// cannot reach each other without remote (TestRemoteRoundTrip and the
	// integration tests cover that).
	nd := h.startNode("n0")
	h.introduce(co, nd)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h.train(ctx, nd, co)
	h.check(2)
	// The node's reports reach the coordinator's status: one goes with
	// every request tick of the node (which keeps ticking after the job),
	// so a job shorter than a tick has its report a tick later.
	for {
		st, err := co.Status(ctx)
		if err == nil && len(st.Nodes) == 1 && st.Nodes[0].Report != nil && st.Nodes[0].Report.Samples > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("status nodes %+v (%v): want n0's report", st.Nodes, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond): // polling pace only
		}
	}
	// The journal's newest generation has the job done.
	j2, err := journal.Open(ctx, journal.Config{Store: jstore})
	if err != nil {
		t.Fatal(err)
	}
	last, err := j2.Start(ctx, journal.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for e, es := range last.State.Epochs {
		if !es.Complete {
			t.Errorf("journal generation %d: epoch %d not complete", last.Gen, e)
		}
	}
	if err := nd.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := co.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	h.sys.Shutdown()
	deadline := time.Now().Add(30 * time.Second) // a backstop: the loop ends as soon as they are gone
	for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before+2 {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines left (before: %d):\n%s", g, before, buf[:runtime.Stack(buf, true)])
	}
}

// crashingJournal lets its n-th write land and then reports failure: the
// coordinator stops without sending the acks the write made durable, as
// if it died between the journal write and the send.
type crashingJournal struct {
	*journal.Journal
	n      int
	writes int
	landed chan uint64 // the generation that landed unacknowledged
}

func (j *crashingJournal) Write(ctx context.Context, s cluster.State, peers []string) (uint64, error) {
	gen, err := j.Journal.Write(ctx, s, peers)
	if j.writes++; err == nil && j.writes == j.n {
		j.landed <- gen
		return 0, errors.New("simulated crash after the journal write landed")
	}
	return gen, err
}

// TestAckLostWithCoordinator: a commit the journal holds but whose ack
// died with the coordinator is acknowledged to the trainer by the next
// life's Welcome, so the samples of those steps are in committed history
// exactly once: the new life does not issue them again, and the trainer
// does not roll back past them.
func TestAckLostWithCoordinator(t *testing.T) {
	h := newHarness(t, 97)
	defer h.sys.Shutdown()
	jstore := storage.NewMemStore("journal")
	cj := &crashingJournal{Journal: openJournal(t, jstore), n: 6, landed: make(chan uint64, 1)}
	co := h.startCoordinator(1, 2, cj, nil)
	nd := h.startNode("n0")
	h.introduce(co, nd)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	trained := make(chan struct{})
	go func() {
		defer close(trained)
		h.train(ctx, nd, nil)
	}()

	var lostGen uint64
	select {
	case lostGen = <-cj.landed:
	case <-ctx.Done():
		t.Fatal("the journal write to crash after never came")
	}
	<-co.Fatal()
	if err := co.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// The next life restores the newest generation, the one whose acks
	// were never sent, and the node joins it.
	j2 := openJournalAt(t, jstore)
	last, err := j2.Start(ctx, journal.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if last.Gen != lostGen {
		t.Fatalf("restored generation %d, the unacknowledged one is %d", last.Gen, lostGen)
	}
	c2 := h.startCoordinator(1, 0, j2, &last.State)
	defer c2.Shutdown(context.Background())
	h.introduce(c2, nd)
	select {
	case <-trained:
	case <-ctx.Done():
		t.Fatal("trainers did not finish")
	}
	h.check(1)
	h.mu.Lock()
	late := h.tokenGens[lostGen]
	h.mu.Unlock()
	if late == 0 {
		t.Errorf("no trainer got an ack made durable by generation %d: the scenario did not happen", lostGen)
	}
	if err := nd.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTrainerReset: a trainer that restarts from its last acknowledged
// commit (agent Rank.Reset, as the feed does when a trainer reconnects)
// gets what it had been given since delivered again — to it or to the
// other rank — and committed history stays exact.
func TestTrainerReset(t *testing.T) {
	h := newHarness(t, 97)
	defer h.sys.Shutdown()
	co := h.startCoordinator(2, 2, openJournal(t, storage.NewMemStore("journal")), nil)
	defer co.Shutdown(context.Background())
	nd := h.startNode("n0")
	defer nd.Shutdown(context.Background())
	h.introduce(co, nd)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h.resets = map[int][]int{0: {3, 9}, 1: {5}} // after these batches, uncommitted
	h.train(ctx, nd, co)
	h.check(2)
	st, err := co.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.resetsDone != 3 {
		t.Errorf("%d resets done, want 3", h.resetsDone)
	}
	t.Logf("3 trainer resets; coordinator stats %+v", st.Stats)
}

// TestLostWelcome: the node never gets the first Welcome (its mail is
// dropped on the way); the coordinator sends it again, since a node
// without sessions has nothing to say, and the job completes.
func TestLostWelcome(t *testing.T) {
	h := newHarness(t, 40)
	defer h.sys.Shutdown()
	co := h.startCoordinator(1, 0, openJournal(t, storage.NewMemStore("journal")), nil)
	defer co.Shutdown(context.Background())
	nd := h.startNode("n0")
	defer nd.Shutdown(context.Background())
	var welcomes atomic.Int32
	drop, err := h.sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*wire.NodeMail); ok {
			if len(m.Welcomes) > 0 && welcomes.Add(1) == 1 {
				return // lost
			}
			c.Send(nd.PID(), m)
		}
	}), "dropper")
	if err != nil {
		t.Fatal(err)
	}
	// introduce, with the coordinator's mail to the node going through
	// the dropper.
	h.co = co
	nd.SetCoordinatorPID(co.PID())
	co.SetNodePID(nd.Name(), drop)
	co.Membership(gossip.Event{Kind: gossip.Joined, Name: nd.Name(), Meta: gossip.Meta{
		ID: nd.Name(), Role: gossip.RoleNode, Ranks: nd.RankNames(), Incarnation: nd.Incarnation()}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h.train(ctx, nd, co)
	h.check(1)
	if n := welcomes.Load(); n < 2 {
		t.Errorf("%d mails with Welcomes reached the node's address, want the lost one and a resend", n)
	}
}

// harness is one node's trainers against in-process coordinators.
type harness struct {
	t   *testing.T
	sys *actor.ActorSystem
	ds  *dataset.Dataset
	st  storage.Store

	mu        sync.Mutex
	co        *coord.Coordinator  // the current life, for rejoins
	acked     map[string]int64    // rank@session/epoch -> step
	delivered map[string][]string // rank@session/epoch/step -> keys
	tokenGens map[uint64]int      // acks per token generation
	badTokens []string
	// resets: per rank index, after which of its batches (counted from
	// 1) its trainer resets instead of committing.
	resets     map[int][]int
	resetsDone int
	discarded  map[string]bool // steps a reset threw away: never committed
	nodeInc    uint64          // the incarnation startNode gives; 0: the node's default
	linkMax    int             // coord.Config.LinkMaxPending of startCoordinator
	nodeMax    int             // node.Config.LinkMaxPending of startNode
}

func newHarness(t *testing.T, n int) *harness {
	store := storage.NewMemStore("t")
	ds := &dataset.Dataset{Classes: []string{"a"}}
	for i := range n {
		key := fmt.Sprintf("k%03d", i)
		if _, err := store.Put(context.Background(), key, []byte{1}, storage.Cond{}); err != nil {
			t.Fatal(err)
		}
		ds.Samples = append(ds.Samples, dataset.Sample{Key: key})
	}
	return &harness{
		t: t, ds: ds, st: store,
		sys:   actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) })),
		acked: map[string]int64{}, delivered: map[string][]string{}, tokenGens: map[uint64]int{}, discarded: map[string]bool{},
	}
}

// startCoordinator starts a coordinator of an epochs-epoch job over the
// harness's dataset, batch 4, shard 8, journaling to jn (in its
// incarnation), from restore if not nil.
func (h *harness) startCoordinator(epochs, minRanks int, jn interface {
	coord.Journal
	Incarnation() uint64
}, restore *cluster.State) *coord.Coordinator {
	h.t.Helper()
	cfg := cluster.DefaultConfig()
	cfg.Samples, cfg.Epochs, cfg.ShardSize, cfg.Seed = int64(len(h.ds.Samples)), epochs, 8, 5
	cfg.Incarnation = jn.Incarnation()
	cfg.MinRanks = minRanks
	co, err := coord.Start(h.sys, coord.Config{Cluster: cfg, BatchSize: 4, Digest: dataset.ManifestDigest(h.ds),
		TickEvery: 20 * time.Millisecond, Journal: jn, Restore: restore, LinkMaxPending: h.linkMax})
	if err != nil {
		h.t.Fatal(err)
	}
	return co
}

// startNode starts a node with two ranks that records every ack.
func (h *harness) startNode(name string) *node.Node {
	var started atomic.Pointer[node.Node] // the report may be asked for before Start returns
	nd, err := node.Start(h.sys, node.Config{
		Report: func() *wire.NodeReport {
			var n int64
			if nd := started.Load(); nd != nil {
				for _, c := range nd.RankCounters() {
					n += c.Delivered().Samples
				}
			}
			return &wire.NodeReport{Samples: n}
		},
		Node: name, Ranks: 2, Dataset: h.ds, Incarnation: h.nodeInc,
		Pipeline: actors.Config{Sample: actors.Shape{Height: 2, Width: 2}, Decoders: 1, FetchConcurrency: 2, Slots: 2},
		Deps:     actors.Deps{Store: h.st, SampleSeed: actorstest.SampleSeed, NewDecoder: func() (actors.SampleDecoder, error) { return zeroDecoder{}, nil }},
		OnAck: func(rank string, s cluster.Fence, a cluster.Ack) {
			h.mu.Lock()
			defer h.mu.Unlock()
			k := fmt.Sprintf("%s@%s/%d", rank, s, a.Epoch)
			h.acked[k] = max(h.acked[k], a.Step)
			tok, err := journal.ParseToken(a.Token)
			if err != nil || tok.Epoch != a.Epoch || tok.Step != a.Step || tok.Gen < 2 {
				h.badTokens = append(h.badTokens, fmt.Sprintf("%q (%+v, %v)", a.Token, tok, err))
			}
			h.tokenGens[tok.Gen]++
		},
		RequestEvery:   20 * time.Millisecond,
		LinkMaxPending: h.nodeMax,
		// Gossip would spread the node's new life to the coordinator.
		Rejoin: func(_ context.Context, inc uint64) error {
			h.mu.Lock()
			co := h.co
			h.mu.Unlock()
			co.Membership(gossip.Event{Kind: gossip.Joined, Name: name, Meta: gossip.Meta{
				ID: name, Role: gossip.RoleNode, Ranks: []string{name + "/0", name + "/1"}, Incarnation: inc}})
			return nil
		},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	started.Store(nd)
	return nd
}

// introduce does what gossip would: coordinator and node learn each
// other's PID (locally the address is the system's) and the node joins.
func (h *harness) introduce(co *coord.Coordinator, nd *node.Node) {
	h.mu.Lock()
	h.co = co
	h.mu.Unlock()
	nd.SetCoordinatorPID(co.PID())
	co.SetNodePID(nd.Name(), nd.PID())
	co.Membership(gossip.Event{Kind: gossip.Joined, Name: nd.Name(), Meta: gossip.Meta{
		ID: nd.Name(), Role: gossip.RoleNode, Ranks: nd.RankNames(), Incarnation: nd.Incarnation()}})
}

// train runs a trainer per rank that commits every batch, until the job
// is over for it; a rollback makes it carry on. With co, it also waits
// for the coordinator to be done.
func (h *harness) train(ctx context.Context, nd *node.Node, co *coord.Coordinator) {
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i := range 2 {
		r := nd.Rank(i)
		resets := h.resets[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 1; ; n++ {
				b, err := r.Next(ctx)
				if errors.Is(err, io.EOF) {
					return
				}
				if errors.Is(err, node.ErrRolledBack) {
					continue // this trainer's model is its acks: nothing to restore
				}
				if err != nil {
					errs <- err
					return
				}
				h.mu.Lock()
				k := fmt.Sprintf("%s@%s/%d/%d", b.RankName, b.Session, b.Epoch, b.Step)
				for j, key := range b.Keys {
					if !b.Pads[j] {
						h.delivered[k] = append(h.delivered[k], key)
					}
				}
				h.mu.Unlock()
				epoch, step := b.Epoch, b.Step
				b.Release()
				if len(resets) > 0 && n == resets[0] {
					resets = resets[1:]
					h.mu.Lock()
					h.resetsDone++
					h.discarded[fmt.Sprintf("%s@%s/%d/%d", b.RankName, b.Session, epoch, step)] = true
					h.mu.Unlock()
					r.Reset()
					continue
				}
				r.Commit(epoch, step)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		h.t.Error(err)
	}
	if co == nil {
		return
	}
	select {
	case <-co.Done():
	case <-ctx.Done():
		h.t.Error("coordinator not done")
	}
}

// check verifies the promise: every sample is in acknowledged steps
// exactly once per epoch, and every ack carried a good token.
func (h *harness) check(epochs int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for e := range epochs {
		seen := map[string]int{}
		for k, keys := range h.delivered {
			parts := strings.Split(k, "/")
			rs := strings.Join(parts[:len(parts)-1], "/")
			var step int64
			fmt.Sscan(parts[len(parts)-1], &step)
			if !strings.HasSuffix(rs, fmt.Sprintf("/%d", e)) {
				continue
			}
			if a, ok := h.acked[rs]; ok && step <= a && !h.discarded[k] {
				for _, key := range keys {
					seen[key]++
				}
			}
		}
		for _, s := range h.ds.Samples {
			if seen[s.Key] != 1 {
				h.t.Errorf("epoch %d: %s in committed steps %d times", e, s.Key, seen[s.Key])
			}
		}
	}
	if len(h.badTokens) > 0 {
		h.t.Errorf("acks with bad tokens: %v", h.badTokens)
	}
}

func openJournal(t *testing.T, store storage.Store) *journal.Journal {
	t.Helper()
	j := openJournalAt(t, store)
	if _, err := j.Start(context.Background(), journal.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	return j
}

// openJournalAt opens the journal in store without starting it.
func openJournalAt(t *testing.T, store storage.Store) *journal.Journal {
	t.Helper()
	j, err := journal.Open(context.Background(), journal.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestStaleStepsDown: a coordinator whose journal another coordinator has
// written since stops — at start, or on its next check — and says why.
func TestStaleStepsDown(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	store := storage.NewMemStore("journal")
	cfg := cluster.DefaultConfig()
	cfg.Samples, cfg.Epochs = 10, 1

	// Two coordinators opened the journal at once; b writes first, so a
	// fails at start.
	a, b := openJournal(t, store), openJournal(t, store)
	cfg.Incarnation = b.Incarnation()
	if _, err := b.Write(context.Background(), cluster.State{Incarnation: cfg.Incarnation, Samples: 10}, nil); err != nil {
		t.Fatal(err)
	}
	cfg.Incarnation = a.Incarnation()
	if _, err := coord.Start(sys, coord.Config{Cluster: cfg, BatchSize: 1, Journal: a}); !errors.Is(err, journal.ErrSuperseded) {
		t.Fatalf("start over a newer generation: err %v, want ErrSuperseded", err)
	}

	// A running coordinator is superseded: its next check stops it. The
	// ticks come from a fake clock, so the check is the first tick after
	// the other coordinator's write, however slow the machine.
	c := openJournal(t, store)
	cfg.Incarnation = c.Incarnation()
	fc := clock.NewFake(time.Time{})
	co, err := coord.Start(sys, coord.Config{Cluster: cfg, BatchSize: 1, Journal: c, TickEvery: time.Second, CheckEvery: 1, Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Shutdown(context.Background())
	d := openJournal(t, store)
	if _, err := d.Write(context.Background(), cluster.State{Incarnation: d.Incarnation(), Samples: 10}, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a failure backstop only
	defer cancel()
	if err := fc.BlockUntil(ctx, 1); err != nil {
		t.Fatalf("the coordinator's ticker is not on the injected clock: %v", err)
	}
	select {
	case err := <-co.Fatal():
		t.Fatalf("stopped before its check: %v", err)
	default:
	}
	fc.Advance(time.Second)
	select {
	case err := <-co.Fatal():
		if !errors.Is(err, journal.ErrSuperseded) || !errors.Is(err, coord.ErrStopped) {
			t.Fatalf("Fatal: %v, want ErrStopped and ErrSuperseded", err)
		}
	case <-ctx.Done():
		t.Fatal("stale coordinator did not step down on its next check")
	}
}

// stuckJournal is a journal whose writes after the first n block until
// their context ends, as on a store that stopped answering.
type stuckJournal struct {
	*journal.Journal
	n       int
	writes  atomic.Int32
	blocked chan struct{} // closed when a write blocks
	aborted chan error    // the blocked write's context error
	once    sync.Once
}

func (j *stuckJournal) Write(ctx context.Context, s cluster.State, peers []string) (uint64, error) {
	if int(j.writes.Add(1)) <= j.n {
		return j.Journal.Write(ctx, s, peers)
	}
	j.once.Do(func() { close(j.blocked) })
	<-ctx.Done()
	j.aborted <- ctx.Err()
	return 0, ctx.Err()
}

// TestShutdownAbortsStuckJournalWrite: when Shutdown's ctx ends while the
// actor is stuck in a journal write, Shutdown returns ctx.Err() and the
// write's context is canceled too, so the write does not outlive it.
func TestShutdownAbortsStuckJournalWrite(t *testing.T) {
	h := newHarness(t, 40)
	defer h.sys.Shutdown()
	sj := &stuckJournal{Journal: openJournal(t, storage.NewMemStore("journal")), n: 1,
		blocked: make(chan struct{}), aborted: make(chan error, 1)}
	co := h.startCoordinator(1, 0, sj, nil)
	nd := h.startNode("n0")
	defer nd.Shutdown(context.Background())
	h.co = co
	nd.SetCoordinatorPID(co.PID())
	co.SetNodePID(nd.Name(), nd.PID())
	co.Membership(gossip.Event{Kind: gossip.Joined, Name: nd.Name(), Meta: gossip.Meta{
		ID: nd.Name(), Role: gossip.RoleNode, Ranks: nd.RankNames(), Incarnation: nd.Incarnation()}})
	// Trainers that commit every batch: the coordinator writes commits
	// to the journal.
	trainCtx, stopTraining := context.WithCancel(context.Background())
	defer stopTraining()
	for i := range 2 {
		go func() {
			for {
				b, err := nd.Rank(i).Next(trainCtx)
				if err != nil {
					if errors.Is(err, node.ErrRolledBack) {
						continue
					}
					return
				}
				_ = nd.Rank(i).Commit(b.Epoch, b.Step)
				b.Release()
			}
		}()
	}
	select {
	case <-sj.blocked:
	case <-time.After(time.Minute): // a failure backstop only
		t.Fatal("no journal write after the first within a minute")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Shutdown gives up at once: the actor is stuck
	if err := co.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v, want context.Canceled", err)
	}
	select {
	case err := <-sj.aborted:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the stuck write ended with %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute): // a failure backstop only
		t.Fatal("the stuck journal write outlived Shutdown")
	}
}

// TestStoreBudgetShares: with a job-wide store budget the coordinator
// mails each live node its share by ranks as nodes join and leave, and
// Status shows the shares. The nodes here are stand-ins that record the
// shares their mail carries.
func TestStoreBudgetShares(t *testing.T) {
	h := newHarness(t, 40)
	defer h.sys.Shutdown()
	cfg := cluster.DefaultConfig()
	cfg.Samples, cfg.Epochs, cfg.ShardSize = int64(len(h.ds.Samples)), 1, 8
	co, err := coord.Start(h.sys, coord.Config{Cluster: cfg, BatchSize: 4, Digest: dataset.ManifestDigest(h.ds),
		TickEvery: time.Hour, JobStoreRPS: 300})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Shutdown(context.Background())
	type share struct {
		node string
		rps  float64
	}
	shares := make(chan share, 64)
	join := func(name string, ranks int) {
		pid, err := h.sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
			if m, ok := c.Message().(*wire.NodeMail); ok && m.StoreBudget != nil {
				shares <- share{name, m.StoreBudget.Rps}
			}
		}), "standin-"+name)
		if err != nil {
			t.Fatal(err)
		}
		co.SetNodePID(name, pid)
		var names []string
		for i := range ranks {
			names = append(names, fmt.Sprintf("%s/%d", name, i))
		}
		co.Membership(gossip.Event{Kind: gossip.Joined, Name: name, Meta: gossip.Meta{ID: name, Role: gossip.RoleNode, Ranks: names, Incarnation: 1}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// expect waits until every named node's latest share is the one
	// wanted (a node may first get a share that a later join changed).
	expect := func(want map[string]float64) {
		t.Helper()
		got := map[string]float64{}
		for {
			ok := true
			for n, w := range want {
				if got[n] != w {
					ok = false
				}
			}
			if ok {
				return
			}
			select {
			case s := <-shares:
				got[s.node] = s.rps
			case <-ctx.Done():
				t.Fatalf("shares %v, want %v", got, want)
			}
		}
	}
	join("a", 2)
	expect(map[string]float64{"a": 300})
	join("b", 1)
	expect(map[string]float64{"a": 200, "b": 100})
	co.Membership(gossip.Event{Kind: gossip.Left, Name: "b", Meta: gossip.Meta{ID: "b", Role: gossip.RoleNode, Incarnation: 1}})
	expect(map[string]float64{"a": 300})
	st, err := co.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if want := map[string]float64{"a": 300, "b": 0}[n.Node]; n.StoreRPS != want {
			t.Errorf("status: %s's share %v, want %v", n.Node, n.StoreRPS, want)
		}
	}
}

// TestRestartWithoutJournal: a coordinator without a journal restarts
// while its node lives on. The new life cannot know the old one's
// incarnation; its Welcome must still be taken for a new life's (before,
// both were incarnation 1 and the node kept its old sessions and leases,
// whose messages the new life refused, and the job stalled): the node
// ends the old sessions and the job runs to the end under the new life.
func TestRestartWithoutJournal(t *testing.T) {
	h := newHarness(t, 97)
	defer h.sys.Shutdown()
	start := func() *coord.Coordinator {
		cfg := cluster.DefaultConfig()
		cfg.Samples, cfg.Epochs, cfg.ShardSize, cfg.Seed = int64(len(h.ds.Samples)), 30, 8, 5
		co, err := coord.Start(h.sys, coord.Config{Cluster: cfg, BatchSize: 4, Digest: dataset.ManifestDigest(h.ds), TickEvery: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return co
	}
	co := start()
	nd := h.startNode("n0")
	h.introduce(co, nd)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	trained := make(chan struct{})
	go func() {
		defer close(trained)
		h.train(ctx, nd, nil)
	}()
	for { // until the first life acknowledged a commit (of the job's 30 epochs): the node holds its leases
		h.mu.Lock()
		n := len(h.acked)
		h.mu.Unlock()
		if n > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no commit acknowledged by the first life")
		case <-time.After(5 * time.Millisecond): // polling pace only
		}
	}
	if err := co.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := co.Status(ctx); st.Done {
		t.Fatal("the first life finished the job before its restart: make the job longer")
	}
	co2 := start()
	defer co2.Shutdown(context.Background())
	h.introduce(co2, nd)
	select {
	case <-co2.Done():
	case <-ctx.Done():
		st, _ := co2.Status(context.Background())
		t.Fatalf("the new life never finished the job: %+v %+v", st.Stats, st.Epochs)
	}
	st, err := co2.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Stats.Invalid != 0 {
		t.Errorf("the new life refused %d messages as invalid: the node kept the old life's sessions", st.Stats.Invalid)
	}
	select {
	case <-trained:
	case <-ctx.Done():
		t.Fatal("trainers did not finish")
	}
	if err := nd.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestNodeBehindKnownLife: a node process whose incarnation comes out
// below the life of it the coordinator knows (its clock stepped back
// since the last life started) is still welcomed: the coordinator tells
// it the later life, it rejoins above it, and the job finishes. Before,
// its Join was taken for a stale report and it waited for good.
func TestNodeBehindKnownLife(t *testing.T) {
	h := newHarness(t, 40)
	defer h.sys.Shutdown()
	co := h.startCoordinator(1, 0, openJournal(t, storage.NewMemStore("journal")), nil)
	defer co.Shutdown(context.Background())
	const earlier = uint64(1) << 40 // the life before, which died
	meta := gossip.Meta{ID: "n0", Role: gossip.RoleNode, Ranks: []string{"n0/0", "n0/1"}, Incarnation: earlier}
	co.Membership(gossip.Event{Kind: gossip.Joined, Name: "n0", Meta: meta})
	co.Membership(gossip.Event{Kind: gossip.Failed, Name: "n0", Meta: meta})
	h.nodeInc = 7 // this life's start time, read from a clock stepped back
	nd := h.startNode("n0")
	h.introduce(co, nd)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h.train(ctx, nd, co)
	h.check(1)
	if err := nd.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
