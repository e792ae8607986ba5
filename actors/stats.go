package actors

import (
	"fmt"
	"math"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/longshore/longshore/internal/clock"
)

// Stage names a pipeline stage in stats and failure records.
type Stage uint8

const (
	StageFetch  Stage = iota // object reads
	StageDecode              // decode + transform into the slot
	StageBatch               // a slot from its first fetch to its last sample
	StageUpload              // hand-off of a full slot to gpu.Uploader
	StageFeed                // the consumer waiting in Next (data stall)
	numStages
)

var stageNames = [numStages]string{"fetch", "decode", "batch", "upload", "feed"}

func (s Stage) String() string {
	if s < numStages {
		return stageNames[s]
	}
	return fmt.Sprintf("Stage(%d)", int(s))
}

// MarshalText writes the stage's name.
func (s Stage) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a stage name.
func (s *Stage) UnmarshalText(b []byte) error {
	for i, n := range stageNames {
		if n == string(b) {
			*s = Stage(i)
			return nil
		}
	}
	return fmt.Errorf("actors: unknown stage %q", b)
}

// histogram is a fixed-memory log-linear histogram of durations in
// nanoseconds: 16 linear sub-buckets per power of two, so a percentile is
// off by at most 1/16 (6%) whatever the range. 7.8 KB, no allocation.
type histogram struct {
	counts [16 + 60*16]uint64
	n      uint64
	sum    float64 // ns
	max    uint64
}

func histBucket(v uint64) int {
	if v < 16 {
		return int(v)
	}
	e := bits.Len64(v) - 1 // >= 4
	return 16 + (e-4)*16 + int(v>>(e-4)&15)
}

// histRange returns bucket i's [lo, hi) in nanoseconds.
func histRange(i int) (lo, hi float64) {
	if i < 16 {
		return float64(i), float64(i + 1)
	}
	e, m := (i-16)/16+4, (i-16)%16
	return float64(uint64(16+m) << (e - 4)), float64(uint64(17+m) << (e - 4))
}

func (h *histogram) record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[histBucket(v)]++
	h.n++
	h.sum += float64(v)
	h.max = max(h.max, v)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile returns the q-quantile in nanoseconds (bucket midpoint).
func (h *histogram) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := histRange(i)
			return min((lo+hi)/2, float64(h.max))
		}
	}
	return float64(h.max)
}

// stageRec accumulates one stage's numbers.
type stageRec struct {
	items, failures int64
	hist            histogram
	busy            time.Duration // summed task time
	workers         int
	qCap            int
	qLen            int
	qArea           float64 // integral of qLen/qCap over seconds
	qLast           time.Time
}

func (r *stageRec) setQueue(n int, now time.Time) {
	if r.qCap > 0 && !r.qLast.IsZero() {
		r.qArea += float64(min(r.qLen, r.qCap)) / float64(r.qCap) * now.Sub(r.qLast).Seconds()
	}
	r.qLen, r.qLast = n, now
}

// recorder holds a rank's stats. Several actors and the consumer write it,
// so a mutex guards it: a few uncontended lock/unlock pairs per sample.
type recorder struct {
	clock clock.Clock
	mu    struct {
		sync.Mutex
		start, end time.Time
		firstBatch time.Duration // from start to the first delivered batch; 0 before
		stages     [numStages]stageRec
		nextCalls  int64 // Next calls that returned a batch
		nextReady  int64 // ... of which found it ready without waiting
		samples    int64 // samples delivered
		pads       int64
		more       moreRec // see counters.go
	}
	storeRetries atomic.Int64 // fetches repeated while the store did not answer
	readAhead    atomic.Int64 // work items the rank keeps pending (its core's wantHigh)
	slotsUsed    atomic.Int64 // slots not free now (the rank actor's view)
}

func newRecorder(clk clock.Clock, workers, queueCaps [numStages]int) *recorder {
	r := &recorder{clock: clk}
	now := clk.Now()
	r.mu.start = now
	for s := range r.mu.stages {
		r.mu.stages[s].workers = workers[s]
		r.mu.stages[s].qCap = queueCaps[s]
		r.mu.stages[s].qLast = now
	}
	return r
}

