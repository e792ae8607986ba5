package observe

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/coord"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/internal/clock"
)

// TestStatusPage: /status.json joins the coordinator's view with the
// nodes' reports (progress and time left, nodes and their standing,
// ranks' delivered and committed steps, the bottleneck most nodes name,
// failures by reason, the journal), and / serves the page.
func TestStatusPage(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	committed := int64(0)
	status := func(context.Context) (coord.Status, error) {
		now := clk.Now()
		return coord.Status{
			Census: cluster.Census{Nodes: 2, Leases: cluster.LeaseStates{Active: 2},
				Ranks: []cluster.RankCensus{{Rank: "a/0", Node: "a", Epoch: 0, Step: 3, Leases: 1}, {Rank: "b/0", Node: "b", Epoch: 0, Step: -1, Leases: 1}}},
			Epochs: []cluster.EpochStatus{{Started: true, Committed: committed}, {}},
			Nodes: []coord.NodeStatus{
				{Node: "a", State: coord.NodeAlive, Incarnation: 1, ReportAt: now, Report: &wire.NodeReport{Samples: 50, SamplesPerSecond: 20,
					Bottleneck: "decode", BottleneckReason: "decoders busy", Failed: 2, Failures: []*wire.FailureCount{{Reason: "decode/corrupt", Count: 2}},
					Ranks: []*wire.RankReport{{Rank: "a/0", Samples: 50, Epoch: 0, Step: 5, SlotsInUse: 2}}}},
				{Node: "b", State: coord.NodeSuspect, Incarnation: 1, ReportAt: now, Report: &wire.NodeReport{Samples: 70, SamplesPerSecond: 30, Bottleneck: "decode"}},
				{Node: "c", State: coord.NodeEvicted, Incarnation: 4, ReportAt: now.Add(-time.Minute), Report: &wire.NodeReport{Bottleneck: "fetch"}},
			},
		}, nil
	}
	jm := NewJournalMeter(fakeJournal{})
	if _, err := jm.Write(context.Background(), cluster.State{}, nil); err != nil {
		t.Fatal(err)
	}
	jm.Token(7, 0, 3)
	p := &StatusPage{Status: status, Clock: clk, Journal: jm, Job: JobInfo{Dataset: "d", Samples: 100, Epochs: 2, BatchSize: 4}}
	p.sample(context.Background())
	clk.Advance(10 * time.Second)
	committed = 50
	p.sample(context.Background())

	srv := httptest.NewServer(p)
	defer srv.Close()
	get := func(path string) string {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	var s StatusJSON
	if err := json.Unmarshal([]byte(get("/status.json")), &s); err != nil {
		t.Fatal(err)
	}
	if s.Progress.Committed != 50 || s.Progress.Total != 200 || s.Progress.Ratio != 0.25 || s.Progress.PerSecond != 5 || s.Progress.ETASeconds != 30 {
		t.Errorf("progress %+v: want 50 of 200 at 5/s, 30 s left", s.Progress)
	}
	if len(s.Nodes) != 3 || s.Nodes[1].State != "suspect" || s.Nodes[2].State != "evicted" || s.Nodes[0].SamplesPerSecond != 20 {
		t.Errorf("nodes %+v", s.Nodes)
	}
	if st, _ := status(context.Background()); ClusterBottleneck(st) != "decode" {
		t.Errorf("cluster bottleneck %q, want decode", ClusterBottleneck(st))
	}
	if s.Bottleneck.Stage != "decode" || s.Bottleneck.Node != "a" {
		t.Errorf("bottleneck %+v: want decode, named by the slowest node a (c is evicted)", s.Bottleneck)
	}
	if len(s.Ranks) != 2 || s.Ranks[0].DeliveredStep != 5 || s.Ranks[0].CommittedStep != 3 || s.Ranks[1].DeliveredStep != -1 {
		t.Errorf("ranks %+v", s.Ranks)
	}
	if len(s.Failures) != 1 || s.Failures[0] != (FailureJSON{"decode/corrupt", 2}) {
		t.Errorf("failures %+v", s.Failures)
	}
	if s.Journal == nil || s.Journal.Generation != 7 || !strings.HasPrefix(s.Journal.LastToken, "lsr1.") {
		t.Errorf("journal %+v", s.Journal)
	}
	if len(s.History) != 2 || s.History[1].Nodes["b"] != 30 {
		t.Errorf("history %+v: want b's throughput (a suspect node still holds leases)", s.History)
	}
	for _, path := range []string{"/", "/page.js", "/page.css"} {
		if body := get(path); len(body) < 100 {
			t.Errorf("%s: %q", path, body)
		}
	}
	if body := get("/"); !strings.Contains(body, `id="progress"`) || !strings.Contains(body, "page.js") {
		t.Errorf("the page lacks its progress bar or script")
	}
}

// TestStatusPageMixture: a mixture's sources reach status.json with
// their committed samples and the source epochs these make, and the page
// has their table; without a mixture there is no such key.
func TestStatusPageMixture(t *testing.T) {
	var mix []coord.SourceStatus
	p := &StatusPage{Status: func(context.Context) (coord.Status, error) {
		return coord.Status{Epochs: []cluster.EpochStatus{{Started: true}}, Mixture: mix}, nil
	}, Clock: clock.NewFake(time.Unix(1000, 0)), Job: JobInfo{Dataset: "mixture(a=x, b=y)", Samples: 96, Epochs: 1, BatchSize: 8}}
	s, err := p.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(s); strings.Contains(string(b), `"mixture":`) {
		t.Errorf("status.json of a dataset has a mixture: %s", b)
	}
	mix = []coord.SourceStatus{{Source: "a", Samples: 40, Committed: 100}, {Source: "b", Samples: 200, Committed: 50}}
	if s, err = p.Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []MixtureJSON{{Source: "a", Samples: 40, Committed: 100, SourceEpochs: 2.5}, {Source: "b", Samples: 200, Committed: 50, SourceEpochs: 0.25}}
	if len(s.Mixture) != 2 || s.Mixture[0] != want[0] || s.Mixture[1] != want[1] {
		t.Errorf("mixture %+v, want %+v", s.Mixture, want)
	}
	page, err := static.ReadFile("static/index.html")
	if err != nil || !strings.Contains(string(page), `id="mixture"`) {
		t.Errorf("the page has no mixture table (%v)", err)
	}
}
