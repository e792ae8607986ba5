package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/observe"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
)

// NodeSource is what a node's metrics read. Every field but Ranks may be
// nil (that part is not exported); each func is called at scrape time
// and must be safe for concurrent use.
type NodeSource struct {
	// Ranks snapshots every rank's counters (over every pipeline it had).
	Ranks func() []RankCounters
	// Store counts the requests the dataset's store answered: its
	// storage.CountingStore, or a mixture's sources' summed.
	Store RequestCounter
	// S3 is the S3 client's HTTP-level counts, when the store is S3.
	S3 func() s3.Stats
	// Pack is the packed-sample store's counts, for a packed dataset.
	Pack func() dataset.PackedStats
	// Committed lists each rank's last acknowledged commit (feed and
	// cluster modes).
	Committed func() []observe.Commit
	// Report is the live bottleneck report whose latest interval the busy
	// ratios, occupancies and bottleneck show.
	Report *Reporter
	// JobSamples is the samples the node delivers over the whole job,
	// padding included, and JobEpochs its epochs (0: not known, as in
	// cluster mode, where the coordinator has the job's progress).
	JobSamples int64
	JobEpochs  int
	// Gossip, if set, counts the node's inbound gossip streams (cluster
	// mode; observe.NewGossipCollector).
	Gossip func() gossip.StreamStats
	// TrainerWait, if set, reads the trainers' data-stall reports per
	// rank (feed sink; NewTrainerWaitCollector).
	TrainerWait func() []TrainerWait
	// Mixture, if set, counts each source of a weighted mixture.
	Mixture func() []observe.SourceCount
}

// RequestCounter counts a store's requests (storage.CountingStore).
type RequestCounter interface {
	Stats() storage.RequestStats
}

// NewNodeCollector exports a node's metrics from src: the table's rows
// of observe.GroupNode.
func NewNodeCollector(src NodeSource) prometheus.Collector {
	return observe.Metrics.Collector(src.Snapshot, []observe.Group{observe.GroupNode})
}

// Snapshot reads src's node part now.
func (src NodeSource) Snapshot() observe.Snapshot {
	n := &observe.NodeSnapshot{}
	if src.Ranks != nil {
		n.Ranks = Ranks(src.Ranks())
		abandoned, waits := actors.DecodeCores()
		n.Decode = &observe.DecodeCores{Abandoned: abandoned, Waits: waits}
	}
	if src.Report != nil {
		if rep, ok := src.Report.Last(); ok {
			n.Interval = rep.interval()
		}
	}
	if src.Committed != nil {
		n.Committed = src.Committed()
	}
	if src.Mixture != nil {
		n.Mixture = src.Mixture()
	}
	if src.Store != nil {
		st := src.Store.Stats()
		n.Store = &observe.StoreCounts{BytesRead: st.BytesRead, BytesWritten: st.BytesWritten}
		for _, r := range st.Requests {
			n.Store.Requests = append(n.Store.Requests, observe.StoreRequests{Op: r.Op.String(), Outcome: r.Outcome.String(), Count: r.Count})
		}
	}
	if src.S3 != nil {
		n.S3 = s3Counts(src.S3())
	}
	if src.Pack != nil {
		p := src.Pack()
		n.Pack = &observe.PackCounts{CachedBytes: p.CachedBytes, PeakBytes: p.PeakBytes, Chunks: p.Chunks, ChunkBytes: p.ChunkBytes,
			Hits: p.Hits, ReadAlone: p.ReadAlone, Evictions: p.Evictions, ChunkFailures: p.ChunkFailures}
	}
	if src.JobSamples > 0 {
		n.Job = &observe.JobSize{Samples: src.JobSamples, Epochs: src.JobEpochs}
	}
	return observe.Snapshot{Node: n}
}

func s3Counts(st s3.Stats) *observe.S3Counts {
	c := st.RetriesByCause
	return &observe.S3Counts{Requests: st.Requests, Timeouts: st.Timeouts, Stalls: st.Stalls, BadResponses: st.BadResponses,
		Retries:        [6]int64{c.Throttle, c.Server, c.Timeout, c.Conn, c.BadResponse, c.Stall}, // observe.S3RetryCauses
		BackoffSeconds: st.Backoff.Seconds(), Rate: st.Rate, Budget: st.Budget,
		RateWaits: st.RateWaits, RateWaitSeconds: st.RateWait.Seconds(), RateCuts: st.RateCuts, Throttled: st.Throttled, Errors: st.Errors,
		Hedges: st.Hedges, HedgeWins: st.HedgeWins, HedgesCancelled: st.HedgesCancelled, HedgesDenied: st.HedgesDenied}
}

// Ranks reads each rank's counters into the table's neutral form.
func Ranks(rcs []RankCounters) []observe.RankSnapshot {
	out := make([]observe.RankSnapshot, 0, len(rcs))
	for _, rc := range rcs {
		r := observe.RankSnapshot{Name: rc.Name}
		for _, s := range actors.Stages() {
			sc := rc.Stage(s)
			cum, n, sum := rc.Histogram(s, observe.StageBuckets)
			r.Stages = append(r.Stages, observe.StageCounts{Stage: s.String(), Items: sc.Items, Failures: sc.Failures,
				BusySeconds: sc.Busy.Seconds(), Workers: int64(sc.Workers), QueueCapacity: int64(sc.QueueCapacity),
				QueueLength: int64(sc.QueueLength), QueueFullSeconds: sc.QueueFull.Seconds(),
				Seconds: observe.Hist{Bounds: observe.StageBuckets, Cumulative: cum, Count: n, Sum: sum}})
		}
		d := rc.Delivered()
		r.Batches, r.Samples, r.Pads, r.Ready = d.Batches, d.Samples, d.Pads, d.Ready
		r.Seconds = rc.Elapsed().Seconds()
		r.Delivering, r.Epoch, r.Step = d.Delivering, d.LastEpoch, d.LastStep
		r.SlotsInUse, r.Slots = rc.SlotsInUse(), int64(rc.Stage(actors.StageBatch).Workers)
		r.OutageRetries = rc.StoreRetries()
		for _, f := range rc.Failures() {
			r.Failures = append(r.Failures, observe.FailureCount{Stage: f.Stage.String(), Class: f.Class, Count: f.Count})
		}
		out = append(out, r)
	}
	return out
}
