package observe

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/longshore/longshore/cluster/coord"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/internal/clock"
)

// The page: plain HTML, a stylesheet and a small script, served from the
// binary (no build step, no CDN).
//
//go:embed static
var static embed.FS

// JobInfo is what the status page says of the job beyond the
// coordinator's state.
type JobInfo struct {
	Dataset    string `json:"dataset"`
	Samples    int64  `json:"samples"`
	Epochs     int    `json:"epochs"`
	BatchSize  int    `json:"batch_size"`
	Balance    string `json:"balance"`
	Checkpoint string `json:"checkpoint,omitempty"`
}

// StatusPage is the coordinator's status page: GET / is the page, GET
// /status.json its content, refreshed by the page every second. Run
// samples the nodes' throughput for the chart.
type StatusPage struct {
	// Status asks the coordinator actor for its state.
	Status func(ctx context.Context) (coord.Status, error)
	Job    JobInfo
	// Journal, if set, gives the journal's generation and the last token.
	Journal *JournalMeter
	// Clock: nil is the real one.
	Clock clock.Clock
	// Every is how often Run samples throughput (0: 2 s), History how
	// many samples the chart keeps (0: 300, ten minutes at 2 s).
	Every   time.Duration
	History int

	mu struct {
		sync.Mutex
		points  []Point
		started time.Time
	}
}

// Point is one sample of the chart: each node's throughput, and the
// job's committed samples.
type Point struct {
	Time      time.Time          `json:"t"`
	Nodes     map[string]float64 `json:"nodes"` // samples/s by node
	Committed int64              `json:"committed"`
}

// StatusJSON is GET /status.json.
type StatusJSON struct {
	Now        time.Time      `json:"now"`
	Started    time.Time      `json:"started"`
	Job        JobInfo        `json:"job"`
	Done       bool           `json:"done"`
	Stopped    string         `json:"stopped,omitempty"` // why the coordinator stopped
	Progress   ProgressJSON   `json:"progress"`
	Bottleneck BottleneckJSON `json:"bottleneck"`
	Nodes      []NodeJSON     `json:"nodes"`
	Ranks      []RankJSON     `json:"ranks"`
	// TrainerWait is the job's data-stall share over every rank whose
	// trainer reported (StallShare -1: none did).
	TrainerWait StallJSON       `json:"trainer_wait"`
	Leases      map[string]int  `json:"leases"`
	Failures    []FailureJSON   `json:"failures"`
	Journal     *JournalJSON    `json:"journal,omitempty"`
	Counters    map[string]uint `json:"counters"`
	History     []Point         `json:"history"`
	// Mixture is each source of a weighted mixture; absent without one.
	Mixture []MixtureJSON `json:"mixture,omitempty"`
}

// MixtureJSON is one source of a weighted mixture: its size, its
// samples in committed history, and so the source epochs committed.
type MixtureJSON struct {
	Source       string  `json:"source"`
	Samples      int64   `json:"samples"`
	Committed    int64   `json:"committed"`
	SourceEpochs float64 `json:"source_epochs"`
}

// ProgressJSON is the job's progress and what is left.
type ProgressJSON struct {
	Epoch          int     `json:"epoch"`
	EpochsComplete int     `json:"epochs_complete"`
	Committed      int64   `json:"committed"`
	Total          int64   `json:"total"`
	Ratio          float64 `json:"ratio"`
	EpochCommitted int64   `json:"epoch_committed"`
	// PerSecond is samples committed per second over the last minute;
	// ETASeconds the time left at that rate (-1: unknown).
	PerSecond  float64 `json:"committed_per_second"`
	ETASeconds float64 `json:"eta_seconds"`
}

// BottleneckJSON is the stage most nodes name (ties: the slowest node's).
type BottleneckJSON struct {
	Stage  string `json:"stage"`
	Node   string `json:"node,omitempty"`
	Reason string `json:"reason,omitempty"`
	Advice string `json:"advice,omitempty"`
}

