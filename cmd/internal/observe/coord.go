package observe

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/coord"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/journal"
)

// CoordSource is what a coordinator's metrics read.
type CoordSource struct {
	// Status asks the coordinator actor for its state (coord.Status).
	Status func(ctx context.Context) (coord.Status, error)
	// Samples and Epochs are the job's.
	Samples int64
	Epochs  int
	// Journal, if set, is the metered journal the coordinator writes.
	Journal *JournalMeter
	// StatusTimeout bounds a scrape's wait for the actor; 0: 5 s.
	StatusTimeout time.Duration
	// Gossip, if set, counts the coordinator's inbound gossip streams
	// (NewGossipCollector).
	Gossip func() gossip.StreamStats
}

type coordMetrics struct {
	up, nodes, nodeStates, ranks, leases, done               metric
	events, grants, revokes, commits, fenced, stale, invalid metric
	evictions, returned, padding, held                       metric
	jobEpochs, jobSamples, epochsComplete, epoch, committed  metric
	progress                                                 metric
	rankLeases, rankEpoch, rankStep, rankCommitted           metric
}

func newCoordMetrics() *coordMetrics {
	r := []string{"rank"}
	return &coordMetrics{
		up:             newMetric("coord_up", gauge, "1 if the coordinator answered the scrape, 0 if it has stopped (a journal failure, another coordinator took over)."),
		nodes:          newMetric("coord_nodes", gauge, "Node lives the coordinator counts alive."),
		nodeStates:     newMetric("coord_node_states", gauge, "Nodes heard of, by state as on the status page (alive, suspect, silent, evicted, left, joining); every state is exported, 0 included.", "state"),
		ranks:          newMetric("coord_ranks", gauge, "Ranks alive."),
		leases:         newMetric("coord_leases", gauge, "Leases of open epochs not wholly committed, by state (active, delivered, revoking).", "state"),
		done:           newMetric("coord_done", gauge, "1 once every epoch is committed."),
		events:         newMetric("coord_events_total", counter, "Events the state machine stepped."),
		grants:         newMetric("coord_grants_total", counter, "Leases granted (padding included)."),
		revokes:        newMetric("coord_revokes_total", counter, "Revokes sent (lease splits asked for)."),
		commits:        newMetric("coord_commits_total", counter, "Commits applied and acknowledged."),
		fenced:         newMetric("coord_fenced_total", counter, "Messages refused from ended sessions."),
		stale:          newMetric("coord_stale_total", counter, "Messages about leases or epochs no longer current."),
		invalid:        newMetric("coord_invalid_total", counter, "Messages that contradicted the state (a sender's bug)."),
		evictions:      newMetric("coord_evictions_total", counter, "Node lives ended (failures, leaves, revoke timeouts)."),
		returned:       newMetric("coord_returned_positions_total", counter, "Positions departed ranks held beyond their commits, returned to be issued again."),
		padding:        newMetric("coord_padding_positions_total", counter, "Padding positions issued."),
		held:           newMetric("coord_held_requests_total", counter, "Requests held back until --min-ranks ranks joined."),
		jobEpochs:      newMetric("coord_job_epochs", gauge, "Epochs of the job."),
		jobSamples:     newMetric("coord_job_samples", gauge, "Real samples of the whole job (dataset samples times epochs)."),
		epochsComplete: newMetric("coord_epochs_complete", gauge, "Epochs every real sample of which is committed."),
		epoch:          newMetric("coord_epoch", gauge, "The oldest epoch not complete (the job's epochs when done)."),
		committed:      newMetric("coord_committed_samples", gauge, "Real samples committed, over every epoch."),
		progress:       newMetric("coord_progress_ratio", gauge, "Fraction of the job's real samples committed."),
		rankLeases:     newMetric("coord_rank_leases", gauge, "Leases a rank holds in open epochs, not wholly committed.", r...),
		rankEpoch:      newMetric("coord_rank_epoch", gauge, "Oldest open epoch a rank has a stream in.", r...),
		rankStep:       newMetric("coord_rank_committed_step", gauge, "Step of a rank's last commit in that epoch.", r...),
		rankCommitted:  newMetric("coord_rank_committed_positions", gauge, "Positions a rank has committed in open epochs.", r...),
	}
}

