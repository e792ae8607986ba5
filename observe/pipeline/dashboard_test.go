package pipeline

import (
	"context"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/coord"
	"github.com/longshore/longshore/cluster/journal"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/observe"
	"github.com/longshore/longshore/observe/observetest"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
)

type fakeJournal struct{}

func (fakeJournal) Write(context.Context, cluster.State, []string) (uint64, error) { return 7, nil }
func (fakeJournal) Check(context.Context) error                                    { return nil }
func (fakeJournal) Token(gen uint64, epoch int, step int64) journal.Token {
	return journal.Token{Gen: gen, Epoch: epoch, Step: step}
}

// exported returns every metric name the node's and the coordinator's
// registries export with every source present (a histogram's series
// names included).
func exported(t *testing.T) map[string]bool {
	t.Helper()
	st, ds := testDataset(t, 16, 3)
	cs := storage.NewCountingStore(st)
	n, err := actors.NewNode(config(), ds, 1, testDeps(cs, testDecoder{}))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := n.Run(context.Background(), func(*actors.Batch) error { return nil }); err != nil {
		t.Fatal(err)
	}
	ranks := rankCounters(n)
	rep := &Reporter{Ranks: ranks}
	rep.Step()
	node := observe.Registry(NewNodeCollector(NodeSource{
		Ranks: ranks, Store: cs, Report: rep, JobSamples: 10, JobEpochs: 1,
		S3:        func() s3.Stats { return s3.Stats{} },
		Pack:      func() dataset.PackedStats { return dataset.PackedStats{} },
		Committed: func() []observe.Commit { return []observe.Commit{{Rank: "0", Epoch: 0, Step: 3}} },
	}))
	jm := observe.NewJournalMeter(fakeJournal{})
	if _, err := jm.Write(context.Background(), cluster.State{}, nil); err != nil {
		t.Fatal(err)
	}
	_ = jm.Check(context.Background())
	co := prometheus.NewRegistry()
	co.MustRegister(observe.NewCoordCollector(observe.CoordSource{Samples: 10, Epochs: 2, Journal: jm,
		Status: func(context.Context) (coord.Status, error) {
			return coord.Status{Census: cluster.Census{Nodes: 1, Ranks: []cluster.RankCensus{{Rank: "n/0", Node: "n", Epoch: 0, Step: 1}}},
				Epochs: []cluster.EpochStatus{{Started: true, Committed: 4}, {}}}, nil
		}}))
	names := map[string]bool{}
	for _, g := range []prometheus.Gatherer{node, co} {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			n := mf.GetName()
			names[n] = true
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
			}
		}
	}
	return names
}

// TestDashboardNamesExportedMetrics: every expression of the Grafana
// dashboard in docs/ names only metrics the daemons export.
func TestDashboardNamesExportedMetrics(t *testing.T) {
	names := exported(t)
	exprs := observetest.DashboardExprs(t, dashboard(t, "../../docs/grafana-dashboard.json"))
	if len(exprs) < 10 {
		t.Fatalf("the dashboard has %d expressions", len(exprs))
	}
	for _, e := range exprs {
		found := observetest.MetricNames(e)
		if len(found) == 0 {
			t.Errorf("expression names no metric: %s", e)
		}
		for _, n := range found {
			if !names[n] {
				t.Errorf("expression %s names %s, which is not exported", e, n)
			}
		}
	}
}

// dashboard reads the Grafana dashboard's JSON.
func dashboard(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
