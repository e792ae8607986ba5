package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/actorstest"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/observe"
	"github.com/longshore/longshore/observe/observetest"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/faulty"
)

// testDecoder is the pattern decoder that fails on objects starting
// with "BAD" (class corrupt) and takes delay per sample.
type testDecoder struct{ delay time.Duration }

func (d testDecoder) Decode(data []byte, seed uint64, dst []byte) error {
	if d.delay > 0 {
		time.Sleep(d.delay)
	}
	if bytes.HasPrefix(data, []byte("BAD")) {
		return actors.WithFailureClass(errors.New("test: corrupt"), "corrupt")
	}
	return actorstest.PatternDecoder{}.Decode(data, seed, dst)
}

func (testDecoder) Close() error { return nil }

// testDataset puts n small objects in a MemStore, bad of them corrupt.
func testDataset(t testing.TB, n int, bad ...int) (*storage.MemStore, *dataset.Dataset) {
	t.Helper()
	st := storage.NewMemStore("t")
	ds := &dataset.Dataset{Classes: []string{"a", "b"}}
	isBad := map[int]bool{}
	for _, i := range bad {
		isBad[i] = true
	}
	for i := range n {
		key := fmt.Sprintf("c%d/%05d.jpg", i%2, i)
		data := []byte("object " + key)
		if isBad[i] {
			data = []byte("BAD " + key)
		}
		if _, err := st.Put(context.Background(), key, data, storage.Cond{}); err != nil {
			t.Fatal(err)
		}
		ds.Samples = append(ds.Samples, dataset.Sample{Key: key, Label: int32(i % 2)})
	}
	return st, ds
}

// testDeps are a pipeline's collaborators over store with dec.
func testDeps(store storage.Store, dec testDecoder) actors.Deps {
	return actors.Deps{Store: store, Allocator: gpu.HeapAllocator{}, SampleSeed: actorstest.SampleSeed,
		NewDecoder: func() (actors.SampleDecoder, error) { return dec, nil },
		Order:      func(seed uint64, epoch int, n int64) actors.Order { return cluster.NewOrder(seed, epoch, n, 1, 1) }}
}

func config() actors.Config {
	return actors.Config{BatchSize: 8, Slots: 3, FetchConcurrency: 2, Decoders: 2, DecodeQueue: 2,
		Sample: actors.Shape{Height: 2, Width: 4}, Seed: 1, Epochs: 1, MaxFailures: actors.MaxFailureCount(100)}
}

func rankCounters(n *actors.Node) func() []RankCounters {
	return func() []RankCounters {
		var out []RankCounters
		for i, c := range n.RankCounters() {
			out = append(out, RankCounters{Name: strconv.Itoa(i), Counters: c})
		}
		return out
	}
}

// TestNodeMetricsAreTheSummary: what a node's metrics say after a run is
// what its summary says: samples and batches delivered, failures by
// stage and class, stage items and histograms; the store's requests by
// operation and outcome.
func TestNodeMetricsAreTheSummary(t *testing.T) {
	st, ds := testDataset(t, 100, 7, 31, 77)
	cs := storage.NewCountingStore(st)
	cfg := config()
	node, err := actors.NewNode(cfg, ds, 2, testDeps(cs, testDecoder{}))
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	if err := node.Run(context.Background(), func(*actors.Batch) error { return nil }); err != nil {
		t.Fatal(err)
	}
	rep := &Reporter{Ranks: rankCounters(node)}
	rep.Step()
	reg := observe.Registry(NewNodeCollector(NodeSource{Ranks: rankCounters(node), Store: cs, Report: rep, JobSamples: 100, JobEpochs: 1}))
	mfs := observetest.Families(t, reg)
	stats := node.Stats()
	if got := observetest.Sum(mfs, "longshore_delivered_samples_total", nil); got != float64(stats.Samples) || got != 97 {
		t.Errorf("delivered samples %v, summary %d (want 97)", got, stats.Samples)
	}
	if got := observetest.Sum(mfs, "longshore_delivered_batches_total", nil); got != float64(stats.Batches) {
		t.Errorf("delivered batches %v, summary %d", got, stats.Batches)
	}
	failures := node.Failures()
	for _, g := range failures.Groups {
		if got := observetest.Sum(mfs, "longshore_failures_total", map[string]string{"stage": g.Stage.String(), "class": g.Class}); got != float64(g.Count) {
			t.Errorf("failures %s/%s: %v, the report's %d", g.Stage, g.Class, got, g.Count)
		}
	}
	if got := observetest.Sum(mfs, "longshore_failures_total", nil); got != 3 || failures.Failed != 3 {
		t.Errorf("failures %v, report %d, want 3", got, failures.Failed)
	}
	for _, s := range stats.Stages {
		lb := map[string]string{"stage": s.Stage.String()}
		if got := observetest.Sum(mfs, "longshore_stage_items_total", lb); got != float64(s.Items) {
			t.Errorf("%s items %v, summary %d", s.Stage, got, s.Items)
		}
		if got := observetest.Sum(mfs, "longshore_stage_seconds", lb); got != float64(s.Items) {
			t.Errorf("%s histogram count %v, summary %d", s.Stage, got, s.Items)
		}
	}
	if got := observetest.Sum(mfs, "longshore_store_requests_total", map[string]string{"op": "get", "outcome": "ok"}); got != 100 {
		t.Errorf("store gets %v, want 100", got)
	}
	if got := observetest.Sum(mfs, "longshore_job_progress_ratio", nil); got < 0.96 || got > 1 {
		t.Errorf("progress %v", got)
	}
	if got := observetest.Sum(mfs, "longshore_bottleneck", nil); got != 1 {
		t.Errorf("bottleneck gauges add up to %v, want 1", got)
	}
	if mfs["go_goroutines"] == nil || mfs["process_cpu_seconds_total"] == nil {
		t.Errorf("no runtime or process metrics")
	}
}