func (m *coordMetrics) all() []metric {
	return []metric{m.up, m.nodes, m.nodeStates, m.ranks, m.leases, m.done, m.events, m.grants, m.revokes, m.commits, m.fenced, m.stale,
		m.invalid, m.evictions, m.returned, m.padding, m.held, m.jobEpochs, m.jobSamples, m.epochsComplete, m.epoch,
		m.committed, m.progress, m.rankLeases, m.rankEpoch, m.rankStep, m.rankCommitted}
}

// CoordCollector exports a coordinator's metrics from src.
type CoordCollector struct {
	src CoordSource
	m   *coordMetrics
}

var _ prometheus.Collector = (*CoordCollector)(nil)

// NewCoordCollector returns the collector of src.
func NewCoordCollector(src CoordSource) *CoordCollector {
	if src.StatusTimeout <= 0 {
		src.StatusTimeout = 5 * time.Second
	}
	return &CoordCollector{src: src, m: newCoordMetrics()}
}

// Describe implements prometheus.Collector.
func (c *CoordCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.m.all() {
		ch <- m.desc
	}
	if c.src.Journal != nil {
		c.src.Journal.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c *CoordCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	if c.src.Journal != nil {
		c.src.Journal.Collect(ch)
	}
	m.jobEpochs.emit(ch, float64(c.src.Epochs))
	m.jobSamples.emit(ch, float64(c.src.Samples*int64(c.src.Epochs)))
	ctx, cancel := context.WithTimeout(context.Background(), c.src.StatusTimeout)
	st, err := c.src.Status(ctx)
	cancel()
	if err != nil || st.Err != nil {
		m.up.emit(ch, 0)
		if err != nil {
			return
		}
	} else {
		m.up.emit(ch, 1)
	}
	s, cs := st.Stats, st.Census
	m.nodes.emit(ch, float64(cs.Nodes))
	byState := map[coord.NodeState]int{}
	for _, n := range st.Nodes {
		byState[n.State]++
	}
	for _, s := range coord.NodeStates {
		m.nodeStates.emit(ch, float64(byState[s]), string(s))
	}
	m.ranks.emit(ch, float64(len(cs.Ranks)))
	m.leases.emit(ch, float64(cs.Leases.Active), "active")
	m.leases.emit(ch, float64(cs.Leases.Delivered), "delivered")
	m.leases.emit(ch, float64(cs.Leases.Revoking), "revoking")
	m.done.emit(ch, b2f(st.Done))
	for _, x := range []struct {
		m metric
		v uint64
	}{{m.events, s.Events}, {m.grants, s.Grants}, {m.revokes, s.Revokes}, {m.commits, s.Commits}, {m.fenced, s.Fenced},
		{m.stale, s.Stale}, {m.invalid, s.Invalid}, {m.evictions, s.Evictions}, {m.returned, s.Returned},
		{m.padding, s.PadPositions}, {m.held, s.HeldRequests}} {
		x.m.emit(ch, float64(x.v))
	}
	p := Progress(st)
	m.epochsComplete.emit(ch, float64(p.EpochsComplete))
	m.epoch.emit(ch, float64(p.Epoch))
	m.committed.emit(ch, float64(p.Committed))
	if job := c.src.Samples * int64(c.src.Epochs); job > 0 {
		m.progress.emit(ch, float64(p.Committed)/float64(job))
	}
	for _, r := range cs.Ranks {
		m.rankLeases.emit(ch, float64(r.Leases), r.Rank)
		m.rankCommitted.emit(ch, float64(r.Committed), r.Rank)
		if r.Epoch >= 0 {
			m.rankEpoch.emit(ch, float64(r.Epoch), r.Rank)
		}
		if r.Step >= 0 {
			m.rankStep.emit(ch, float64(r.Step), r.Rank)
		}
	}
}

// JobProgress is how far a job is, from the coordinator's status.
type JobProgress struct {
	// Epoch is the oldest epoch not complete (Epochs when done).
	Epoch          int
	EpochsComplete int
	// Committed counts real samples committed over every epoch; in
	// Epoch, EpochCommitted of samples.
	Committed      int64
	EpochCommitted int64
}

// Progress sums st's epochs.
func Progress(st coord.Status) JobProgress {
	p := JobProgress{Epoch: len(st.Epochs)}
	for i, e := range st.Epochs {
		if e.Complete {
			p.EpochsComplete++
		}
		p.Committed += e.Committed
		if !e.Complete && p.Epoch == len(st.Epochs) {
			p.Epoch, p.EpochCommitted = i, e.Committed
		}
	}
	return p
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// JournalMeter is a coord.Journal that counts and times the writes and
// checks of the journal it wraps: the metrics' journal figures (their
// only source) and the last generation written.
type JournalMeter struct {
	J coord.Journal

	writes, checks *prometheus.CounterVec
	latency        prometheus.Histogram
	generation     prometheus.Gauge
	mu             struct {
		sync.Mutex
		gen   uint64
		token string // the last resume token made
	}
}

var _ coord.Journal = (*JournalMeter)(nil)

// NewJournalMeter wraps j.
func NewJournalMeter(j coord.Journal) *JournalMeter {
	return &JournalMeter{
		J: j,
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "journal_writes_total",
			Help: "Journal generations written, by outcome (ok, error)."}, []string{"outcome"}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "journal_checks_total",
			Help: "Checks that no other coordinator took the journal over, by outcome."}, []string{"outcome"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "journal_write_seconds",
			Help: "Time a journal write took (the commits it makes durable wait for it).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "journal_generation",
			Help: "The last journal generation written."}),
	}
}

