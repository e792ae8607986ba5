package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/actorstest"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/delivery"
	"github.com/longshore/longshore/feed"
	"github.com/longshore/longshore/storage"
)

// runRig is a standalone run's pieces over a memory store of n samples
// with the pattern decoder: what longshore-node --standalone assembles.
func runRig(t *testing.T, n, ranks int) (*Assembly, dataset.Catalog) {
	t.Helper()
	st := storage.NewMemStore("t")
	ds := &dataset.Dataset{Classes: []string{"a"}}
	for i := range n {
		key := fmt.Sprintf("k%03d", i)
		if _, err := st.Put(context.Background(), key, []byte(key), storage.Cond{}); err != nil {
			t.Fatal(err)
		}
		ds.Samples = append(ds.Samples, dataset.Sample{Key: key})
	}
	pc := actors.DefaultConfig()
	pc.Sample, pc.BatchSize, pc.Epochs, pc.Decoders, pc.FetchConcurrency, pc.Slots = actors.Shape{Height: 4, Width: 4}, 4, 2, 2, 2, 2
	asm, err := Assemble(AssemblyConfig{Ranks: ranks, Pipeline: pc, Deps: actors.Deps{Store: st}, Logger: testLogger(),
		UseDecoder: func(c *actors.Config, d *actors.Deps) error {
			d.SampleSeed = actorstest.SampleSeed
			d.NewDecoder = func() (actors.SampleDecoder, error) { return actorstest.PatternDecoder{}, nil }
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { asm.Close() })
	return asm, dataset.DatasetCatalog(ds)
}

// epochOrder is the epoch order a standalone run of the command uses.
func epochOrder(seed uint64, epoch int, n int64) actors.Order {
	return cluster.NewOrder(seed, epoch, n, 1, 1)
}

// recordSink is an in-process BatchSink that counts each (epoch, key).
type recordSink struct {
	mu       sync.Mutex
	seen     map[string]int
	ranks    map[string]bool
	sessions int
	flushes  int
}

func (s *recordSink) Session(string, cluster.Fence) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions++
	return nil
}

func (s *recordSink) Batch(b *Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range b.Keys {
		if !b.Pads[i] {
			s.seen[fmt.Sprintf("%d/%s", b.Epoch, k)]++
		}
	}
	s.ranks[b.RankName] = true
	return nil
}

func (s *recordSink) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushes++
	return nil
}

// checkOnce checks that every one of n samples came once in each of
// epochs epochs.
func checkOnce(t *testing.T, seen map[string]int, n, epochs int) {
	t.Helper()
	for e := range epochs {
		for i := range n {
			if k := fmt.Sprintf("%d/k%03d", e, i); seen[k] != 1 {
				t.Errorf("%s delivered %d times, want once", k, seen[k])
			}
		}
	}
	if len(seen) != n*epochs {
		t.Errorf("%d (epoch, sample) pairs delivered, want %d", len(seen), n*epochs)
	}
}

