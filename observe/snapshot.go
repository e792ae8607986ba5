package observe

import (
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/coord"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/wire"
)

// Snapshot is what a daemon counts at one moment, in neutral types: the
// table's rows (series.go) read their values from it. A nil part (or an
// empty list) exports nothing of its rows. The node's parts are filled
// from its pipeline by observe/pipeline; the coordinator's by
// NewCoordCollector and the status page.
type Snapshot struct {
	// Node is a node's pipeline, store and job.
	Node *NodeSnapshot
	// Trainers are the trainers' data-stall reports per rank (feed sink).
	Trainers []TrainerCounts
	// Gossip counts the daemon's inbound gossip streams.
	Gossip *gossip.StreamStats
	// Coord is the coordinator's state.
	Coord *CoordSnapshot
	// Journal counts the coordinator's journal writes and checks.
	Journal *JournalCounts
	// Process is what every daemon's control port and links did.
	Process *ProcessCounts
	// Conns counts an HTTP server's connections.
	Conns *ConnStats
}

// NodeSnapshot is a node's counts.
type NodeSnapshot struct {
	// Ranks are each rank's counters, over every pipeline it had, in a
	// stable order.
	Ranks []RankSnapshot
	// Decode counts the decodes abandoned at --decode-deadline.
	Decode *DecodeCores
	// Interval is the latest live-report interval (nil: none yet).
	Interval *Interval
	// Committed lists each rank's last acknowledged commit.
	Committed []Commit
	// Store, S3 and Pack count the dataset's store: its requests, the S3
	// client's HTTP-level work, the packed-sample store's chunks.
	Store *StoreCounts
	S3    *S3Counts
	Pack  *PackCounts
	// Mixture counts each source of a weighted mixture (--mixture): the
	// samples of it the node handed to its pipelines; nil without one.
	Mixture []SourceCount
	// Job is the job's size, when the node knows it (standalone and feed
	// modes; in a cluster the coordinator has the job's progress).
	Job *JobSize
}

// RankSnapshot is one rank's counters under its name ("0", or "n1/0" in
// a cluster): the rank label.
type RankSnapshot struct {
	Name   string
	Stages []StageCounts
	// Batches, Samples (padding included), Pads and Ready (found ready by
	// the trainer) delivered; Seconds the rank's pipelines ran.
	Batches, Samples, Pads, Ready int64
	Seconds                       float64
	// Delivering: a batch was delivered, of Epoch and Step.
	Delivering bool
	Epoch      int
	Step       int64
	// SlotsInUse of Slots batch slots are not free.
	SlotsInUse, Slots int64
	// OutageRetries counts fetches repeated while the store did not
	// answer.
	OutageRetries int64
	// Failures counts the rank's failed samples by stage and class.
	Failures []FailureCount
}

// StageCounts is one pipeline stage of a rank.
type StageCounts struct {
	Stage                               string
	Items, Failures                     int64
	BusySeconds                         float64
	Workers, QueueCapacity, QueueLength int64
	QueueFullSeconds                    float64
	// Seconds is the histogram of its task times (StageBuckets).
	Seconds Hist
}

// FailureCount is the failures of one stage and class.
type FailureCount struct {
	Stage, Class string
	Count        int64
}

// DecodeCores counts decodes abandoned and still running in C, and the
// decodes that waited for a core one of them held.
type DecodeCores struct{ Abandoned, Waits int64 }

// Interval is the figures of the latest live-report interval.
type Interval struct {
	Ranks []IntervalRank
	// Bottleneck is the stage that limited the node (one of
	// BottleneckStages).
	Bottleneck       string
	SamplesPerSecond float64
}

// IntervalRank is one rank's stages in the interval.
type IntervalRank struct {
	Name   string
	Stages []IntervalStage
}

// IntervalStage is a stage's busy ratio and its queue's occupancy in the
// interval.
type IntervalStage struct {
	Stage           string
	Busy, Occupancy float64
}

// BottleneckStages are the values longshore_bottleneck's stage label
// takes.
var BottleneckStages = []string{"fetch", "decode", "upload", "consumer", "source", "none"}

// Commit is a rank's last acknowledged commit.
type Commit struct {
	Rank  string
	Epoch int
	Step  int64
}

// StoreCounts is the dataset store's calls and bytes.
type StoreCounts struct {
	Requests                []StoreRequests
	BytesRead, BytesWritten int64
}

// StoreRequests counts calls of one operation with one outcome.
type StoreRequests struct {
	Op, Outcome string
	Count       int64
}

// S3Counts is the S3 client's HTTP-level counts.
type S3Counts struct {
	Requests, Timeouts, Stalls, BadResponses int64
	// Retries counts repeated requests by cause, in S3RetryCauses order.
	Retries                                          [6]int64
	BackoffSeconds                                   float64
	Rate, Budget                                     float64
	RateWaits                                        int64
	RateWaitSeconds                                  float64
	RateCuts, Throttled, Errors                      int64
	Hedges, HedgeWins, HedgesCancelled, HedgesDenied int64
}

// S3RetryCauses are the cause label's values of longshore_store_retries_total.
var S3RetryCauses = [6]string{"throttle", "server", "timeout", "conn", "bad_response", "stall"}

// PackCounts is the packed-sample store's chunk cache.
type PackCounts struct {
	CachedBytes, PeakBytes, Chunks, ChunkBytes, Hits, ReadAlone, Evictions, ChunkFailures int64
}

// JobSize is the samples a node delivers over the job (padding
// included) and its epochs.
type JobSize struct {
	Samples int64
	Epochs  int
}

// TrainerCounts is a rank's data-stall accounting as its trainers'
// clients reported it.
type TrainerCounts struct {
	Rank string
	// Steps batches waited for WaitSeconds in all (Wait: their histogram)
	// and computed on for ComputeSeconds.
	Steps          int64
	Wait           Hist
	ComputeSeconds float64
	// HeadspaceSteps replayed steps took HeadspaceSeconds.
	HeadspaceSteps   int64
	HeadspaceSeconds float64
}

// CoordSnapshot is a coordinator's state for the job.
type CoordSnapshot struct {
	// Status is the actor's answer; Answered is false when it gave none
	// (then only the job's size and coord_up are exported).
	Status   coord.Status
	Answered bool
	// Samples and Epochs are the job's.
	Samples int64
	Epochs  int
}

// JournalCounts is the journal's writes and checks.
type JournalCounts struct {
	// Writes and Checks by outcome ("ok", "error"; one that never
	// happened is absent).
	Writes, Checks []OutcomeCount
	// WriteSeconds is the histogram of write times.
	WriteSeconds Hist
	Generation   uint64
}

// OutcomeCount counts the calls with one outcome.
type OutcomeCount struct {
	Outcome string
	Count   uint64
}

// ProcessCounts is what the process's control port refused and what its
// control links did.
type ProcessCounts struct {
	Control wire.ControlCounts
	Links   cluster.LinkTotals
}

// ProcessNow reads the process's counts.
func ProcessNow() *ProcessCounts {
	return &ProcessCounts{Control: wire.ControlPortCounts(), Links: cluster.Links.Totals()}
}

// Hist is a histogram: Cumulative[i] observations were at most Bounds[i];
// Count in all, summing Sum.
type Hist struct {
	Bounds     []float64
	Cumulative []uint64
	Count      uint64
	Sum        float64
}

// SourceCount is one mixture source's count.
type SourceCount struct {
	Source  string
	Samples int64
}
