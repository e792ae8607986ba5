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
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/agent"
	"github.com/longshore/longshore/cluster/coord"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/journal"
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
	const n = 97
	store := storage.NewMemStore("t")
	ds := &storage.Dataset{Classes: []string{"a"}}
	for i := range n {
		key := fmt.Sprintf("k%03d", i)
		if _, err := store.Put(context.Background(), key, []byte{1}, storage.Cond{}); err != nil {
			t.Fatal(err)
		}
		ds.Samples = append(ds.Samples, storage.Sample{Key: key})
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	cfg := cluster.DefaultConfig()
	cfg.Samples, cfg.Epochs, cfg.ShardSize, cfg.Seed = n, 2, 8, 5
	jstore := storage.NewMemStore("journal")
	jn := openJournal(t, jstore)
	cfg.Incarnation = jn.Incarnation()
	co, err := coord.Start(sys, coord.Config{Cluster: cfg, BatchSize: 4, Digest: agent.ManifestDigest(ds), MinRanks: 2,
		TickEvery: 20 * time.Millisecond, Journal: jn})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[string]int64{} // rank@session/epoch -> step
	var badTokens []string
	delivered := map[string][]string{}
	var nodes []*agent.Node
	// One node: agents are named actors, and two systems in one process
	// cannot reach each other without remote (TestRemoteRoundTrip and the
	// integration tests cover that).
	for i := range 1 {
		nd, err := agent.Start(sys, agent.Config{
			Node: fmt.Sprintf("n%d", i), Ranks: 2, Dataset: ds,
			Pipeline: actors.Config{Sample: actors.Shape{Height: 2, Width: 2}, Decoders: 1, FetchConcurrency: 2, Slots: 2},
			Deps:     actors.Deps{Store: store, NewDecoder: func() (actors.SampleDecoder, error) { return zeroDecoder{}, nil }},
			OnAck: func(rank string, s cluster.Fence, a cluster.Ack) {
				mu.Lock()
				k := fmt.Sprintf("%s@%s/%d", rank, s, a.Epoch)
				acked[k] = max(acked[k], a.Step)
				if tok, err := journal.ParseToken(a.Token); err != nil || tok.Epoch != a.Epoch || tok.Step != a.Step || tok.Gen < 2 {
					badTokens = append(badTokens, fmt.Sprintf("%q (%+v, %v)", a.Token, tok, err))
				}
				mu.Unlock()
			},
			RequestEvery: 20 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, nd)
		// Coordinator and nodes find each other by PID; locally the
		// address is the system's.
		nd.SetCoordinatorPID(co.PID())
		co.SetNodePID(nd.Name(), nd.PID())
		co.Membership(gossip.Event{Kind: gossip.Joined, Name: nd.Name(), Meta: gossip.Meta{
			ID: nd.Name(), Role: gossip.RoleNode, Ranks: nd.RankNames(), Incarnation: nd.Incarnation()}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, nd := range nodes {
		for i := range 2 {
			r := nd.Rank(i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					b, err := r.Next(ctx)
					if errors.Is(err, io.EOF) {
						return
					}
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					k := fmt.Sprintf("%s@%s/%d/%d", b.RankName, b.Session, b.Epoch, b.Step)
					for j, key := range b.Keys {
						if !b.Pads[j] {
							delivered[k] = append(delivered[k], key)
						}
					}
					mu.Unlock()
					epoch, step := b.Epoch, b.Step
					b.Release()
					r.Commit(epoch, step)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	select {
	case <-co.Done():
	case <-ctx.Done():
		t.Fatal("coordinator not done")
	}
	for e := range 2 {
		seen := map[string]int{}
		for k, keys := range delivered {
			parts := strings.Split(k, "/")
			rs := strings.Join(parts[:len(parts)-1], "/")
			var step int64
			fmt.Sscan(parts[len(parts)-1], &step)
			if !strings.HasSuffix(rs, fmt.Sprintf("/%d", e)) {
				continue
			}
			if a, ok := acked[rs]; ok && step <= a {
				for _, key := range keys {
					seen[key]++
				}
			}
		}
		for _, s := range ds.Samples {
			if seen[s.Key] != 1 {
				t.Errorf("epoch %d: %s in committed steps %d times", e, s.Key, seen[s.Key])
			}
		}
	}
	if len(badTokens) > 0 {
		t.Errorf("acks with bad tokens: %v", badTokens)
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
	for _, nd := range nodes {
		if err := nd.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := co.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	sys.Shutdown()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before+2 {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines left (before: %d):\n%s", g, before, buf[:runtime.Stack(buf, true)])
	}
}

func openJournal(t *testing.T, store storage.Store) *journal.Journal {
	t.Helper()
	j, err := journal.Open(context.Background(), journal.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Start(context.Background(), journal.StartOptions{}); err != nil {
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

	// A running coordinator is superseded: its next check stops it.
	c := openJournal(t, store)
	cfg.Incarnation = c.Incarnation()
	co, err := coord.Start(sys, coord.Config{Cluster: cfg, BatchSize: 1, Journal: c, TickEvery: 5 * time.Millisecond, CheckEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Shutdown(context.Background())
	d := openJournal(t, store)
	if _, err := d.Write(context.Background(), cluster.State{Incarnation: d.Incarnation(), Samples: 10}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-co.Fatal():
		if !errors.Is(err, journal.ErrSuperseded) || !errors.Is(err, coord.ErrStopped) {
			t.Fatalf("Fatal: %v, want ErrStopped and ErrSuperseded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stale coordinator did not step down")
	}
}
