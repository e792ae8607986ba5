// Command longshore-bench measures the single-node loader against the
// machine's decode ceiling, from a local directory and from MinIO, and
// prints a table with ratios (make bench).
//
// Each configuration runs as its own process so CPU time, peak memory and
// time to first batch are the process's own; configurations alternate
// (ceiling, local, minio, ceiling, ...) so machine noise hits them alike,
// and the table shows medians of the repetitions.
//
//	ceiling  one goroutine per core, each with its own decoder, decoding and
//	         transforming the dataset's files from memory in a tight loop:
//	         no store, no pipeline, no batching.
//	local    bin/longshore-node --standalone over the directory.
//	minio    the same over s3:// on a MinIO server on loopback (its CPU is
//	         reported separately: it shares the machine's cores).
//	local-packed, minio-packed
//	         the same samples packed into tar shards by longshore-pack
//	         (docs/packed-datasets.md), from the directory and from MinIO.
//	         From a local directory the node reads each member in place
//	         (--pack-cache auto); from MinIO a chunk at a time, the chunks
//	         spilled to a local disk (--pack-spill auto).
//	local-packed-chunks
//	         local-packed with chunks in memory (--pack-cache 1GiB), as
//	         on a store across a network.
//	local-packed-spill
//	         local-packed with the chunks spilled to files on a local disk
//	         (--pack-spill, in --spill-dir) instead of held in memory.
//	minio-packed-memory
//	         minio-packed with the chunks held in memory (--pack-spill
//	         off), the default before 2026-12-05.
//	local-metrics
//	         local with --metrics on and the live report every second,
//	         scraped every --scrape-every (100 ms: 150 times Prometheus's
//	         default rate): its "vs local" is the cost of metrics.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/longshore/longshore/cmd/internal/version"
	"github.com/longshore/longshore/dataset"
)

