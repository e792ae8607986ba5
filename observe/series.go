package observe

import (
	"sort"
	"strings"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/coord"
)

// Namespace prefixes every metric name.
const Namespace = "longshore"

// StageBuckets are the upper bounds, in seconds, of longshore_stage_seconds.
var StageBuckets = []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10}

// Kind is a series' Prometheus type.
type Kind int

const (
	Counter Kind = iota
	Gauge
	Histogram
)

// Group is the collector that exports a series: which daemons register
// it, and when.
type Group int

const (
	GroupNode    Group = iota // a node's pipeline, store and job (Snapshot.Node)
	GroupTrainer              // a feed node's trainers (Snapshot.Trainers)
	GroupGossip               // a cluster daemon's gossip (Snapshot.Gossip)
	GroupCoord                // the coordinator (Snapshot.Coord)
	GroupJournal              // the coordinator's journal (Snapshot.Journal)
	GroupProcess              // every daemon (Snapshot.Process)
	GroupConns                // each HTTP server (Snapshot.Conns)
)

// Series is one row of the table: a metric's name (after "longshore_"),
// type, help and labels, and how its samples are read from a Snapshot.
// Names, types and labels are contracts (dashboards and alerts use them):
// never rename one.
type Series struct {
	Name   string
	Kind   Kind
	Help   string
	Labels []string
	// Const are labels each collector of the series fixes (an HTTP
	// server's name), after Labels.
	Const []string
	Group Group
	// Figure, if set, names the place where the node's report
	// (NodeReport), its end-of-run summary (NodeSummary) or the status
	// page (StatusPage) shows this series' figure: they read it through
	// this row, so the metric and the page cannot disagree.
	Figure string
	// Read emits the series' samples of s; nothing when its part of s is
	// absent.
	Read func(s *Snapshot, o *Out)
}

// Table is a list of series.
type Table []Series

