package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/ffdecode"
	"github.com/longshore/longshore/actors/nvdecode"
	"github.com/longshore/longshore/actors/quarantine"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/node"
	"github.com/longshore/longshore/cmd/internal/listing"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/observe"
	"github.com/longshore/longshore/observe/pipeline"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
)

// started is when the process began: first_batch_seconds counts from here,
// so it includes opening the store and discovering the dataset.
var started = time.Now()

// Summary is what --stats-json writes: the figures of one run.
type Summary struct {
	Dataset           string         `json:"dataset"`
	Samples           int            `json:"dataset_samples"`
	Classes           int            `json:"dataset_classes"`
	Epochs            int            `json:"epochs"`
	Ranks             int            `json:"ranks"`
	BatchSize         int            `json:"batch_size"`
	Transform         string         `json:"transform"`
	Media             string         `json:"media"`  // image, video or audio (--media): what the "images" fields count
	Images            int64          `json:"images"` // samples delivered (images, clips or waveforms), padding included
	Pads              int64          `json:"pads"`
	Batches           int64          `json:"batches"`
	Seconds           float64        `json:"seconds"` // from the first fetch to the last batch
	ImagesPerSecond   float64        `json:"images_per_second"`
	FirstBatchSeconds float64        `json:"first_batch_seconds"` // from process start
	CPUSeconds        float64        `json:"cpu_seconds"`         // whole process, user+system
	CPUMsPerImage     float64        `json:"cpu_ms_per_image"`
	PeakRSSBytes      int64          `json:"peak_rss_bytes"`
	Failures          FailureSummary `json:"failures"`
	Bottleneck        string         `json:"bottleneck"`
	BottleneckReason  string         `json:"bottleneck_reason"`
	BottleneckAdvice  string         `json:"bottleneck_advice,omitempty"`
	Stages            actors.Stats   `json:"stages"`
	// Startup is where the time before the first batch went (standalone
	// runs).
	Startup *Startup `json:"startup,omitempty"`
	// FetchConcurrency is --fetch-concurrency (auto, auto:N or N) and
	// FetchInFlight the reads in flight it allowed at the end, summed
	// over the ranks (with auto, the tuners' choice).
	FetchConcurrency string                     `json:"fetch_concurrency"`
	FetchInFlight    int                        `json:"fetch_in_flight"`
	Pack             *dataset.PackedStats       `json:"pack,omitempty"`             // a packed dataset's chunk cache
	Store            *s3.Stats                  `json:"store,omitempty"`            // an S3 dataset's requests, retries by cause, throttling
	GPUDecode        *nvdecode.Stats            `json:"gpu_decode,omitempty"`       // --decode-device cuda: samples by path, CPU fallbacks by reason
	GPUVideoDecode   *ffdecode.VideoDeviceStats `json:"gpu_video_decode,omitempty"` // --decode-device cuda, --media video: clips by path, CPU fallbacks by reason
	Excluded         int                        `json:"excluded"`                   // samples left out by --exclude
	Quarantined      int                        `json:"quarantined"`                // keys this run added to --quarantine
	TrainerWait      *TrainerWaitSummary        `json:"trainer_wait,omitempty"`     // feed sink: the trainers' reported waits for data and compute
	Mixture          []dataset.MixtureCount     `json:"mixture,omitempty"`          // --mixture: each source's samples handed to the pipelines
	Error            string                     `json:"error,omitempty"`
}

// FailureSummary is the failure part of Summary.
type FailureSummary struct {
	Total    int64                `json:"total"`
	ByReason map[string]int64     `json:"by_reason"` // "<stage>/<class>"
	Report   actors.FailureReport `json:"report"`
}

// progress draws a bar on a terminal and otherwise prints a line every
// few seconds, so logs of non-interactive runs still show life.
type progress struct {
	mu    sync.Mutex
	bar   *progressbar.ProgressBar
	w     io.Writer
	total int64
	done  int64
	last  time.Time
	start time.Time
	// noun and unit name what is loaded (mediaNouns): "images", "img".
	noun, unit string
}

// mediaNouns names what a run of --media delivers, in the summary and the
// progress line: one of them, and more than one.
func mediaNouns(media string) (one, many string) {
	switch dataset.MediaKind(media) {
	case "video":
		return "clip", "clips"
	case "audio":
		return "waveform", "waveforms"
	case "raw":
		return "sample", "samples"
	}
	return "image", "images"
}

