package observe

// Summary is the figures of the node's end-of-run summary (the lines it
// prints and --stats-json) that are also series: read from a snapshot
// through the table's rows whose Figure is the summary's (or the
// report's, for the delivered samples and the failures), so the summary
// and the metrics cannot disagree.
type Summary struct {
	// Samples (padding included), Pads and Batches delivered, over the
	// ranks.
	Samples, Pads, Batches int64
	// Failures counts failed samples by "<stage>/<class>".
	Failures map[string]int64
	// Stages are each stage's counts summed over the ranks, in the
	// rows' order of stages.
	Stages []SummaryStage
	// Store is the S3 client's work, when the store is S3.
	Store *SummaryStore
	// Pack is the packed-sample store's chunk reading, for a packed
	// dataset.
	Pack *SummaryPack
}

// SummaryStage is one stage's counts over the ranks.
type SummaryStage struct {
	Stage                    string
	Items, Failures, Workers int64
}

// Stage returns the stage named name's counts (zero if absent).
func (s Summary) Stage(name string) SummaryStage {
	for _, st := range s.Stages {
		if st.Stage == name {
			return st
		}
	}
	return SummaryStage{Stage: name}
}

// SummaryStore is the S3 client's figures of the summary.
type SummaryStore struct {
	Requests  int64
	Retries   [6]int64 // by S3RetryCauses
	Throttled int64
	// BackoffSeconds is the time slept between attempts.
	BackoffSeconds float64
	// Rate is the adaptive request-rate limit now, Budget the node's
	// share of the job's request budget (requests/s; 0: none).
	Rate, Budget float64
	// RateWaits counts requests the limiter held back, RateWaitSeconds
	// their wait.
	RateWaits       int64
	RateWaitSeconds float64
}

// SummaryPack is the packed-sample store's figures of the summary.
type SummaryPack struct {
	Chunks, ChunkBytes, PeakBytes, ReadAlone, Evictions int64
}

// The figures only the summary reads (it shares FigRankSamples and
// FigFailures with the report).
const (
	FigSummaryBatches        = "summary.batches"
	FigSummaryPads           = "summary.pads"
	FigSummaryStageItems     = "summary.stage.items"
	FigSummaryStageFailures  = "summary.stage.failures"
	FigSummaryStageWorkers   = "summary.stage.workers"
	FigSummaryStoreRequests  = "summary.store.requests"
	FigSummaryStoreRetries   = "summary.store.retries"
	FigSummaryStoreThrottled = "summary.store.throttled"
	FigSummaryStoreBackoff   = "summary.store.backoff_seconds"
	FigSummaryStoreRate      = "summary.store.rate"
	FigSummaryStoreBudget    = "summary.store.budget"
	FigSummaryStoreRateWaits = "summary.store.rate_waits"
	FigSummaryStoreRateWait  = "summary.store.rate_wait_seconds"
	FigSummaryPackChunks     = "summary.pack.chunks"
	FigSummaryPackChunkBytes = "summary.pack.chunk_bytes"
	FigSummaryPackPeakBytes  = "summary.pack.peak_bytes"
	FigSummaryPackReadAlone  = "summary.pack.read_alone"
	FigSummaryPackEvictions  = "summary.pack.evictions"
)

// NodeSummary is the summary's figures of s, read through t's rows.
func (t Table) NodeSummary(s Snapshot) Summary {
	v := t.Eval(s, GroupNode)
	sum := func(fig string) (total float64, any bool) {
		for _, x := range v.Figure(fig) {
			total, any = total+x.Value, true
		}
		return total, any
	}
	count := func(fig string) int64 { n, _ := sum(fig); return int64(n) }
	out := Summary{Samples: count(FigRankSamples), Pads: count(FigSummaryPads), Batches: count(FigSummaryBatches),
		Failures: map[string]int64{}}
	for _, x := range v.Figure(FigFailures) {
		out.Failures[x.Labels[0]+"/"+x.Labels[1]] += int64(x.Value)
	}
	// The stages, by the "stage" label (the first), summed over ranks.
	at := map[string]int{}
	for _, f := range []struct {
		fig string
		set func(*SummaryStage, int64)
	}{
		{FigSummaryStageItems, func(st *SummaryStage, n int64) { st.Items += n }},
		{FigSummaryStageFailures, func(st *SummaryStage, n int64) { st.Failures += n }},
		{FigSummaryStageWorkers, func(st *SummaryStage, n int64) { st.Workers += n }},
	} {
		for _, x := range v.Figure(f.fig) {
			i, ok := at[x.Labels[0]]
			if !ok {
				i = len(out.Stages)
				at[x.Labels[0]] = i
				out.Stages = append(out.Stages, SummaryStage{Stage: x.Labels[0]})
			}
			f.set(&out.Stages[i], int64(x.Value))
		}
	}
	if n, ok := sum(FigSummaryStoreRequests); ok {
		st := &SummaryStore{Requests: int64(n), Throttled: count(FigSummaryStoreThrottled)}
		st.BackoffSeconds, _ = sum(FigSummaryStoreBackoff)
		st.Rate, _ = sum(FigSummaryStoreRate)
		st.Budget, _ = sum(FigSummaryStoreBudget)
		st.RateWaits = count(FigSummaryStoreRateWaits)
		st.RateWaitSeconds, _ = sum(FigSummaryStoreRateWait)
		for _, x := range v.Figure(FigSummaryStoreRetries) {
			for i, c := range S3RetryCauses {
				if x.Labels[0] == c {
					st.Retries[i] += int64(x.Value)
				}
			}
		}
		out.Store = st
	}
	if n, ok := sum(FigSummaryPackChunks); ok {
		out.Pack = &SummaryPack{Chunks: int64(n), ChunkBytes: count(FigSummaryPackChunkBytes), PeakBytes: count(FigSummaryPackPeakBytes),
			ReadAlone: count(FigSummaryPackReadAlone), Evictions: count(FigSummaryPackEvictions)}
	}
	return out
}