// TestRunStandaloneInProcess: a standalone source and an in-process sink
// go through Run: every sample once an epoch, the ranks named by index,
// no session lines, the hooks in order, the counters in the result.
func TestRunStandaloneInProcess(t *testing.T) {
	asm, cat := runRig(t, 30, 2)
	rec := &recordSink{seen: map[string]int{}, ranks: map[string]bool{}}
	var order []string
	var firsts int
	var mu sync.Mutex
	res, err := Run(context.Background(), RunConfig{Assembly: asm, Source: &Standalone{Catalog: cat, Order: epochOrder}, Sink: &InProcess{Sink: rec},
		Logger: testLogger(),
		OnStart: func(r *Running) error {
			order = append(order, "start")
			if len(r.Names()) != 2 || r.Node != nil {
				t.Errorf("running: names %v, cluster node %v", r.Names(), r.Node)
			}
			return nil
		},
		OnServe:      func(*Running) { order = append(order, "serve") },
		OnFirstBatch: func() { mu.Lock(); firsts++; mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	checkOnce(t, rec.seen, 30, 2)
	if !rec.ranks["0"] || !rec.ranks["1"] || len(rec.ranks) != 2 || rec.sessions != 0 || rec.flushes != 1 {
		t.Errorf("ranks %v, %d session lines, %d flushes; want 0 and 1, none, one at the end", rec.ranks, rec.sessions, rec.flushes)
	}
	if fmt.Sprint(order) != "[start serve]" || firsts == 0 {
		t.Errorf("hooks %v, %d batches noted; want start then serve, every batch noted", order, firsts)
	}
	if got := res.Counters.Stats().Samples; got != 60 || len(res.Ranks) != 2 || res.Seconds <= 0 {
		t.Errorf("result: %d samples (want 60: 2 epochs x 30), %d ranks, %v s", got, len(res.Ranks), res.Seconds)
	}
}

// TestRunStandaloneFeed: the same source through Run with the feed sink:
// trainers on the ranks' sockets get every sample once an epoch, their
// commits reach OnCommit, and Run returns once they have left.
func TestRunStandaloneFeed(t *testing.T) {
	asm, cat := runRig(t, 30, 2)
	dir, err := os.MkdirTemp("", "lsr")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var mu sync.Mutex
	var commits []string
	served := make(chan *delivery.Server, 1)
	done := make(chan error, 1)
	var res Result
	go func() {
		var err error
		res, err = Run(context.Background(), RunConfig{Assembly: asm,
			Source: &Standalone{Catalog: cat, Order: epochOrder, Committer: delivery.LocalCommitter{Job: "t", BatchSize: 4}},
			Sink:   &Feed{Config: delivery.Config{Dir: dir, Job: "t"}}, Logger: testLogger(),
			OnServe: func(r *Running) { served <- r.Served.Load() },
			OnCommit: func(rank string, epoch int, step int64) {
				mu.Lock()
				commits = append(commits, fmt.Sprintf("%s:%d:%d", rank, epoch, step))
				mu.Unlock()
			}})
		done <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var srv *delivery.Server
	select {
	case srv = <-served:
	case err := <-done:
		t.Fatalf("Run returned before serving: %v", err)
	}
	seen := map[string]int{}
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := feed.DialContext(ctx, srv.SocketPath(r), feed.DialConfig{})
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			for {
				b, err := c.Next(ctx)
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for i, k := range b.Keys {
					if !b.Pads[i] {
						seen[fmt.Sprintf("%d/%s", b.Epoch, k)]++
					}
				}
				mu.Unlock()
				epoch, step := b.Epoch, b.Step
				b.Release()
				if _, err := c.Commit(ctx, epoch, step); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("Run did not return after the trainers left")
	}
	checkOnce(t, seen, 30, 2)
	sort.Strings(commits)
	if len(commits) != 16 || commits[0] != "0:0:0" {
		t.Errorf("commits %v; want each rank's 8 batches", commits)
	}
	if got := res.Counters.Stats().Samples; got != 60 {
		t.Errorf("result: %d samples, want 60", got)
	}
	if _, err := os.Stat(filepath.Join(dir, feed.SocketName(0))); err == nil {
		t.Error("the socket is left after the run")
	}
}

// TestRunRefuses: a run without its pieces is refused, naming them.
func TestRunRefuses(t *testing.T) {
	asm, cat := runRig(t, 4, 1)
	for _, c := range []RunConfig{
		{Source: &Standalone{Catalog: cat, Order: epochOrder}, Sink: &InProcess{Sink: &recordSink{}}},
		{Assembly: asm, Sink: &InProcess{Sink: &recordSink{}}},
		{Assembly: asm, Source: &Standalone{Catalog: cat, Order: epochOrder}},
	} {
		if _, err := Run(context.Background(), c); !errors.Is(err, ErrRunConfig) {
			t.Errorf("%+v: %v, want ErrRunConfig", c, err)
		}
	}
}
