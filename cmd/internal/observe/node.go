package observe

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
)

// Namespace prefixes every metric name.
const Namespace = "longshore"

// Commit is a rank's last acknowledged commit.
type Commit struct {
	Rank  string
	Epoch int
	Step  int64
}

// NodeSource is what a node's metrics read. Every field but Ranks may be
// nil (that part is not exported); each func is called at scrape time
// and must be safe for concurrent use.
type NodeSource struct {
	// Ranks snapshots every rank's counters (over every pipeline it had).
	Ranks func() []RankCounters
	// Store counts the requests the dataset's store answered.
	Store *storage.CountingStore
	// S3 is the S3 client's HTTP-level counts, when the store is S3.
	S3 func() s3.Stats
	// Pack is the packed-sample store's counts, for a packed dataset.
	Pack func() dataset.PackedStats
	// Committed lists each rank's last acknowledged commit (feed and
	// cluster modes).
	Committed func() []Commit
	// Report is the live bottleneck report whose latest interval the busy
	// ratios, occupancies and bottleneck show.
	Report *Reporter
	// JobSamples is the samples the node delivers over the whole job,
	// padding included, and JobEpochs its epochs (0: not known, as in
	// cluster mode, where the coordinator has the job's progress).
	JobSamples int64
	JobEpochs  int
	// Gossip, if set, counts the node's inbound gossip streams (cluster
	// mode; NewGossipCollector).
	Gossip func() gossip.StreamStats
	// TrainerWait, if set, reads the trainers' data-stall reports per
	// rank (feed sink; NewTrainerWaitCollector).
	TrainerWait func() []TrainerWait
}

// StageBuckets are the upper bounds, in seconds, of longshore_stage_seconds.
var StageBuckets = []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10}

type metric struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
}

func newMetric(name string, typ prometheus.ValueType, help string, labels ...string) metric {
	return metric{prometheus.NewDesc(Namespace+"_"+name, help, labels, nil), typ}
}

func (m metric) emit(ch chan<- prometheus.Metric, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(m.desc, m.typ, v, labels...)
}

const (
	counter = prometheus.CounterValue
	gauge   = prometheus.GaugeValue
)

// nodeMetrics are a node's metrics.
type nodeMetrics struct {
	stageItems, stageFailures, stageBusy, stageWorkers       metric
	queueCapacity, queueLength, queueFull                    metric
	busyRatio, occupancy, bottleneck, intervalRate           metric
	stageSeconds                                             *prometheus.Desc
	batches, samples, pads, ready, elapsed                   metric
	epoch, deliveredStep, slotsInUse, slots, outageRetries   metric
	committedEpoch, committedStep                            metric
	failures                                                 metric
	storeRequests, storeBytes                                metric
	s3Requests, s3Retries, s3Throttled, s3Errors             metric
	s3Timeouts, s3Bad, s3Backoff, s3Rate, s3RateWaits        metric
	s3RateWait, s3RateCuts, s3Budget                         metric
	s3Hedges, s3Stalls                                       metric
	decodesAbandoned, decodeCoreWaits                        metric
	packCache, packPeak, packChunks, packChunkBytes, packHit metric
	packAlone, packEvict, packFail                           metric
	jobSamples, jobEpochs, progress                          metric
}