func newProgress(mode string, total int64, media string, w io.Writer) *progress {
	p := &progress{w: w, total: total, start: time.Now(), last: time.Now()}
	p.unit, p.noun = mediaNouns(media)
	if p.unit == "image" {
		p.unit = "img" // as the bar has always said
	}
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	if mode == "always" || (mode == "auto" && tty) {
		p.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription("loading"),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString(p.unit),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
		)
	} else if mode == "never" {
		p.w = nil
	}
	return p
}

func (p *progress) add(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += int64(n)
	if p.bar != nil {
		p.bar.Add(n)
		return
	}
	if p.w != nil && time.Since(p.last) >= 5*time.Second {
		p.last = time.Now()
		el := time.Since(p.start).Seconds()
		fmt.Fprintf(p.w, "loading: %d/%d %s, %.0f %s/s\n", p.done, p.total, p.noun, float64(p.done)/el, p.unit)
	}
}

func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil && p.done < p.total {
		// Failed or dropped samples never arrive: close the bar cleanly.
		p.bar.Exit()
		fmt.Fprintln(p.w)
	}
}

// orderBlock is the standalone order's block for a dataset, packed or
// not: --block if given, else the coordinator's default for it
// (cluster.DefaultBlock), so that a standalone run and a cluster run of
// the same dataset share one order.
func (o options) orderBlock(packed bool) int {
	if o.blockSet {
		return o.block
	}
	return cluster.DefaultBlock(packed)
}

// orderFunc is the standalone epoch order over a dataset, packed or not:
// cluster.NewOrder with its block (orderBlock) and --mix-window.
func (o options) orderFunc(packed bool) actors.OrderFunc {
	block, window := o.orderBlock(packed), o.window
	return func(seed uint64, epoch int, n int64) actors.Order {
		return cluster.NewOrder(seed, epoch, n, block, window)
	}
}

// standaloneData is a standalone run's dataset: its store and catalog;
// ds is the sample list in memory, nil on the lazy path (indexed: the
// manifest read piece by piece through its index, as in cluster mode).
type standaloneData struct {
	store   storage.Store
	cat     dataset.Catalog
	ds      *dataset.Dataset
	indexed *dataset.IndexedManifest
	pack    dataset.PackPlan // a packed dataset's: where its chunks are kept
	// A --mixture: the mixture, its sources as opened (cat is a
	// dataset.MixtureCatalog over them, store its store), and whether
	// any is packed.
	mix       *cluster.Mixture
	parts     []standaloneData
	mixPacked bool
	// clusterMix is a cluster node's --mixture: its sources' catalog
	// (cat), the mixture made once the coordinator's job says its seed,
	// block and window.
	clusterMix *clusterMixture
}

// orderFunc is the run's epoch order: the mixture's epochs, or
// options.orderFunc over the dataset.
func (d standaloneData) orderFunc(o options) actors.OrderFunc {
	if d.mix != nil {
		return mixtureOrder(d.mix)
	}
	return o.orderFunc(d.packed())
}

// packed reports whether the dataset has packed samples.
func (d standaloneData) packed() bool {
	if d.mix != nil {
		return d.mixPacked
	}
	if d.ds != nil {
		return d.ds.Packed()
	}
	return d.indexed.Index().Layout() != "plain"
}

// excluded is how many samples --exclude left out.
func (d standaloneData) excluded() int { return excludedOf(d.ds) }

// close closes the catalog and the store.
func (d standaloneData) close() {
	if d.mix != nil {
		for _, p := range d.parts {
			p.close()
		}
		return
	}
	if d.indexed != nil {
		d.indexed.Close()
	}
	storage.Close(d.store)
}

// openStandalone opens the dataset for a standalone run: a packed one is
// read in chunks of its order's blocks, a window of them at once. A
// manifest with an index takes the lazy path, as in cluster mode
// (openIndexed says when).
//
// An ImageFolder listed, or WebDataset tars of images indexed in place,
// past --write-manifest-over gets its manifest and index written
// (cmd/internal/listing), so the next run reads them.
func openStandalone(ctx context.Context, o options, logger *slog.Logger) (standaloneData, error) {
	if o.mixture.on() {
		return openMixture(ctx, o, logger)
	}
	b := o.orderBlock(true)
	w := cluster.EffectiveWindow(b, o.window)
	store, ds, indexed, plan, err := openData(ctx, o, b, w, logger)
	if err != nil {
		return standaloneData{}, err
	}
	if indexed != nil {
		return standaloneData{store: store, cat: indexed, indexed: indexed, pack: plan}, nil
	}
	if o.manifest == "" && o.faults.exclude == "" {
		exts, _ := dataset.MediaExtensions(o.mediaFlags.media) // checked in parseFlags
		listing.WriteManifest(ctx, store, ds, exts, o.writeManifest, logger)
	}
	return standaloneData{store: store, cat: dataset.DatasetCatalog(ds), ds: ds, pack: plan}, nil
}