func (r *recorder) task(s Stage, d time.Duration, failed bool) {
	r.mu.Lock()
	st := &r.mu.stages[s]
	st.items++
	if failed {
		st.failures++
	}
	st.hist.record(d)
	st.busy += d
	r.mu.Unlock()
}

// setWorkers sets a stage's concurrency (the fetch tuner moves it).
func (r *recorder) setWorkers(s Stage, n int) {
	r.mu.Lock()
	r.mu.stages[s].workers = n
	r.mu.Unlock()
}

// schedQueues sets the queue lengths the scheduler knows.
func (r *recorder) schedQueues(now time.Time, fetched, decoded int) {
	r.mu.Lock()
	r.mu.stages[StageFetch].setQueue(fetched, now)
	r.mu.stages[StageDecode].setQueue(decoded, now)
	r.mu.Unlock()
}

func (r *recorder) queueAdd(s Stage, delta int) {
	now := r.clock.Now()
	r.mu.Lock()
	st := &r.mu.stages[s]
	st.setQueue(st.qLen+delta, now)
	r.mu.Unlock()
}

func (r *recorder) delivered(b *Batch, wait time.Duration, ready bool) {
	now := r.clock.Now()
	r.mu.Lock()
	if r.mu.nextCalls == 0 {
		r.mu.firstBatch = max(now.Sub(r.mu.start), 1)
	}
	r.mu.nextCalls++
	if ready {
		r.mu.nextReady++
	}
	r.mu.more.delivered(b, now.Sub(r.mu.start))
	for j, p := range b.Pads {
		if j < len(b.Filled) && b.Filled[j] { // a copy in a failed sample's place: no sample
			continue
		}
		r.mu.samples++
		if p {
			r.mu.pads++
		}
	}
	st := &r.mu.stages[StageFeed]
	st.items++
	st.hist.record(wait)
	st.busy += wait
	r.mu.Unlock()
}

func (r *recorder) finish() {
	now := r.clock.Now()
	r.mu.Lock()
	if r.mu.end.IsZero() {
		r.mu.end = now
		for s := range r.mu.stages {
			r.mu.stages[s].setQueue(r.mu.stages[s].qLen, now)
		}
	}
	r.mu.Unlock()
}

// rawStats is a consistent copy of recorders' numbers, merged over ranks.
type rawStats struct {
	rank                          int
	elapsed, firstBatch           time.Duration
	stages                        [numStages]stageRec
	ranks                         int
	nextCalls, nextReady, samples int64
	pads                          int64
	storeRetries                  int64
	readAhead                     int64 // a gauge: summed over ranks
	more                          moreRec
}

func (r *recorder) raw(rank int) rawStats {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := rawStats{rank: rank, ranks: 1, firstBatch: r.mu.firstBatch, stages: r.mu.stages, nextCalls: r.mu.nextCalls,
		nextReady: r.mu.nextReady, samples: r.mu.samples, pads: r.mu.pads, storeRetries: r.storeRetries.Load(),
		readAhead: r.readAhead.Load(), more: r.mu.more.clone(r.slotsUsed.Load())}
	end := r.mu.end
	if end.IsZero() {
		end = now
		for s := range out.stages {
			out.stages[s].setQueue(out.stages[s].qLen, now)
		}
	}
	out.elapsed = end.Sub(r.mu.start)
	return out
}

func mergeRaw(rs []rawStats) rawStats {
	out := rawStats{rank: -1}
	for i := range rs {
		r := &rs[i]
		out.ranks += r.ranks
		out.elapsed = max(out.elapsed, r.elapsed)
		if r.firstBatch > 0 && (out.firstBatch == 0 || r.firstBatch < out.firstBatch) {
			out.firstBatch = r.firstBatch
		}
		out.nextCalls += r.nextCalls
		out.nextReady += r.nextReady
		out.samples += r.samples
		out.pads += r.pads
		out.storeRetries += r.storeRetries
		out.readAhead += r.readAhead
		out.more.add(&r.more, false)
		for s := range out.stages {
			o, x := &out.stages[s], &r.stages[s]
			o.items += x.items
			o.failures += x.failures
			o.hist.merge(&x.hist)
			o.busy += x.busy
			o.workers += x.workers
			o.qCap += x.qCap
			o.qArea += x.qArea // summed; divided by ranks below
		}
	}
	if out.ranks > 0 {
		for s := range out.stages {
			out.stages[s].qArea /= float64(out.ranks)
		}
	}
	return out
}