func newNodeMetrics() *nodeMetrics {
	sr := []string{"stage", "rank"}
	r := []string{"rank"}
	return &nodeMetrics{
		stageItems:    newMetric("stage_items_total", counter, "Tasks a pipeline stage finished (failed ones included).", sr...),
		stageFailures: newMetric("stage_failures_total", counter, "Tasks of a stage that failed.", sr...),
		stageBusy:     newMetric("stage_busy_seconds_total", counter, "Summed task time of a stage's workers (for feed: the consumer's waits for data).", sr...),
		stageWorkers:  newMetric("stage_workers", gauge, "A stage's concurrency (fetchers, decoders, slots, 1 uploader, 1 consumer).", sr...),
		queueCapacity: newMetric("queue_capacity", gauge, "Bound of the queue after a stage.", sr...),
		queueLength:   newMetric("queue_length", gauge, "Items in the queue after a stage now.", sr...),
		queueFull:     newMetric("queue_full_seconds_total", counter, "Integral over time of the filled fraction of the queue after a stage: its rate is the occupancy.", sr...),
		busyRatio:     newMetric("stage_busy_ratio", gauge, "Fraction of a stage's worker time spent on tasks in the latest report interval (for feed: the consumer waiting).", sr...),
		occupancy:     newMetric("queue_occupancy_ratio", gauge, "Time-averaged filled fraction of the queue after a stage in the latest report interval (SPDL's data readiness).", sr...),
		bottleneck:    newMetric("bottleneck", gauge, "1 for the stage that limited the node's throughput in the latest report interval (fetch, decode, upload, consumer, source or none).", "stage"),
		intervalRate:  newMetric("report_samples_per_second", gauge, "Samples delivered per second by the node in the latest report interval."),
		stageSeconds: prometheus.NewDesc(Namespace+"_stage_seconds",
			"Task time of a pipeline stage (for feed: the consumer's wait in Next).", sr, nil),
		batches:          newMetric("delivered_batches_total", counter, "Batches delivered to the rank's trainer.", r...),
		samples:          newMetric("delivered_samples_total", counter, "Samples delivered to the rank's trainer, padding included.", r...),
		pads:             newMetric("padding_samples_total", counter, "Delivered samples that repeat others to even out ranks.", r...),
		ready:            newMetric("ready_batches_total", counter, "Batches the trainer found ready without waiting.", r...),
		elapsed:          newMetric("pipeline_seconds_total", counter, "Time the rank's pipelines ran.", r...),
		epoch:            newMetric("delivered_epoch", gauge, "Epoch of the rank's last delivered batch.", r...),
		deliveredStep:    newMetric("delivered_step", gauge, "Step of the rank's last delivered batch.", r...),
		slotsInUse:       newMetric("slots_in_use", gauge, "Batch slots not free (being filled, uploaded, or held by the trainer).", r...),
		slots:            newMetric("slots", gauge, "Batch slots of the rank.", r...),
		outageRetries:    newMetric("fetch_outage_retries_total", counter, "Fetches repeated while the store did not answer (not failures).", r...),
		committedEpoch:   newMetric("committed_epoch", gauge, "Epoch of the rank's last acknowledged commit.", r...),
		committedStep:    newMetric("committed_step", gauge, "Step of the rank's last acknowledged commit.", r...),
		failures:         newMetric("failures_total", counter, "Samples that failed, by stage and class (what the summary's failures list).", "stage", "class"),
		storeRequests:    newMetric("store_requests_total", counter, "Calls to the dataset's store, by operation and outcome.", "op", "outcome"),
		storeBytes:       newMetric("store_bytes_total", counter, "Payload bytes moved by the dataset's store.", "direction"),
		s3Requests:       newMetric("s3_http_requests_total", counter, "HTTP requests the S3 client sent (retries included)."),
		s3Retries:        newMetric("store_retries_total", counter, "S3 requests repeated after a retryable error, by cause (throttle, server, timeout, conn, bad_response, stall).", "cause"),
		s3Timeouts:       newMetric("store_timeouts_total", counter, "S3 attempts ended by the request timeout."),
		s3Stalls:         newMetric("store_stalls_total", counter, "S3 response bodies abandoned for making no progress within --progress-timeout (hedges' included)."),
		s3Bad:            newMetric("store_bad_responses_total", counter, "S3 answers refused as short, corrupt or for the wrong range."),
		s3Backoff:        newMetric("store_backoff_seconds_total", counter, "Time slept between S3 attempts."),
		s3Rate:           newMetric("store_request_rate_limit", gauge, "The adaptive S3 request-rate limit now, requests/s (0: none)."),
		s3RateWaits:      newMetric("store_rate_waits_total", counter, "S3 requests the rate limiter held back."),
		s3RateWait:       newMetric("store_rate_wait_seconds_total", counter, "Time S3 requests waited for the rate limiter."),
		s3RateCuts:       newMetric("store_rate_cuts_total", counter, "Times throttling cut the S3 request-rate limit."),
		s3Budget:         newMetric("store_budget_requests_per_second", gauge, "This node's share of the job-wide S3 request budget (the coordinator's --job-store-rps), requests/s (0: none)."),
		s3Throttled:      newMetric("store_throttled_total", counter, "S3 answers 429 or 503 (SlowDown)."),
		s3Errors:         newMetric("store_errors_total", counter, "S3 operations that failed after retries."),
		decodesAbandoned: newMetric("decodes_abandoned", gauge, "Decodes abandoned at --decode-deadline still running in C: each holds a decoder's core until it returns, so the node decodes with one decoder fewer."),
		decodeCoreWaits:  newMetric("decode_core_waits_total", counter, "Decodes that waited for a core an abandoned decode held."),
		s3Hedges:         newMetric("store_hedges_total", counter, "Hedged S3 GETs (--hedge-quantile), by outcome: sent (second requests), won (answered first), cancelled (losers of either kind), denied (slow enough to hedge, kept from it by the budget or throttling).", "outcome"),
		packCache:        newMetric("pack_cache_bytes", gauge, "Packed-sample chunk cache: bytes held or being fetched."),
		packPeak:         newMetric("pack_cache_peak_bytes", gauge, "Most bytes the chunk cache ever held (with buffers kept for reuse)."),
		packChunks:       newMetric("pack_chunks_total", counter, "Chunk fetches (one ranged GET each)."),
		packChunkBytes:   newMetric("pack_chunk_bytes_total", counter, "Bytes chunk fetches read."),
		packHit:          newMetric("pack_hits_total", counter, "Samples served from a cached chunk."),
		packAlone:        newMetric("pack_read_alone_total", counter, "Samples read with a ranged GET of their own."),
		packEvict:        newMetric("pack_evictions_total", counter, "Chunks dropped before all their samples were served."),
		packFail:         newMetric("pack_chunk_failures_total", counter, "Chunk fetches that failed."),
		jobSamples:       newMetric("job_samples", gauge, "Samples the node delivers over the whole job, padding included (standalone)."),
		jobEpochs:        newMetric("job_epochs", gauge, "Epochs of the job (standalone)."),
		progress:         newMetric("job_progress_ratio", gauge, "Fraction of the node's job delivered (standalone)."),
	}
}

