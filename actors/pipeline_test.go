package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/storage"
)

// TestNodeDeliversEverySampleOnceMultiRankMultiEpoch: over 3 ranks and 3
// epochs, every sample of each epoch is delivered exactly once (padding
// aside), batches come in order, and every sample's pixels are its own.
func TestNodeDeliversEverySampleOnceMultiRankMultiEpoch(t *testing.T) {
	checkNoLeaks(t)
	const n, ranks, epochs = 103, 3, 3
	st, ds := makeDataset(t, n, 5, 64)
	cfg := smallConfig()
	cfg.Epochs = epochs
	node, err := NewNode(cfg, ds, ranks, testDeps(st, fakeDecoders(0, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()

	var mu sync.Mutex
	byRank := make([][]batchRecord, ranks)
	err = node.Run(context.Background(), func(b *Batch) error {
		r := checkBatch(t, st, cfg, b)
		mu.Lock()
		byRank[b.Rank] = append(byRank[b.Rank], r)
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	perRank := (n + ranks - 1) / ranks // 35
	wantSteps := (perRank + cfg.BatchSize - 1) / cfg.BatchSize
	for e := 0; e < epochs; e++ {
		seen := make(map[int64]int)
		pads := 0
		for r := 0; r < ranks; r++ {
			steps := 0
			for _, b := range byRank[r] {
				if b.Epoch != e {
					continue
				}
				if int(b.Step) != steps {
					t.Fatalf("rank %d epoch %d: step %d delivered after %d steps", r, e, b.Step, steps)
				}
				steps++
				for i, idx := range b.Indices {
					if b.Pads[i] {
						pads++
						continue
					}
					seen[idx]++
				}
			}
			if steps != wantSteps {
				t.Errorf("rank %d epoch %d: %d steps, want %d (equal across ranks)", r, e, steps, wantSteps)
			}
		}
		for i := int64(0); i < n; i++ {
			if seen[i] != 1 {
				t.Errorf("epoch %d: sample %d delivered %d times", e, i, seen[i])
			}
		}
		if want := perRank*ranks - n; pads != want {
			t.Errorf("epoch %d: %d pads, want %d", e, pads, want)
		}
	}
	// Epochs are shuffled differently.
	if reflect.DeepEqual(byRank[0][0].Indices, byRank[0][wantSteps].Indices) {
		t.Errorf("epochs 0 and 1 start with the same batch: %v", byRank[0][0].Indices)
	}
	st0 := node.Stats()
	if st0.Samples != int64(perRank*ranks*epochs) {
		t.Errorf("stats: %d samples delivered, want %d", st0.Samples, perRank*ranks*epochs)
	}
	if got := st0.Stage(StageDecode).Items; got != int64(perRank*ranks*epochs) {
		t.Errorf("stats: decode items %d", got)
	}
}

// run drives a single-rank loader to the end and returns its batches.
func runLoader(t *testing.T, cfg Config, st storage.Store, ds *dataset.Dataset, dec DecoderFactory) ([]batchRecord, FailureReport, error) {
	t.Helper()
	p, err := NewLoader(cfg, ds, testDeps(st, dec))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	recs, err := drainAll(t, st, cfg, p)
	return recs, p.Failures(), err
}

// TestBatchesAreDeterministic: the same seed gives the same batches whatever
// the decoder count, fetch concurrency and completion order (random delays
// in the store and the decoders), failures included.
func TestBatchesAreDeterministic(t *testing.T) {
	checkNoLeaks(t)
	const n = 150
	mem, ds := makeDataset(t, n, 4, 32)
	bad := map[string]error{ds.Samples[7].Key: storage.ErrNotFound, ds.Samples[90].Key: storage.ErrAccess}
	ctx := context.Background()
	mem.Put(ctx, ds.Samples[33].Key, []byte("BAD object"), storage.Cond{})

	type variant struct {
		decoders, fetchers, slots int
		delay                     time.Duration
	}
	var first []batchRecord
	for i, v := range []variant{{1, 1, 1, 0}, {4, 8, 3, 2 * time.Millisecond}, {3, 16, 5, 1 * time.Millisecond}, {2, 3, 2, 3 * time.Millisecond}} {
		cfg := smallConfig()
		cfg.Epochs = 2
		cfg.Decoders, cfg.FetchConcurrency, cfg.Slots = v.decoders, v.fetchers, v.slots
		cfg.MaxFailures = MaxFailureCount(10)
		st := &faultStore{Store: mem, fail: bad, delay: v.delay, rng: seededRand(uint64(i))}
		recs, rep, err := runLoader(t, cfg, st, ds, fakeDecoders(v.delay, uint64(i)))
		if !errors.Is(err, io.EOF) {
			t.Fatalf("variant %+v: %v", v, err)
		}
		if rep.Failed != 6 { // 3 per epoch
			t.Errorf("variant %+v: %d failures, want 6", v, rep.Failed)
		}
		if i == 0 {
			first = recs
			continue
		}
		if !reflect.DeepEqual(recs, first) {
			for j := range min(len(recs), len(first)) {
				if !reflect.DeepEqual(recs[j], first[j]) {
					t.Fatalf("variant %+v differs at batch %d:\n got %v\nwant %v", v, j, recs[j], first[j])
				}
			}
			t.Fatalf("variant %+v: %d batches, want %d", v, len(recs), len(first))
		}
	}
	// A different seed gives a different order.
	cfg := smallConfig()
	cfg.Epochs, cfg.Seed, cfg.MaxFailures = 2, 43, MaxFailureCount(10)
	recs, _, _ := runLoader(t, cfg, &faultStore{Store: mem, fail: bad}, ds, fakeDecoders(0, 9))
	if reflect.DeepEqual(recs, first) {
		t.Error("seeds 42 and 43 gave the same batches")
	}
}

// TestDropLast: the final short batch of each epoch is not delivered; every
// full batch is.
func TestDropLast(t *testing.T) {
	st, ds := makeDataset(t, 37, 2, 16) // 4 full batches of 8, 5 left over
	cfg := smallConfig()
	cfg.Epochs, cfg.DropLast = 2, true
	recs, _, err := runLoader(t, cfg, st, ds, fakeDecoders(0, 1))
	if !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if len(recs) != 8 {
		t.Fatalf("%d batches, want 8: %v", len(recs), recs)
	}
	for _, r := range recs {
		if len(r.Keys) != 8 {
			t.Errorf("short batch delivered: %v", r)
		}
	}
	cfg.DropLast = false
	recs, _, _ = runLoader(t, cfg, st, ds, fakeDecoders(0, 1))
	if len(recs) != 10 || len(recs[4].Keys) != 5 {
		t.Fatalf("without DropLast: %d batches, last of epoch 0 has %d samples", len(recs), len(recs[4].Keys))
	}
}

// TestFailuresUnderBudgetAreSkippedAndRecorded: failing samples are left
// out, their batches delivered short and compacted, and the report groups
// them by reason.
func TestFailuresUnderBudgetAreSkippedAndRecorded(t *testing.T) {
	checkNoLeaks(t)
	mem, ds := makeDataset(t, 64, 4, 32)
	ctx := context.Background()
	fail := map[string]error{}
	for _, i := range []int{3, 20, 41} {
		fail[ds.Samples[i].Key] = storage.ErrNotFound
	}
	for _, i := range []int{10, 11} {
		mem.Put(ctx, ds.Samples[i].Key, []byte("BAD"), storage.Cond{})
	}
	mem.Put(ctx, ds.Samples[50].Key, []byte("PANIC"), storage.Cond{})
	cfg := smallConfig()
	cfg.MaxFailures = MaxFailureCount(6)
	cfg.ShortBatches = true
	recs, rep, err := runLoader(t, cfg, &faultStore{Store: mem, fail: fail}, ds, fakeDecoders(0, 1))
	if !errors.Is(err, io.EOF) {
		t.Fatalf("under budget: %v", err)
	}
	delivered, failed := 0, 0
	seen := map[int64]bool{}
	for _, r := range recs {
		delivered += len(r.Keys)
		failed += r.Failed
		if len(r.Keys)+r.Failed != cfg.BatchSize {
			t.Errorf("batch %v: %d samples + %d failed != %d", r, len(r.Keys), r.Failed, cfg.BatchSize)
		}
		for _, i := range r.Indices {
			seen[i] = true
		}
	}
	if delivered != 58 || failed != 6 {
		t.Errorf("delivered %d, failed %d; want 58, 6", delivered, failed)
	}
	for _, i := range []int64{3, 20, 41, 10, 11, 50} {
		if seen[i] {
			t.Errorf("failed sample %d was delivered", i)
		}
	}
	if rep.Failed != 6 || rep.Attempted != 64 || len(rep.Records) != 6 {
		t.Fatalf("report: %+v", rep)
	}
	groups := map[string]int64{}
	for _, g := range rep.Groups {
		groups[g.Stage.String()+"/"+g.Class] = g.Count
	}
	want := map[string]int64{"fetch/not_found": 3, "decode/corrupt": 2, "decode/panic": 1}
	if !reflect.DeepEqual(groups, want) {
		t.Errorf("groups %v, want %v", groups, want)
	}
	for _, f := range rep.Records {
		if f.Key == "" || f.Reason == "" {
			t.Errorf("record without key or reason: %+v", f)
		}
	}
}

// TestFailedSamplesFillTheirPlaces: by default a failed sample's place
// is filled with the next sample of its batch that made it (wrapping):
// every batch keeps its size (torch.compile and cudnn.benchmark see one
// shape), Filled marks exactly the failed places, a filled row is its
// source's bytes and metadata, and every good sample is delivered once
// unfilled. The failures are recorded as with short batches.
func TestFailedSamplesFillTheirPlaces(t *testing.T) {
	checkNoLeaks(t)
	mem, ds := makeDataset(t, 68, 4, 32) // 8 full batches and a short one of 4
	ctx := context.Background()
	fail := map[string]error{}
	for _, i := range []int{3, 20, 41, 66} {
		fail[ds.Samples[i].Key] = storage.ErrNotFound
	}
	for _, i := range []int{10, 11} {
		mem.Put(ctx, ds.Samples[i].Key, []byte("BAD"), storage.Cond{})
	}
	for i := 24; i < 32; i++ { // a whole batch (identity order, B=8): nothing to fill it with
		fail[ds.Samples[i].Key] = storage.ErrNotFound
	}
	bad := map[int64]bool{3: true, 20: true, 41: true, 66: true, 10: true, 11: true}
	for i := int64(24); i < 32; i++ {
		bad[i] = true
	}
	cfg := smallConfig()
	cfg.MaxFailures = MaxFailureCount(14)
	st := &faultStore{Store: mem, fail: fail}
	deps := testDeps(st, fakeDecoders(0, 1))
	deps.Order = func(_ uint64, _ int, n int64) Order { return identityOrder(n) }
	p, err := NewLoader(cfg, ds, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	seen := map[int64]int{}
	steps := map[int64]bool{}
	for {
		b, err := p.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		steps[b.Step] = true
		rec := checkBatch(t, st, cfg, b)
		want := cfg.BatchSize
		switch {
		case b.Step == 3:
			want = 0 // every sample failed: nothing to fill with
		case b.Step == 8:
			want = 4 // the epoch's last batch stays short
		}
		if b.Len() != want || len(b.Filled) != want {
			t.Fatalf("step %d: %d samples, %d filled marks; want %d", b.Step, b.Len(), len(b.Filled), want)
		}
		failed := 0
		for j := range want {
			pos := b.Step*int64(cfg.BatchSize) + int64(j)
			if b.Filled[j] != bad[pos] {
				t.Errorf("step %d row %d (position %d): filled %v, failed %v", b.Step, j, pos, b.Filled[j], bad[pos])
			}
			if !b.Filled[j] {
				seen[rec.Indices[j]]++
				if b.Positions[j] != pos {
					t.Errorf("step %d row %d: position %d, want %d", b.Step, j, b.Positions[j], pos)
				}
				continue
			}
			failed++
			src := j // the next unfilled row, wrapping
			for b.Filled[src] {
				src = (src + 1) % want
			}
			if b.Keys[j] != b.Keys[src] || b.Indices[j] != b.Indices[src] || b.Labels[j] != b.Labels[src] || b.Positions[j] != b.Positions[src] {
				t.Errorf("step %d row %d: filled with %s/%d, want row %d's %s/%d", b.Step, j, b.Keys[j], b.Indices[j], src, b.Keys[src], b.Indices[src])
			}
		}
		if want > 0 && b.Failed != failed {
			t.Errorf("step %d: Failed %d, %d rows filled", b.Step, b.Failed, failed)
		}
		b.Release()
	}
	if len(steps) != 9 {
		t.Errorf("steps delivered %v, want 0..8", steps)
	}
	for i := int64(0); i < 68; i++ {
		if want := map[bool]int{true: 0, false: 1}[bad[i]]; seen[i] != want {
			t.Errorf("sample %d delivered unfilled %d times, want %d", i, seen[i], want)
		}
	}
	if rep := p.Failures(); rep.Failed != 14 || rep.Attempted != 68 {
		t.Errorf("report: %d of %d failed, want 14 of 68", rep.Failed, rep.Attempted)
	}
}

// TestFailureBudgetExceededStopsWithReport: past the budget, Next returns a
// *BudgetError carrying the report, and keeps returning it.
func TestFailureBudgetExceededStopsWithReport(t *testing.T) {
	checkNoLeaks(t)
	mem, ds := makeDataset(t, 200, 4, 32)
	fail := map[string]error{}
	for i := 0; i < 200; i += 10 {
		fail[ds.Samples[i].Key] = storage.ErrNotFound
	}
	for _, budget := range []string{"3", "5%"} { // 20 failures of 200: 10%
		t.Run(budget, func(t *testing.T) {
			cfg := smallConfig()
			var err error
			if cfg.MaxFailures, err = ParseFailureBudget(budget); err != nil {
				t.Fatal(err)
			}
			p, err := NewLoader(cfg, ds, testDeps(&faultStore{Store: mem, fail: fail}, fakeDecoders(0, 1)))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			_, err = drainAll(t, mem, cfg, p)
			var be *BudgetError
			if !errors.Is(err, ErrFailureBudget) || !errors.As(err, &be) {
				t.Fatalf("Next = %v, want a budget error", err)
			}
			if be.Report.Failed <= be.Report.Allowed || len(be.Report.Groups) != 1 || be.Report.Groups[0].Class != "not_found" {
				t.Fatalf("report: %+v", be.Report)
			}
			t.Logf("error: %v", err)
			if _, err2 := p.Next(context.Background()); !errors.Is(err2, ErrFailureBudget) {
				t.Fatalf("second Next = %v", err2)
			}
		})
	}
	// The same failures within a 10% budget finish the run.
	cfg := smallConfig()
	cfg.MaxFailures = MaxFailureFraction(0.10)
	if _, _, err := runLoader(t, cfg, &faultStore{Store: mem, fail: fail}, ds, fakeDecoders(0, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("10%% budget: %v", err)
	}
}

// TestSlowConsumerKeepsMemoryFlat stalls the consumer on a large dataset:
// the pipeline must stop (no reads, no growth) with memory flat, never more
// reads in flight than FetchConcurrency, never more fetch buffers than
// FetchConcurrency + Decoders*DecodeQueue, and the source asked for no more
// than the slots can take.
func TestSlowConsumerKeepsMemoryFlat(t *testing.T) {
	checkNoLeaks(t)
	const n = 20000
	mem, ds := makeDataset(t, n, 10, 2048)
	st := &faultStore{Store: mem, delay: 200 * time.Microsecond, rng: seededRand(1)}
	cfg := Config{BatchSize: 16, Slots: 3, FetchConcurrency: 6, Decoders: 2, DecodeQueue: 2,
		Sample: Shape{Height: 16, Width: 16}, MaxFailures: MaxFailureCount(0)}
	feeder, err := NewFeeder(ds, cfg, 0, 1, testOrder)
	if err != nil {
		t.Fatal(err)
	}
	src := &countingSource{Source: feeder}
	deps := testDeps(st, fakeDecoders(0, 1))
	deps.Allocator = nil // default: mmap slots, outside the heap
	p, err := NewPipeline(cfg, 0, src, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	held, err := p.Next(ctx) // hold one batch, take nothing more
	if err != nil {
		t.Fatal(err)
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	// Every slot is full once the other two batches are ready: a fetch
	// belongs to a slot, so nothing more can be read until a release.
	waitUntil(t, "every slot filled", func() bool { return len(p.ready) == cfg.Slots-1 })
	h1, g1, w1 := heap(), st.gets.Load(), src.items.Load()
	time.Sleep(time.Second) // pacing: room for a runaway loop to show; nothing below depends on it
	h2, g2, w2 := heap(), st.gets.Load(), src.items.Load()
	t.Logf("stalled: heap in use %d -> %d bytes, reads %d -> %d, items asked %d -> %d", h1, h2, g1, g2, w1, w2)
	if g2 != g1 || g1 != int64(cfg.Slots*cfg.BatchSize) {
		t.Errorf("reads went on while the consumer stalled: %d -> %d, want the %d samples of the slots", g1, g2, cfg.Slots*cfg.BatchSize)
	}
	// Slots hold 3 batches (one held, two ready): at most 3*16 samples read,
	// plus what was pending. (A Want in flight when the slots filled may
	// still land: the bound, not equality, is the promise.)
	if maxItems := int64(2*cfg.Slots*cfg.BatchSize) + int64(cfg.BatchSize); w2 > maxItems {
		t.Errorf("source asked for %d items with %d slots of %d (at most %d)", w2, cfg.Slots, cfg.BatchSize, maxItems)
	}
	if h2 > h1+256<<10 {
		t.Errorf("heap grew by %d bytes while stalled", h2-h1)
	}
	held.Release()
	// Now consume everything, slowly at first, and check the bounds held.
	var got int
	for {
		b, err := p.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got += b.Len()
		b.Release()
	}
	if got != n-held.Len() {
		t.Errorf("delivered %d samples after the held batch, want %d", got, n-held.Len())
	}
	if m := st.maxIn.Load(); m > int64(cfg.FetchConcurrency) {
		t.Errorf("%d reads in flight at once, FetchConcurrency is %d", m, cfg.FetchConcurrency)
	}
	if m := st.maxIn.Load(); m < 2 {
		t.Errorf("never more than %d read in flight: concurrency not used", m)
	}
	if b, max := p.bufsMade.Load(), int64(cfg.FetchConcurrency+cfg.Decoders*cfg.DecodeQueue); b > max {
		t.Errorf("%d fetch buffers allocated, bound is %d", b, max)
	}
	if h3 := heap(); h3 > h1+1<<20 {
		t.Errorf("heap after the run %d, stalled %d", h3, h1)
	}
}

type countingSource struct {
	Source
	items atomic.Int64
}

func (c *countingSource) Want(n int, give func(Work)) {
	c.Source.Want(n, func(w Work) {
		c.items.Add(int64(len(w.Items)))
		give(w)
	})
}

// TestCloseMidEpochWithStalledConsumer: closing while the consumer holds a
// batch and reads are blocked stops every actor and goroutine; the held
// batch stays readable until released, and releasing after Close is fine.
func TestCloseMidEpochWithStalledConsumer(t *testing.T) {
	checkNoLeaks(t)
	mem, ds := makeDataset(t, 500, 4, 64)
	block := map[string]bool{}
	for _, s := range ds.Samples[100:] {
		block[s.Key] = true // reads that never return on their own
	}
	var closed atomic.Int64
	dec := func() (SampleDecoder, error) { return &fakeDecoder{closed: &closed}, nil }
	cfg := smallConfig()
	deps := testDeps(&faultStore{Store: mem, block: block}, dec)
	deps.Allocator = nil // mmap: use after free would crash the test
	deps.Order = func(uint64, int, int64) Order { return identityOrder(500) }
	p, err := NewLoader(cfg, ds, deps)
	if err != nil {
		t.Fatal(err)
	}
	held, err := p.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := checkBatch(t, mem, cfg, held)
	time.Sleep(50 * time.Millisecond) // pacing: let the blocked reads start; nothing depends on it
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute): // a failure backstop only
		t.Fatal("Close hung")
	}
	if got := closed.Load(); got != int64(cfg.Decoders) {
		t.Errorf("%d decoders closed, want %d", got, cfg.Decoders)
	}
	if _, err := p.Next(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Next after Close = %v", err)
	}
	if got := checkBatch(t, mem, cfg, held); !reflect.DeepEqual(got, want) {
		t.Errorf("held batch changed after Close")
	}
	held.Release()
	held.Release()
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestShutdownHonoursContext: a decode that outlasts the Shutdown context
// makes Shutdown return ctx.Err(); the actors still stop afterwards.
func TestShutdownHonoursContext(t *testing.T) {
	checkNoLeaks(t)
	st, ds := makeDataset(t, 50, 2, 16)
	release := make(chan struct{})
	var started sync.Once
	startedCh := make(chan struct{})
	dec := func() (SampleDecoder, error) {
		return slowDecoder{wait: release, started: func() { started.Do(func() { close(startedCh) }) }}, nil
	}
	p, err := NewLoader(smallConfig(), ds, testDeps(st, dec))
	if err != nil {
		t.Fatal(err)
	}
	<-startedCh
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want deadline exceeded", err)
	}
	close(release)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

type slowDecoder struct {
	wait    chan struct{}
	started func()
}

func (d slowDecoder) Decode(data []byte, seed uint64, dst []byte) error {
	d.started()
	<-d.wait
	return nil
}
func (slowDecoder) Close() error { return nil }

// TestSourceErrorsReachTheConsumer: a broken source (a gap in positions,
// or an error it reports) ends the run with an error from Next.
func TestSourceErrorsReachTheConsumer(t *testing.T) {
	checkNoLeaks(t)
	st, ds := makeDataset(t, 20, 2, 16)
	for name, w := range map[string]Work{
		"gap":   {Epoch: 0, Start: 3, Items: []Item{{Pos: 3, Key: ds.Samples[0].Key}}},
		"error": {Err: errors.New("coordinator unreachable")},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := NewPipeline(smallConfig(), 0, fixedSource{w}, testDeps(st, fakeDecoders(0, 1)))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			_, err = p.Next(context.Background())
			if err == nil || errors.Is(err, io.EOF) {
				t.Fatalf("Next = %v", err)
			}
			t.Log(err)
		})
	}
}

type fixedSource struct{ w Work }

func (s fixedSource) Want(n int, give func(Work)) { give(s.w) }

// TestUploadErrorReachesTheConsumer.
func TestUploadErrorReachesTheConsumer(t *testing.T) {
	checkNoLeaks(t)
	st, ds := makeDataset(t, 40, 2, 16)
	deps := testDeps(st, fakeDecoders(0, 1))
	deps.NewUploader = func(int, *gpu.HostPool) (gpu.Uploader, error) { return failingUploader{}, nil }
	p, err := NewLoader(smallConfig(), ds, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Next(context.Background()); err == nil || !errors.Is(err, errDevice) {
		t.Fatalf("Next = %v", err)
	}
}

var errDevice = errors.New("device lost")

type failingUploader struct{}

func (failingUploader) Upload(context.Context, *gpu.Slot, int) error { return errDevice }
func (failingUploader) Close() error                                 { return nil }

// TestNewPipelineReportsEveryProblem.
func TestNewPipelineReportsEveryProblem(t *testing.T) {
	cfg := Config{BatchSize: -1, Slots: -2, Decoders: -1, Sample: Shape{Height: -3, Layout: 7}}
	_, err := NewPipeline(cfg, 0, nil, Deps{})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"BatchSize", "Slots", "Decoders", "Sample", "Layout", "Store", "NewDecoder", "Source"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s: %v", want, err)
		}
	}
	// A decoder factory error is returned, and nothing leaks.
	checkNoLeaks(t)
	st, ds := makeDataset(t, 4, 1, 8)
	_, err = NewLoader(smallConfig(), ds, testDeps(st, func() (SampleDecoder, error) { return nil, errors.New("no codec") }))
	if err == nil || !strings.Contains(err.Error(), "no codec") {
		t.Fatalf("NewLoader = %v", err)
	}
}

// TestStatsAndBottleneck: a slow decoder shows up as the bottleneck; a slow
// consumer makes the consumer the bottleneck; the stats JSON-encode.
func TestStatsAndBottleneck(t *testing.T) {
	st, ds := makeDataset(t, 96, 2, 16)
	cfg := smallConfig()
	cfg.Decoders = 1
	// The decoder takes 2 ms of a fake clock per sample, so its times are
	// exact however loaded the machine is.
	fc := clock.NewFake(time.Time{})
	deps := testDeps(st, func() (SampleDecoder, error) { return clockDecoder{fc, 2 * time.Millisecond}, nil })
	deps.Clock = fc
	p, err := NewLoader(cfg, ds, deps)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drainAll(t, st, cfg, p); !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	s := p.Stats()
	p.Close()
	if s.Bottleneck.Stage != "decode" {
		t.Errorf("bottleneck %+v, want decode", s.Bottleneck)
	}
	d := s.Stage(StageDecode)
	if d.Items != 96 || d.Time.P50 < 1.9 || d.Time.P50 > 2.1 || d.Busy < 0.5 {
		t.Errorf("decode stats %+v", d)
	}
	if s.FirstBatchSeconds <= 0 || s.FirstBatchSeconds > s.Seconds {
		t.Errorf("first batch at %vs of %vs", s.FirstBatchSeconds, s.Seconds)
	}
	if s.Batches != 12 || s.Samples != 96 {
		t.Errorf("batches %d samples %d", s.Batches, s.Samples)
	}
	t.Logf("slow decoder: %+v", s.Bottleneck)

	// A slow trainer: 48 batches at 10 ms each of a fake clock that only
	// the trainer moves, once the pipeline has filled every other slot:
	// the pipeline keeps ahead by construction, however slow the machine
	// (on a real clock a loaded machine made the source the bottleneck).
	fc = clock.NewFake(time.Time{})
	st, ds = makeDataset(t, 384, 2, 16)
	deps = testDeps(st, fakeDecoders(0, 1))
	deps.Clock = fc
	p, err = NewLoader(cfg, ds, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for {
		b, err := p.Next(context.Background())
		if err != nil {
			break
		}
		waitUntil(t, "the other slots filled", func() bool {
			select {
			case <-p.done: // the last batches are in
				return true
			default:
				return len(p.ready) == cfg.Slots-1
			}
		})
		fc.Advance(10 * time.Millisecond)
		b.Release()
	}
	s = p.Stats()
	if s.Bottleneck.Stage != "consumer" {
		t.Errorf("bottleneck %+v, want consumer", s.Bottleneck)
	}
	if occ := s.Stage(StageUpload).Queue.Occupancy; occ < 0.3 {
		t.Errorf("with a slow consumer, ready-batch queue occupancy %.2f", occ)
	}
	t.Logf("slow consumer: %+v", s.Bottleneck)
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"stage":"decode"`, `"p99_ms"`, `"occupancy"`, `"bottleneck"`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("JSON lacks %s: %s", want, js)
		}
	}
}

// clockDecoder takes d of a fake clock's time per sample.
type clockDecoder struct {
	fc *clock.Fake
	d  time.Duration
}

func (d clockDecoder) Decode(data []byte, seed uint64, dst []byte) error {
	d.fc.Advance(d.d)
	fillPattern(dst, data)
	return nil
}
func (clockDecoder) Close() error { return nil }

// waitUntil polls cond until it holds; the deadline is a failure backstop
// only.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after 60 s", what)
		}
	}
}

type identityOrder int64

func (o identityOrder) Len() int64         { return int64(o) }
func (o identityOrder) At(pos int64) int64 { return pos }

// TestReadAheadBoundsWhatIsTaken: with a stalled consumer, a rank holds
// its slots' samples plus at most ReadAhead more items taken from the
// source (the read-ahead a cluster node keeps small, so an idle rank can
// be given what a straggler has not taken).
func TestReadAheadBoundsWhatIsTaken(t *testing.T) {
	checkNoLeaks(t)
	mem, ds := makeDataset(t, 2000, 10, 256)
	for _, readAhead := range []int{0, 4} {
		cfg := Config{BatchSize: 16, Slots: 3, FetchConcurrency: 6, Decoders: 2, DecodeQueue: 2, ReadAhead: readAhead,
			Sample: Shape{Height: 4, Width: 4}, MaxFailures: MaxFailureCount(0)}
		feeder, err := NewFeeder(ds, cfg, 0, 1, testOrder)
		if err != nil {
			t.Fatal(err)
		}
		src := &countingSource{Source: feeder}
		p, err := NewPipeline(cfg, 0, src, testDeps(mem, fakeDecoders(0, 1)))
		if err != nil {
			t.Fatal(err)
		}
		held, err := p.Next(context.Background()) // hold one batch, take nothing more
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "every slot filled", func() bool { return len(p.ready) == cfg.Slots-1 })
		time.Sleep(200 * time.Millisecond) // pacing: room to take too much; the checks hold at any moment
		taken := src.items.Load()
		limit := cfg.WithDefaults().ReadAhead + cfg.Slots*cfg.BatchSize
		t.Logf("ReadAhead %d: %d items taken with %d slots of %d", readAhead, taken, cfg.Slots, cfg.BatchSize)
		if taken > int64(limit) {
			t.Errorf("ReadAhead %d: %d items taken, want at most %d", readAhead, taken, limit)
		}
		if readAhead > 0 && taken < int64(cfg.Slots*cfg.BatchSize) {
			t.Errorf("ReadAhead %d: only %d items taken: the slots were not filled", readAhead, taken)
		}
		held.Release()
		p.Close()
	}
}

// outageStore fails every Get with a connection error (not an answer
// about the object) until up is closed.
type outageStore struct {
	storage.Store
	up    chan struct{}
	tries atomic.Int64
}

func (s *outageStore) Get(ctx context.Context, key string, dst []byte) ([]byte, error) {
	select {
	case <-s.up:
		return s.Store.Get(ctx, key, dst)
	default:
		s.tries.Add(1)
		return dst[:0], fmt.Errorf("get %s: dial tcp 10.0.0.9:9000: connect: connection refused", key)
	}
}

// TestStoreOutageIsNotBadData: while the store does not answer, fetches
// wait and try again instead of failing samples, so an outage shorter
// than StoreOutage costs time, not the failure budget; a longer one
// fails the samples, saying why. The backoff runs on a fake clock: ten
// seconds of outage take no real time, and the test advances the clock
// only while every fetcher waits on it, so each retry's time is exact.
func TestStoreOutageIsNotBadData(t *testing.T) {
	checkNoLeaks(t)
	mem, ds := makeDataset(t, 40, 2, 64)
	cfg := smallConfig()
	cfg.StoreOutage = 20 * time.Second
	fc := clock.NewFake(time.Time{})
	start := fc.Now()
	st := &outageStore{Store: mem, up: make(chan struct{})}
	deps := testDeps(st, fakeDecoders(0, 1))
	deps.Clock = fc
	p, err := NewLoader(cfg, ds, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// 40 samples keep every fetcher busy; each waits out its backoff on
	// the fake clock (a real timer would leave BlockUntil waiting).
	for fc.Since(start) < 10*time.Second {
		if err := fc.BlockUntil(ctx, cfg.FetchConcurrency); err != nil {
			t.Fatalf("fetchers not all waiting on the clock at %v of the outage: %v", fc.Since(start), err)
		}
		fc.Advance(250 * time.Millisecond)
	}
	close(st.up)
	defer driveClock(fc, 8*time.Second)()
	recs, err := drainAll(t, st, cfg, p)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("after a 10 s outage: %v (failures %+v)", err, p.Failures())
	}
	n := 0
	for _, r := range recs {
		n += len(r.Keys)
	}
	if n != 40 || p.Failures().Failed != 0 {
		t.Errorf("after a 10 s outage: %d samples delivered, %d failed; want 40, 0", n, p.Failures().Failed)
	}
	// Each fetcher retried at 0.25, 0.75, 1.75, 3.75 and 7.75 s, and
	// waits 8 s for the next.
	if r := p.Stats().StoreRetries; r < int64(5*cfg.FetchConcurrency) {
		t.Errorf("%d store retries counted (%d failed attempts), want at least %d", r, st.tries.Load(), 5*cfg.FetchConcurrency)
	}
	if took := fc.Since(start); took < 15*time.Second {
		t.Errorf("the outage cost %v of the clock; the last backoff alone ends at 15.75 s", took)
	}
	p.Close()

	cfg.StoreOutage = 300 * time.Millisecond
	cfg.MaxFailures = MaxFailureCount(1000)
	down := &outageStore{Store: mem, up: make(chan struct{})}
	deps = testDeps(down, fakeDecoders(0, 1))
	deps.Clock = clock.NewFake(time.Time{})
	defer driveClock(deps.Clock.(*clock.Fake), time.Second)()
	p2, err := NewLoader(cfg, ds, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	drainAll(t, down, cfg, p2)
	rep := p2.Failures()
	if rep.Failed != 40 || len(rep.Records) == 0 || !strings.Contains(rep.Records[0].Reason, "store did not answer for 300ms") {
		t.Errorf("a store down for good: %d failed, records %+v; want all 40, saying the store did not answer", rep.Failed, rep.Records)
	}
}

// driveClock advances fc by step whenever something waits on it, until
// the returned stop is called.
func driveClock(fc *clock.Fake, step time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for fc.BlockUntil(ctx, 1) == nil {
			fc.Advance(step)
		}
	}()
	return func() { cancel(); <-done }
}

// prefetchStore records, for a SampleStore, which samples were
// announced and whether each read came after its announcement.
type prefetchStore struct {
	storage.Store
	mu        sync.Mutex
	announced map[int64]bool
	early     []string // keys read before they were announced
	bySample  int      // reads by index
}

func (s *prefetchStore) PrefetchSample(index int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.announced[index] = true
}

func (s *prefetchStore) GetSample(ctx context.Context, index int64, key string, dst []byte) ([]byte, error) {
	s.mu.Lock()
	if !s.announced[index] {
		s.early = append(s.early, key)
	}
	s.bySample++
	s.mu.Unlock()
	return s.Store.Get(ctx, key, dst)
}

// TestPrefetchHints: with a store that addresses samples by index, the
// pipeline announces every item when the work arrives, before its fetch,
// and reads by index, never by key.
func TestPrefetchHints(t *testing.T) {
	checkNoLeaks(t)
	mem, ds := makeDataset(t, 100, 4, 32)
	st := &prefetchStore{Store: mem, announced: map[int64]bool{}}
	cfg := smallConfig()
	recs, _, err := runLoader(t, cfg, st, ds, fakeDecoders(0, 1))
	if !errors.Is(err, io.EOF) || len(recs) == 0 {
		t.Fatalf("%d batches, %v", len(recs), err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.announced) != len(ds.Samples) || len(st.early) > 0 {
		t.Errorf("%d of %d keys announced; %d read before their announcement (%v)", len(st.announced), len(ds.Samples), len(st.early), st.early)
	}
	if st.bySample != len(ds.Samples) {
		t.Errorf("%d of %d samples read by index", st.bySample, len(ds.Samples))
	}
}

// gatedStore answers its first Get; every later one fails with
// ErrNotFound once gate is closed.
type gatedStore struct {
	storage.Store
	gets atomic.Int64
	gate <-chan struct{}
}

func (s *gatedStore) Get(ctx context.Context, key string, dst []byte) ([]byte, error) {
	if s.gets.Add(1) > 1 {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return dst[:0], ctx.Err()
		}
		return dst[:0], storage.ErrNotFound
	}
	return s.Store.Get(ctx, key, dst)
}

// signalDecoder is fakeDecoder that closes done after its first decode.
type signalDecoder struct {
	fakeDecoder
	once *sync.Once
	done chan struct{}
}

func (d *signalDecoder) Decode(data []byte, seed uint64, dst []byte) error {
	err := d.fakeDecoder.Decode(data, seed, dst)
	d.once.Do(func() { close(d.done) })
	return err
}

// TestBudgetBreachCompletingABatch: the failure that breaches the budget
// is also the one that completes a batch (its other sample decoded
// first). The run ends with the budget error, and that batch is not
// delivered after it: every Next from then on returns the error.
func TestBudgetBreachCompletingABatch(t *testing.T) {
	checkNoLeaks(t)
	mem, ds := makeDataset(t, 2, 1, 32)
	cfg := smallConfig()
	cfg.BatchSize, cfg.Slots, cfg.FetchConcurrency, cfg.Decoders = 2, 1, 1, 1
	cfg.MaxFailures = MaxFailureCount(0)
	decoded := make(chan struct{})
	var once sync.Once
	deps := testDeps(&gatedStore{Store: mem, gate: decoded}, func() (SampleDecoder, error) {
		return &signalDecoder{once: &once, done: decoded}, nil
	})
	// One fetcher: the second sample's fetch starts after the first's
	// returned, and fails only once the first is decoded.
	p, err := NewLoader(cfg, ds, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 3 {
		b, err := p.Next(context.Background())
		if b != nil {
			b.Release()
			t.Fatalf("Next %d delivered a batch (%v) when the budget is 0 and a sample failed", i, b.Keys)
		}
		if !errors.Is(err, ErrFailureBudget) {
			t.Fatalf("Next %d = %v, want the budget error", i, err)
		}
	}
}