// Percentiles of a stage's task time, in milliseconds.
type Percentiles struct {
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Mean float64 `json:"mean_ms"`
	Max  float64 `json:"max_ms"`
}

// QueueStats describes the queue downstream of a stage.
type QueueStats struct {
	// What the queue holds.
	What string `json:"what"`
	// Capacity is its bound (summed over ranks in a node's stats).
	Capacity int `json:"capacity"`
	// Occupancy is the time-averaged fraction of Capacity that was filled:
	// SPDL's "data readiness". Near 1: the stage keeps ahead of what
	// follows; near 0: what follows waits for this stage.
	Occupancy float64 `json:"occupancy"`
}

// StageStats is one stage's summary.
type StageStats struct {
	Stage    Stage `json:"stage"`
	Items    int64 `json:"items"`
	Failures int64 `json:"failures"`
	// Workers is the stage's concurrency (fetchers, decoders, slots, 1
	// uploader, 1 consumer per rank).
	Workers int         `json:"workers"`
	Time    Percentiles `json:"time"`
	// Busy is the fraction of the workers' time spent on tasks: near 1, the
	// stage is saturated. For feed it is the fraction of time the consumer
	// was blocked in Next waiting for data.
	Busy  float64    `json:"busy"`
	Queue QueueStats `json:"queue"`
}

// Bottleneck names the stage that limits throughput, with the evidence.
type Bottleneck struct {
	Stage  string `json:"stage"` // a stage name, "consumer" or "source"
	Reason string `json:"reason"`
	// Advice says what to change (empty when nothing in the loader
	// would help).
	Advice string `json:"advice,omitempty"`
}

// advice is what to change when a stage limits throughput.
var advice = map[string]string{
	"fetch":  "more fetchers (--fetch-concurrency), or a faster store: reads take most of the time",
	"decode": "more decoders (--decoders, up to the cores), or less to decode (--lowres, a smaller --size)",
	"upload": "the hand-off to the device is slow: check the uploader (pinned memory, the device's copy engine)",
	"source": "work arrives too slowly: raise --read-ahead (or, in a cluster, --shard-size), or the per-sample overhead is the cost",
}

// Stats is a snapshot of a pipeline's (or a node's, merged) numbers. It
// JSON-encodes as the node binary's "stages" section wants.
type Stats struct {
	Rank    int     `json:"rank"` // -1: merged over a node's ranks
	Ranks   int     `json:"ranks"`
	Seconds float64 `json:"seconds"`
	Batches int64   `json:"batches"`
	Samples int64   `json:"samples"` // delivered, padding included, filled places (Batch.Filled) not
	Pads    int64   `json:"pads"`
	// FirstBatchSeconds is the time from start to the first delivered
	// batch (the earliest rank's in a node's stats); 0 before it.
	FirstBatchSeconds float64 `json:"first_batch_seconds"`
	// SamplesPerSecond is delivered samples over Seconds.
	SamplesPerSecond float64 `json:"samples_per_second"`
	// ReadyFraction is the fraction of Next calls that found a batch
	// already waiting.
	ReadyFraction float64      `json:"ready_fraction"`
	Stages        []StageStats `json:"stages"`
	Bottleneck    Bottleneck   `json:"bottleneck"`
	// StoreRetries counts fetches repeated because the store did not
	// answer (see Config.StoreOutage); they are not failures.
	StoreRetries int64 `json:"store_retries"`
	// ReadAhead is the work items the ranks kept pending at the end,
	// summed (Config.ReadAhead; with ReadAheadAuto, what the store's
	// latency asked for).
	ReadAhead int64 `json:"read_ahead"`
}

// Stage returns the stats of stage s.
func (st Stats) Stage(s Stage) StageStats {
	for _, x := range st.Stages {
		if x.Stage == s {
			return x
		}
	}
	return StageStats{Stage: s}
}

