package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/dataset/datasettest"
	"github.com/longshore/longshore/storage/faultproxy"
)

// BenchmarkMixtureMinIO reads the same N JPEGs (benchJPEG's, 320x240)
// from MinIO as one source of N samples and as a --mixture of three
// sources of N/3 (weights 1:1:1, proportional to the sizes), each way
// in one format (packed tars with longshore-pack --index's manifest;
// per-object ImageFolders) and, for the mixture, also in three formats
// at once (packed, Parquet and an ImageFolder) against one source of
// each of those formats. A standalone node runs one epoch of each, the
// six interleaved LONGSHORE_BENCH_REPS times (default 2). It reports
// images/s; the mixture's against the single source's of the same
// format (for the three formats, against the rate one source of each
// format would read its third at: N over the sum of (N/3)/rate); the S3
// requests a sample (every request MinIO answered, counted by a proxy
// in front of it that changes nothing: a mixture's summary has no S3
// counters of its own, its store unwraps to no S3 client); and the
// seconds from the node's start to its first batch (a mixture opens
// three sources) and the whole run's, as this benchmark times run().
// Each run's delivery log must hold every sample exactly once (a
// mixture's each source's N/3 once), or it fails.
//
//	go test ./cmd/node -run '^$' -bench MixtureMinIO -benchtime 1x
func BenchmarkMixtureMinIO(b *testing.B) {
	n, reps := benchSize(1152, 2)
	// A third is a whole number of the mixture's rounds' shares: rounds
	// of 96 (3 x the batch of 32) hold 32 of each source, so one epoch of
	// the mixture is each source's samples exactly once, no round split
	// 11/11/10 and no source's next epoch begun to fill the last round.
	const batch, round, perGroup = 32, 96, 16
	n -= n % round
	if n == 0 {
		b.Fatalf("LONGSHORE_BENCH_SAMPLES: want at least %d", round)
	}
	third := n / 3
	perShard := third / 2 // a third is 2 shards or Parquet files, N is 6

	srv, bucket, open, put := benchBucket(b)
	images, bytesIn := benchImages(b, n)
	// Samples [lo, hi) as tar shards of perShard (.jpg, .cls), indexed as
	// longshore-pack --index does it: packed.
	packed := func(prefix string, lo, hi int) {
		s := open(prefix)
		for sh := lo; sh < hi; sh += perShard {
			var names []string
			var datas [][]byte
			for i := sh; i < min(sh+perShard, hi); i++ {
				names = append(names, fmt.Sprintf("%06d.jpg", i), fmt.Sprintf("%06d.cls", i))
				datas = append(datas, images[i], []byte(strconv.Itoa(i%3)))
			}
			var t bytes.Buffer
			if _, err := dataset.WriteTarShard(&t, names, datas); err != nil {
				b.Fatal(err)
			}
			put(s, fmt.Sprintf("shard-%06d.tar", (sh-lo)/perShard), t.Bytes())
		}
		indexTars(b, s)
	}
	// Samples [lo, hi) one object each, class directories: an
	// ImageFolder, read per object.
	folder := func(prefix string, lo, hi int) {
		s := open(prefix)
		for i := lo; i < hi; i++ {
			put(s, fmt.Sprintf("c%d/%06d.jpg", i%3, i), images[i])
		}
	}
	// Samples [lo, hi) as Parquet files of perShard rows, row groups of
	// perGroup (Hugging Face's layout, as BenchmarkFormatsMinIO's).
	pq := func(prefix string, lo, hi int) {
		s := open(prefix)
		files, _ := datasettest.HFDataset(b, images[lo:hi], nil, perShard, perGroup, parquet.Compression(&parquet.Snappy))
		for _, f := range files {
			put(s, f.Key, f.Data)
		}
	}
	packed("one-packed", 0, n)
	folder("one-folder", 0, n)
	pq("one-parquet", 0, n)
	for k, name := range []string{"a", "b", "c"} {
		packed("third-packed-"+name, k*third, (k+1)*third)
		folder("third-folder-"+name, k*third, (k+1)*third)
	}
	pq("third-parquet-b", third, 2*third)

	mixture := func(prefixes ...string) string {
		var parts []string
		for k, p := range prefixes {
			parts = append(parts, fmt.Sprintf("%c=%s:1", 'a'+k, srv.URL(bucket, p)))
		}
		return strings.Join(parts, ",")
	}
	type config struct {
		name    string
		dataset string // --dataset, or
		mixture string // --mixture
		base    []string
	}
	configs := []config{
		{name: "packed, one source", dataset: "one-packed"},
		{name: "packed, mixture of 3", mixture: mixture("third-packed-a", "third-packed-b", "third-packed-c"), base: []string{"packed, one source"}},
		{name: "per-object, one source", dataset: "one-folder"},
		{name: "per-object, mixture of 3", mixture: mixture("third-folder-a", "third-folder-b", "third-folder-c"), base: []string{"per-object, one source"}},
		{name: "Parquet, one source", dataset: "one-parquet"},
		{name: "packed+Parquet+per-object, mixture of 3", mixture: mixture("third-packed-a", "third-parquet-b", "third-folder-c"),
			base: []string{"packed, one source", "Parquet, one source", "per-object, one source"}},
	}

	// Every request to MinIO goes through a proxy that only counts: the
	// same hop for every configuration.
	proxy := faultproxy.Start(b, srv.Endpoint)
	type result struct {
		ips, reqs, first, wall, load []float64
		bottleneck                   []string
		pack                         string // the last rep's chunk cache, if packed
		ops                          string // the last rep's requests by kind
	}
	res := map[string]*result{}
	for _, c := range configs {
		res[c.name] = &result{}
	}
	dir := b.TempDir()
	for i := 0; i < b.N; i++ {
		for rep := range reps {
			for ci, c := range configs {
				stem := filepath.Join(dir, fmt.Sprintf("%d-%d-%d", ci, i, rep))
				stats, logPath := stem+".json", stem+".log"
				args := []string{"--standalone", "--s3-endpoint", proxy.URL, "--epochs", "1", "--batch-size", strconv.Itoa(batch),
					"--size", "64", "--seed", strconv.Itoa(rep), "--sink", "log:" + logPath, "--stats-json", stats, "--progress", "never"}
				if c.mixture != "" {
					args = append(args, "--mixture", c.mixture, "--mixture-round", strconv.Itoa(round))
				} else {
					args = append(args, "--dataset", srv.URL(bucket, c.dataset))
				}
				before, logged, start := proxy.Requests(), len(proxy.Log()), time.Now()
				var out, errb bytes.Buffer
				if code := run(args, &out, &errb); code != 0 {
					b.Fatalf("%s: exit %d\n%s", c.name, code, errb.String())
				}
				wall, reqs := time.Since(start).Seconds(), proxy.Requests()-before
				s := readSummary(b, stats)
				if s.Images != int64(n) || s.Pads != 0 || s.Failures.Total != 0 {
					b.Fatalf("%s: %d samples delivered, %d of them padding (want %d, none), failures %+v", c.name, s.Images, s.Pads, n, s.Failures)
				}
				checkMixtureDelivery(b, c.name, logPath, n, c.mixture != "")
				r := res[c.name]
				r.ips = append(r.ips, s.ImagesPerSecond)
				r.reqs = append(r.reqs, float64(reqs)/float64(n))
				// FirstBatchSeconds counts from the program's start (started),
				// this benchmark's: from run()'s.
				r.first = append(r.first, s.FirstBatchSeconds-start.Sub(started).Seconds())
				r.wall = append(r.wall, wall)
				r.bottleneck = append(r.bottleneck, s.Bottleneck)
				ops := map[faultproxy.Op]int{}
				for _, e := range proxy.Log()[logged:] {
					ops[e.Op]++
				}
				r.ops = fmt.Sprint(ops)
				if s.Pack != nil {
					r.pack = fmt.Sprintf("; chunks %d, read alone %d, prefetches %d, peak %.1f MB", s.Pack.Chunks, s.Pack.ReadAlone, s.Pack.Prefetches, float64(s.Pack.PeakBytes)/1e6)
				}
				r.load = append(r.load, loadAverage())
			}
		}
	}
	b.Logf("%d samples of %.1f KB (320x240 JPEGs): one source of %d, or a mixture of 3 sources of %d (weights 1:1:1, rounds of %d); shards and Parquet files of %d, row groups of %d; one epoch, --batch-size %d, --size 64, %d reps interleaved; MinIO on this machine, through a counting proxy",
		n, float64(bytesIn)/float64(n)/1000, n, third, round, perShard, perGroup, batch, reps)
	b.Logf("%-40s %10s %9s %14s %14s %8s", "config", "images/s", "× single", "S3 req/sample", "first batch s", "run s")
	for _, c := range configs {
		r := res[c.name]
		ips := median(r.ips)
		ratio := "-"
		if len(c.base) > 0 {
			// One source of each base format reading its share: N over
			// the sum of each share's time.
			var secs float64
			for _, bn := range c.base {
				secs += float64(n) / float64(len(c.base)) / median(res[bn].ips)
			}
			ratio = fmt.Sprintf("%.2f", ips/(float64(n)/secs))
		}
		b.Logf("%-40s %10.0f %9s %14.3f %14.2f %8.2f   (images/s of each rep: %.0f; bottleneck: %v; load average after each: %.1f; requests %s%s)",
			c.name, ips, ratio, median(r.reqs), median(r.first), median(r.wall), r.ips, r.bottleneck, r.load, r.ops, r.pack)
		key := strings.NewReplacer(" ", "", ",", "-", "+", "-").Replace(c.name)
		b.ReportMetric(ips, key+"-images/s")
		b.ReportMetric(median(r.reqs), key+"-req/sample")
	}
}