// NodeJSON is one node.
type NodeJSON struct {
	Node             string        `json:"node"`
	State            string        `json:"state"`
	Incarnation      uint64        `json:"incarnation"`
	ReportAgeSeconds float64       `json:"report_age_seconds"` // -1: no report
	SamplesPerSecond float64       `json:"samples_per_second"`
	Samples          int64         `json:"samples"`
	Failed           int64         `json:"failed"`
	Bottleneck       string        `json:"bottleneck"`
	Reason           string        `json:"bottleneck_reason,omitempty"`
	Advice           string        `json:"bottleneck_advice,omitempty"`
	Failures         []FailureJSON `json:"failures,omitempty"`
	// StoreRPS is the node's share of the job's store request budget
	// (the coordinator's --job-store-rps; 0: none).
	StoreRPS float64 `json:"store_rps"`
}

// RankJSON is one rank: the coordinator's view joined with its node's
// report.
type RankJSON struct {
	Rank           string `json:"rank"`
	Node           string `json:"node"`
	Epoch          int    `json:"epoch"`
	Leases         int    `json:"leases"`
	CommittedStep  int64  `json:"committed_step"`
	DeliveredEpoch int64  `json:"delivered_epoch"`
	DeliveredStep  int64  `json:"delivered_step"`
	Samples        int64  `json:"samples"`
	SlotsInUse     int64  `json:"slots_in_use"`
	// The rank's trainer's data-stall accounting as its client reported
	// it to the node: over TrainerSteps batches, seconds waiting for them
	// and computing between them, and the share waiting (-1: no report).
	TrainerSteps          int64   `json:"trainer_steps"`
	TrainerWaitSeconds    float64 `json:"trainer_wait_seconds"`
	TrainerComputeSeconds float64 `json:"trainer_compute_seconds"`
	StallShare            float64 `json:"stall_share"`
}

// StallJSON is the trainers' data-stall accounting summed over ranks.
type StallJSON struct {
	Steps          int64   `json:"steps"`
	WaitSeconds    float64 `json:"wait_seconds"`
	ComputeSeconds float64 `json:"compute_seconds"`
	StallShare     float64 `json:"stall_share"` // wait / (wait + compute); -1: no rank reported
}

// stallShare is wait / (wait + compute), -1 with neither.
func stallShare(wait, compute float64) float64 {
	if wait+compute <= 0 {
		return -1
	}
	return wait / (wait + compute)
}

// FailureJSON is a count of failures for one reason.
type FailureJSON struct {
	Reason string `json:"reason"`
	Count  int64  `json:"count"`
}

// JournalJSON is the journal's generation and the last resume token.
type JournalJSON struct {
	Generation uint64 `json:"generation"`
	LastToken  string `json:"last_token"`
}

func (p *StatusPage) clock() clock.Clock { return clock.Or(p.Clock) }

// Run samples the nodes' throughput every Every until ctx is done.
func (p *StatusPage) Run(ctx context.Context) {
	every := p.Every
	if every <= 0 {
		every = 2 * time.Second
	}
	t, tick := p.clock().NewTicker(every)
	defer t.Stop()
	p.sample(ctx)
	for {
		select {
		case <-tick:
			p.sample(ctx)
		case <-ctx.Done():
			return
		}
	}
}

func (p *StatusPage) sample(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	st, err := p.Status(sctx)
	cancel()
	if err != nil {
		return
	}
	pt := Point{Time: p.clock().Now(), Nodes: map[string]float64{}, Committed: Progress(st).Committed}
	for _, n := range st.Nodes {
		if n.Report != nil && n.State.Live() {
			pt.Nodes[n.Node] = n.Report.SamplesPerSecond
		}
	}
	keep := p.History
	if keep <= 0 {
		keep = 300
	}
	p.mu.Lock()
	if p.mu.started.IsZero() {
		p.mu.started = pt.Time
	}
	p.mu.points = append(p.mu.points, pt)
	if len(p.mu.points) > keep {
		p.mu.points = append([]Point(nil), p.mu.points[len(p.mu.points)-keep:]...)
	}
	p.mu.Unlock()
}

