package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/storage/faultproxy"
	"github.com/longshore/longshore/storage/miniotest"
)

// BenchmarkRemoteStore: one standalone epoch of 4,000 small JPEGs from
// a directory, and from MinIO behind the fault proxy delaying every
// request by 0, 1, 5, 20 and 50 ms (a store that far away: the kernel
// here has no netem, so the delay is the proxy's, in user space; TCP
// connections stay warm on the loopback). Per object with
// --fetch-concurrency 16 (the old fixed default) and auto, and packed
// (tar shards read a chunk at a time) with auto. The images are 16×16
// so decoding is cheap and the store's latency is what limits: the
// worst case for a remote store. It prints one table, every figure of
// one run side by side: images/s, the ratio to the same layout from the
// local directory, and the reads in flight each run allowed at its end.
//
//	go test -run '^$' -bench BenchmarkRemoteStore -benchtime 1x ./integration
func BenchmarkRemoteStore(b *testing.B) {
	const remoteImages = 4000
	srv := miniotest.Start(b)
	dir, _ := makeDataset(b, remoteImages)
	bucket := srv.NewBucket(b)
	uploadTree(b, srv, bucket, "ds/", dir)
	_, nodeBin := binaries(b)
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
		rtt             time.Duration // -1: the local directory
		layout, fetch   string
		imagesPerSecond float64
		inFlight        int
	}
	run := func(dataset, endpoint, fetch string) (float64, int) {
		wd := b.TempDir()
		stats := filepath.Join(wd, "s.json")
		args := []string{"--standalone", "--dataset", dataset, "--epochs", "1", "--batch-size", "32", "--size", "16",
			"--transform", "resize", "--sink", "null", "--progress", "never", "--fetch-concurrency", fetch, "--stats-json", stats}
		if endpoint != "" {
			args = append(args, "--s3-endpoint", endpoint)
		}
		if out, err := runNode(nodeBin, wd, srv.Env(), args...); err != nil {
			b.Fatalf("node: %v\n%s", err, out)
		}
		var s struct {
			Images   int64   `json:"images"`
			Rate     float64 `json:"images_per_second"`
			InFlight int     `json:"fetch_in_flight"`
		}
		raw, err := os.ReadFile(stats)
		if err != nil {
			b.Fatal(err)
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			b.Fatal(err)
		}
		if s.Images != remoteImages {
			b.Fatalf("%d images delivered, want %d", s.Images, remoteImages)
		}
		return s.Rate, s.InFlight
	}
	for range b.N {
		var rs []result
		local := map[string]float64{}
		for _, c := range []struct{ layout, path, fetch string }{{"per object", dir, "16"}, {"per object", dir, "auto"}, {"packed", packed, "auto"}} {
			r, n := run(c.path, "", c.fetch)
			rs = append(rs, result{-1, c.layout, c.fetch, r, n})
			if c.fetch == "auto" {
				local[c.layout] = r
			}
		}
		for _, rtt := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond} {
			var rules []faultproxy.Rule
			if rtt > 0 {
				rules = append(rules, faultproxy.Rule{Fault: faultproxy.Delay(rtt)})
			}
			p := faultproxy.Start(b, srv.Endpoint, rules...)
			for _, c := range []struct{ layout, prefix, fetch string }{{"per object", "ds", "16"}, {"per object", "ds", "auto"}, {"packed", "packed", "auto"}} {
				r, n := run(srv.URL(bucket, c.prefix), p.URL, c.fetch)
				rs = append(rs, result{rtt, c.layout, c.fetch, r, n})
			}
			p.Close()
		}
		// The ratio that isolates the latency: against MinIO with no delay,
		// same layout and fetch (MinIO's own cost on these cores is in
		// both); and against the directory, which MinIO's cost dominates
		// here.
		near := map[string]float64{}
		for _, r := range rs {
			if r.rtt == 0 {
				near[r.layout+r.fetch] = r.imagesPerSecond
			}
		}
		var tab strings.Builder
		fmt.Fprintf(&tab, "\n%-13s %-11s %-6s %10s %9s %9s %9s\n", "store", "layout", "fetch", "images/s", "vs +0 ms", "vs local", "in flight")
		for _, r := range rs {
			where, vsNear := "directory", "-"
			if r.rtt >= 0 {
				where = fmt.Sprintf("MinIO +%v", r.rtt)
				vsNear = fmt.Sprintf("%.2f×", r.imagesPerSecond/near[r.layout+r.fetch])
			}
			fmt.Fprintf(&tab, "%-13s %-11s %-6s %10.0f %9s %8.2f× %9d\n", where, r.layout, r.fetch, r.imagesPerSecond, vsNear, r.imagesPerSecond/local[r.layout], r.inFlight)
			b.ReportMetric(r.imagesPerSecond, fmt.Sprintf("img/s-%s-%s-%s", strings.ReplaceAll(where, " ", ""), strings.ReplaceAll(r.layout, " ", ""), r.fetch))
		}
		fmt.Print(tab.String()) // whole: b.Log truncates a benchmark's log
	}
}