func main() {
	version.Exit("longshore-bench")
	if len(os.Args) > 1 && os.Args[1] == "ceiling" {
		if err := ceilingMain(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "longshore-bench ceiling: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "serve-minio" {
		if err := serveMinioMain(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "longshore-bench serve-minio: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if err := benchMain(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "longshore-bench: %v\n", err)
		os.Exit(1)
	}
}

// result is one run of one configuration.
type result struct {
	Config            string  `json:"config"`
	Images            int64   `json:"images"`
	Seconds           float64 `json:"seconds"`
	ImagesPerSecond   float64 `json:"images_per_second"`
	CPUSecondsPer1000 float64 `json:"cpu_seconds_per_1000"`
	PeakRSSBytes      int64   `json:"peak_rss_bytes"`
	FirstBatchSeconds float64 `json:"first_batch_seconds,omitempty"`
	ServerCPUPer1000  float64 `json:"server_cpu_seconds_per_1000,omitempty"`
	// Rep and LoadAvg (1, 5, 15 min, after the run): the machine is
	// shared; a reader weighs each repetition by it.
	Rep     int       `json:"rep,omitempty"`
	LoadAvg []float64 `json:"loadavg_after,omitempty"`
	// Pack is a packed run's chunk cache figures, from the node.
	Pack json.RawMessage `json:"pack,omitempty"`
}

type row struct {
	Config string   `json:"config"`
	Runs   []result `json:"runs"`
	Median result   `json:"median"`
	// Ratios of the median images/s: to the ceiling, and (every row but
	// ceiling and local) to local.
	VsCeiling float64 `json:"vs_ceiling"`
	VsLocal   float64 `json:"vs_local,omitempty"`
}

type report struct {
	Machine string  `json:"machine"`
	CPUs    int     `json:"cpus"`
	Dataset string  `json:"dataset"`
	Images  int     `json:"dataset_images"`
	MeanKB  float64 `json:"dataset_mean_kb"`
	Reps    int     `json:"repetitions"`
	Args    string  `json:"node_args"`
	TmpDir  string  `json:"node_tmpdir,omitempty"` // --node-tmpdir
	Rows    []row   `json:"rows"`
	// Metrics is the cost of metrics: local-metrics against the local
	// run just before it, pair by pair (medians of the ratios).
	Metrics       *pairs    `json:"metrics_on,omitempty"`
	Started       string    `json:"started"`
	Duration      string    `json:"duration"`
	LoadAvgBefore []float64 `json:"loadavg_before"`
	LoadAvgAfter  []float64 `json:"loadavg_after"`
}

func benchMain(args []string) error {
	fs := flag.NewFlagSet("longshore-bench", flag.ContinueOnError)
	datasetDir := fs.String("dataset", "", "ImageFolder directory of JPEGs (make bench makes one)")
	node := fs.String("node", "bin/longshore-node", "the node binary")
	reps := fs.Int("reps", 3, "repetitions of each configuration")
	epochs := fs.Int("epochs", 1, "epochs per run")
	out := fs.String("json", "", "also write the report as JSON here")
	noMinio := fs.Bool("no-minio", false, "skip the MinIO configurations")
	pack := fs.String("pack", "bin/longshore-pack", "the pack binary, for the packed configurations (\"\" skips them)")
	extra := fs.String("node-args", "", "extra flags for every node run, e.g. \"--lowres=false\"")
	tmpDir := fs.String("node-tmpdir", "", "TMPDIR for every node run: where --pack-spill auto looks first (minio-packed), so a disk can be measured without moving the bench's own files there")
	spillDir := fs.String("spill-dir", "", "local-packed-spill: where the node spills chunks (--pack-spill), a directory on a local disk; empty: one in the bench's temporary directory; \"none\" skips the configuration")
	scrapeEvery := fs.Duration("scrape-every", 100*time.Millisecond, "local-metrics: how often to scrape the node's /metrics (0 skips the configuration)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *datasetDir == "" {
		return fmt.Errorf("--dataset is required")
	}
	if *tmpDir != "" {
		runEnv = []string{"TMPDIR=" + *tmpDir}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	files, total, err := listFiles(*datasetDir)
	if err != nil {
		return err
	}
	ctx := context.Background()
	rep := report{Machine: machine(), CPUs: runtime.NumCPU(), Dataset: *datasetDir, Images: len(files),
		MeanKB: float64(total) / float64(len(files)) / 1024, Reps: *reps, Args: *extra, TmpDir: *tmpDir, Started: time.Now().UTC().Format(time.RFC3339),
		LoadAvgBefore: loadAvg()}
	t0 := time.Now()

	tmp, err := os.MkdirTemp("", "longshore-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// The packed copy: the same samples in tar shards (docs/packed-datasets.md).
	packed := ""
	if *pack != "" {
		packed = filepath.Join(tmp, "packed")
		fmt.Fprintf(os.Stderr, "bench: packing the dataset into tar shards\n")
		cmd := exec.CommandContext(ctx, *pack, "--dataset", *datasetDir, "--out", packed)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %w\n%s", cmd.Args, err, out)
		}
	}
	spill := ""
	if packed != "" && *spillDir != "none" {
		spill = *spillDir
		if spill == "" {
			spill = filepath.Join(tmp, "spill")
			if err := os.Mkdir(spill, 0o700); err != nil {
				return err
			}
		}
		if err := dataset.CheckSpillDir(spill); err != nil {
			return fmt.Errorf("local-packed-spill: %w (--spill-dir DIR on a local disk, or --spill-dir none to skip it)", err)
		}
	}
	var srv *minioServer
	var s3url, s3packed string
	if !*noMinio {
		fmt.Fprintf(os.Stderr, "bench: starting MinIO and uploading %d files\n", len(files))
		srv, err = startMinio(ctx)
		if err != nil {
			return err
		}
		defer srv.Stop()
		if s3url, err = upload(ctx, srv, *datasetDir, "imagenet-like", files); err != nil {
			return err
		}
		if packed != "" {
			pfiles, err := walkFiles(packed)
			if err != nil {
				return err
			}
			if s3packed, err = upload(ctx, srv, packed, "imagenet-like-packed", pfiles); err != nil {
				return err
			}
		}
	}
	nodeArgs := func(ds string, statsPath string) []string {
		a := []string{"--standalone", "--dataset", ds, "--epochs", strconv.Itoa(*epochs), "--batch-size", "32",
			"--transform", "train", "--seed", "1", "--sink", "null", "--stats-json", statsPath, "--progress", "never"}
		if *extra != "" {
			a = append(a, strings.Fields(*extra)...)
		}
		return a
	}
	runs := map[string][]result{}
	order := []string{"ceiling", "local"}
	if *scrapeEvery > 0 {
		order = append(order, "local-metrics")
	}
	if srv != nil {
		order = append(order, "minio")
	}
	if packed != "" {
		order = append(order, "local-packed", "local-packed-chunks")
		if spill != "" {
			order = append(order, "local-packed-spill")
		}
		if srv != nil {
			order = append(order, "minio-packed", "minio-packed-memory")
		}
	}
	for r := 0; r < *reps; r++ {
		for _, cfg := range order {
			statsPath := filepath.Join(tmp, fmt.Sprintf("%s-%d.json", cfg, r))
			var res result
			var err error
			var srvCPU float64
			switch cfg {
			case "ceiling":
				res, err = runProc(ctx, cfg, nil, self, "ceiling", "--dataset", *datasetDir, "--epochs", strconv.Itoa(*epochs), "--json", statsPath)
			case "local":
				res, err = runProc(ctx, cfg, nil, *node, nodeArgs(*datasetDir, statsPath)...)
			case "local-metrics":
				var addr string
				if addr, err = freeAddr(); err == nil {
					res, err = runScraped(ctx, cfg, addr, *scrapeEvery, *node,
						append(nodeArgs(*datasetDir, statsPath), "--metrics", addr, "--report-every", "1s")...)
				}
			case "local-packed":
				res, err = runProc(ctx, cfg, nil, *node, nodeArgs(packed, statsPath)...)
			case "local-packed-chunks":
				res, err = runProc(ctx, cfg, nil, *node, append(nodeArgs(packed, statsPath), "--pack-cache", "1GiB")...)
			case "local-packed-spill":
				res, err = runProc(ctx, cfg, nil, *node, append(nodeArgs(packed, statsPath), "--pack-spill", spill)...)
			case "minio", "minio-packed", "minio-packed-memory":
				url, args := s3url, []string(nil)
				if cfg != "minio" {
					url = s3packed
				}
				if cfg == "minio-packed-memory" {
					args = []string{"--pack-spill", "off"}
				}
				cpu0 := procCPU(srv.cmd.Process.Pid)
				res, err = runProc(ctx, cfg, srv.env(), *node, append(nodeArgs(url, statsPath), args...)...)
				srvCPU = procCPU(srv.cmd.Process.Pid) - cpu0
			}
			if err != nil {
				return fmt.Errorf("%s run %d: %w", cfg, r+1, err)
			}
			if err := mergeStats(&res, statsPath, int64(len(files))*int64(*epochs)); err != nil {
				return fmt.Errorf("%s run %d: %w", cfg, r+1, err)
			}
			if srvCPU > 0 {
				res.ServerCPUPer1000 = 1000 * srvCPU / float64(res.Images)
			}
			res.Rep, res.LoadAvg = r+1, loadAvg()
			fmt.Fprintf(os.Stderr, "bench: %-12s run %d: %6.0f images/s, %.2f CPU-s/1000\n", cfg, r+1, res.ImagesPerSecond, res.CPUSecondsPer1000)
			runs[cfg] = append(runs[cfg], res)
		}
	}
	for _, cfg := range order {
		rep.Rows = append(rep.Rows, row{Config: cfg, Runs: runs[cfg], Median: median(cfg, runs[cfg])})
	}
	ceil := rep.Rows[0].Median.ImagesPerSecond
	for i := range rep.Rows {
		rep.Rows[i].VsCeiling = rep.Rows[i].Median.ImagesPerSecond / ceil
		if rep.Rows[i].Config != "ceiling" && rep.Rows[i].Config != "local" {
			rep.Rows[i].VsLocal = rep.Rows[i].Median.ImagesPerSecond / rep.Rows[1].Median.ImagesPerSecond
		}
	}
	if m := runs["local-metrics"]; len(m) > 0 {
		rep.Metrics = pair(runs["local"], m)
		rep.Metrics.ScrapeEvery = scrapeEvery.String()
	}
	rep.Duration = time.Since(t0).Round(time.Second).String()
	rep.LoadAvgAfter = loadAvg()
	printTable(os.Stdout, rep)
	if *out != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runScraped is runProc with a scraper fetching http://addr/metrics
// every interval while the process runs.
func runScraped(ctx context.Context, cfg, addr string, every time.Duration, bin string, args ...string) (result, error) {
	sctx, stop := context.WithCancel(ctx)
	done := make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-sctx.Done():
				return
			}
			req, _ := http.NewRequestWithContext(sctx, "GET", "http://"+addr+"/metrics", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				continue // not listening yet, or gone
			}
			if _, err := io.Copy(io.Discard, resp.Body); err == nil && resp.StatusCode == http.StatusOK {
				n++
			}
			resp.Body.Close()
		}
	}()
	res, err := runProc(ctx, cfg, nil, bin, args...)
	stop()
	if n := <-done; err == nil && n == 0 {
		err = fmt.Errorf("%s: no scrape of %s succeeded", cfg, addr)
	}
	return res, err
}

// freeAddr returns a loopback address with a port free now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// runEnv is added to every child's environment (--node-tmpdir).
var runEnv []string

// runProc runs one configuration as a child process and measures it.
func runProc(ctx context.Context, cfg string, env []string, bin string, args ...string) (result, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(append(os.Environ(), runEnv...), env...)
	var stderr strings.Builder
	cmd.Stdout = io.Discard
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return result{}, fmt.Errorf("%v: %w\n%s", cmd.Args, err, stderr.String())
	}
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	res := result{Config: cfg}
	if ru != nil {
		res.PeakRSSBytes = ru.Maxrss * 1024
		res.CPUSecondsPer1000 = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9 // total for now; per-1000 after merge
	}
	return res, nil
}