// Metrics is the one table of every series the daemons export (beyond
// the Go runtime's and the process's go_* and process_*). A new metric
// is a row here, reading a field of Snapshot (snapshot.go); a new figure
// adds that field and fills it where it is counted (observe/pipeline for
// a node's pipeline).
var Metrics = Table{
	// A node's pipeline, per stage and rank.
	{Name: "stage_items_total", Kind: Counter, Labels: stageRank, Help: "Tasks a pipeline stage finished (failed ones included).", Figure: FigSummaryStageItems,
		Read: perStage(func(c *StageCounts) float64 { return float64(c.Items) })},
	{Name: "stage_failures_total", Kind: Counter, Labels: stageRank, Help: "Tasks of a stage that failed.", Figure: FigSummaryStageFailures,
		Read: perStage(func(c *StageCounts) float64 { return float64(c.Failures) })},
	{Name: "stage_busy_seconds_total", Kind: Counter, Labels: stageRank, Help: "Summed task time of a stage's workers (for feed: the consumer's waits for data).",
		Read: perStage(func(c *StageCounts) float64 { return c.BusySeconds })},
	{Name: "stage_workers", Kind: Gauge, Labels: stageRank, Help: "A stage's concurrency (fetchers, decoders, slots, 1 uploader, 1 consumer).", Figure: FigSummaryStageWorkers,
		Read: perStage(func(c *StageCounts) float64 { return float64(c.Workers) })},
	{Name: "queue_capacity", Kind: Gauge, Labels: stageRank, Help: "Bound of the queue after a stage.",
		Read: perStage(func(c *StageCounts) float64 { return float64(c.QueueCapacity) })},
	{Name: "queue_length", Kind: Gauge, Labels: stageRank, Help: "Items in the queue after a stage now.",
		Read: perStage(func(c *StageCounts) float64 { return float64(c.QueueLength) })},
	{Name: "queue_full_seconds_total", Kind: Counter, Labels: stageRank, Help: "Integral over time of the filled fraction of the queue after a stage: its rate is the occupancy.",
		Read: perStage(func(c *StageCounts) float64 { return c.QueueFullSeconds })},
	{Name: "stage_seconds", Kind: Histogram, Labels: stageRank, Help: "Task time of a pipeline stage (for feed: the consumer's wait in Next).",
		Read: node(func(n *NodeSnapshot, o *Out) {
			for _, r := range n.Ranks {
				for _, c := range r.Stages {
					o.Hist(c.Seconds, c.Stage, r.Name)
				}
			}
		})},
	// The latest live-report interval.
	{Name: "stage_busy_ratio", Kind: Gauge, Labels: stageRank, Help: "Fraction of a stage's worker time spent on tasks in the latest report interval (for feed: the consumer waiting).",
		Read: perInterval(func(s IntervalStage) float64 { return s.Busy })},
	{Name: "queue_occupancy_ratio", Kind: Gauge, Labels: stageRank, Help: "Time-averaged filled fraction of the queue after a stage in the latest report interval (SPDL's data readiness).",
		Read: perInterval(func(s IntervalStage) float64 { return s.Occupancy })},
	{Name: "bottleneck", Kind: Gauge, Labels: []string{"stage"}, Help: "1 for the stage that limited the node's throughput in the latest report interval (fetch, decode, upload, consumer, source or none).",
		Read: node(func(n *NodeSnapshot, o *Out) {
			if n.Interval != nil {
				for _, s := range BottleneckStages {
					o.Add(b2f(s == n.Interval.Bottleneck), s)
				}
			}
		})},
	{Name: "report_samples_per_second", Kind: Gauge, Help: "Samples delivered per second by the node in the latest report interval.",
		Read: node(func(n *NodeSnapshot, o *Out) {
			if n.Interval != nil {
				o.Add(n.Interval.SamplesPerSecond)
			}
		})},
	// Delivery, per rank.
	{Name: "delivered_batches_total", Kind: Counter, Labels: rank, Help: "Batches delivered to the rank's trainer.", Figure: FigSummaryBatches,
		Read: perRank(func(r *RankSnapshot) float64 { return float64(r.Batches) })},
	{Name: "delivered_samples_total", Kind: Counter, Labels: rank, Help: "Samples delivered to the rank's trainer, padding included.", Figure: FigRankSamples,
		Read: perRank(func(r *RankSnapshot) float64 { return float64(r.Samples) })},
	{Name: "padding_samples_total", Kind: Counter, Labels: rank, Help: "Delivered samples that repeat others to even out ranks.", Figure: FigSummaryPads,
		Read: perRank(func(r *RankSnapshot) float64 { return float64(r.Pads) })},
	{Name: "ready_batches_total", Kind: Counter, Labels: rank, Help: "Batches the trainer found ready without waiting.",
		Read: perRank(func(r *RankSnapshot) float64 { return float64(r.Ready) })},
	{Name: "pipeline_seconds_total", Kind: Counter, Labels: rank, Help: "Time the rank's pipelines ran.", Figure: FigRankSeconds,
		Read: perRank(func(r *RankSnapshot) float64 { return r.Seconds })},
	{Name: "delivered_epoch", Kind: Gauge, Labels: rank, Help: "Epoch of the rank's last delivered batch.", Figure: FigRankEpoch,
		Read: node(func(n *NodeSnapshot, o *Out) {
			for _, r := range n.Ranks {
				if r.Delivering {
					o.Add(float64(r.Epoch), r.Name)
				}
			}
		})},
	{Name: "delivered_step", Kind: Gauge, Labels: rank, Help: "Step of the rank's last delivered batch.", Figure: FigRankStep,
		Read: node(func(n *NodeSnapshot, o *Out) {
			for _, r := range n.Ranks {
				if r.Delivering {
					o.Add(float64(r.Step), r.Name)
				}
			}
		})},
	{Name: "slots_in_use", Kind: Gauge, Labels: rank, Help: "Batch slots not free (being filled, uploaded, or held by the trainer).", Figure: FigRankSlotsInUse,
		Read: perRank(func(r *RankSnapshot) float64 { return float64(r.SlotsInUse) })},
	{Name: "slots", Kind: Gauge, Labels: rank, Help: "Batch slots of the rank.",
		Read: perRank(func(r *RankSnapshot) float64 { return float64(r.Slots) })},
	{Name: "fetch_outage_retries_total", Kind: Counter, Labels: rank, Help: "Fetches repeated while the store did not answer (not failures).",
		Read: perRank(func(r *RankSnapshot) float64 { return float64(r.OutageRetries) })},
	{Name: "committed_epoch", Kind: Gauge, Labels: rank, Help: "Epoch of the rank's last acknowledged commit.",
		Read: node(func(n *NodeSnapshot, o *Out) {
			for _, c := range n.Committed {
				o.Add(float64(c.Epoch), c.Rank)
			}
		})},
	{Name: "committed_step", Kind: Gauge, Labels: rank, Help: "Step of the rank's last acknowledged commit.",
		Read: node(func(n *NodeSnapshot, o *Out) {
			for _, c := range n.Committed {
				o.Add(float64(c.Step), c.Rank)
			}
		})},
	{Name: "failures_total", Kind: Counter, Labels: []string{"stage", "class"}, Help: "Samples that failed, by stage and class (what the summary's failures list).", Figure: FigFailures,
		Read: node(func(n *NodeSnapshot, o *Out) {
			sum := map[[2]string]int64{}
			var keys [][2]string
			for _, r := range n.Ranks {
				for _, f := range r.Failures {
					k := [2]string{f.Stage, f.Class}
					if _, ok := sum[k]; !ok {
						keys = append(keys, k)
					}
					sum[k] += f.Count
				}
			}
			for _, k := range keys {
				o.Add(float64(sum[k]), k[0], k[1])
			}
		})},
	{Name: "decodes_abandoned", Kind: Gauge, Help: "Decodes abandoned at --decode-deadline still running in C: each holds a decoder's core until it returns, so the node decodes with one decoder fewer.",
		Read: decode(func(d *DecodeCores) int64 { return d.Abandoned })},
	{Name: "decode_core_waits_total", Kind: Counter, Help: "Decodes that waited for a core an abandoned decode held.",
		Read: decode(func(d *DecodeCores) int64 { return d.Waits })},
	// A weighted mixture's sources (--mixture).
	{Name: "mixture_samples_total", Kind: Counter, Labels: []string{"source"}, Help: "Samples of each source of a weighted mixture the node handed to its pipelines (padding and re-issued work included): their shares are the mixture's weights as rounded per round.",
		Read: node(func(n *NodeSnapshot, o *Out) {
			for _, c := range n.Mixture {
				o.Add(float64(c.Samples), c.Source)
			}
		})},
	// The dataset's store.
	{Name: "store_requests_total", Kind: Counter, Labels: []string{"op", "outcome"}, Help: "Calls to the dataset's store, by operation and outcome.",
		Read: node(func(n *NodeSnapshot, o *Out) {
			if n.Store != nil {
				for _, r := range n.Store.Requests {
					o.Add(float64(r.Count), r.Op, r.Outcome)
				}
			}
		})},
	{Name: "store_bytes_total", Kind: Counter, Labels: []string{"direction"}, Help: "Payload bytes moved by the dataset's store.",
		Read: node(func(n *NodeSnapshot, o *Out) {
			if n.Store != nil {
				o.Add(float64(n.Store.BytesRead), "read")
				o.Add(float64(n.Store.BytesWritten), "write")
			}
		})},
	{Name: "s3_http_requests_total", Kind: Counter, Help: "HTTP requests the S3 client sent (retries included).", Figure: FigSummaryStoreRequests,
		Read: s3Read(func(c *S3Counts) float64 { return float64(c.Requests) })},
	{Name: "store_retries_total", Kind: Counter, Labels: []string{"cause"}, Help: "S3 requests repeated after a retryable error, by cause (throttle, server, timeout, conn, bad_response, stall).", Figure: FigSummaryStoreRetries,
		Read: node(func(n *NodeSnapshot, o *Out) {
			if n.S3 != nil {
				for i, cause := range S3RetryCauses {
					o.Add(float64(n.S3.Retries[i]), cause)
				}
			}
		})},
	{Name: "store_timeouts_total", Kind: Counter, Help: "S3 attempts ended by the request timeout.",
		Read: s3Read(func(c *S3Counts) float64 { return float64(c.Timeouts) })},
	{Name: "store_stalls_total", Kind: Counter, Help: "S3 response bodies abandoned for making no progress within --progress-timeout (hedges' included).",
		Read: s3Read(func(c *S3Counts) float64 { return float64(c.Stalls) })},
	{Name: "store_bad_responses_total", Kind: Counter, Help: "S3 answers refused as short, corrupt or for the wrong range.",
		Read: s3Read(func(c *S3Counts) float64 { return float64(c.BadResponses) })},
	{Name: "store_backoff_seconds_total", Kind: Counter, Help: "Time slept between S3 attempts.", Figure: FigSummaryStoreBackoff,
		Read: s3Read(func(c *S3Counts) float64 { return c.BackoffSeconds })},
	{Name: "store_request_rate_limit", Kind: Gauge, Help: "The adaptive S3 request-rate limit now, requests/s (0: none).", Figure: FigSummaryStoreRate,
		Read: s3Read(func(c *S3Counts) float64 { return c.Rate })},
	{Name: "store_rate_waits_total", Kind: Counter, Help: "S3 requests the rate limiter held back.", Figure: FigSummaryStoreRateWaits,
		Read: s3Read(func(c *S3Counts) float64 { return float64(c.RateWaits) })},
	{Name: "store_rate_wait_seconds_total", Kind: Counter, Help: "Time S3 requests waited for the rate limiter.", Figure: FigSummaryStoreRateWait,
		Read: s3Read(func(c *S3Counts) float64 { return c.RateWaitSeconds })},
	{Name: "store_rate_cuts_total", Kind: Counter, Help: "Times throttling cut the S3 request-rate limit.",
		Read: s3Read(func(c *S3Counts) float64 { return float64(c.RateCuts) })},
	{Name: "store_budget_requests_per_second", Kind: Gauge, Help: "This node's share of the job-wide S3 request budget (the coordinator's --job-store-rps), requests/s (0: none).", Figure: FigSummaryStoreBudget,
		Read: s3Read(func(c *S3Counts) float64 { return c.Budget })},
	{Name: "store_throttled_total", Kind: Counter, Help: "S3 answers 429 or 503 (SlowDown).", Figure: FigSummaryStoreThrottled,
		Read: s3Read(func(c *S3Counts) float64 { return float64(c.Throttled) })},
	{Name: "store_errors_total", Kind: Counter, Help: "S3 operations that failed after retries.",
		Read: s3Read(func(c *S3Counts) float64 { return float64(c.Errors) })},
	{Name: "store_hedges_total", Kind: Counter, Labels: []string{"outcome"}, Help: "Hedged S3 GETs (--hedge-quantile), by outcome: sent (second requests), won (answered first), cancelled (losers of either kind), denied (slow enough to hedge, kept from it by the budget or throttling).",
		Read: node(func(n *NodeSnapshot, o *Out) {
			if c := n.S3; c != nil {
				o.Add(float64(c.Hedges), "sent")
				o.Add(float64(c.HedgeWins), "won")
				o.Add(float64(c.HedgesCancelled), "cancelled")
				o.Add(float64(c.HedgesDenied), "denied")
			}
		})},
	// The packed-sample store.
	{Name: "pack_cache_bytes", Kind: Gauge, Help: "Packed-sample chunk cache: bytes held or being fetched.",
		Read: pack(func(p *PackCounts) int64 { return p.CachedBytes })},
	{Name: "pack_cache_peak_bytes", Kind: Gauge, Help: "Most bytes the chunk cache ever held (with buffers kept for reuse).", Figure: FigSummaryPackPeakBytes,
		Read: pack(func(p *PackCounts) int64 { return p.PeakBytes })},
	{Name: "pack_chunks_total", Kind: Counter, Help: "Chunk fetches (one ranged GET each).", Figure: FigSummaryPackChunks,
		Read: pack(func(p *PackCounts) int64 { return p.Chunks })},
	{Name: "pack_chunk_bytes_total", Kind: Counter, Help: "Bytes chunk fetches read.", Figure: FigSummaryPackChunkBytes,
		Read: pack(func(p *PackCounts) int64 { return p.ChunkBytes })},
	{Name: "pack_hits_total", Kind: Counter, Help: "Samples served from a cached chunk.",
		Read: pack(func(p *PackCounts) int64 { return p.Hits })},
	{Name: "pack_read_alone_total", Kind: Counter, Help: "Samples read with a ranged GET of their own.", Figure: FigSummaryPackReadAlone,
		Read: pack(func(p *PackCounts) int64 { return p.ReadAlone })},
	{Name: "pack_evictions_total", Kind: Counter, Help: "Chunks dropped before all their samples were served.", Figure: FigSummaryPackEvictions,
		Read: pack(func(p *PackCounts) int64 { return p.Evictions })},
	{Name: "pack_chunk_failures_total", Kind: Counter, Help: "Chunk fetches that failed.",
		Read: pack(func(p *PackCounts) int64 { return p.ChunkFailures })},
	// The node's job (standalone and feed).
	{Name: "job_samples", Kind: Gauge, Help: "Samples the node delivers over the whole job, padding included (standalone).",
		Read: job(func(_ *NodeSnapshot, j *JobSize) float64 { return float64(j.Samples) })},
	{Name: "job_epochs", Kind: Gauge, Help: "Epochs of the job (standalone).",
		Read: job(func(_ *NodeSnapshot, j *JobSize) float64 { return float64(j.Epochs) })},
	{Name: "job_progress_ratio", Kind: Gauge, Help: "Fraction of the node's job delivered (standalone).",
		Read: job(func(n *NodeSnapshot, j *JobSize) float64 {
			var delivered int64
			for _, r := range n.Ranks {
				delivered += r.Samples
			}
			return min(1, float64(delivered)/float64(j.Samples))
		})},

	// The trainers' data-stall reports (a feed node).
	{Name: "trainer_wait_seconds", Kind: Histogram, Labels: rank, Group: GroupTrainer, Figure: FigRankTrainerWait,
		Help: "Time the rank's trainer waited for each batch, from asking for it to having it, as its client reported.",
		Read: perTrainer(func(w *TrainerCounts, o *Out) { o.Hist(w.Wait, w.Rank) })},
	{Name: "trainer_compute_seconds_total", Kind: Counter, Labels: rank, Group: GroupTrainer, Figure: FigRankTrainerCompute,
		Help: "Time the rank's trainer spent between having a batch and asking for the next, as its client reported.",
		Read: perTrainer(func(w *TrainerCounts, o *Out) { o.Add(w.ComputeSeconds, w.Rank) })},
	{Name: "trainer_stall_ratio", Kind: Gauge, Labels: rank, Group: GroupTrainer,
		Help: "Fraction of the rank's trainer time spent waiting for data over the run: wait / (wait + compute).",
		Read: perTrainer(func(w *TrainerCounts, o *Out) {
			if w.Steps > 0 {
				o.Add(max(stallShare(w.Wait.Sum, w.ComputeSeconds), 0), w.Rank)
			}
		})},
	{Name: "trainer_headspace_steps_total", Kind: Counter, Labels: rank, Group: GroupTrainer,
		Help: "Steps the rank's trainer ran on replayed cached batches (its headspace mode).",
		Read: perTrainer(func(w *TrainerCounts, o *Out) { o.Add(float64(w.HeadspaceSteps), w.Rank) })},
	{Name: "trainer_headspace_compute_seconds_total", Kind: Counter, Labels: rank, Group: GroupTrainer,
		Help: "Time those headspace steps took: the trainer's compute ceiling with a perfect loader.",
		Read: perTrainer(func(w *TrainerCounts, o *Out) { o.Add(w.HeadspaceSeconds, w.Rank) })},

	// Gossip (a cluster's daemons).
	{Name: "gossip_streams_open", Kind: Gauge, Group: GroupGossip, Help: "Inbound gossip streams held now (at most --gossip-max-streams).",
		Read: gossipStreams(func(open, _, _ int64) int64 { return open })},
	{Name: "gossip_streams_refused_total", Kind: Counter, Group: GroupGossip, Help: "Inbound gossip streams closed at once because --gossip-max-streams were open.",
		Read: gossipStreams(func(_, refused, _ int64) int64 { return refused })},
	{Name: "gossip_streams_truncated_total", Kind: Counter, Group: GroupGossip, Help: "Inbound gossip streams cut off at --gossip-max-stream-bytes.",
		Read: gossipStreams(func(_, _, truncated int64) int64 { return truncated })},

	// The coordinator.
	{Name: "coord_up", Kind: Gauge, Group: GroupCoord, Help: "1 if the coordinator answered the scrape, 0 if it has stopped (a journal failure, another coordinator took over).",
		Read: func(s *Snapshot, o *Out) {
			if c := s.Coord; c != nil {
				o.Add(b2f(c.Answered && c.Status.Err == nil))
			}
		}},
	{Name: "coord_nodes", Kind: Gauge, Group: GroupCoord, Help: "Node lives the coordinator counts alive.",
		Read: coordStatus(func(st *coord.Status, o *Out) { o.Add(float64(st.Census.Nodes)) })},
	{Name: "coord_node_states", Kind: Gauge, Group: GroupCoord, Labels: []string{"state"}, Help: "Nodes heard of, by state as on the status page (alive, suspect, silent, evicted, left, joining); every state is exported, 0 included.",
		Read: coordStatus(func(st *coord.Status, o *Out) {
			by := map[coord.NodeState]int{}
			for _, n := range st.Nodes {
				by[n.State]++
			}
			for _, s := range coord.NodeStates {
				o.Add(float64(by[s]), string(s))
			}
		})},
	{Name: "coord_ranks", Kind: Gauge, Group: GroupCoord, Help: "Ranks alive.",
		Read: coordStatus(func(st *coord.Status, o *Out) { o.Add(float64(len(st.Census.Ranks))) })},
	{Name: "coord_leases", Kind: Gauge, Group: GroupCoord, Labels: []string{"state"}, Help: "Leases of open epochs not wholly committed, by state (active, delivered, revoking).", Figure: FigStatusLeases,
		Read: coordStatus(func(st *coord.Status, o *Out) {
			l := st.Census.Leases
			o.Add(float64(l.Active), "active")
			o.Add(float64(l.Delivered), "delivered")
			o.Add(float64(l.Revoking), "revoking")
		})},
	{Name: "coord_mixture_committed_samples", Kind: Gauge, Group: GroupCoord, Labels: []string{"source"}, Help: "Samples of each source of a weighted mixture in committed history (every epoch, padding excluded): divided by the source's size, the source epochs committed, its cursor.", Figure: FigStatusMixture,
		Read: coordStatus(func(st *coord.Status, o *Out) {
			for _, s := range st.Mixture {
				o.Add(float64(s.Committed), s.Source)
			}
		})},
	{Name: "coord_done", Kind: Gauge, Group: GroupCoord, Help: "1 once every epoch is committed.",
		Read: coordStatus(func(st *coord.Status, o *Out) { o.Add(b2f(st.Done)) })},
	{Name: "coord_events_total", Kind: Counter, Group: GroupCoord, Help: "Events the state machine stepped.",
		Read: coordStats(func(s *cluster.Stats) uint64 { return s.Events })},
	{Name: "coord_grants_total", Kind: Counter, Group: GroupCoord, Help: "Leases granted (padding included).", Figure: FigStatusCounter + "grants",
		Read: coordStats(func(s *cluster.Stats) uint64 { return s.Grants })},
	{Name: "coord_revokes_total", Kind: Counter, Group: GroupCoord, Help: "Revokes sent (lease splits asked for).", Figure: FigStatusCounter + "revokes",
		Read: coordStats(func(s *cluster.Stats) uint64 { return s.Revokes })},
	{Name: "coord_commits_total", Kind: Counter, Group: GroupCoord, Help: "Commits applied and acknowledged.", Figure: FigStatusCounter + "commits",
		Read: coordStats(func(s *cluster.Stats) uint64 { return s.Commits })},
	{Name: "coord_fenced_total", Kind: Counter, Group: GroupCoord, Help: "Messages refused from ended sessions.", Figure: FigStatusCounter + "fenced",
		Read: coordStats(func(s *cluster.Stats) uint64 { return s.Fenced })},
	{Name: "coord_stale_total", Kind: Counter, Group: GroupCoord, Help: "Messages about leases or epochs no longer current.", Figure: FigStatusCounter + "stale",
		Read: coordStats(func(s *cluster.Stats) uint64 { return s.Stale })},
	{Name: "coord_invalid_total", Kind: Counter, Group: GroupCoord, Help: "Messages that contradicted the state (a sender's bug).",
		Read: coordStats(func(s *cluster.Stats) uint64 { return s.Invalid })},
	{Name: "coord_evictions_total", Kind: Counter, Group: GroupCoord, Help: "Node lives ended (failures, leaves, revoke timeouts).", Figure: FigStatusCounter + "evictions",
		Read: coordStats(func(s *cluster.Stats) uint64 { return s.Evictions })},
	{Name: "coord_returned_positions_total", Kind: Counter, Group: GroupCoord, Help: "Positions departed ranks held beyond their commits, returned to be issued again.", Figure: FigStatusCounter + "returned_positions",
		Read: coordStats(func(s *cluster.Stats) uint64 { return s.Returned })},
	{Name: "coord_padding_positions_total", Kind: Counter, Group: GroupCoord, Help: "Padding positions issued.",
		Read: coordStats(func(s *cluster.Stats) uint64 { return s.PadPositions })},
	{Name: "coord_held_requests_total", Kind: Counter, Group: GroupCoord, Help: "Requests held back until --min-ranks ranks joined.",
		Read: coordStats(func(s *cluster.Stats) uint64 { return s.HeldRequests })},
	{Name: "coord_job_epochs", Kind: Gauge, Group: GroupCoord, Help: "Epochs of the job.",
		Read: func(s *Snapshot, o *Out) {
			if c := s.Coord; c != nil {
				o.Add(float64(c.Epochs))
			}
		}},
	{Name: "coord_job_samples", Kind: Gauge, Group: GroupCoord, Help: "Real samples of the whole job (dataset samples times epochs).", Figure: FigStatusTotal,
		Read: func(s *Snapshot, o *Out) {
			if c := s.Coord; c != nil {
				o.Add(float64(c.Samples * int64(c.Epochs)))
			}
		}},
	{Name: "coord_epochs_complete", Kind: Gauge, Group: GroupCoord, Help: "Epochs every real sample of which is committed.", Figure: FigStatusEpochsComplete,
		Read: coordStatus(func(st *coord.Status, o *Out) { o.Add(float64(Progress(*st).EpochsComplete)) })},
	{Name: "coord_epoch", Kind: Gauge, Group: GroupCoord, Help: "The oldest epoch not complete (the job's epochs when done).", Figure: FigStatusEpoch,
		Read: coordStatus(func(st *coord.Status, o *Out) { o.Add(float64(Progress(*st).Epoch)) })},
	{Name: "coord_committed_samples", Kind: Gauge, Group: GroupCoord, Help: "Real samples committed, over every epoch.", Figure: FigStatusCommitted,
		Read: coordStatus(func(st *coord.Status, o *Out) { o.Add(float64(Progress(*st).Committed)) })},
	{Name: "coord_progress_ratio", Kind: Gauge, Group: GroupCoord, Help: "Fraction of the job's real samples committed.", Figure: FigStatusRatio,
		Read: func(s *Snapshot, o *Out) {
			if c := s.Coord; c != nil && c.Answered {
				if job := c.Samples * int64(c.Epochs); job > 0 {
					o.Add(float64(Progress(c.Status).Committed) / float64(job))
				}
			}
		}},
	{Name: "coord_rank_leases", Kind: Gauge, Group: GroupCoord, Labels: rank, Help: "Leases a rank holds in open epochs, not wholly committed.",
		Read: coordRanks(func(r *cluster.RankCensus, o *Out) { o.Add(float64(r.Leases), r.Rank) })},
	{Name: "coord_rank_epoch", Kind: Gauge, Group: GroupCoord, Labels: rank, Help: "Oldest open epoch a rank has a stream in.",
		Read: coordRanks(func(r *cluster.RankCensus, o *Out) {
			if r.Epoch >= 0 {
				o.Add(float64(r.Epoch), r.Rank)
			}
		})},
	{Name: "coord_rank_committed_step", Kind: Gauge, Group: GroupCoord, Labels: rank, Help: "Step of a rank's last commit in that epoch.",
		Read: coordRanks(func(r *cluster.RankCensus, o *Out) {
			if r.Step >= 0 {
				o.Add(float64(r.Step), r.Rank)
			}
		})},
	{Name: "coord_rank_committed_positions", Kind: Gauge, Group: GroupCoord, Labels: rank, Help: "Positions a rank has committed in open epochs.",
		Read: coordRanks(func(r *cluster.RankCensus, o *Out) { o.Add(float64(r.Committed), r.Rank) })},

	// The coordinator's journal.
	{Name: "journal_writes_total", Kind: Counter, Group: GroupJournal, Labels: []string{"outcome"}, Help: "Journal generations written, by outcome (ok, error).",
		Read: journalCounts(func(j *JournalCounts, o *Out) {
			for _, c := range j.Writes {
				o.Add(float64(c.Count), c.Outcome)
			}
		})},
	{Name: "journal_checks_total", Kind: Counter, Group: GroupJournal, Labels: []string{"outcome"}, Help: "Checks that no other coordinator took the journal over, by outcome.",
		Read: journalCounts(func(j *JournalCounts, o *Out) {
			for _, c := range j.Checks {
				o.Add(float64(c.Count), c.Outcome)
			}
		})},
	{Name: "journal_write_seconds", Kind: Histogram, Group: GroupJournal, Help: "Time a journal write took (the commits it makes durable wait for it).",
		Read: journalCounts(func(j *JournalCounts, o *Out) { o.Hist(j.WriteSeconds) })},
	{Name: "journal_generation", Kind: Gauge, Group: GroupJournal, Help: "The last journal generation written.",
		Read: journalCounts(func(j *JournalCounts, o *Out) { o.Add(float64(j.Generation)) })},

	// Every daemon: the control port's refusals (wire.ControlPortCounts;
	// a standalone node, without a control port, reads zero).
	{Name: "control_refused_calls_total", Kind: Counter, Group: GroupProcess, Labels: []string{"method"},
		Help: "Calls to the control port of methods other than the message stream, refused (by method of protoactor's Remoting service).",
		Read: process(func(p *ProcessCounts, o *Out) {
			methods := make([]string, 0, len(p.Control.RefusedCalls))
			for m := range p.Control.RefusedCalls {
				methods = append(methods, m)
			}
			sort.Strings(methods)
			for _, m := range methods {
				o.Add(float64(p.Control.RefusedCalls[m]), m)
			}
		})},
	{Name: "control_refused_messages_total", Kind: Counter, Group: GroupProcess,
		Help: "Messages dropped at the control port as outside the protocol: system messages (stop, watch, ...), other types, other encodings, other processes' addresses.",
		Read: process(func(p *ProcessCounts, o *Out) { o.Add(float64(p.Control.RefusedMessages)) })},
	{Name: "control_malformed_batches_total", Kind: Counter, Group: GroupProcess,
		Help: "Message batches refused as malformed (indices out of range, unknown protocol types): each ended its stream, nothing delivered.",
		Read: process(func(p *ProcessCounts, o *Out) { o.Add(float64(p.Control.MalformedBatches)) })},
	{Name: "control_panics_total", Kind: Counter, Group: GroupProcess,
		Help: "Panics of the control port's handlers, recovered into an error.",
		Read: process(func(p *ProcessCounts, o *Out) { o.Add(float64(p.Control.Panics)) })},
	// Every daemon: its control links (cluster.Links: the coordinator's
	// links to node lives, a node's link to the coordinator life it
	// follows; a standalone node reads zero).
	{Name: "control_link_sent_total", Kind: Counter, Group: GroupProcess,
		Help: "Numbered control frames sent on the links (each once; resends are counted apart).",
		Read: links(func(l *cluster.LinkTotals) float64 { return float64(l.Sent) })},
	{Name: "control_link_resends_total", Kind: Counter, Group: GroupProcess,
		Help: "Control frames sent again because the peer had not acknowledged them in time (a loss, or a slow peer).",
		Read: links(func(l *cluster.LinkTotals) float64 { return float64(l.Resent) })},
	{Name: "control_link_applied_total", Kind: Counter, Group: GroupProcess,
		Help: "Control frames received and applied, each once, in order.",
		Read: links(func(l *cluster.LinkTotals) float64 { return float64(l.Applied) })},
	{Name: "control_link_duplicates_total", Kind: Counter, Group: GroupProcess,
		Help: "Control frames received again after they were applied, and dropped.",
		Read: links(func(l *cluster.LinkTotals) float64 { return float64(l.Duplicates) })},
	{Name: "control_link_held_total", Kind: Counter, Group: GroupProcess,
		Help: "Control frames received ahead of a gap (one before them lost or late) and held until it was filled.",
		Read: links(func(l *cluster.LinkTotals) float64 { return float64(l.Held) })},
	{Name: "control_link_held_dropped_total", Kind: Counter, Group: GroupProcess,
		Help: "Control frames received ahead of a gap when 1024 were held already, dropped (the peer sends them again).",
		Read: links(func(l *cluster.LinkTotals) float64 { return float64(l.DroppedHeld) })},
	{Name: "control_link_peers_lost_total", Kind: Counter, Group: GroupProcess,
		Help: "Links whose unacknowledged frames reached the bound: the peer life was declared lost (the coordinator evicts the node life; a node rejoins as a new life).",
		Read: links(func(l *cluster.LinkTotals) float64 { return float64(l.Lost) })},
	{Name: "control_link_unacknowledged", Kind: Gauge, Group: GroupProcess,
		Help: "Control frames sent and not acknowledged yet, on every link of the process.",
		Read: links(func(l *cluster.LinkTotals) float64 { return float64(l.Pending) })},

	// Each HTTP server, labelled with the flag that set its address
	// without dashes ("metrics", "http").
	{Name: "http_connections_open", Kind: Gauge, Group: GroupConns, Const: []string{"server"},
		Help: "HTTP connections the server holds now (at most its connection cap).",
		Read: func(s *Snapshot, o *Out) {
			if s.Conns != nil {
				o.Add(float64(s.Conns.Open))
			}
		}},
	{Name: "http_connections_refused_total", Kind: Counter, Group: GroupConns, Const: []string{"server"},
		Help: "HTTP connections closed unanswered at once because the server held its connection cap.",
		Read: func(s *Snapshot, o *Out) {
			if s.Conns != nil {
				o.Add(float64(s.Conns.Refused))
			}
		}},
}