func outcome(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// Write implements coord.Journal.
func (j *JournalMeter) Write(ctx context.Context, s cluster.State, peers []string) (uint64, error) {
	t0 := time.Now()
	gen, err := j.J.Write(ctx, s, peers)
	j.latency.Observe(time.Since(t0).Seconds())
	j.writes.WithLabelValues(outcome(err)).Inc()
	if err == nil {
		j.generation.Set(float64(gen))
		j.mu.Lock()
		j.mu.gen = gen
		j.mu.Unlock()
	}
	return gen, err
}

// Check implements coord.Journal.
func (j *JournalMeter) Check(ctx context.Context) error {
	err := j.J.Check(ctx)
	j.checks.WithLabelValues(outcome(err)).Inc()
	return err
}

// Token implements coord.Journal.
func (j *JournalMeter) Token(gen uint64, epoch int, step int64) journal.Token {
	t := j.J.Token(gen, epoch, step)
	j.mu.Lock()
	j.mu.token = t.String()
	j.mu.Unlock()
	return t
}

// Generation is the last generation written (0: none yet).
func (j *JournalMeter) Generation() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.mu.gen
}

// LastToken is the last resume token the coordinator handed out with an
// ack ("": none yet).
func (j *JournalMeter) LastToken() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.mu.token
}

// Describe implements prometheus.Collector.
func (j *JournalMeter) Describe(ch chan<- *prometheus.Desc) {
	j.writes.Describe(ch)
	j.checks.Describe(ch)
	j.latency.Describe(ch)
	j.generation.Describe(ch)
}

// Collect implements prometheus.Collector.
func (j *JournalMeter) Collect(ch chan<- prometheus.Metric) {
	j.writes.Collect(ch)
	j.checks.Collect(ch)
	j.latency.Collect(ch)
	j.generation.Collect(ch)
}
