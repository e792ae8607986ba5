package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/node"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/observe/pipeline"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/miniotest"
	"github.com/longshore/longshore/storage/s3"
)

// metricValue is the value of the series line (name and labels, as
// the exposition writes them) in a /metrics page; -1 when absent.
func metricValue(t *testing.T, page, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return -1
}

// TestMixtureStoreStats: a mixture of two datasets on S3 reports the
// store figures summed over its sources: the metrics'
// longshore_store_requests_total and the S3 client's series, the
// summary's store line and --stats-json's store.
func TestMixtureStoreStats(t *testing.T) {
	srv := miniotest.Start(t)
	root, _ := makeDataset(t, 12)
	b1, b2 := srv.NewBucket(t), srv.NewBucket(t)
	uploadDir(t, srv, b1, root)
	uploadDir(t, srv, b2, root)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	t.Setenv(s3.EnvEndpointS3, "")
	spec := "a=s3://" + b1 + "/:1,b=s3://" + b2 + "/:3"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("metrics", func(t *testing.T) {
		o, err := parseFlags([]string{"--standalone", "--mixture", spec, "--batch-size", "4", "--size", "32",
			"--metrics", "127.0.0.1:0"}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		logger := slog.New(slog.DiscardHandler)
		data, err := openNodeData(ctx, o, logger)
		if err != nil {
			t.Fatal(err)
		}
		defer data.close()
		cat := dataset.MixtureOf(data.store)
		if cat == nil {
			t.Fatalf("no mixture opened (store %s)", data.store)
		}
		var buf []byte
		for i := range cat.Len() { // every sample of both sources
			smp, _, err := cat.Sample(ctx, i)
			if err != nil {
				t.Fatal(err)
			}
			if buf, err = data.store.Get(ctx, smp.Key, buf[:0]); err != nil {
				t.Fatal(err)
			}
		}
		var gets, s3Requests int64
		for _, src := range cat.Sources() {
			counted, s3s, _ := storeParts(src.Store)
			if counted == nil || s3s == nil {
				t.Fatalf("source %s: store %s: want the node's counting store over S3", src.Name, src.Store)
			}
			gets += counted.Stats().Count(storage.OpGet, storage.OutcomeOK)
			s3Requests += s3s.Stats().Requests
		}
		if gets < cat.Len() {
			t.Fatalf("the sources' counting stores answered %d GETs; want at least the %d samples read", gets, cat.Len())
		}
		ob, err := startObserver(o, pipeline.NodeSource{Ranks: func() []pipeline.RankCounters { return nil }},
			func() error { return nil }, data.store, logger)
		if err != nil {
			t.Fatal(err)
		}
		defer ob.shutdown(ctx, 0)
		resp, err := http.Get("http://" + ob.srv.Addr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		page, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := metricValue(t, string(page), `longshore_store_requests_total{op="get",outcome="ok"}`); got != float64(gets) {
			t.Errorf(`longshore_store_requests_total{op="get",outcome="ok"} %v; want %d, the sources' GETs summed`, got, gets)
		}
		if got := metricValue(t, string(page), "longshore_s3_http_requests_total"); got < float64(s3Requests) {
			t.Errorf("longshore_s3_http_requests_total %v; want at least %d, the sources' S3 requests summed", got, s3Requests)
		}
	})

	t.Run("rates", func(t *testing.T) {
		// A cluster node's share of the coordinator's --job-store-rps, and
		// the node's own --store-rps standalone and in a cluster, are split
		// among the S3 sources by their weights (1:3), so that together
		// they keep to them; a source's ceiling is the lower of its parts;
		// the store figures are the sources' summed.
		cluster := []string{"--join", "127.0.0.1:1", "--gossip", "127.0.0.1:0", "--listen", "127.0.0.1:0"} // never dialled
		for _, c := range []struct {
			name          string
			args          []string
			share         float64            // the coordinator's share applied (0: none)
			budget, ceil  map[string]float64 // each source's
			budgetSum, at float64            // the figures' budget, and the most their ceiling may be
		}{
			{"share", cluster, 100, map[string]float64{"a": 25, "b": 75}, map[string]float64{"a": 25, "b": 75}, 100, 100},
			{"own cap standalone", []string{"--standalone", "--store-rps", "100"}, 0, nil, map[string]float64{"a": 25, "b": 75}, 0, 100},
			{"own cap in a cluster", append([]string{"--store-rps", "100"}, cluster...), 0, nil, map[string]float64{"a": 25, "b": 75}, 0, 100},
			{"own cap under a higher share", append([]string{"--store-rps", "100"}, cluster...), 200, map[string]float64{"a": 50, "b": 150}, map[string]float64{"a": 25, "b": 75}, 200, 100},
			{"own cap under a lower share", append([]string{"--store-rps", "100"}, cluster...), 40, map[string]float64{"a": 10, "b": 30}, map[string]float64{"a": 10, "b": 30}, 40, 40},
		} {
			t.Run(c.name, func(t *testing.T) {
				o, err := parseFlags(append(c.args, "--mixture", spec, "--batch-size", "4", "--size", "32"), io.Discard)
				if err != nil {
					t.Fatal(err)
				}
				data, err := openNodeData(ctx, o, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatal(err)
				}
				defer data.close()
				if c.share > 0 {
					node.NewStoreBudget(data.store, o.faults.maxRequestRate, nil).Apply(c.share)
				}
				var ceil float64
				for _, src := range dataset.MixtureOf(data.store).Sources() {
					_, s3s, _ := storeParts(src.Store)
					st := s3s.Stats()
					ceil += st.Ceiling
					if st.Budget != c.budget[src.Name] || st.Ceiling != c.ceil[src.Name] {
						t.Errorf("source %s: budget %v, ceiling %v requests/s; want %v and %v", src.Name, st.Budget, st.Ceiling, c.budget[src.Name], c.ceil[src.Name])
					}
				}
				if st := s3Stats(data.store); st == nil || st.Budget != c.budgetSum || st.Ceiling != ceil || ceil > c.at {
					t.Errorf("the store figures: %+v; want budget %v, ceiling the sources' %v, at most %v", st, c.budgetSum, ceil, c.at)
				}
			})
		}
	})

	t.Run("summary", func(t *testing.T) {
		dir := t.TempDir()
		logPath, statsPath := filepath.Join(dir, "d.log"), filepath.Join(dir, "s.json")
		var out, errb bytes.Buffer
		code := run([]string{"--standalone", "--mixture", spec, "--epochs", "1", "--batch-size", "4", "--size", "32",
			"--seed", "2", "--sink", "log:" + logPath, "--stats-json", statsPath, "--progress", "never"}, &out, &errb)
		if code != 0 {
			t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
		}
		s := readSummary(t, statsPath)
		if s.Store == nil {
			t.Fatalf("--stats-json has no store figures for a mixture on S3\n%s", out.String())
		}
		if s.Store.Requests < int64(s.Images) {
			t.Errorf("--stats-json store: %d requests; want at least one per sample delivered (%d)", s.Store.Requests, s.Images)
		}
		if !strings.Contains(out.String()+errb.String(), "  store ") {
			t.Errorf("the summary has no store line:\n%s%s", out.String(), errb.String())
		}
	})
}

// TestBudgetWeights: each source's part of the store budget is its
// largest share of the draws over the schedule (weights or counts per
// epoch, all/epoch the source's size).
func TestBudgetWeights(t *testing.T) {
	sizes := []cluster.MixSource{{Name: "a", Samples: 300}, {Name: "b", Samples: 100}}
	for _, c := range []struct {
		name   string
		phases []cluster.MixPhase
		want   []float64
	}{
		{"weights", []cluster.MixPhase{{Weights: []string{"0.75", "1/4"}}}, []float64{0.75, 0.25}},
		{"schedule", []cluster.MixPhase{{Weights: []string{"1", "0"}}, {At: 1000, Weights: []string{"1", "1"}, Linear: true}}, []float64{1, 0.5}},
		{"counts", []cluster.MixPhase{{Weights: []string{"all/epoch", "100/epoch"}}}, []float64{0.75, 0.25}},
		{"unreadable", []cluster.MixPhase{{Weights: []string{"x", "1"}}}, nil},
	} {
		got := budgetWeights(c.phases, sizes)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v; want %v", c.name, got, c.want)
		}
	}
}