// The figures the node's report (report.go; the summary, summary.go,
// reads FigRankSamples and FigFailures too) and the status page
// (status.go) read through the table's rows.
const (
	FigRankSamples        = "report.rank.samples"
	FigRankSeconds        = "report.rank.seconds"
	FigRankEpoch          = "report.rank.epoch"
	FigRankStep           = "report.rank.step"
	FigRankSlotsInUse     = "report.rank.slots_in_use"
	FigRankTrainerWait    = "report.rank.trainer_wait"
	FigRankTrainerCompute = "report.rank.trainer_compute"
	FigFailures           = "report.failures"

	// FigStatusCounter prefixes a counter of the status page: the rest is
	// its key in status.json's counters.
	FigStatusCounter        = "status.counters."
	FigStatusLeases         = "status.leases"
	FigStatusTotal          = "status.progress.total"
	FigStatusEpoch          = "status.progress.epoch"
	FigStatusEpochsComplete = "status.progress.epochs_complete"
	FigStatusCommitted      = "status.progress.committed"
	FigStatusRatio          = "status.progress.ratio"
	FigStatusMixture        = "status.mixture"
)

var (
	rank      = []string{"rank"}
	stageRank = []string{"stage", "rank"}
)

// Row returns the series named name (without the namespace), or nil.
func (t Table) Row(name string) *Series {
	for i := range t {
		if t[i].Name == name {
			return &t[i]
		}
	}
	return nil
}

