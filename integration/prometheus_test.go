package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/internal/testports"
	"github.com/longshore/longshore/observe/observetest"
	"github.com/longshore/longshore/storage/miniotest"
)

// promServer is a real Prometheus (Debian's package) scraping targets
// on loopback.
type promServer struct {
	t    *testing.T
	base string // http://127.0.0.1:<port>
}

// promBinary finds Prometheus, installing Debian's package through
// scripts/deps.sh when it is missing (the test never skips for want of
// it).
func promBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	if out, err := exec.Command("../scripts/deps.sh", "observe").CombinedOutput(); err != nil {
		t.Fatalf("scripts/deps.sh observe: %v\n%s", err, out)
	}
	p, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus not on PATH after scripts/deps.sh observe: %v", err)
	}
	return p
}

// startPrometheus starts Prometheus with a generated config: one scrape
// job per entry of jobs (name -> targets), every 100 ms.
func startPrometheus(t *testing.T, jobs map[string][]string) *promServer {
	t.Helper()
	bin := promBinary(t)
	dir := t.TempDir()
	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 100ms\n  scrape_timeout: 90ms\nscrape_configs:\n")
	names := make([]string, 0, len(jobs))
	for n := range jobs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&cfg, "  - job_name: %s\n    static_configs:\n      - targets: [%s]\n", n, strings.Join(quoteAll(jobs[n]), ", "))
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := testports.Addr(t, "127.0.0.1")
	p := startProc(t, dir, "prometheus", bin, nil, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	ps := &promServer{t: t, base: "http://" + addr}
	// Ready once its HTTP API answers.
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(ps.base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return ps
			}
		}
		select {
		case <-p.done:
			t.Fatalf("prometheus exited: %v\n%s", p.err, tail(p.stderr, 20))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after a minute:\n%s", tail(p.stderr, 20))
		}
	}
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

// promResult is one series of a query's answer.
type promResult struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`  // instant: [ts, "v"]
	Values [][]any           `json:"values"` // range: [[ts, "v"], ...]
}

// query runs an instant PromQL query over the HTTP API.
func (p *promServer) query(q string) []promResult {
	p.t.Helper()
	resp, err := http.Get(p.base + "/api/v1/query?" + url.Values{"query": {q}}.Encode())
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []promResult `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Status != "success" {
		p.t.Fatalf("query %s: %v %s: %s", q, err, out.Error, b)
	}
	return out.Data.Result
}

// scalar is the value of a query answering one series (NaN: none).
func (p *promServer) scalar(q string) float64 {
	p.t.Helper()
	r := p.query(q)
	if len(r) != 1 {
		return math.NaN()
	}
	v, _ := strconv.ParseFloat(r[0].Value[1].(string), 64)
	return v
}

// point is one scraped sample.
type point struct {
	t time.Time
	v float64
}