// packedLine describes a packed dataset's chunk reading, and warns when
// --pack-cache cannot hold the window of chunks the ranks read at once
// (ranks: how many windows are read at once; standalone ranks share
// one): then chunks are evicted before they are used up, or samples read
// one by one.
// mean is a packed sample's mean size (dataset.PackedMean).
func packedLine(ps *dataset.PackedStore, mean int64, plan dataset.PackPlan, ranks int) string {
	block, window := max(ps.Block(), 1), ps.Window()
	cache := ps.Stats().CacheBytes
	if cache == 0 {
		return fmt.Sprintf("packed dataset: every sample read in place from its shard, no chunks (%s)", plan.Why)
	}
	need := mean * int64(block) * int64(window) * int64(ranks)
	where := "in memory"
	if plan.SpillDir != "" {
		where = "on disk in " + plan.SpillDir
	}
	line := fmt.Sprintf("packed dataset: chunks of %d-sample blocks, %d at once (a window: about %s per rank), cache %s %s (%s)",
		block, window, byteSize(need/int64(ranks)).human(), byteSize(cache).human(), where, plan.Why)
	if cache < need {
		line += fmt.Sprintf("; warning: --pack-cache below the %s that %d window(s) take: chunks will be read more than once or samples one by one (raise --pack-cache, or lower --mix-window)", byteSize(need).human(), ranks)
	}
	return line
}

// runFacts are what a run's Summary is made of.
type runFacts struct {
	store             storage.Store
	samples           int64 // in the dataset
	classes, excluded int
	epochs, batchSize int
	counters          actors.Counters // the node's, merged over its ranks
	// ranks are each rank's counters at the end: what the metrics read,
	// and the summary's figures through the same table's rows.
	ranks  []node.RankCount
	report actors.FailureReport
	// seconds is the run's time (standalone: from the first fetch to
	// the last batch; feed and cluster modes: activeSeconds);
	// firstBatch from process start, if known (else the first
	// pipeline's start counts).
	seconds, firstBatch float64
	// startup, if set, noted the run's start-up phases (standalone runs).
	startup    *startupClock
	err        error
	quarantine *quarantine.File // --quarantine, or nil
	// trainerWait is what the trainers reported (feed sink), or nil.
	trainerWait *TrainerWaitSummary
}

// summarize makes the Summary of a run, the same fields in every mode.
// Its figures that are also series (delivered samples, pads and
// batches, each stage's items, failures and workers, failures by reason,
// the S3 client's and the chunk cache's counts) are read through the
// metrics' table (observe.Table.NodeSummary) from the ranks' counters
// and the store's stats, so the summary and the metrics cannot
// disagree; the rest (percentiles, busy fractions, the bottleneck) come
// from the node's merged counters, the failure report from the failure
// books.
func summarize(o options, f runFacts) Summary {
	stats := f.counters.Stats()
	use := readUsage()
	src := pipeline.NodeSource{Ranks: func() []pipeline.RankCounters {
		out := make([]pipeline.RankCounters, len(f.ranks))
		for i, r := range f.ranks {
			out[i] = pipeline.RankCounters{Name: r.Name, Counters: r.Counters}
		}
		return out
	}}
	var pack *dataset.PackedStats
	if stats := packStats(f.store); stats != nil {
		st := stats()
		pack = &st
		src.Pack = func() dataset.PackedStats { return st }
	}
	store := s3Stats(f.store)
	if store != nil {
		st := *store
		src.S3 = func() s3.Stats { return st }
	}
	fig := pipeline.Summary(src)
	if f.firstBatch == 0 {
		f.firstBatch = stats.FirstBatchSeconds
	}
	stats.Samples, stats.Pads, stats.Batches = fig.Samples, fig.Pads, fig.Batches
	for i := range stats.Stages {
		st := fig.Stage(stats.Stages[i].Stage.String())
		stats.Stages[i].Items, stats.Stages[i].Failures, stats.Stages[i].Workers = st.Items, st.Failures, int(st.Workers)
	}
	s := Summary{
		Dataset: f.store.String(), Samples: int(f.samples), Classes: f.classes,
		Epochs: f.epochs, Ranks: o.ranks, BatchSize: f.batchSize, Transform: o.transform,
		Media: o.mediaFlags.media, Images: fig.Samples, Pads: fig.Pads, Batches: fig.Batches,
		Seconds:           f.seconds,
		FirstBatchSeconds: f.firstBatch,
		CPUSeconds:        use.CPU.Seconds(),
		PeakRSSBytes:      use.PeakRSS,
		Bottleneck:        stats.Bottleneck.Stage,
		BottleneckReason:  stats.Bottleneck.Reason,
		BottleneckAdvice:  stats.Bottleneck.Advice,
		Stages:            stats,
		FetchConcurrency:  o.fetchConcurrency.String(),
		FetchInFlight:     int(fig.Stage(actors.StageFetch.String()).Workers),
		Failures:          FailureSummary{Total: f.report.Failed, ByReason: fig.Failures, Report: f.report},
		Pack:              summaryPack(pack, fig.Pack),
		Store:             summaryStore(store, fig.Store),
		GPUDecode:         o.gpu.decodeStats(),
		GPUVideoDecode:    o.gpu.videoDecodeStats(),
		Excluded:          f.excluded,
		Quarantined:       f.quarantine.Added(),
		Startup:           f.startup.startup(f.firstBatch),
		TrainerWait:       f.trainerWait,
		Mixture:           mixtureSummary(f.store),
	}
	if s.Seconds > 0 {
		s.ImagesPerSecond = float64(s.Images) / s.Seconds
	}
	if s.Images > 0 {
		s.CPUMsPerImage = 1000 * s.CPUSeconds / float64(s.Images)
	}
	if f.err != nil {
		s.Error = f.err.Error()
	}
	return s
}