// FullName is the series' exported name.
func (s *Series) FullName() string { return Namespace + "_" + s.Name }

// Sample is one exported sample of a series: its label values (Labels'
// order) and its value, or its histogram.
type Sample struct {
	Series *Series
	Labels []string
	Value  float64
	Hist   *Hist
}

// Out gathers the samples a row's Read emits.
type Out struct {
	series  *Series
	samples []Sample
}

// Add emits a counter's or a gauge's sample.
func (o *Out) Add(v float64, labels ...string) {
	o.samples = append(o.samples, Sample{Series: o.series, Labels: labels, Value: v})
}

// Hist emits a histogram's sample.
func (o *Out) Hist(h Hist, labels ...string) {
	o.samples = append(o.samples, Sample{Series: o.series, Labels: labels, Hist: &h})
}

// Values are a table's samples of one snapshot.
type Values []Sample

// Eval reads every row of t in groups (none: every row) from s.
func (t Table) Eval(s Snapshot, groups ...Group) Values {
	var out Values
	for i := range t {
		if len(groups) > 0 && !hasGroup(groups, t[i].Group) {
			continue
		}
		o := Out{series: &t[i]}
		t[i].Read(&s, &o)
		out = append(out, o.samples...)
	}
	return out
}

func hasGroup(gs []Group, g Group) bool {
	for _, x := range gs {
		if x == g {
			return true
		}
	}
	return false
}