// Snapshot is what /status.json says now.
func (p *StatusPage) Snapshot(ctx context.Context) (StatusJSON, error) {
	st, err := p.Status(ctx)
	if err != nil {
		return StatusJSON{}, err
	}
	now := p.clock().Now()
	p.mu.Lock()
	hist := append([]Point(nil), p.mu.points...)
	started := p.mu.started
	p.mu.Unlock()
	out := StatusJSON{Now: now, Started: started, Job: p.Job, Done: st.Done, History: hist, Leases: map[string]int{}, Counters: map[string]uint{}}
	if st.Err != nil {
		out.Stopped = st.Err.Error()
	}
	// The figures the metrics show too, through the table's rows.
	v := Metrics.Eval(Snapshot{Coord: &CoordSnapshot{Status: st, Answered: true, Samples: p.Job.Samples, Epochs: p.Job.Epochs}}, GroupCoord)
	for _, x := range v.Figure(FigStatusLeases) {
		out.Leases[x.Labels[0]] = int(x.Value)
	}
	committed := map[string]int64{}
	for _, x := range v.Figure(FigStatusMixture) {
		committed[x.Labels[0]] = int64(x.Value)
	}
	for _, s := range st.Mixture {
		mj := MixtureJSON{Source: s.Source, Samples: s.Samples, Committed: committed[s.Source]}
		if s.Samples > 0 {
			mj.SourceEpochs = float64(mj.Committed) / float64(s.Samples)
		}
		out.Mixture = append(out.Mixture, mj)
	}
	for _, x := range v.FigurePrefix(FigStatusCounter) {
		out.Counters[strings.TrimPrefix(x.Series.Figure, FigStatusCounter)] = uint(x.Value)
	}
	fig := func(name string) float64 {
		if x, ok := v.Lookup(name); ok {
			return x.Value
		}
		return 0
	}
	total := int64(fig(FigStatusTotal))
	out.Progress = ProgressJSON{Epoch: int(fig(FigStatusEpoch)), EpochsComplete: int(fig(FigStatusEpochsComplete)),
		Committed: int64(fig(FigStatusCommitted)), Total: total, Ratio: fig(FigStatusRatio),
		EpochCommitted: Progress(st).EpochCommitted, ETASeconds: -1}
	pr := out.Progress
	// The rate over the last minute of samples.
	if n := len(hist); n >= 2 {
		last := hist[n-1]
		first := hist[0]
		for _, h := range hist {
			if last.Time.Sub(h.Time) <= time.Minute {
				first = h
				break
			}
		}
		if dt := last.Time.Sub(first.Time).Seconds(); dt > 0 {
			out.Progress.PerSecond = float64(last.Committed-first.Committed) / dt
			if out.Progress.PerSecond > 0 {
				out.Progress.ETASeconds = float64(total-pr.Committed) / out.Progress.PerSecond
			}
		}
	}
	if st.Done {
		out.Progress.ETASeconds = 0
	}

	reports := map[string]coord.NodeStatus{}
	failures := map[string]int64{}
	votes := map[string]int{}
	slowest := map[string]float64{}
	for _, n := range st.Nodes {
		reports[n.Node] = n
		nj := NodeJSON{Node: n.Node, State: string(n.State), Incarnation: n.Incarnation, ReportAgeSeconds: -1, StoreRPS: n.StoreRPS}
		if r := n.Report; r != nil {
			nj.ReportAgeSeconds = now.Sub(n.ReportAt).Seconds()
			nj.SamplesPerSecond, nj.Samples, nj.Failed = r.SamplesPerSecond, r.Samples, r.Failed
			nj.Bottleneck, nj.Reason, nj.Advice = r.Bottleneck, r.BottleneckReason, r.BottleneckAdvice
			for _, f := range r.Failures {
				nj.Failures = append(nj.Failures, FailureJSON{f.Reason, f.Count})
				failures[f.Reason] += f.Count
			}
			if n.State.Live() && r.Bottleneck != "" {
				votes[r.Bottleneck]++
				if v, ok := slowest[r.Bottleneck]; !ok || r.SamplesPerSecond < v {
					slowest[r.Bottleneck] = r.SamplesPerSecond
				}
			}
		}
		out.Nodes = append(out.Nodes, nj)
	}
	out.Bottleneck = pickBottleneck(out.Nodes, votes, slowest)
	for reason, c := range failures {
		out.Failures = append(out.Failures, FailureJSON{reason, c})
	}
	sort.Slice(out.Failures, func(i, j int) bool {
		a, b := out.Failures[i], out.Failures[j]
		return a.Count > b.Count || a.Count == b.Count && a.Reason < b.Reason
	})
	for _, rc := range st.Census.Ranks {
		rj := RankJSON{Rank: rc.Rank, Node: rc.Node, Epoch: rc.Epoch, Leases: rc.Leases, CommittedStep: rc.Step,
			DeliveredEpoch: -1, DeliveredStep: -1, StallShare: -1}
		if n, ok := reports[rc.Node]; ok && n.Report != nil {
			for _, rr := range n.Report.Ranks {
				if rr.Rank == rc.Rank {
					rj.DeliveredEpoch, rj.DeliveredStep, rj.Samples, rj.SlotsInUse = rr.Epoch, rr.Step, rr.Samples, rr.SlotsInUse
					addStall(&rj, &out.TrainerWait, rr)
				}
			}
		}
		out.Ranks = append(out.Ranks, rj)
	}
	out.TrainerWait.StallShare = stallShare(out.TrainerWait.WaitSeconds, out.TrainerWait.ComputeSeconds)
	if j := p.Journal; j != nil {
		out.Journal = &JournalJSON{Generation: j.Generation(), LastToken: j.LastToken()}
	}
	return out, nil
}