// summaryStore is st with the figures the table reads (fig) in place of
// its own; nil without an S3 store.
func summaryStore(st *s3.Stats, fig *observe.SummaryStore) *s3.Stats {
	if st == nil || fig == nil {
		return st
	}
	r := fig.Retries // observe.S3RetryCauses' order
	st.Requests, st.Throttled, st.RateWaits = fig.Requests, fig.Throttled, fig.RateWaits
	st.RetriesByCause = s3.RetriesByCause{Throttle: r[0], Server: r[1], Timeout: r[2], Conn: r[3], BadResponse: r[4], Stall: r[5]}
	st.Retries = r[0] + r[1] + r[2] + r[3] + r[4] + r[5]
	st.Backoff, st.RateWait = seconds(fig.BackoffSeconds), seconds(fig.RateWaitSeconds)
	st.Rate, st.Budget = fig.Rate, fig.Budget
	return st
}

// summaryPack is p with the figures the table reads (fig) in place of
// its own; nil without a packed dataset.
func summaryPack(p *dataset.PackedStats, fig *observe.SummaryPack) *dataset.PackedStats {
	if p == nil || fig == nil {
		return p
	}
	p.Chunks, p.ChunkBytes, p.PeakBytes, p.ReadAlone, p.Evictions = fig.Chunks, fig.ChunkBytes, fig.PeakBytes, fig.ReadAlone, fig.Evictions
	return p
}

// seconds is s as a Duration, to the nearest nanosecond.
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// finish ends a run, the same in every mode: the metrics server stops
// (after --metrics-linger), the quarantine says what the run added, and
// the summary of f is printed and written to --stats-json. It returns
// f.err, else the summary's error.
func finish(ctx context.Context, o options, ob *observer, f runFacts, stdout, stderr io.Writer, logger *slog.Logger) error {
	if err := ob.shutdown(ctx, o.metricsLinger); err != nil {
		logger.Warn("metrics server shutdown", "err", err)
	}
	tellQuarantine(stderr, f.quarantine)
	if err := emitSummary(o, stdout, summarize(o, f)); err != nil && f.err == nil {
		return err
	}
	return f.err
}

// emitSummary prints s and writes it to --stats-json.
func emitSummary(o options, stdout io.Writer, s Summary) error {
	printSummary(stdout, s)
	if o.statsJSON != "" {
		return writeJSON(o.statsJSON, s)
	}
	return nil
}