// names are the metric names Prometheus scraped.
func (p *promServer) names() map[string]bool {
	p.t.Helper()
	resp, err := http.Get(p.base + "/api/v1/label/__name__/values")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Data []string `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		p.t.Fatal(err)
	}
	m := map[string]bool{}
	for _, n := range out.Data {
		m[n] = true
	}
	return m
}

// measuredRate is the throughput Prometheus saw for one node (instance
// of job): the samples it delivered over the time its pipelines ran, as
// scraped. The run starts where the first scrape with pipelines running
// says it started (that scrape's time less the pipeline time it
// reports) and ends at the first scrape that shows the final count.
func (p *promServer) measuredRate(job, instance string) (rate, final, secs float64) {
	p.t.Helper()
	sel := fmt.Sprintf(`{job=%q,instance=%q}`, job, instance)
	delivered := p.sumByTime("longshore_delivered_samples_total" + sel)
	elapsed := p.maxByTime("longshore_pipeline_seconds_total" + sel)
	final = delivered[len(delivered)-1].v
	var start, end time.Time
	for _, s := range elapsed {
		if s.v > 0 {
			start = s.t.Add(-time.Duration(s.v * float64(time.Second)))
			break
		}
	}
	for _, s := range delivered {
		if s.v == final {
			end = s.t
			break
		}
	}
	secs = end.Sub(start).Seconds()
	if start.IsZero() || secs <= 0 {
		p.t.Fatalf("%s: no run in the scraped samples (start %v, end %v)", sel, start, end)
	}
	return final / secs, final, secs
}

// sumByTime adds up the ranks' series of selector scrape by scrape (a
// target's series of one scrape share its timestamp).
func (p *promServer) sumByTime(selector string) []point { return p.byTime(selector, false) }

func (p *promServer) maxByTime(selector string) []point { return p.byTime(selector, true) }

func (p *promServer) byTime(selector string, useMax bool) []point {
	p.t.Helper()
	r := p.query(selector + "[1h]")
	if len(r) == 0 {
		p.t.Fatalf("%s: no series", selector)
	}
	acc := map[float64]float64{}
	for _, series := range r {
		for _, tv := range series.Values {
			ts := tv[0].(float64)
			v, _ := strconv.ParseFloat(tv[1].(string), 64)
			if useMax {
				acc[ts] = max(acc[ts], v)
			} else {
				acc[ts] += v
			}
		}
	}
	out := make([]point, 0, len(acc))
	for ts, v := range acc {
		out = append(out, point{time.Unix(0, int64(ts*1e9)), v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].t.Before(out[j].t) })
	return out
}

// corruptJPEG is a file that starts like a JPEG and is garbage after.
func corruptJPEG(rng *rand.Rand) []byte {
	b := []byte{0xff, 0xd8, 0xff, 0xdb, 0, 0x43, 0}
	for range 3000 {
		b = append(b, byte(rng.IntN(256)))
	}
	return b
}

// statsOf reads a node's --stats-json.
func statsOf(t *testing.T, path string) (imagesPerSecond, images, failures float64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		ImagesPerSecond float64 `json:"images_per_second"`
		Images          float64 `json:"images"`
		Failures        struct {
			Total float64 `json:"total"`
		} `json:"failures"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s.ImagesPerSecond, s.Images, s.Failures.Total
}