// NodeCollector exports a node's metrics from src.
type NodeCollector struct {
	src NodeSource
	m   *nodeMetrics
}

var _ prometheus.Collector = (*NodeCollector)(nil)

// NewNodeCollector returns the collector of src.
func NewNodeCollector(src NodeSource) *NodeCollector {
	return &NodeCollector{src: src, m: newNodeMetrics()}
}

// Describe implements prometheus.Collector: every metric the node may
// export.
func (c *NodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.m.all() {
		ch <- m.desc
	}
	ch <- c.m.stageSeconds
}

func (m *nodeMetrics) all() []metric {
	return []metric{m.stageItems, m.stageFailures, m.stageBusy, m.stageWorkers, m.queueCapacity, m.queueLength, m.queueFull,
		m.busyRatio, m.occupancy, m.bottleneck, m.intervalRate, m.batches, m.samples, m.pads, m.ready, m.elapsed,
		m.epoch, m.deliveredStep, m.slotsInUse, m.slots, m.outageRetries, m.committedEpoch, m.committedStep,
		m.failures, m.storeRequests, m.storeBytes, m.s3Requests, m.s3Retries, m.s3Throttled, m.s3Errors,
		m.s3Timeouts, m.s3Bad, m.s3Backoff, m.s3Rate, m.s3RateWaits, m.s3RateWait, m.s3RateCuts, m.s3Budget, m.s3Hedges, m.s3Stalls, m.decodesAbandoned, m.decodeCoreWaits,
		m.packCache, m.packPeak, m.packChunks, m.packChunkBytes, m.packHit, m.packAlone, m.packEvict, m.packFail,
		m.jobSamples, m.jobEpochs, m.progress}
}

// bottleneckStages are the values the bottleneck's stage label takes.
var bottleneckStages = []string{"fetch", "decode", "upload", "consumer", "source", "none"}