func printSummary(w io.Writer, s Summary) {
	unit, plural := mediaNouns(s.Media)
	fmt.Fprintf(w, "\nlongshore: %d %s (%d padding) in %d batches, %.2f s: %.0f %s/s\n",
		s.Images, plural, s.Pads, s.Batches, s.Seconds, s.ImagesPerSecond, plural)
	fmt.Fprintf(w, "  first batch   %.3f s after start\n", s.FirstBatchSeconds)
	printStartup(w, s.Startup)
	fmt.Fprintf(w, "  CPU           %.2f s (%.2f ms per %s)\n", s.CPUSeconds, s.CPUMsPerImage, unit)
	fmt.Fprintf(w, "  peak memory   %.1f MiB RSS\n", float64(s.PeakRSSBytes)/(1<<20))
	fmt.Fprintf(w, "  failures      %d", s.Failures.Total)
	if len(s.Failures.ByReason) > 0 {
		keys := make([]string, 0, len(s.Failures.ByReason))
		for k := range s.Failures.ByReason {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", k, s.Failures.ByReason[k]))
		}
		fmt.Fprintf(w, " (%s)", strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
	if st := s.Store; st != nil {
		r := st.RetriesByCause
		fmt.Fprintf(w, "  store         %d requests, %d retries (throttle %d, server %d, timeout %d, conn %d, bad response %d), %d throttled, %.2f s backed off\n",
			st.Requests, st.Retries, r.Throttle, r.Server, r.Timeout, r.Conn, r.BadResponse, st.Throttled, st.Backoff.Seconds())
		if st.Ceiling > 0 || st.Budget > 0 {
			fmt.Fprintf(w, "  store rate    limit %.0f/s (now %.0f/s, lowest %.0f/s), job budget share %.0f/s, %d requests held back %.2f s\n",
				st.Ceiling, st.Rate, st.RateLow, st.Budget, st.RateWaits, st.RateWait.Seconds())
		}
	}
	if g := s.GPUDecode; g != nil {
		fmt.Fprintf(w, "  gpu decode    %s\n", g)
	}
	if g := s.GPUVideoDecode; g != nil {
		fmt.Fprintf(w, "  gpu decode    video: %s\n", g)
	}
	if p := s.Pack; p != nil && p.CacheBytes == 0 && p.Chunks == 0 {
		fmt.Fprintf(w, "  packed        %d samples read one by one from their shards (no chunk cache: --pack-cache 0, or auto on a local disk)\n", p.ReadAlone)
	} else if p != nil {
		fmt.Fprintf(w, "  packed        %d chunk reads (%.1f MiB, peak %.1f MiB cached), %d samples read alone, %d evictions",
			p.Chunks, float64(p.ChunkBytes)/(1<<20), float64(p.PeakBytes)/(1<<20), p.ReadAlone, p.Evictions)
		if p.Spilled > 0 || p.SpillErrors > 0 {
			fmt.Fprintf(w, "; %d chunks spilled to disk (%d staging buffers at the end), %d spill errors (a file not written or not read back: its members read alone from the store)", p.Spilled, p.SpillStaging, p.SpillErrors)
		}
		fmt.Fprintln(w)
	}
	if s.FetchInFlight > 0 {
		fmt.Fprintf(w, "  fetch         %d reads in flight allowed over %d rank(s) at the end (--fetch-concurrency %s), %d work items read ahead\n", s.FetchInFlight, s.Ranks, s.FetchConcurrency, s.Stages.ReadAhead)
	}
	printTrainerWait(w, s.TrainerWait)
	printMixture(w, s.Mixture)
	fmt.Fprintf(w, "  bottleneck    %s: %s\n", s.Bottleneck, s.BottleneckReason)
	if s.BottleneckAdvice != "" {
		fmt.Fprintf(w, "  advice        %s\n", s.BottleneckAdvice)
	}
	fmt.Fprintf(w, "  %-8s %8s %6s %8s %8s %8s %6s %6s\n", "stage", "items", "fail", "p50 ms", "p90 ms", "p99 ms", "busy", "queue")
	for _, st := range s.Stages.Stages {
		fmt.Fprintf(w, "  %-8s %8d %6d %8.2f %8.2f %8.2f %5.0f%% %5.0f%%\n", st.Stage, st.Items, st.Failures,
			st.Time.P50, st.Time.P90, st.Time.P99, 100*st.Busy, 100*st.Queue.Occupancy)
	}
	if s.Error != "" {
		fmt.Fprintf(w, "  error: %s\n", s.Error)
	}
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--stats-json: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("--stats-json: %w", err)
	}
	return nil
}

// filled counts a batch's filled rows (actors.Batch.Filled).
func filled(b *actors.Batch) int {
	n := 0
	for _, f := range b.Filled {
		if f {
			n++
		}
	}
	return n
}