// TestPrometheus: a real Prometheus scrapes a standalone node and a
// 2-node cluster (the nodes and the coordinator), all reading real
// photos with 8 corrupt JPEGs among them from MinIO; PromQL over its
// HTTP API finds each node's throughput close to the node's own summary,
// the failures equal to the corrupt samples read, the job complete on
// the coordinator, and every metric the Grafana dashboard names.
func TestPrometheus(t *testing.T) {
	const corrupt, standaloneEpochs, clusterEpochs = 8, 3, 2
	photos := realPhotos(t)
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	cl := srv.Client(t)
	var keys []string
	if err := filepath.Walk(photos, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || strings.HasPrefix(info.Name(), ".") {
			return err // .complete marks the cache entry
		}
		rel, _ := filepath.Rel(photos, p)
		keys = append(keys, rel)
		_, err = cl.FPutObject(t.Context(), bucket, "ds/"+rel, p, minioPutOptions())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	for i := range corrupt {
		p := filepath.Join(dir, fmt.Sprintf("corrupt%d.jpg", i))
		if err := os.WriteFile(p, corruptJPEG(rng), 0o644); err != nil {
			t.Fatal(err)
		}
		class := strings.Split(keys[i*37%len(keys)], "/")[0]
		if _, err := cl.FPutObject(t.Context(), bucket, fmt.Sprintf("ds/%s/zz_corrupt%d.jpg", class, i), p, minioPutOptions()); err != nil {
			t.Fatal(err)
		}
	}
	samples := len(keys) + corrupt // 520: 260 a rank standalone, 130 in the cluster
	dataset := srv.URL(bucket, "ds")
	_, nodeBin := binaries(t)

	standaloneMetrics := testports.Addr(t, "127.0.0.1")
	packedMetrics := testports.Addr(t, "127.0.0.1")
	coordMetrics := testports.Addr(t, "127.0.0.1")
	nodeMetrics := []string{testports.Addr(t, "127.0.0.2"), testports.Addr(t, "127.0.0.3")}
	prom := startPrometheus(t, map[string][]string{
		"standalone":  {standaloneMetrics},
		"packed":      {packedMetrics},
		"cluster":     nodeMetrics,
		"coordinator": {coordMetrics},
	})
	common := []string{"--dataset", dataset, "--batch-size", "8", "--size", "64", "--transform", "train",
		"--max-failures", "100", "--progress", "never", "--metrics-linger", "5s", "--report-every", "1s"}
	// Start the runs only once Prometheus scrapes (its up series for the
	// standalone target exists, the target still down): a loaded machine
	// may take seconds to get it there, and a short run would go unseen.
	for deadline := time.Now().Add(2 * time.Minute); len(prom.query(`up{job="standalone"}`)) == 0; {
		if time.Now().After(deadline) { // a failure backstop only
			t.Fatal("Prometheus did not scrape within 2 minutes")
		}
		time.Sleep(50 * time.Millisecond) // polling pace
	}

	// Standalone: two ranks, three epochs.
	sdir := t.TempDir()
	sstats := filepath.Join(sdir, "stats.json")
	sn := startProc(t, sdir, "standalone", nodeBin, srv.Env(), append([]string{"--standalone", "--ranks", "2",
		"--epochs", strconv.Itoa(standaloneEpochs), "--metrics", standaloneMetrics, "--stats-json", sstats}, common...)...)
	if err := sn.wait(t, 3*time.Minute); err != nil {
		t.Fatalf("standalone node: %v\n%s", err, tail(sn.stderr, 30))
	}
	wantRate, images, fails := statsOf(t, sstats)
	rate, final, secs := prom.measuredRate("standalone", standaloneMetrics)
	t.Logf("standalone: summary %.0f images/s, %v images; Prometheus %.0f images/s (%v samples in %.2f s)", wantRate, images, rate, final, secs)
	if want := (samples - corrupt) * standaloneEpochs; final != images || images != float64(want) {
		t.Errorf("standalone: Prometheus saw %v samples delivered, the summary %v (want %d)", final, images, want)
	}
	if math.Abs(rate-wantRate) > 0.15*wantRate {
		t.Errorf("standalone: Prometheus measured %.0f images/s, the summary says %.0f", rate, wantRate)
	}
	got := prom.scalar(`sum(max_over_time(longshore_failures_total{job="standalone"}[1h]))`)
	if got != corrupt*standaloneEpochs || fails != got {
		t.Errorf("standalone: PromQL says %v failures, the summary %v; injected %d", got, fails, corrupt*standaloneEpochs)
	}
	if got := prom.scalar(`sum(max_over_time(longshore_failures_total{job="standalone",stage="decode",class="corrupt"}[1h]))`); got != corrupt*standaloneEpochs {
		t.Errorf("standalone: %v decode/corrupt failures, want %d", got, corrupt*standaloneEpochs)
	}
	if got := prom.scalar(`sum(max_over_time(longshore_store_requests_total{job="standalone",op="get",outcome="ok"}[1h]))`); got != float64(samples*standaloneEpochs) {
		t.Errorf("standalone: %v successful store gets, want %d", got, samples*standaloneEpochs)
	}

	// Packed: the photos packed into tar shards, one epoch: the chunk
	// cache's metrics, which the dashboard's packed-dataset panels use.
	pdir := t.TempDir()
	packed := filepath.Join(pdir, "packed")
	if out, err := exec.Command("go", "run", "../cmd/longshore-pack", "--dataset", photos, "--out", packed, "--per-shard", "64").CombinedOutput(); err != nil {
		t.Fatalf("longshore-pack: %v\n%s", err, out)
	}
	pn := startProc(t, pdir, "packed", nodeBin, srv.Env(), "--standalone", "--dataset", packed, "--epochs", "1", "--batch-size", "8",
		"--size", "64", "--progress", "never", "--metrics", packedMetrics, "--metrics-linger", "5s", "--report-every", "1s",
		"--pack-cache", "256MiB") // chunks, though the directory is local (auto reads in place)
	if err := pn.wait(t, 3*time.Minute); err != nil {
		t.Fatalf("packed node: %v\n%s", err, tail(pn.stderr, 30))
	}
	chunks := prom.scalar(`max_over_time(longshore_pack_chunks_total{job="packed"}[1h])`)
	hits := prom.scalar(`max_over_time(longshore_pack_hits_total{job="packed"}[1h])`)
	peak := prom.scalar(`max_over_time(longshore_pack_cache_peak_bytes{job="packed"}[1h])`)
	t.Logf("packed: %v chunk fetches, %v samples from cached chunks, cache peak %.0f bytes", chunks, hits, peak)
	if !(chunks > 0) || !(hits > chunks) || !(peak > 0) {
		t.Errorf("packed: %v chunk fetches, %v cache hits, peak %v bytes: want chunks read and most samples served from them", chunks, hits, peak)
	}

	// A 2-node cluster, two ranks each, journaled.
	c := startCluster(t, job{dataset: dataset, env: srv.Env(), epochs: clusterEpochs, batch: 8, shard: 32, balance: "equal",
		commit: 2, minRanks: 4, extraCoord: []string{"--metrics", coordMetrics, "--metrics-linger", "2s",
			"--checkpoint", filepath.Join(t.TempDir(), "journal"), "--report-every", "1s"}})
	var cstats []string
	for i, addr := range nodeMetrics {
		st := filepath.Join(c.dir, fmt.Sprintf("n%d.json", i+1))
		cstats = append(cstats, st)
		c.addNode("--metrics", addr, "--metrics-linger", "2s", "--stats-json", st, "--size", "64", "--transform", "train",
			"--max-failures", "100", "--report-every", "1s")
	}
	c.finish()
	var clusterImages, clusterFails float64
	for i, addr := range nodeMetrics {
		wantRate, images, fails := statsOf(t, cstats[i])
		rate, final, secs := prom.measuredRate("cluster", addr)
		t.Logf("cluster node n%d: summary %.0f images/s, %v images; Prometheus %.0f images/s (%v samples in %.2f s)", i+1, wantRate, images, rate, final, secs)
		if final != images {
			t.Errorf("n%d: Prometheus saw %v samples delivered, the summary %v", i+1, final, images)
		}
		if math.Abs(rate-wantRate) > 0.15*wantRate {
			t.Errorf("n%d: Prometheus measured %.0f images/s, the summary says %.0f", i+1, rate, wantRate)
		}
		clusterImages += images
		clusterFails += fails
	}
	if got := prom.scalar(`sum(max_over_time(longshore_failures_total{job="cluster"}[1h]))`); got != corrupt*clusterEpochs || clusterFails != got {
		t.Errorf("cluster: PromQL says %v failures, the summaries %v; injected %d", got, clusterFails, corrupt*clusterEpochs)
	}
	if got := prom.scalar(`sum(max_over_time(longshore_delivered_samples_total{job="cluster"}[1h]))`); got != clusterImages || got < float64((samples-corrupt)*clusterEpochs) {
		t.Errorf("cluster: PromQL says %v samples delivered, the summaries %v (the job has %d good ones)", got, clusterImages, (samples-corrupt)*clusterEpochs)
	}
	if got := prom.scalar(`max_over_time(longshore_coord_committed_samples[1h])`); got != float64(samples*clusterEpochs) {
		t.Errorf("coordinator: %v samples committed, want %d", got, samples*clusterEpochs)
	}
	if got := prom.scalar(`max_over_time(longshore_coord_ranks[1h])`); got != 4 {
		t.Errorf("coordinator: at most %v ranks alive, want 4", got)
	}
	if got := prom.scalar(`max_over_time(longshore_coord_progress_ratio[1h])`); got != 1 {
		t.Errorf("coordinator: progress reached %v, want 1", got)
	}
	if got := prom.scalar(`sum(max_over_time(longshore_journal_writes_total{outcome="ok"}[1h]))`); !(got > 0) {
		t.Errorf("coordinator: %v journal writes", got)
	}

	// The dashboard names only metrics Prometheus scraped.
	scraped := prom.names()
	for _, name := range dashboardMetrics(t) {
		if !scraped[name] {
			t.Errorf("the dashboard uses %s, which no target exported", name)
		}
	}
}

// dashboardMetrics returns the metric names the Grafana dashboard's
// expressions use.
func dashboardMetrics(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	for _, e := range observetest.DashboardExprs(t, dashboard(t, "../docs/grafana-dashboard.json")) {
		for _, n := range observetest.MetricNames(e) {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out
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