// Collect implements prometheus.Collector.
func (c *NodeCollector) Collect(ch chan<- prometheus.Metric) {
	m, src := c.m, c.src
	var ranks []RankCounters
	if src.Ranks != nil {
		ranks = src.Ranks()
	}
	if src.Ranks != nil {
		abandoned, waits := actors.DecodeCores()
		m.decodesAbandoned.emit(ch, float64(abandoned))
		m.decodeCoreWaits.emit(ch, float64(waits))
	}
	failures := map[[2]string]int64{}
	var delivered int64
	for _, rc := range ranks {
		for _, s := range actors.Stages() {
			sc := rc.Stage(s)
			st, rn := s.String(), rc.Name
			m.stageItems.emit(ch, float64(sc.Items), st, rn)
			m.stageFailures.emit(ch, float64(sc.Failures), st, rn)
			m.stageBusy.emit(ch, sc.Busy.Seconds(), st, rn)
			m.stageWorkers.emit(ch, float64(sc.Workers), st, rn)
			m.queueCapacity.emit(ch, float64(sc.QueueCapacity), st, rn)
			m.queueLength.emit(ch, float64(sc.QueueLength), st, rn)
			m.queueFull.emit(ch, sc.QueueFull.Seconds(), st, rn)
			cum, n, sum := rc.Histogram(s, StageBuckets)
			buckets := make(map[float64]uint64, len(cum))
			for i, b := range StageBuckets {
				buckets[b] = cum[i]
			}
			ch <- prometheus.MustNewConstHistogram(m.stageSeconds, n, sum, buckets, st, rn)
		}
		d := rc.Delivered()
		delivered += d.Samples
		m.batches.emit(ch, float64(d.Batches), rc.Name)
		m.samples.emit(ch, float64(d.Samples), rc.Name)
		m.pads.emit(ch, float64(d.Pads), rc.Name)
		m.ready.emit(ch, float64(d.Ready), rc.Name)
		m.elapsed.emit(ch, rc.Elapsed().Seconds(), rc.Name)
		if d.Delivering {
			m.epoch.emit(ch, float64(d.LastEpoch), rc.Name)
			m.deliveredStep.emit(ch, float64(d.LastStep), rc.Name)
		}
		m.slotsInUse.emit(ch, float64(rc.SlotsInUse()), rc.Name)
		m.slots.emit(ch, float64(rc.Stage(actors.StageBatch).Workers), rc.Name)
		m.outageRetries.emit(ch, float64(rc.StoreRetries()), rc.Name)
		for _, f := range rc.Failures() {
			failures[[2]string{f.Stage.String(), f.Class}] += f.Count
		}
	}
	for k, n := range failures {
		m.failures.emit(ch, float64(n), k[0], k[1])
	}
	if src.Report != nil {
		if rep, ok := src.Report.Last(); ok {
			for _, rs := range rep.Ranks {
				for _, s := range rs.Stages {
					m.busyRatio.emit(ch, s.Busy, s.Stage.String(), rs.Name)
					m.occupancy.emit(ch, s.Queue.Occupancy, s.Stage.String(), rs.Name)
				}
			}
			for _, s := range bottleneckStages {
				v := 0.0
				if s == rep.Bottleneck.Stage {
					v = 1
				}
				m.bottleneck.emit(ch, v, s)
			}
			m.intervalRate.emit(ch, rep.Node.SamplesPerSecond)
		}
	}
	if src.Committed != nil {
		for _, cm := range src.Committed() {
			m.committedEpoch.emit(ch, float64(cm.Epoch), cm.Rank)
			m.committedStep.emit(ch, float64(cm.Step), cm.Rank)
		}
	}
	if src.Store != nil {
		st := src.Store.Stats()
		for _, r := range st.Requests {
			m.storeRequests.emit(ch, float64(r.Count), r.Op.String(), r.Outcome.String())
		}
		m.storeBytes.emit(ch, float64(st.BytesRead), "read")
		m.storeBytes.emit(ch, float64(st.BytesWritten), "write")
	}
	if src.S3 != nil {
		st := src.S3()
		m.s3Requests.emit(ch, float64(st.Requests))
		c := st.RetriesByCause
		for _, x := range []struct {
			cause string
			n     int64
		}{{"throttle", c.Throttle}, {"server", c.Server}, {"timeout", c.Timeout}, {"conn", c.Conn}, {"bad_response", c.BadResponse}, {"stall", c.Stall}} {
			m.s3Retries.emit(ch, float64(x.n), x.cause)
		}
		m.s3Timeouts.emit(ch, float64(st.Timeouts))
		m.s3Stalls.emit(ch, float64(st.Stalls))
		m.s3Bad.emit(ch, float64(st.BadResponses))
		m.s3Backoff.emit(ch, st.Backoff.Seconds())
		m.s3Rate.emit(ch, st.Rate)
		m.s3Budget.emit(ch, st.Budget)
		m.s3RateWaits.emit(ch, float64(st.RateWaits))
		m.s3RateWait.emit(ch, st.RateWait.Seconds())
		m.s3RateCuts.emit(ch, float64(st.RateCuts))
		m.s3Throttled.emit(ch, float64(st.Throttled))
		m.s3Errors.emit(ch, float64(st.Errors))
		m.s3Hedges.emit(ch, float64(st.Hedges), "sent")
		m.s3Hedges.emit(ch, float64(st.HedgeWins), "won")
		m.s3Hedges.emit(ch, float64(st.HedgesCancelled), "cancelled")
		m.s3Hedges.emit(ch, float64(st.HedgesDenied), "denied")
	}
	if src.Pack != nil {
		p := src.Pack()
		m.packCache.emit(ch, float64(p.CachedBytes))
		m.packPeak.emit(ch, float64(p.PeakBytes))
		m.packChunks.emit(ch, float64(p.Chunks))
		m.packChunkBytes.emit(ch, float64(p.ChunkBytes))
		m.packHit.emit(ch, float64(p.Hits))
		m.packAlone.emit(ch, float64(p.ReadAlone))
		m.packEvict.emit(ch, float64(p.Evictions))
		m.packFail.emit(ch, float64(p.ChunkFailures))
	}
	if src.JobSamples > 0 {
		m.jobSamples.emit(ch, float64(src.JobSamples))
		m.jobEpochs.emit(ch, float64(src.JobEpochs))
		m.progress.emit(ch, min(1, float64(delivered)/float64(src.JobSamples)))
	}
}