// Figure returns the samples of the row whose Figure is fig.
func (v Values) Figure(fig string) []Sample {
	var out []Sample
	for _, s := range v {
		if s.Series.Figure == fig {
			out = append(out, s)
		}
	}
	return out
}

// FigurePrefix returns the samples of the rows whose Figure starts with
// prefix.
func (v Values) FigurePrefix(prefix string) []Sample {
	var out []Sample
	for _, s := range v {
		if strings.HasPrefix(s.Series.Figure, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// Lookup returns the sample of fig with the label values labels.
func (v Values) Lookup(fig string, labels ...string) (Sample, bool) {
	for _, s := range v {
		if s.Series.Figure == fig && equal(s.Labels, labels) {
			return s, true
		}
	}
	return Sample{}, false
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The readers the rows share.

func node(f func(n *NodeSnapshot, o *Out)) func(*Snapshot, *Out) {
	return func(s *Snapshot, o *Out) {
		if s.Node != nil {
			f(s.Node, o)
		}
	}
}

func perRank(f func(r *RankSnapshot) float64) func(*Snapshot, *Out) {
	return node(func(n *NodeSnapshot, o *Out) {
		for i := range n.Ranks {
			o.Add(f(&n.Ranks[i]), n.Ranks[i].Name)
		}
	})
}

func perStage(f func(c *StageCounts) float64) func(*Snapshot, *Out) {
	return node(func(n *NodeSnapshot, o *Out) {
		for _, r := range n.Ranks {
			for i := range r.Stages {
				o.Add(f(&r.Stages[i]), r.Stages[i].Stage, r.Name)
			}
		}
	})
}

func perInterval(f func(s IntervalStage) float64) func(*Snapshot, *Out) {
	return node(func(n *NodeSnapshot, o *Out) {
		if n.Interval == nil {
			return
		}
		for _, r := range n.Interval.Ranks {
			for _, s := range r.Stages {
				o.Add(f(s), s.Stage, r.Name)
			}
		}
	})
}

func decode(f func(d *DecodeCores) int64) func(*Snapshot, *Out) {
	return node(func(n *NodeSnapshot, o *Out) {
		if n.Decode != nil {
			o.Add(float64(f(n.Decode)))
		}
	})
}

func s3Read(f func(c *S3Counts) float64) func(*Snapshot, *Out) {
	return node(func(n *NodeSnapshot, o *Out) {
		if n.S3 != nil {
			o.Add(f(n.S3))
		}
	})
}

func pack(f func(p *PackCounts) int64) func(*Snapshot, *Out) {
	return node(func(n *NodeSnapshot, o *Out) {
		if n.Pack != nil {
			o.Add(float64(f(n.Pack)))
		}
	})
}

func job(f func(n *NodeSnapshot, j *JobSize) float64) func(*Snapshot, *Out) {
	return node(func(n *NodeSnapshot, o *Out) {
		if n.Job != nil && n.Job.Samples > 0 {
			o.Add(f(n, n.Job))
		}
	})
}

func perTrainer(f func(w *TrainerCounts, o *Out)) func(*Snapshot, *Out) {
	return func(s *Snapshot, o *Out) {
		for i := range s.Trainers {
			f(&s.Trainers[i], o)
		}
	}
}

func gossipStreams(f func(open, refused, truncated int64) int64) func(*Snapshot, *Out) {
	return func(s *Snapshot, o *Out) {
		if g := s.Gossip; g != nil {
			o.Add(float64(f(g.Open, g.Refused, g.Truncated)))
		}
	}
}

// coordStatus reads the coordinator's status, when it answered.
func coordStatus(f func(st *coord.Status, o *Out)) func(*Snapshot, *Out) {
	return func(s *Snapshot, o *Out) {
		if c := s.Coord; c != nil && c.Answered {
			f(&c.Status, o)
		}
	}
}

func coordStats(f func(s *cluster.Stats) uint64) func(*Snapshot, *Out) {
	return coordStatus(func(st *coord.Status, o *Out) { o.Add(float64(f(&st.Stats))) })
}

func coordRanks(f func(r *cluster.RankCensus, o *Out)) func(*Snapshot, *Out) {
	return coordStatus(func(st *coord.Status, o *Out) {
		for i := range st.Census.Ranks {
			f(&st.Census.Ranks[i], o)
		}
	})
}

func journalCounts(f func(j *JournalCounts, o *Out)) func(*Snapshot, *Out) {
	return func(s *Snapshot, o *Out) {
		if s.Journal != nil {
			f(s.Journal, o)
		}
	}
}

func process(f func(p *ProcessCounts, o *Out)) func(*Snapshot, *Out) {
	return func(s *Snapshot, o *Out) {
		if s.Process != nil {
			f(s.Process, o)
		}
	}
}

func links(f func(l *cluster.LinkTotals) float64) func(*Snapshot, *Out) {
	return process(func(p *ProcessCounts, o *Out) { o.Add(f(&p.Links)) })
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