var queueWhat = [numStages]string{
	StageFetch:  "fetched objects waiting for a decoder",
	StageDecode: "decoded samples in slots still being assembled",
	StageBatch:  "full batches waiting for upload",
	StageUpload: "uploaded batches waiting for the consumer",
	StageFeed:   "batches held by the consumer",
}

func (r rawStats) stats() Stats {
	secs := r.elapsed.Seconds()
	out := Stats{Rank: r.rank, Ranks: r.ranks, Seconds: secs, Batches: r.nextCalls, Samples: r.samples, Pads: r.pads,
		FirstBatchSeconds: r.firstBatch.Seconds(), StoreRetries: r.storeRetries, ReadAhead: r.readAhead}
	if secs > 0 {
		out.SamplesPerSecond = float64(r.samples) / secs
	}
	if r.nextCalls > 0 {
		out.ReadyFraction = float64(r.nextReady) / float64(r.nextCalls)
	}
	for s := range r.stages {
		x := &r.stages[s]
		ms := func(ns float64) float64 { return ns / 1e6 }
		ss := StageStats{
			Stage: Stage(s), Items: x.items, Failures: x.failures, Workers: x.workers,
			Time: Percentiles{P50: ms(x.hist.quantile(0.5)), P90: ms(x.hist.quantile(0.9)),
				P99: ms(x.hist.quantile(0.99)), Max: ms(float64(x.hist.max))},
			Queue: QueueStats{What: queueWhat[s], Capacity: x.qCap},
		}
		if x.hist.n > 0 {
			ss.Time.Mean = ms(x.hist.sum / float64(x.hist.n))
		}
		if secs > 0 && x.workers > 0 {
			ss.Busy = min(1, x.busy.Seconds()/(float64(x.workers)*secs))
		}
		if secs > 0 && x.qCap > 0 {
			ss.Queue.Occupancy = min(1, x.qArea/secs)
		}
		out.Stages = append(out.Stages, ss)
	}
	out.Bottleneck = bottleneck(out)
	return out
}

// bottleneck applies a simple rule to the stats. If the consumer rarely
// waited, the trainer is the bottleneck (the goal). Otherwise the busiest
// worker stage is, if it is busy most of the time; if none is, work arrives
// too slowly (the source) or per-sample overhead dominates.
func bottleneck(st Stats) Bottleneck {
	feed := st.Stage(StageFeed)
	if st.Batches == 0 {
		return Bottleneck{Stage: "none", Reason: "no batch delivered yet"}
	}
	if feed.Busy < 0.05 {
		return Bottleneck{Stage: "consumer", Reason: fmt.Sprintf(
			"the consumer waited for data %.1f%% of the time and found a batch ready on %.0f%% of Next calls: the loader keeps ahead",
			100*feed.Busy, 100*st.ReadyFraction)}
	}
	var best StageStats
	var others []string
	for _, s := range []Stage{StageFetch, StageDecode, StageUpload} {
		x := st.Stage(s)
		if x.Busy > best.Busy || best.Workers == 0 {
			if best.Workers != 0 {
				others = append(others, fmt.Sprintf("%s %.0f%%", best.Stage, 100*best.Busy))
			}
			best = x
		} else {
			others = append(others, fmt.Sprintf("%s %.0f%%", x.Stage, 100*x.Busy))
		}
	}
	if best.Busy < 0.5 {
		return Bottleneck{Stage: "source", Advice: advice["source"], Reason: fmt.Sprintf(
			"the consumer waited %.0f%% of the time but no stage was busy more than %.0f%% (%s %.0f%%, %s): work arrives too slowly, or per-sample overhead dominates",
			100*feed.Busy, 100*best.Busy, best.Stage, 100*best.Busy, strings.Join(others, ", "))}
	}
	return Bottleneck{Stage: best.Stage.String(), Advice: advice[best.Stage.String()], Reason: fmt.Sprintf(
		"%d %s workers busy %.0f%% of the time (p50 %.2f ms per item; %s); the queue after it was %.0f%% full and the consumer waited %.0f%% of the time",
		best.Workers, best.Stage, 100*best.Busy, best.Time.P50, strings.Join(others, ", "), 100*best.Queue.Occupancy, 100*feed.Busy)}
}