// addStall puts rr's data-stall accounting on rj and adds it to job.
func addStall(rj *RankJSON, job *StallJSON, rr *wire.RankReport) {
	if rr.StallSteps <= 0 {
		return
	}
	w, c := float64(rr.WaitUs)/1e6, float64(rr.ComputeUs)/1e6
	rj.TrainerSteps, rj.TrainerWaitSeconds, rj.TrainerComputeSeconds, rj.StallShare = rr.StallSteps, w, c, stallShare(w, c)
	job.Steps += rr.StallSteps
	job.WaitSeconds += w
	job.ComputeSeconds += c
}

// ClusterBottleneck is the stage most alive nodes name in their latest
// reports (ties: the slowest node's), "none" before any names one.
func ClusterBottleneck(st coord.Status) string {
	votes, slowest := map[string]int{}, map[string]float64{}
	for _, n := range st.Nodes {
		r := n.Report
		if r == nil || r.Bottleneck == "" || !n.State.Live() {
			continue
		}
		votes[r.Bottleneck]++
		if v, ok := slowest[r.Bottleneck]; !ok || r.SamplesPerSecond < v {
			slowest[r.Bottleneck] = r.SamplesPerSecond
		}
	}
	return pickBottleneck(nil, votes, slowest).Stage
}

// pickBottleneck is the stage most alive nodes name; a tie goes to the
// stage the slowest of them names.
func pickBottleneck(nodes []NodeJSON, votes map[string]int, slowest map[string]float64) BottleneckJSON {
	best := ""
	for stage, v := range votes {
		if best == "" || v > votes[best] || v == votes[best] && (slowest[stage] < slowest[best] || slowest[stage] == slowest[best] && stage < best) {
			best = stage
		}
	}
	out := BottleneckJSON{Stage: best}
	if best == "" {
		out.Stage = "none"
		return out
	}
	for _, n := range nodes {
		if n.Bottleneck == best && n.SamplesPerSecond == slowest[best] {
			out.Node, out.Reason, out.Advice = n.Node, n.Reason, n.Advice
			break
		}
	}
	return out
}

// ServeHTTP serves / (the page), /status.json and the page's files.
func (p *StatusPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/status.json":
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		s, err := p.Snapshot(ctx)
		if err != nil {
			http.Error(w, "the coordinator did not answer: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		_ = enc.Encode(s)
	default:
		sub, _ := fs.Sub(static, "static")
		http.FileServer(http.FS(sub)).ServeHTTP(w, r)
	}
}