// slowRun runs 2 epochs of 96 samples through one rank with the given
// store and decoder delay, the trainer taking trainer per batch, and
// returns the report of the interval from batch 4 to batch 20 (after
// start-up).
func slowRun(t *testing.T, store func(storage.Store) storage.Store, decode, trainer time.Duration) Figures {
	t.Helper()
	st, ds := testDataset(t, 96)
	cfg := config()
	cfg.Epochs = 2
	cfg.Decoders = 1
	node, err := actors.NewNode(cfg, ds, 1, testDeps(store(st), testDecoder{delay: decode}))
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	rep := &Reporter{Ranks: rankCounters(node)}
	var interval Figures
	n := 0
	err = node.Run(context.Background(), func(*actors.Batch) error {
		n++
		switch n {
		case 4:
			rep.Step()
		case 20:
			interval = rep.Step()
		}
		if trainer > 0 {
			time.Sleep(trainer)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return interval
}

// TestReportNamesTheSlowStage slows each stage in turn — the store (a
// faulty store's delay on every read), the decoder, the trainer — and
// checks the live report names it, with advice for the loader's stages.
func TestReportNamesTheSlowStage(t *testing.T) {
	plain := func(s storage.Store) storage.Store { return s }
	for _, tc := range []struct {
		name             string
		store            func(storage.Store) storage.Store
		decode, trainer  time.Duration
		want, wantAdvice string
	}{
		{"store", func(s storage.Store) storage.Store {
			return faulty.Wrap(s, faulty.Rule{Ops: faulty.OpGet, Delay: 4 * time.Millisecond, NoError: true})
		}, 0, 0, "fetch", "fetchers"},
		{"decoder", plain, 2 * time.Millisecond, 0, "decode", "decoders"},
		{"trainer", plain, 0, 15 * time.Millisecond, "consumer", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := slowRun(t, tc.store, tc.decode, tc.trainer)
			b := w.Bottleneck
			if b.Stage != tc.want {
				t.Fatalf("bottleneck %q (%s), want %q; interval %v, %.0f samples/s", b.Stage, b.Reason, tc.want, w.Interval, w.Node.SamplesPerSecond)
			}
			if !bytes.Contains([]byte(b.Advice), []byte(tc.wantAdvice)) || (tc.wantAdvice == "") != (b.Advice == "") {
				t.Errorf("advice %q, want it to mention %q", b.Advice, tc.wantAdvice)
			}
			if w.Node.Batches != 16 || len(w.Ranks) != 1 || w.Ranks[0].Batches != 16 {
				t.Errorf("interval of %d batches (%+v), want 16", w.Node.Batches, w.Ranks)
			}
			t.Logf("%s: %s: %s", tc.name, b.Stage, b.Reason)
		})
	}
}

// TestReportThrottling: a fetch bottleneck while the store throttles
// says so.
func TestReportThrottling(t *testing.T) {
	var thr int64
	st, ds := testDataset(t, 64)
	slow := faulty.Wrap(st, faulty.Rule{Ops: faulty.OpGet, Delay: 3 * time.Millisecond, NoError: true})
	node, err := actors.NewNode(config(), ds, 1, testDeps(slow, testDecoder{}))
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	rep := &Reporter{Ranks: rankCounters(node), Throttled: func() int64 { return thr }}
	rep.Step()
	n := 0
	var w Figures
	if err := node.Run(context.Background(), func(*actors.Batch) error {
		if n++; n == 6 {
			thr = 5
			w = rep.Step()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if w.Bottleneck.Stage != "fetch" || w.Throttled != 5 || !bytes.Contains([]byte(w.Bottleneck.Advice), []byte("throttling")) {
		t.Errorf("report %+v, throttled %d", w.Bottleneck, w.Throttled)
	}
}

// BenchmarkScrape is one scrape of a 4-rank node's /metrics (the
// collectors, the Go runtime's and the process's, text encoding): the
// whole cost of metrics on, since the counters are kept anyway. At
// Prometheus's default interval (15 s) it is paid once per 15 s.
func BenchmarkScrape(b *testing.B) {
	st, ds := testDataset(b, 64, 3)
	cs := storage.NewCountingStore(st)
	node, err := actors.NewNode(config(), ds, 4, testDeps(cs, testDecoder{}))
	if err != nil {
		b.Fatal(err)
	}
	defer node.Close()
	if err := node.Run(context.Background(), func(*actors.Batch) error { return nil }); err != nil {
		b.Fatal(err)
	}
	rep := &Reporter{Ranks: rankCounters(node)}
	rep.Step()
	h := observe.Handler(observe.Registry(NewNodeCollector(NodeSource{Ranks: rankCounters(node), Store: cs, Report: rep, JobSamples: 64, JobEpochs: 1})), nil)
	req := httptest.NewRequest("GET", "/metrics", nil)
	var n int
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		n = w.Body.Len()
	}
	b.ReportMetric(float64(n), "bytes/scrape")
}

// BenchmarkReportStep is one live-report interval of a 4-rank node
// (--report-every).
func BenchmarkReportStep(b *testing.B) {
	st, ds := testDataset(b, 64)
	node, err := actors.NewNode(config(), ds, 4, testDeps(st, testDecoder{}))
	if err != nil {
		b.Fatal(err)
	}
	defer node.Close()
	if err := node.Run(context.Background(), func(*actors.Batch) error { return nil }); err != nil {
		b.Fatal(err)
	}
	rep := &Reporter{Ranks: rankCounters(node)}
	for b.Loop() {
		rep.Step()
	}
}
