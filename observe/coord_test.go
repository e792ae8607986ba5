package observe

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/coord"
	"github.com/longshore/longshore/cluster/journal"
	"github.com/longshore/longshore/observe/observetest"
)

type fakeJournal struct{}

func (fakeJournal) Write(context.Context, cluster.State, []string) (uint64, error) { return 7, nil }
func (fakeJournal) Check(context.Context) error                                    { return nil }
func (fakeJournal) Token(gen uint64, epoch int, step int64) journal.Token {
	return journal.Token{Gen: gen, Epoch: epoch, Step: step}
}

// TestCoordMetrics: the coordinator's metrics read its status.
func TestCoordMetrics(t *testing.T) {
	st := coord.Status{
		Stats: cluster.Stats{Grants: 5, Evictions: 1, Returned: 9},
		Census: cluster.Census{Nodes: 2, Leases: cluster.LeaseStates{Active: 3, Delivered: 1},
			Ranks: []cluster.RankCensus{{Rank: "a/0", Node: "a", Epoch: 1, Step: 4, Leases: 2}, {Rank: "b/0", Node: "b", Epoch: -1, Step: -1}}},
		Epochs: []cluster.EpochStatus{{Started: true, Complete: true, Committed: 10}, {Started: true, Committed: 4}, {}},
		Nodes:  []coord.NodeStatus{{Node: "a", State: coord.NodeAlive}, {Node: "b", State: coord.NodeSuspect}, {Node: "c", State: coord.NodeEvicted}},
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCoordCollector(CoordSource{Samples: 10, Epochs: 3, Status: func(context.Context) (coord.Status, error) { return st, nil }}))
	mfs := observetest.Families(t, reg)
	for name, want := range map[string]float64{
		"longshore_coord_nodes": 2, "longshore_coord_ranks": 2, "longshore_coord_leases": 4,
		"longshore_coord_grants_total": 5, "longshore_coord_evictions_total": 1, "longshore_coord_returned_positions_total": 9,
		"longshore_coord_committed_samples": 14, "longshore_coord_epochs_complete": 1, "longshore_coord_epoch": 1,
		"longshore_coord_job_samples": 30, "longshore_coord_rank_committed_step": 4, "longshore_coord_up": 1,
	} {
		if got := observetest.Sum(mfs, name, nil); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for _, state := range coord.NodeStates {
		want := map[coord.NodeState]float64{coord.NodeAlive: 1, coord.NodeSuspect: 1, coord.NodeEvicted: 1}[state]
		if got := observetest.Sum(mfs, "longshore_coord_node_states", map[string]string{"state": string(state)}); got != want {
			t.Errorf("longshore_coord_node_states{state=%q} = %v, want %v", state, got, want)
		}
	}
	if got := observetest.Sum(mfs, "longshore_coord_progress_ratio", nil); got < 0.466 || got > 0.467 {
		t.Errorf("progress %v, want 14/30", got)
	}
}

// TestStatusPageShowsTheMetrics: the status page's counters, leases and
// progress are read through the table's rows, so they are the
// coordinator's metrics.
func TestStatusPageShowsTheMetrics(t *testing.T) {
	st := coord.Status{
		Stats:  cluster.Stats{Grants: 5, Revokes: 2, Commits: 7, Evictions: 1, Returned: 9, Fenced: 3, Stale: 4},
		Census: cluster.Census{Nodes: 1, Leases: cluster.LeaseStates{Active: 3, Delivered: 1, Revoking: 2}},
		Epochs: []cluster.EpochStatus{{Started: true, Complete: true, Committed: 10}, {Started: true, Committed: 4}, {}},
	}
	status := func(context.Context) (coord.Status, error) { return st, nil }
	page := &StatusPage{Status: status, Job: JobInfo{Samples: 10, Epochs: 3}}
	js, err := page.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCoordCollector(CoordSource{Samples: 10, Epochs: 3, Status: status}))
	mfs := observetest.Families(t, reg)
	n := 0
	for _, s := range Metrics {
		key, ok := strings.CutPrefix(s.Figure, FigStatusCounter)
		if !ok {
			continue
		}
		n++
		if got, ok := js.Counters[key]; !ok || float64(got) != observetest.Sum(mfs, s.FullName(), nil) {
			t.Errorf("status counter %s = %v, %s = %v", key, got, s.FullName(), observetest.Sum(mfs, s.FullName(), nil))
		}
	}
	if n != 7 || len(js.Counters) != n {
		t.Errorf("status counters %v from %d rows, want the 7 the page always showed", js.Counters, n)
	}
	for state, v := range js.Leases {
		if got := observetest.Sum(mfs, "longshore_coord_leases", map[string]string{"state": state}); got != float64(v) {
			t.Errorf("leases %s: page %d, metric %v", state, v, got)
		}
	}
	p := js.Progress
	for name, v := range map[string]float64{"longshore_coord_committed_samples": float64(p.Committed), "longshore_coord_epoch": float64(p.Epoch),
		"longshore_coord_epochs_complete": float64(p.EpochsComplete), "longshore_coord_job_samples": float64(p.Total),
		"longshore_coord_progress_ratio": p.Ratio} {
		if got := observetest.Sum(mfs, name, nil); got != v {
			t.Errorf("%s = %v, the page's %v", name, got, v)
		}
	}
	if p.Committed != 14 || p.Total != 30 || p.Epoch != 1 || p.EpochCommitted != 4 || len(js.Leases) != 3 {
		t.Errorf("progress %+v, leases %v", p, js.Leases)
	}
}
