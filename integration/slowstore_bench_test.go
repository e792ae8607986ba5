package integration

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/storage/faultproxy"
	"github.com/longshore/longshore/storage/miniotest"
	"github.com/longshore/longshore/storage/s3"
)

// slowStoreMix is the fault mix of a slow store (docs/faults.md, "A slow
// store"): 15% of object GETs (whole and ranged) disturbed, each by one
// of 503 SlowDown, 500, a reset mid-body, a short body or a body that
// stalls for 5 s mid-way, each key at most twice.
func slowStoreMix(seed uint64) faultproxy.Rule {
	return faultproxy.Rule{Name: "mix", Ops: faultproxy.OpGet | faultproxy.OpGetRange, Prob: 0.15, Seed: seed, MaxPerKey: 2,
		Fault: faultproxy.Mix(faultproxy.SlowDown(0), faultproxy.Status(500, "InternalError"),
			faultproxy.ResetAfter(200), faultproxy.ShortBody(100), faultproxy.Stall(200, 5*time.Second))}
}

// BenchmarkSlowStoreEpoch: a standalone node (the binary a user runs)
// reads one epoch of LONGSHORE_BENCH_SLOW_N (2,048) small JPEGs from
// MinIO through the fault proxy, per object and packed (tar shards of
// 256), first with the proxy passing everything, then with
// slowStoreMix. Every run logs its deliveries (--sink log:PATH) and the
// benchmark checks each sample was delivered exactly once, none failed.
// It prints one table: the epoch's seconds clean and under the faults
// side by side, their ratio, and what the store did (faults injected,
// retries by cause, stalls abandoned, hedges sent and won).
//
// LONGSHORE_BENCH_NODES="before=/tmp/node-old,after=bin/longshore-node"
// runs each binary in turn (a row each); LONGSHORE_BENCH_VERBOSE=1 prints
// each run's figures and the longest pauses between its requests (=2: with
// the disturbed requests before each pause); LONGSHORE_BENCH_NODE_ARGS is
// added to every run (e.g. "--hedge-quantile 0 --progress-timeout 0",
// the old defaults); LONGSHORE_BENCH_LAYOUTS narrows to "per object" or
// "packed"; LONGSHORE_BENCH_REPS repeats (medians shown).
//
//	go test -run '^$' -bench BenchmarkSlowStoreEpoch -benchtime 1x ./integration
func BenchmarkSlowStoreEpoch(b *testing.B) {
	n := 2048
	if v := os.Getenv("LONGSHORE_BENCH_SLOW_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 32 || n%32 != 0 {
			b.Fatalf("LONGSHORE_BENCH_SLOW_N=%q: want a multiple of the batch size, 32", v)
		}
	}
	reps := 1
	if v := os.Getenv("LONGSHORE_BENCH_REPS"); v != "" {
		if _, err := fmt.Sscan(v, &reps); err != nil || reps < 1 {
			b.Fatalf("LONGSHORE_BENCH_REPS=%q: want a count of at least 1", v)
		}
	}
	srv := miniotest.Start(b)
	dir, _ := makeDataset(b, n)
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

	type run struct {
		seconds float64
		store   s3.Stats
		fired   int64
	}
	one := func(bin, prefix string, faults bool, seed uint64) run {
		var rules []faultproxy.Rule
		if faults {
			rules = append(rules, slowStoreMix(seed))
		}
		p := faultproxy.Start(b, srv.Endpoint, rules...)
		defer p.Close()
		wd := b.TempDir()
		stats, deliveries := filepath.Join(wd, "s.json"), filepath.Join(wd, "deliveries.log")
		args := append([]string{"--standalone", "--dataset", srv.URL(bucket, prefix), "--s3-endpoint", p.URL,
			"--epochs", "1", "--batch-size", "32", "--size", "16", "--transform", "resize", "--sink", "log:" + deliveries,
			"--progress", "never", "--stats-json", stats}, plan.args...)
		if out, err := runNode(bin, wd, srv.Env(), args...); err != nil {
			b.Fatalf("node: %v\n%s", err, out)
		}
		var s struct {
			Seconds  float64 `json:"seconds"`
			Images   int64   `json:"images"`
			Pads     int64   `json:"pads"`
			Failures struct {
				Total int64 `json:"total"`
			} `json:"failures"`
			Store      s3.Stats `json:"store"`
			Bottleneck string   `json:"bottleneck"`
			InFlight   int      `json:"fetch_in_flight"`
			Stages     struct {
				ReadAhead int `json:"read_ahead"`
			} `json:"stages"`
		}
		raw, err := os.ReadFile(stats)
		if err != nil {
			b.Fatal(err)
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			b.Fatal(err)
		}
		if s.Failures.Total != 0 || s.Images != int64(n) || s.Pads != 0 {
			b.Fatalf("%s (faults %v): %d images, %d pads, %d failures; want %d, 0, 0", prefix, faults, s.Images, s.Pads, s.Failures.Total, n)
		}
		checkOnce(b, deliveries, n)
		if os.Getenv("LONGSHORE_BENCH_VERBOSE") != "" && faults {
			// The longest pauses between requests: where the node waited.
			log := p.Log()
			type gap struct {
				d time.Duration
				i int
			}
			var gaps []gap
			for i := 1; i < len(log); i++ {
				gaps = append(gaps, gap{log[i].At.Sub(log[i-1].At), i})
			}
			slices.SortFunc(gaps, func(a, b gap) int { return cmp.Compare(b.d, a.d) })
			for _, g := range gaps[:min(8, len(gaps))] {
				fmt.Printf("  gap %v before request %d (%s %s), at %v\n", g.d, g.i, log[g.i].Op, log[g.i].Key, log[g.i].At.Sub(log[0].At))
				if os.Getenv("LONGSHORE_BENCH_VERBOSE") == "2" { // the disturbed requests before it, and what came after
					for j := max(0, g.i-80); j < min(len(log), g.i+5); j++ {
						if log[j].Rule != "" || j >= g.i {
							fmt.Printf("     %d %v %s %s %q\n", j, log[j].At.Sub(log[0].At), log[j].Op, log[j].Key, log[j].Rule)
						}
					}
				}
			}
		}
		if os.Getenv("LONGSHORE_BENCH_VERBOSE") != "" {
			fmt.Printf("%s faults=%v: %.2fs bottleneck %s, %d in flight, read-ahead %d, store %+v\n", prefix, faults, s.Seconds, s.Bottleneck, s.InFlight, s.Stages.ReadAhead, s.Store)
		}
		r := run{seconds: s.Seconds, store: s.Store}
		if faults {
			r.fired = p.Fired(0)
		}
		return r
	}
	type row struct {
		node, layout string
		clean, fault []run
	}
	var rows []row
	for range b.N {
		rows = rows[:0]
		for _, nd := range plan.nodes {
			for _, l := range []struct{ layout, prefix string }{{"per object", "ds"}, {"packed", "packed"}} {
				if plan.layout(l.layout) {
					rows = append(rows, row{node: nd.name, layout: l.layout})
				}
			}
		}
		for rep := range reps { // rep by rep, so noise hits every configuration alike
			for i := range rows {
				r := &rows[i]
				bin := nodeBin
				for _, nd := range plan.nodes {
					if nd.name == r.node {
						bin = nd.bin
					}
				}
				prefix := map[string]string{"per object": "ds", "packed": "packed"}[r.layout]
				r.clean = append(r.clean, one(bin, prefix, false, 0))
				r.fault = append(r.fault, one(bin, prefix, true, uint64(rep+1)))
			}
		}
	}
	median := func(rs []run) run {
		s := slices.Clone(rs)
		slices.SortFunc(s, func(a, b run) int { return cmp.Compare(a.seconds, b.seconds) })
		return s[len(s)/2]
	}
	var tab strings.Builder
	fmt.Fprintf(&tab, "\n%d images, one epoch, MinIO through the fault proxy; the mix: 15%% of GETs (503, 500, reset, short, 5 s stall; a key at most twice); medians of %d\n", n, reps)
	fmt.Fprintf(&tab, "%-8s %-11s %8s %8s %7s %7s %-46s %7s %12s %7s %9s %9s\n", "node", "layout", "clean s", "faults s", "ratio", "faults", "retries (throttle/server/conn/bad/stall/timeout)", "stalls", "hedges (won)", "denied", "rate cuts", "backoff s")
	for _, r := range rows {
		c, f := median(r.clean), median(r.fault)
		rc := f.store.RetriesByCause
		fmt.Fprintf(&tab, "%-8s %-11s %8.2f %8.2f %6.2f× %7d %-46s %7d %12s %7d %9d %9.2f\n", cmp.Or(r.node, "-"), r.layout, c.seconds, f.seconds, f.seconds/c.seconds, f.fired,
			fmt.Sprintf("%d (%d/%d/%d/%d/%d/%d)", f.store.Retries, rc.Throttle, rc.Server, rc.Conn, rc.BadResponse, rc.Stall, rc.Timeout),
			f.store.Stalls, fmt.Sprintf("%d (%d)", f.store.Hedges, f.store.HedgeWins), f.store.HedgesDenied, f.store.RateCuts, f.store.Backoff.Seconds())
		b.ReportMetric(f.seconds/c.seconds, "ratio-"+cmp.Or(r.node, "")+strings.ReplaceAll(r.layout, " ", ""))
	}
	fmt.Print(tab.String()) // whole: b.Log truncates a benchmark's log
}

// checkOnce fails b unless the log sink's file names n distinct keys,
// each exactly once (one epoch; a packed dataset's keys are its
// members', so the count is what is compared).
func checkOnce(b *testing.B, path string, n int) {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	seen := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) < 4 {
			continue
		}
		if seen[fields[3]]++; seen[fields[3]] > 1 {
			b.Fatalf("%s: %s delivered twice", path, fields[3])
		}
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	if len(seen) != n {
		b.Fatalf("%s: %d keys delivered; want %d, each once", path, len(seen), n)
	}
}
