package integration

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/storage/faultproxy"
	"github.com/longshore/longshore/storage/miniotest"
)

// BenchmarkRemoteStore: three standalone epochs of 4,000 small JPEGs from
// a directory, and from MinIO in a network namespace of its own, across
// a veth pair shaped by tbf to LONGSHORE_BENCH_RATE each way (1gbit by
// default; the benchmark makes the namespace and the link and removes
// them after), behind the fault proxy delaying every request by 0, 1, 5,
// 20 and 50 ms (a store that far away: the kernel here has no netem, so
// the delay is the proxy's, in user space; its TCP connections to MinIO
// stay warm). Per object with
// --fetch-concurrency 16 (the old fixed default) and auto, and packed
// (tar shards read a chunk at a time) with auto. The images are 16×16
// so decoding is cheap and the store's latency is what limits: the
// worst case for a remote store. It prints one table, every figure of
// one run side by side: images/s over the whole run and in steady state
// (from the first batch on: a job's start-up requests, each a round
// trip, weigh on a run this short as they would not on a real epoch),
// the steady rate's ratio to MinIO with no delay and to the same layout
// from the local directory, and the reads in flight each run allowed at
// its end. LONGSHORE_BENCH_REPS repeats every configuration (rep by rep,
// so noise hits them alike) and the table shows medians.
//
// With LONGSHORE_BENCH_JSON set (make bench-remote sets
// docs/bench/bench-remote.json) it also writes every run, the CPU model
// and the load average before and after there.
//
// A paired run of two builds, or a subset (remoteBenchPlan):
// LONGSHORE_BENCH_NODES="old=/tmp/node-old,new=bin/longshore-node" runs
// every configuration with each binary in turn, rep by rep, and the table
// has a row per binary; LONGSHORE_BENCH_DELAYS="0,20ms" and
// LONGSHORE_BENCH_LAYOUTS="packed" narrow the grid;
// LONGSHORE_BENCH_NODE_ARGS="--pack-spill off" is added to every run.
//
//	go test -run '^$' -bench BenchmarkRemoteStore -benchtime 1x ./integration
func BenchmarkRemoteStore(b *testing.B) {
	const remoteImages = 4000
	rate := cmp.Or(os.Getenv("LONGSHORE_BENCH_RATE"), "1gbit")
	lab := newNetLab(b, rate)
	srv := miniotest.StartInNetns(b, lab.ns, lab.nsIP)
	dir, _ := makeDataset(b, remoteImages)
	bucket := srv.NewBucket(b)
	uploadTree(b, srv, bucket, "ds/", dir)
	_, nodeBin := binaries(b)
	plan, err := remoteBenchPlan(nodeBin)
	if err != nil {
		b.Fatal(err)
	}
	packBin := filepath.Join(binDir, "longshore-pack")
	if out, err := exec.Command("go", "build", "-o", packBin, "../cmd/longshore-pack").CombinedOutput(); err != nil {
		b.Fatalf("go build longshore-pack: %v\n%s", err, out)
	}
	packed := filepath.Join(b.TempDir(), "packed")
	if out, err := exec.Command(packBin, "--dataset", dir, "--out", packed, "--per-shard", "256").CombinedOutput(); err != nil {
		b.Fatalf("longshore-pack: %v\n%s", err, out)
	}
	uploadTree(b, srv, bucket, "packed/", packed)

	type result struct {
		Node            string        `json:"node,omitempty"` // LONGSHORE_BENCH_NODES's name
		RTT             time.Duration `json:"rtt_ns"`         // -1: the local directory
		Layout          string        `json:"layout"`
		Fetch           string        `json:"fetch_concurrency"`
		ImagesPerSecond float64       `json:"images_per_second"`
		Steady          float64       `json:"steady_images_per_second"` // after the first batch
		InFlight        int           `json:"fetch_in_flight"`
		ReadAhead       int           `json:"read_ahead"`
		Rep             int           `json:"rep"`
	}
	const epochs = 3
	run := func(nodeBin, dataset, endpoint, fetch string) (rate, steady float64, inFlight, readAhead int) {
		wd := b.TempDir()
		stats := filepath.Join(wd, "s.json")
		args := []string{"--standalone", "--dataset", dataset, "--epochs", fmt.Sprint(epochs), "--batch-size", "32", "--size", "16",
			"--transform", "resize", "--sink", "null", "--progress", "never", "--fetch-concurrency", fetch, "--stats-json", stats}
		if endpoint != "" {
			args = append(args, "--s3-endpoint", endpoint)
		}
		args = append(args, plan.args...)
		if out, err := runNode(nodeBin, wd, srv.Env(), args...); err != nil {
			b.Fatalf("node: %v\n%s", err, out)
		}
		var s struct {
			Images     int64   `json:"images"`
			Rate       float64 `json:"images_per_second"`
			Seconds    float64 `json:"seconds"`
			FirstBatch float64 `json:"first_batch_seconds"`
			InFlight   int     `json:"fetch_in_flight"`
			Stages     struct {
				ReadAhead int `json:"read_ahead"`
			} `json:"stages"`
			Startup struct {
				Serving float64 `json:"serving_seconds"`
			} `json:"startup"`
		}
		raw, err := os.ReadFile(stats)
		if err != nil {
			b.Fatal(err)
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			b.Fatal(err)
		}
		if s.Images != epochs*remoteImages {
			b.Fatalf("%d images delivered, want %d", s.Images, epochs*remoteImages)
		}
		// Seconds counts from the pipelines' start, the first batch from
		// the program's: the steady rate is after the first batch.
		return s.Rate, float64(s.Images-32) / (s.Seconds - (s.FirstBatch - s.Startup.Serving)), s.InFlight, s.Stages.ReadAhead
	}
	started, loadBefore := time.Now().UTC(), loadAvg()
	reps := 1
	if v := os.Getenv("LONGSHORE_BENCH_REPS"); v != "" {
		if _, err := fmt.Sscan(v, &reps); err != nil || reps < 1 {
			b.Fatalf("LONGSHORE_BENCH_REPS=%q: want a count of at least 1", v)
		}
	}
	for range b.N {
		var all []result // every run, rep by rep
		for rep := 1; rep <= reps; rep++ {
			for _, c := range []struct{ layout, path, fetch string }{{"per object", dir, "16"}, {"per object", dir, "auto"}, {"packed", packed, "auto"}} {
				if !plan.layout(c.layout) || !plan.delay(-1) {
					continue
				}
				for _, n := range plan.nodes {
					r, st, k, ra := run(n.bin, c.path, "", c.fetch)
					all = append(all, result{n.name, -1, c.layout, c.fetch, r, st, k, ra, rep})
				}
			}
			for _, rtt := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond} {
				if !plan.delay(rtt) {
					continue
				}
				var rules []faultproxy.Rule
				if rtt > 0 {
					rules = append(rules, faultproxy.Rule{Fault: faultproxy.Delay(rtt)})
				}
				p := faultproxy.Start(b, srv.Endpoint, rules...)
				for _, c := range []struct{ layout, prefix, fetch string }{{"per object", "ds", "16"}, {"per object", "ds", "auto"}, {"packed", "packed", "auto"}} {
					if !plan.layout(c.layout) {
						continue
					}
					for _, n := range plan.nodes {
						r, st, k, ra := run(n.bin, srv.URL(bucket, c.prefix), p.URL, c.fetch)
						all = append(all, result{n.name, rtt, c.layout, c.fetch, r, st, k, ra, rep})
					}
				}
				p.Close()
			}
		}
		// One row per configuration: the run of median steady rate (with
		// its whole-run rate, reads in flight and read-ahead).
		var rs []result
		for _, first := range all {
			if first.Rep != 1 {
				continue
			}
			var same []result
			for _, x := range all {
				if x.Node == first.Node && x.RTT == first.RTT && x.Layout == first.Layout && x.Fetch == first.Fetch {
					same = append(same, x)
				}
			}
			slices.SortFunc(same, func(a, b result) int { return cmp.Compare(a.Steady, b.Steady) })
			rs = append(rs, same[len(same)/2])
		}
		local := map[string]float64{}
		for _, r := range rs {
			if r.RTT < 0 && r.Fetch == "auto" {
				local[r.Node+r.Layout] = r.Steady
			}
		}
		// The ratio that isolates the latency: against MinIO with no delay,
		// same layout and fetch (MinIO's own cost on these cores is in
		// both); and against the directory, which MinIO's cost dominates
		// here.
		near := map[string]float64{}
		for _, r := range rs {
			if r.RTT == 0 {
				near[r.Node+r.Layout+r.Fetch] = r.Steady
			}
		}
		type row struct {
			Config string `json:"config"`
			result
			VsNoDelay float64 `json:"vs_no_delay,omitempty"`
			VsLocal   float64 `json:"vs_local,omitempty"`
		}
		var rows []row
		var tab strings.Builder
		ratio := func(a, b float64) string {
			if b == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f×", a/b)
		}
		fmt.Fprintf(&tab, "\n%-8s %-13s %-11s %-6s %10s %10s %9s %9s %9s %10s\n", "node", "store", "layout", "fetch", "images/s", "steady", "vs +0 ms", "vs local", "in flight", "read-ahead")
		for _, r := range rs {
			where, vsNear := "directory", "-"
			if r.RTT >= 0 {
				where = fmt.Sprintf("MinIO +%v", r.RTT) // across the link
				vsNear = ratio(r.Steady, near[r.Node+r.Layout+r.Fetch])
			}
			fmt.Fprintf(&tab, "%-8s %-13s %-11s %-6s %10.0f %10.0f %9s %9s %9d %10d\n", cmp.Or(r.Node, "-"), where, r.Layout, r.Fetch, r.ImagesPerSecond, r.Steady, vsNear, ratio(r.Steady, local[r.Node+r.Layout]), r.InFlight, r.ReadAhead)
			rw := row{Config: strings.TrimSpace(r.Node + " " + where + " " + r.Layout + " " + r.Fetch), result: r}
			if l := local[r.Node+r.Layout]; l > 0 {
				rw.VsLocal = r.Steady / l
			}
			if n := near[r.Node+r.Layout+r.Fetch]; r.RTT >= 0 && n > 0 {
				rw.VsNoDelay = r.Steady / n
			}
			rows = append(rows, rw)
			b.ReportMetric(r.Steady, fmt.Sprintf("steady-img/s-%s%s-%s-%s", r.Node, strings.ReplaceAll(where, " ", ""), strings.ReplaceAll(r.Layout, " ", ""), r.Fetch))
		}
		fmt.Printf("\nMinIO in network namespace %s across a veth pair, tbf %s each way; delays added by the fault proxy in user space; medians of %d\n", lab.ns, rate, reps)
		fmt.Print(tab.String()) // whole: b.Log truncates a benchmark's log
		if path := os.Getenv("LONGSHORE_BENCH_JSON"); path != "" {
			out, _ := json.MarshalIndent(map[string]any{
				"bench": "remote", "benchmark": "BenchmarkRemoteStore", "machine": cpuModel(), "cpus": runtime.NumCPU(),
				"images": remoteImages, "epochs": epochs, "delay": "user space (faultproxy.Delay): no netem in this kernel",
				"link":    "MinIO in its own network namespace, veth pair, tbf " + rate + " each way",
				"started": started.Format(time.RFC3339), "loadavg_before": loadBefore, "loadavg_after": loadAvg(),
				"reps": reps, "rows": rows, "runs": all, "node_args": plan.args,
			}, "", "  ")
			if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// remotePlan is what BenchmarkRemoteStore runs, from its environment.
type remotePlan struct {
	nodes   []remoteNode    // LONGSHORE_BENCH_NODES; else the built node, unnamed
	delays  []time.Duration // LONGSHORE_BENCH_DELAYS (-1: the directory); nil: all
	layouts []string        // LONGSHORE_BENCH_LAYOUTS; nil: all
	args    []string        // LONGSHORE_BENCH_NODE_ARGS
}

type remoteNode struct{ name, bin string }

func (p remotePlan) delay(d time.Duration) bool {
	return p.delays == nil || slices.Contains(p.delays, d)
}
func (p remotePlan) layout(l string) bool { return p.layouts == nil || slices.Contains(p.layouts, l) }

// remoteBenchPlan reads BenchmarkRemoteStore's environment: built is the
// node built from this tree. LONGSHORE_BENCH_DELAYS names delays like
// 0, 5ms, 20ms, and "local" for the directory.
func remoteBenchPlan(built string) (remotePlan, error) {
	p := remotePlan{nodes: []remoteNode{{"", built}}, args: strings.Fields(os.Getenv("LONGSHORE_BENCH_NODE_ARGS"))}
	if v := os.Getenv("LONGSHORE_BENCH_NODES"); v != "" {
		p.nodes = nil
		for f := range strings.SplitSeq(v, ",") {
			name, bin, ok := strings.Cut(strings.TrimSpace(f), "=")
			if !ok || name == "" || bin == "" {
				return p, fmt.Errorf("LONGSHORE_BENCH_NODES=%q: want name=binary,name=binary", v)
			}
			if _, err := os.Stat(bin); err != nil {
				return p, fmt.Errorf("LONGSHORE_BENCH_NODES: %w", err)
			}
			p.nodes = append(p.nodes, remoteNode{name, bin})
		}
	}
	if v := os.Getenv("LONGSHORE_BENCH_DELAYS"); v != "" {
		for f := range strings.SplitSeq(v, ",") {
			f = strings.TrimSpace(f)
			if f == "local" {
				p.delays = append(p.delays, -1)
				continue
			}
			if f == "0" {
				f = "0s"
			}
			d, err := time.ParseDuration(f)
			if err != nil || d < 0 {
				return p, fmt.Errorf("LONGSHORE_BENCH_DELAYS=%q: want delays like 0,5ms,20ms and local", v)
			}
			p.delays = append(p.delays, d)
		}
	}
	if v := os.Getenv("LONGSHORE_BENCH_LAYOUTS"); v != "" {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "packed" && f != "per object" {
				return p, fmt.Errorf("LONGSHORE_BENCH_LAYOUTS=%q: want packed and/or per object", v)
			}
			p.layouts = append(p.layouts, strings.TrimSpace(f))
		}
	}
	return p, nil
}

// cpuModel is /proc/cpuinfo's first model name.
func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// loadAvg is /proc/loadavg's three averages.
func loadAvg() []float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	var out []float64
	for _, f := range strings.Fields(string(b))[:3] {
		v, _ := strconv.ParseFloat(f, 64)
		out = append(out, v)
	}
	return out
}