// mergeStats reads the run's own JSON (images, its measured seconds, first
// batch) and turns the process CPU total into CPU-seconds per 1000 images.
func mergeStats(res *result, path string, want int64) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var s struct {
		Images            int64           `json:"images"`
		Seconds           float64         `json:"seconds"`
		FirstBatchSeconds float64         `json:"first_batch_seconds"`
		PeakRSSBytes      int64           `json:"peak_rss_bytes"`
		Pads              int64           `json:"pads"`
		Failures          json.RawMessage `json:"failures"` // the node's {total, ...}; the ceiling's count
		Failed            int64           `json:"failed"`
		Pack              json.RawMessage `json:"pack"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s.Images == 0 || s.Seconds == 0 {
		return fmt.Errorf("%s: no images delivered", path)
	}
	// A run that lost or padded samples does not count: every row must
	// have delivered the whole dataset, each epoch.
	var failed struct {
		Total int64 `json:"total"`
	}
	if len(s.Failures) > 0 {
		if err := json.Unmarshal(s.Failures, &failed); err != nil {
			return fmt.Errorf("%s: failures: %w", path, err)
		}
	}
	if n := failed.Total + s.Failed; n > 0 || s.Pads > 0 {
		return fmt.Errorf("%s: %d failed samples, %d padding: the run does not count", path, n, s.Pads)
	}
	if want > 0 && s.Images != want {
		return fmt.Errorf("%s: delivered %d images, want %d (the dataset × epochs): the run does not count", path, s.Images, want)
	}
	if len(s.Pack) > 0 && string(s.Pack) != "null" {
		res.Pack = s.Pack
	}
	cpu := res.CPUSecondsPer1000
	res.Images, res.Seconds, res.FirstBatchSeconds = s.Images, s.Seconds, s.FirstBatchSeconds
	res.ImagesPerSecond = float64(s.Images) / s.Seconds
	if s.PeakRSSBytes > 0 {
		// The run's own figure (VmHWM): rusage's Maxrss of a child
		// includes this process's memory from before its exec.
		res.PeakRSSBytes = s.PeakRSSBytes
	}
	res.CPUSecondsPer1000 = 1000 * cpu / float64(s.Images)
	return nil
}

// pairs compares two configurations run by run: each repetition ran
// them one after the other, so a pair shares the machine's mood.
type pairs struct {
	Pairs       int    `json:"pairs"`
	ScrapeEvery string `json:"scrape_every"`
	// ImagesPerSecond and CPUPerImage are the medians of b/a.
	ImagesPerSecond float64 `json:"images_per_second_ratio"`
	CPUPerImage     float64 `json:"cpu_per_image_ratio"`
}

func pair(a, b []result) *pairs {
	n := min(len(a), len(b))
	var ips, cpu []float64
	for i := range n {
		ips = append(ips, b[i].ImagesPerSecond/a[i].ImagesPerSecond)
		cpu = append(cpu, b[i].CPUSecondsPer1000/a[i].CPUSecondsPer1000)
	}
	return &pairs{Pairs: n, ImagesPerSecond: medianOf(ips), CPUPerImage: medianOf(cpu)}
}

func medianOf(v []float64) float64 {
	sort.Float64s(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func median(cfg string, rs []result) result {
	m := result{Config: cfg}
	pick := func(f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		sort.Float64s(v)
		if len(v) == 0 {
			return 0
		}
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	m.Images = int64(pick(func(r result) float64 { return float64(r.Images) }))
	m.Seconds = pick(func(r result) float64 { return r.Seconds })
	m.ImagesPerSecond = pick(func(r result) float64 { return r.ImagesPerSecond })
	m.CPUSecondsPer1000 = pick(func(r result) float64 { return r.CPUSecondsPer1000 })
	m.PeakRSSBytes = int64(pick(func(r result) float64 { return float64(r.PeakRSSBytes) }))
	m.FirstBatchSeconds = pick(func(r result) float64 { return r.FirstBatchSeconds })
	m.ServerCPUPer1000 = pick(func(r result) float64 { return r.ServerCPUPer1000 })
	return m
}

func printTable(w io.Writer, r report) {
	fmt.Fprintf(w, "\nlongshore bench — %s, %d CPUs; %d JPEGs (mean %.0f KB), train transform 224, batch 32; medians of %d\n\n",
		r.Machine, r.CPUs, r.Images, r.MeanKB, r.Reps)
	fmt.Fprintf(w, "| %-12s | %9s | %10s | %13s | %9s | %11s | %9s |\n", "config", "images/s", "vs ceiling", "CPU-s/1000 img", "peak RSS", "first batch", "vs local")
	fmt.Fprintf(w, "|%s|%s|%s|%s|%s|%s|%s|\n", dashes(14), dashes(11), dashes(12), dashes(15), dashes(11), dashes(13), dashes(11))
	for _, row := range r.Rows {
		m := row.Median
		first, vsLocal := "-", "-"
		if m.FirstBatchSeconds > 0 {
			first = fmt.Sprintf("%.3f s", m.FirstBatchSeconds)
		}
		if row.VsLocal > 0 {
			vsLocal = fmt.Sprintf("%.2f×", row.VsLocal)
		}
		cpu := fmt.Sprintf("%.2f", m.CPUSecondsPer1000)
		if m.ServerCPUPer1000 > 0 {
			cpu += fmt.Sprintf(" +%.2f srv", m.ServerCPUPer1000)
		}
		fmt.Fprintf(w, "| %-12s | %9.0f | %9.2f× | %14s | %5.0f MiB | %11s | %9s |\n", row.Config, m.ImagesPerSecond, row.VsCeiling,
			cpu, float64(m.PeakRSSBytes)/(1<<20), first, vsLocal)
	}
	if m := r.Metrics; m != nil {
		fmt.Fprintf(w, "\nmetrics on (scraped every %s, report every 1s) against off, run by run (median of %d pairs): %.3f× images/s, %.3f× CPU per image\n",
			m.ScrapeEvery, m.Pairs, m.ImagesPerSecond, m.CPUPerImage)
	}
	fmt.Fprintf(w, "\n(%s; ceiling = one goroutine per core decoding+transforming from memory, no pipeline)\n", r.Duration)
}

func dashes(n int) string { return strings.Repeat("-", n) }

func machine() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOOS + "/" + runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "model name") {
			if i := strings.Index(line, ":"); i >= 0 {
				return strings.TrimSpace(line[i+1:])
			}
		}
	}
	return runtime.GOOS + "/" + runtime.GOARCH
}

// loadAvg is the machine's load average over 1, 5 and 15 minutes (zeros
// where /proc/loadavg cannot be read).
func loadAvg() []float64 {
	l := make([]float64, 3)
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	for i, f := range strings.Fields(string(b)) {
		if i == 3 {
			break
		}
		l[i], _ = strconv.ParseFloat(f, 64)
	}
	return l
}

// procCPU is a process's user+system CPU seconds so far, from /proc.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndex(s, ")")
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}
