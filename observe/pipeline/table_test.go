package pipeline

import (
	"context"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/coord"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/delivery"
	"github.com/longshore/longshore/observe"
	"github.com/longshore/longshore/observe/observetest"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
)

// ranRun runs a 2-rank node over 40 samples, 3 of them corrupt, and
// returns its source with every part present.
func ranRun(t *testing.T) NodeSource {
	t.Helper()
	st, ds := testDataset(t, 40, 3, 11, 29)
	cs := storage.NewCountingStore(st)
	n, err := actors.NewNode(config(), ds, 2, testDeps(cs, testDecoder{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if err := n.Run(context.Background(), func(*actors.Batch) error { return nil }); err != nil {
		t.Fatal(err)
	}
	ranks := rankCounters(n)
	rep := &Reporter{Ranks: ranks}
	rep.Step()
	buckets := make([]uint64, len(delivery.WaitBuckets))
	for i := range buckets {
		buckets[i] = 4
	}
	return NodeSource{Ranks: ranks, Store: cs, Report: rep, JobSamples: 40, JobEpochs: 1,
		S3:        func() s3.Stats { return s3.Stats{Requests: 9, Hedges: 2} },
		Pack:      func() dataset.PackedStats { return dataset.PackedStats{Chunks: 3} },
		Committed: func() []observe.Commit { return []observe.Commit{{Rank: "0", Epoch: 0, Step: 2}} },
		Mixture:   func() []observe.SourceCount { return []observe.SourceCount{{Source: "web", Samples: 7}} },
		Gossip:    func() gossip.StreamStats { return gossip.StreamStats{Open: 1} },
		TrainerWait: func() []TrainerWait {
			return []TrainerWait{{"1", delivery.TrainerWait{Rank: 1, Steps: 4, Wait: 1500 * time.Millisecond, Compute: 500 * time.Millisecond, Buckets: buckets}}}
		}}
}

// everyFamily gathers a node's registry and a coordinator's, each with
// every part present, as their servers export them (connection counts
// included).
func everyFamily(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	src := ranRun(t)
	node := observe.Registry(NewNodeCollector(src), NewTrainerWaitCollector(src.TrainerWait), observe.NewGossipCollector(src.Gossip))
	jm := observe.NewJournalMeter(fakeJournal{})
	if _, err := jm.Write(context.Background(), cluster.State{}, nil); err != nil {
		t.Fatal(err)
	}
	_ = jm.Check(context.Background())
	co := observe.Registry(observe.NewCoordCollector(observe.CoordSource{Samples: 10, Epochs: 2, Journal: jm,
		Status: func(context.Context) (coord.Status, error) {
			return coord.Status{Census: cluster.Census{Nodes: 1, Ranks: []cluster.RankCensus{{Rank: "n/0", Node: "n", Epoch: 0, Step: 1}}},
				Epochs: []cluster.EpochStatus{{Started: true, Committed: 4}, {}}, Mixture: []coord.SourceStatus{{Source: "web", Samples: 3, Committed: 2}}}, nil
		}}))
	srv, err := observe.Listen(observe.ServerConfig{Addr: "127.0.0.1:0", Registry: co}, observe.Handler(co, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	var out []*dto.MetricFamily
	for _, g := range []prometheus.Gatherer{node, co} {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, mfs...)
	}
	return out
}

// TestEverySeriesIsInTheTable: every longshore_* family the daemons
// export is a row of observe.Metrics, with the row's type, help and
// labels; and every row is exported when its part is present.
func TestEverySeriesIsInTheTable(t *testing.T) {
	kinds := map[observe.Kind]dto.MetricType{observe.Counter: dto.MetricType_COUNTER, observe.Gauge: dto.MetricType_GAUGE,
		observe.Histogram: dto.MetricType_HISTOGRAM}
	exported := map[string]bool{}
	for _, mf := range everyFamily(t) {
		name, ours := strings.CutPrefix(mf.GetName(), observe.Namespace+"_")
		if !ours {
			continue
		}
		exported[name] = true
		row := observe.Metrics.Row(name)
		if row == nil {
			t.Errorf("%s is exported but not in the table", mf.GetName())
			continue
		}
		if mf.GetType() != kinds[row.Kind] || mf.GetHelp() != row.Help {
			t.Errorf("%s: exported as %v %q, the table says %v %q", mf.GetName(), mf.GetType(), mf.GetHelp(), kinds[row.Kind], row.Help)
		}
		want := append(slices.Clone(row.Labels), row.Const...)
		sort.Strings(want)
		for _, m := range mf.GetMetric() {
			var got []string
			for _, lp := range m.GetLabel() {
				got = append(got, lp.GetName())
			}
			if sort.Strings(got); !slices.Equal(got, want) {
				t.Errorf("%s: labels %v, the table says %v", mf.GetName(), got, want)
				break
			}
		}
	}
	for _, s := range observe.Metrics {
		if !exported[s.Name] {
			t.Errorf("the table's %s is not exported with every part present", s.FullName())
		}
	}
}

// TestOneRowDrivesMetricsAndReport: the node's report reads its figures
// through the table's rows, so a row's reader changes the metric and the
// report together; and with the real table, the report's figures are
// the metrics' values.
func TestOneRowDrivesMetricsAndReport(t *testing.T) {
	src := ranRun(t)
	snap := src.Snapshot()
	snap.Trainers = Trainers(src.TrainerWait())

	// A table whose delivered_samples_total reads 42 for every rank.
	table := slices.Clone(observe.Metrics)
	row := table.Row("delivered_samples_total")
	row.Read = func(s *observe.Snapshot, o *observe.Out) {
		for _, r := range s.Node.Ranks {
			o.Add(42, r.Name)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(table.Collector(func() observe.Snapshot { return snap }, []observe.Group{observe.GroupNode}))
	mfs := observetest.Families(t, reg)
	rep := table.NodeReport(snap)
	for _, rr := range rep.Ranks {
		if got := observetest.Sum(mfs, "longshore_delivered_samples_total", map[string]string{"rank": rr.Rank}); got != 42 || rr.Samples != 42 {
			t.Errorf("rank %s: metric %v, report %d; the row says 42 for both", rr.Rank, got, rr.Samples)
		}
	}
	if rep.Samples != 84 {
		t.Errorf("report's node samples %d, want the row's 2 x 42", rep.Samples)
	}

	// The real table: each figure of the report is its metric's value.
	reg = observe.Registry(NewNodeCollector(src), NewTrainerWaitCollector(src.TrainerWait))
	mfs = observetest.Families(t, reg)
	rep = NodeReport(src.Ranks(), src.TrainerWait(), src.Report)
	var samples int64
	for _, rr := range rep.Ranks {
		lb := map[string]string{"rank": rr.Rank}
		samples += rr.Samples
		for name, v := range map[string]float64{
			"longshore_delivered_samples_total": float64(rr.Samples), "longshore_delivered_epoch": float64(rr.Epoch),
			"longshore_delivered_step": float64(rr.Step), "longshore_slots_in_use": float64(rr.SlotsInUse),
		} {
			if got := observetest.Sum(mfs, name, lb); got != v {
				t.Errorf("rank %s: %s = %v, the report's %v", rr.Rank, name, got, v)
			}
		}
		if got := observetest.Sum(mfs, "longshore_trainer_wait_seconds", lb); got != float64(rr.StallSteps) {
			t.Errorf("rank %s: %v trainer waits, the report's %d", rr.Rank, got, rr.StallSteps)
		}
	}
	if rep.Samples != samples || samples == 0 || rep.Ranks[1].StallSteps != 4 || rep.Ranks[1].WaitUs != 1_500_000 || rep.Ranks[1].ComputeUs != 500_000 {
		t.Errorf("report %+v (ranks %v)", rep, rep.Ranks)
	}
	if got := observetest.Sum(mfs, "longshore_failures_total", nil); got != float64(rep.Failed) || rep.Failed != 3 {
		t.Errorf("failures: metric %v, report %d, want 3", got, rep.Failed)
	}
	for _, f := range rep.Failures {
		stage, class, _ := strings.Cut(f.Reason, "/")
		if got := observetest.Sum(mfs, "longshore_failures_total", map[string]string{"stage": stage, "class": class}); got != float64(f.Count) {
			t.Errorf("failures %s: metric %v, report %d", f.Reason, got, f.Count)
		}
	}
	if rep.Bottleneck == "" {
		t.Error("the report has no bottleneck, with a live report taken")
	}
}

// TestOneRowDrivesMetricsAndSummary: the end-of-run summary reads its
// figures through the table's rows, so every row with a summary's figure
// changes the summary when its reader does; and with the real table the
// summary's figures are the metrics' values.
func TestOneRowDrivesMetricsAndSummary(t *testing.T) {
	src := ranRun(t)
	src.S3 = func() s3.Stats {
		return s3.Stats{Requests: 9, Retries: 6, RetriesByCause: s3.RetriesByCause{Throttle: 1, Server: 1, Timeout: 1, Conn: 1, BadResponse: 1, Stall: 1},
			Throttled: 2, Backoff: 1500 * time.Millisecond, Rate: 100, Budget: 50, RateWaits: 3, RateWait: 250 * time.Millisecond}
	}
	src.Pack = func() dataset.PackedStats {
		return dataset.PackedStats{Chunks: 3, ChunkBytes: 3 << 20, PeakBytes: 2 << 20, ReadAlone: 5, Evictions: 1}
	}
	snap := src.Snapshot()
	base := observe.Metrics.NodeSummary(snap)
	read := map[string]bool{}
	for i, row := range observe.Metrics {
		if row.Figure == "" || row.Group != observe.GroupNode {
			continue
		}
		// The row's reader changed: the same samples, each worth 1e6.
		table := slices.Clone(observe.Metrics)
		samples := observe.Table{row}.Eval(snap)
		table[i].Read = func(_ *observe.Snapshot, o *observe.Out) {
			for _, s := range samples {
				o.Add(1e6, s.Labels...)
			}
		}
		if len(samples) == 0 {
			t.Errorf("%s: no samples with every part present", row.Name)
		}
		if got := table.NodeSummary(snap); !reflect.DeepEqual(got, base) {
			read[row.Figure] = true
		} else if strings.HasPrefix(row.Figure, "summary.") {
			t.Errorf("%s (%s): the summary does not change with the row's reader", row.Name, row.Figure)
		}
	}
	for _, fig := range []string{observe.FigRankSamples, observe.FigFailures} {
		if !read[fig] {
			t.Errorf("the summary does not read %s through the table", fig)
		}
	}

	// The real table: the summary's figures are the metrics' values.
	mfs := observetest.Families(t, observe.Registry(NewNodeCollector(src)))
	sum := Summary(src)
	for name, v := range map[string]int64{
		"longshore_delivered_samples_total": sum.Samples, "longshore_padding_samples_total": sum.Pads,
		"longshore_delivered_batches_total": sum.Batches, "longshore_s3_http_requests_total": sum.Store.Requests,
		"longshore_store_throttled_total": sum.Store.Throttled, "longshore_store_rate_waits_total": sum.Store.RateWaits,
		"longshore_pack_chunks_total": sum.Pack.Chunks, "longshore_pack_chunk_bytes_total": sum.Pack.ChunkBytes,
		"longshore_pack_cache_peak_bytes": sum.Pack.PeakBytes, "longshore_pack_read_alone_total": sum.Pack.ReadAlone,
		"longshore_pack_evictions_total": sum.Pack.Evictions,
	} {
		if got := observetest.Sum(mfs, name, nil); got != float64(v) {
			t.Errorf("%s = %v, the summary's %d", name, got, v)
		}
	}
	for name, v := range map[string]float64{
		"longshore_store_backoff_seconds_total": sum.Store.BackoffSeconds, "longshore_store_request_rate_limit": sum.Store.Rate,
		"longshore_store_budget_requests_per_second": sum.Store.Budget, "longshore_store_rate_wait_seconds_total": sum.Store.RateWaitSeconds,
	} {
		if got := observetest.Sum(mfs, name, nil); got != v {
			t.Errorf("%s = %v, the summary's %v", name, got, v)
		}
	}
	for i, cause := range observe.S3RetryCauses {
		if got := observetest.Sum(mfs, "longshore_store_retries_total", map[string]string{"cause": cause}); got != float64(sum.Store.Retries[i]) || got != 1 {
			t.Errorf("retries %s: metric %v, summary %d, want 1", cause, got, sum.Store.Retries[i])
		}
	}
	var failed int64
	for reason, n := range sum.Failures {
		stage, class, _ := strings.Cut(reason, "/")
		if got := observetest.Sum(mfs, "longshore_failures_total", map[string]string{"stage": stage, "class": class}); got != float64(n) {
			t.Errorf("failures %s: metric %v, summary %d", reason, got, n)
		}
		failed += n
	}
	if failed != 3 || sum.Samples == 0 || sum.Batches == 0 || len(sum.Stages) != len(actors.Stages()) {
		t.Errorf("summary %+v: want 3 failures, samples, batches and every stage", sum)
	}
	for _, st := range sum.Stages {
		lb := map[string]string{"stage": st.Stage}
		for name, v := range map[string]int64{"longshore_stage_items_total": st.Items, "longshore_stage_failures_total": st.Failures,
			"longshore_stage_workers": st.Workers} {
			if got := observetest.Sum(mfs, name, lb); got != float64(v) {
				t.Errorf("stage %s: %s = %v, the summary's %d", st.Stage, name, got, v)
			}
		}
	}
	// The node's merged counters say the same (what the summary's stage
	// table and percentiles come from).
	var cs []actors.Counters
	for _, r := range src.Ranks() {
		cs = append(cs, r.Counters)
	}
	merged := actors.MergeCounters(cs...).Stats()
	if merged.Samples != sum.Samples || merged.Pads != sum.Pads || merged.Batches != sum.Batches {
		t.Errorf("merged counters: %d samples, %d pads, %d batches; the summary's %d, %d, %d",
			merged.Samples, merged.Pads, merged.Batches, sum.Samples, sum.Pads, sum.Batches)
	}
	for _, st := range merged.Stages {
		if got := sum.Stage(st.Stage.String()); got.Items != st.Items || got.Failures != st.Failures || got.Workers != int64(st.Workers) {
			t.Errorf("stage %s: merged %+v, the summary's %+v", st.Stage, st, got)
		}
	}
}