// checkMixtureDelivery reads a run's delivery log (--sink log): every
// line a sample of epoch 0, none padding, n distinct keys each
// delivered once; a mixture's keys are under its sources' names (a/,
// b/, c/), n/3 of each.
func checkMixtureDelivery(b *testing.B, name, path string, n int, mixture bool) {
	b.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	seen := map[string]int{}
	perSource := map[string]int{}
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		cols := strings.Split(line, "\t")
		if len(cols) != 4 || cols[0] != "0" {
			b.Fatalf("%s: delivery log line %q: want epoch 0, rank, step, key and no padding", name, line)
		}
		seen[cols[3]]++
		if mixture {
			src, _, _ := strings.Cut(cols[3], "/")
			perSource[src]++
		}
	}
	for k, c := range seen {
		if c != 1 {
			b.Fatalf("%s: %s delivered %d times, want once", name, k, c)
		}
	}
	if len(seen) != n {
		b.Fatalf("%s: %d distinct samples delivered, want %d", name, len(seen), n)
	}
	if mixture {
		for _, src := range []string{"a", "b", "c"} {
			if perSource[src] != n/3 {
				b.Fatalf("%s: source %s delivered %d samples, want %d (sources %v)", name, src, perSource[src], n/3, perSource)
			}
		}
	}
}

// loadAverage is the 1-minute load average (/proc/loadavg), 0 where
// there is none.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	return f
}
