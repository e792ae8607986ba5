package observe

import (
	"context"
	"sort"
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

// CoordCollector exports a coordinator's metrics from src: the table's
// rows of GroupCoord, and of GroupJournal with a Journal.
type CoordCollector struct {
	prometheus.Collector
}

// NewCoordCollector returns the collector of src.
func NewCoordCollector(src CoordSource) *CoordCollector {
	if src.StatusTimeout <= 0 {
		src.StatusTimeout = 5 * time.Second
	}
	groups := []Group{GroupCoord}
	if src.Journal != nil {
		groups = append(groups, GroupJournal)
	}
	return &CoordCollector{Metrics.Collector(src.snapshot, groups)}
}

// snapshot asks the actor for its status (at most StatusTimeout).
func (src CoordSource) snapshot() Snapshot {
	ctx, cancel := context.WithTimeout(context.Background(), src.StatusTimeout)
	st, err := src.Status(ctx)
	cancel()
	s := Snapshot{Coord: &CoordSnapshot{Status: st, Answered: err == nil, Samples: src.Samples, Epochs: src.Epochs}}
	if src.Journal != nil {
		s.Journal = src.Journal.Counts()
	}
	return s
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

// JournalMeter is a coord.Journal that counts and times the writes and
// checks of the journal it wraps: the metrics' journal figures (their
// only source, Counts) and the last generation written.
type JournalMeter struct {
	J coord.Journal

	mu struct {
		sync.Mutex
		writes, checks map[string]uint64 // by outcome
		latency        []uint64          // per JournalWriteBuckets bucket, not cumulative; the last: above them
		count          uint64
		sum            float64
		gen            uint64
		token          string // the last resume token made
	}
}

var _ coord.Journal = (*JournalMeter)(nil)

// JournalWriteBuckets are the upper bounds, in seconds, of
// longshore_journal_write_seconds.
var JournalWriteBuckets = prometheus.ExponentialBuckets(0.0005, 2, 16)

// NewJournalMeter wraps j.
func NewJournalMeter(j coord.Journal) *JournalMeter {
	m := &JournalMeter{J: j}
	m.mu.writes, m.mu.checks = map[string]uint64{}, map[string]uint64{}
	m.mu.latency = make([]uint64, len(JournalWriteBuckets)+1)
	return m
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
	took := time.Since(t0).Seconds()
	j.mu.Lock()
	defer j.mu.Unlock()
	j.mu.latency[sort.SearchFloat64s(JournalWriteBuckets, took)]++
	j.mu.count++
	j.mu.sum += took
	j.mu.writes[outcome(err)]++
	if err == nil {
		j.mu.gen = gen
	}
	return gen, err
}

// Check implements coord.Journal.
func (j *JournalMeter) Check(ctx context.Context) error {
	err := j.J.Check(ctx)
	j.mu.Lock()
	j.mu.checks[outcome(err)]++
	j.mu.Unlock()
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

// Counts is what the journal did so far: the metrics' snapshot.
func (j *JournalMeter) Counts() *JournalCounts {
	j.mu.Lock()
	defer j.mu.Unlock()
	c := &JournalCounts{Generation: j.mu.gen,
		WriteSeconds: Hist{Bounds: JournalWriteBuckets, Cumulative: make([]uint64, len(JournalWriteBuckets)), Count: j.mu.count, Sum: j.mu.sum}}
	var cum uint64
	for i := range JournalWriteBuckets {
		cum += j.mu.latency[i]
		c.WriteSeconds.Cumulative[i] = cum
	}
	for _, o := range []string{"error", "ok"} {
		if n := j.mu.writes[o]; n > 0 {
			c.Writes = append(c.Writes, OutcomeCount{o, n})
		}
		if n := j.mu.checks[o]; n > 0 {
			c.Checks = append(c.Checks, OutcomeCount{o, n})
		}
	}
	return c
}
