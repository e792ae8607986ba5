package actors

import (
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"time"
)

// Counters is a cumulative snapshot of a pipeline's numbers, or of
// several pipelines' added up: every count in it only grows during a run,
// so two snapshots' difference (Since) is what happened between them, and
// what a rank did over pipelines that served it one after another is
// their sum (Add; a Tally keeps it). Stats turns Counters into the
// summary's figures (busy fractions, percentiles, the bottleneck); the
// metrics read the counts themselves. The summary, the metrics and the
// live bottleneck report therefore show the same numbers.
//
// The zero value is empty. A Counters is an immutable snapshot: copies
// share it (the stages' histograms take about 40 KB), and Since, Add and
// MergeCounters make new ones.
type Counters struct{ raw *rawStats }

var emptyRaw = rawStats{rank: -1}

// r is the snapshot's numbers (the empty ones for the zero value).
func (c Counters) r() *rawStats {
	if c.raw == nil {
		return &emptyRaw
	}
	return c.raw
}

// moreRec is what the recorder keeps beyond the summary's figures, for
// Counters: the last batch delivered, failures by class, the slots in
// use.
type moreRec struct {
	delivering bool          // a batch has been delivered
	lastEpoch  int           // of the last batch delivered
	lastStep   int64         // ...
	lastAt     time.Duration // when, counted as Elapsed is
	slotsUsed  int64         // at the snapshot
	classes    map[groupKey]int64
}

func (m *moreRec) delivered(b *Batch, at time.Duration) {
	m.delivering, m.lastEpoch, m.lastStep, m.lastAt = true, b.Epoch, b.Step, at
}

func (m *moreRec) clone(slotsUsed int64) moreRec {
	out := *m
	out.classes = maps.Clone(m.classes)
	out.slotsUsed = slotsUsed
	return out
}

// add adds o's counts into m. later: o comes after m in time (the same
// rank's next pipeline), so its last batch and its slots are the ones
// now (Add sets lastAt); otherwise (ranks side by side) slots add up,
// the last batch means nothing and lastAt is the latest.
func (m *moreRec) add(o *moreRec, later bool) {
	if len(o.classes) > 0 && m.classes == nil {
		m.classes = map[groupKey]int64{}
	}
	for k, n := range o.classes {
		m.classes[k] += n
	}
	if later {
		if o.delivering {
			m.delivering, m.lastEpoch, m.lastStep = true, o.lastEpoch, o.lastStep
		}
		m.slotsUsed = o.slotsUsed
		return
	}
	m.delivering, m.lastEpoch, m.lastStep = false, 0, 0
	m.lastAt = max(m.lastAt, o.lastAt)
	m.slotsUsed += o.slotsUsed
}

// failure counts a recorded sample failure by stage and class (the
// failure book's grouping).
func (r *recorder) failure(s Stage, class string) {
	r.mu.Lock()
	if r.mu.more.classes == nil {
		r.mu.more.classes = map[groupKey]int64{}
	}
	r.mu.more.classes[groupKey{s, class}]++
	r.mu.Unlock()
}

// Counters returns the pipeline's counters now.
func (p *Pipeline) Counters() Counters {
	raw := p.rec.raw(p.rank)
	return Counters{raw: &raw}
}

// RankCounters returns each rank's counters now, by rank.
func (n *Node) RankCounters() []Counters {
	out := make([]Counters, len(n.ranks))
	for i, p := range n.ranks {
		out[i] = p.Counters()
	}
	return out
}

// Counters returns the node's counters now: its ranks' merged
// (MergeCounters).
func (n *Node) Counters() Counters { return MergeCounters(n.RankCounters()...) }

// MergeCounters merges the counters of ranks that run side by side (a
// node's): counts and task times add up, Elapsed is the longest rank's,
// queue occupancies are averaged (Stats of the merge is what Node.Stats
// says). Rank is -1.
func MergeCounters(cs ...Counters) Counters {
	raws := make([]rawStats, len(cs))
	for i := range cs {
		raws[i] = *cs[i].r()
	}
	m := mergeRaw(raws)
	return Counters{raw: &m}
}

// Stats returns the figures of the counters: what Pipeline.Stats and
// Node.Stats say for a whole run, or for the interval between two
// snapshots (Since).
func (c Counters) Stats() Stats { return c.r().stats() }

// Rank is the rank counted (-1: merged over a node's ranks).
func (c Counters) Rank() int { return c.r().rank }

// Elapsed is the time counted: from the pipeline's start to its end (or
// the snapshot), summed over a Tally's pipelines.
func (c Counters) Elapsed() time.Duration { return c.r().elapsed }

// Since returns what happened between prev and c, two snapshots of the
// same pipeline, node or Tally (prev first): counts are differences,
// Elapsed the time between them, and Stats of it the figures of that
// interval alone — the live bottleneck report. Gauges (slots in use, the
// last batch, workers, capacities) are c's.
func (c Counters) Since(prev Counters) Counters {
	raw := *c.r()
	out := Counters{raw: &raw}
	r, p := &raw, prev.r()
	r.elapsed = max(r.elapsed-p.elapsed, 0)
	r.nextCalls = max(r.nextCalls-p.nextCalls, 0)
	r.nextReady = max(r.nextReady-p.nextReady, 0)
	r.samples = max(r.samples-p.samples, 0)
	r.pads = max(r.pads-p.pads, 0)
	r.storeRetries = max(r.storeRetries-p.storeRetries, 0)
	for s := range r.stages {
		x, y := &r.stages[s], &p.stages[s]
		x.items = max(x.items-y.items, 0)
		x.failures = max(x.failures-y.failures, 0)
		x.busy = max(x.busy-y.busy, 0)
		x.qArea = max(x.qArea-y.qArea, 0)
		x.hist.sub(&y.hist)
	}
	r.more.classes = maps.Clone(r.more.classes)
	for k, n := range p.more.classes {
		if d := r.more.classes[k] - n; d > 0 {
			r.more.classes[k] = d
		} else {
			delete(r.more.classes, k)
		}
	}
	return out
}

// Add returns c followed by later: the counters of one rank's pipelines
// that ran one after the other (what a Tally adds up). Counts, task times
// and Elapsed add up; gauges are later's.
func (c Counters) Add(later Counters) Counters {
	raw := *c.r()
	out := Counters{raw: &raw}
	r, l := &raw, later.r()
	if r.ranks == 0 {
		r.rank = l.rank
	}
	r.ranks = max(r.ranks, l.ranks)
	if r.firstBatch == 0 && l.firstBatch > 0 {
		r.firstBatch = r.elapsed + l.firstBatch
	}
	lastAt := r.more.lastAt
	if l.more.delivering {
		lastAt = r.elapsed + l.more.lastAt
	}
	r.elapsed += l.elapsed
	r.nextCalls += l.nextCalls
	r.nextReady += l.nextReady
	r.samples += l.samples
	r.pads += l.pads
	r.storeRetries += l.storeRetries
	r.readAhead = l.readAhead
	for s := range r.stages {
		x, y := &r.stages[s], &l.stages[s]
		x.items += y.items
		x.failures += y.failures
		x.hist.merge(&y.hist)
		x.busy += y.busy
		x.workers = max(x.workers, y.workers)
		x.qCap = max(x.qCap, y.qCap)
		x.qArea += y.qArea
		x.qLen = y.qLen
	}
	r.more = r.more.clone(r.more.slotsUsed)
	r.more.add(&l.more, true)
	r.more.lastAt = lastAt
	return out
}

// StageCounters are one stage's counts.
type StageCounters struct {
	Stage Stage
	// Items is the tasks done (failed ones included), Failures those
	// that failed.
	Items, Failures int64
	// Busy is the summed task time (for feed: the consumer's waits).
	Busy time.Duration
	// Workers is the stage's concurrency; Busy/(Workers*Elapsed) is its
	// busy fraction.
	Workers int
	// QueueCapacity bounds the queue after the stage; QueueFull is the
	// integral of its filled fraction over time (QueueFull/Elapsed is the
	// occupancy); QueueLength is its length at the snapshot.
	QueueCapacity int
	QueueFull     time.Duration
	QueueLength   int
}

// Stages lists the pipeline's stages in order.
func Stages() []Stage {
	out := make([]Stage, numStages)
	for i := range out {
		out[i] = Stage(i)
	}
	return out
}

// Stage returns stage s's counts.
func (c Counters) Stage(s Stage) StageCounters {
	if s >= numStages {
		return StageCounters{Stage: s}
	}
	x := &c.r().stages[s]
	return StageCounters{Stage: s, Items: x.items, Failures: x.failures, Busy: x.busy, Workers: x.workers,
		QueueCapacity: x.qCap, QueueFull: time.Duration(x.qArea * float64(time.Second)), QueueLength: x.qLen}
}

// Histogram returns stage s's task times as a cumulative histogram over
// upper bounds in seconds (ascending): cum[i] counts the tasks that took
// at most bounds[i] (to the recorder's resolution: 1/16 of a power of
// two), n all tasks and sum their total in seconds — what a Prometheus
// histogram wants.
func (c Counters) Histogram(s Stage, bounds []float64) (cum []uint64, n uint64, sum float64) {
	cum = make([]uint64, len(bounds))
	if s >= numStages {
		return cum, 0, 0
	}
	h := &c.r().stages[s].hist
	b, seen := 0, uint64(0)
	for i, k := range h.counts {
		_, hi := histRange(i)
		for b < len(bounds) && hi > bounds[b]*1e9 {
			cum[b] = seen
			b++
		}
		seen += k
	}
	for ; b < len(bounds); b++ {
		cum[b] = seen
	}
	return cum, h.n, h.sum / 1e9
}

// Delivery counts what the consumer got.
type Delivery struct {
	// Batches and Samples delivered (padding included); Pads of them
	// repeated to even out ranks; Ready the Next calls that found a batch
	// waiting.
	Batches, Samples, Pads, Ready int64
	// Delivering says a batch was delivered; LastEpoch and LastStep are
	// the last one's (meaningless merged over ranks).
	Delivering bool
	LastEpoch  int
	LastStep   int64
	// LastAt is when the last batch was delivered, counted as Elapsed
	// is (merged over ranks: the latest): the time the ranks took to
	// deliver what they did, without the wait for the end of a job
	// after it.
	LastAt time.Duration
}

// Delivered returns what the consumer got.
func (c Counters) Delivered() Delivery {
	r := c.r()
	return Delivery{Batches: r.nextCalls, Samples: r.samples, Pads: r.pads, Ready: r.nextReady,
		Delivering: r.more.delivering, LastEpoch: r.more.lastEpoch, LastStep: r.more.lastStep, LastAt: r.more.lastAt}
}

// StoreRetries counts fetches repeated while the store did not answer.
func (c Counters) StoreRetries() int64 { return c.r().storeRetries }

// SlotsInUse is how many batch slots were not free at the snapshot
// (being filled, uploaded, or held by the consumer).
func (c Counters) SlotsInUse() int64 { return c.r().more.slotsUsed }

// FailureCount is how many samples failed in one stage with one class.
type FailureCount struct {
	Stage Stage
	Class string
	Count int64
}

// Failures counts the failures recorded (in the failure book: those of a
// run being closed are not), by stage and class, ordered by stage then
// class.
func (c Counters) Failures() []FailureCount {
	classes := c.r().more.classes
	out := make([]FailureCount, 0, len(classes))
	for k, n := range classes {
		out = append(out, FailureCount{Stage: k.stage, Class: k.class, Count: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Stage != out[j].Stage {
			return out[i].Stage < out[j].Stage
		}
		return out[i].Class < out[j].Class
	})
	return out
}

func (h *histogram) sub(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] -= min(c, h.counts[i])
	}
	h.n -= min(o.n, h.n)
	h.sum = math.Max(h.sum-o.sum, 0)
}

// Tally adds up the pipelines that serve one rank one after another (a
// cluster rank's sessions, a feed rank's reopened streams): the counters
// and failure reports of the pipelines it let go, plus the live one's.
// Each pipeline must have its own failure book (NewPipeline's), not a
// Node's shared one. Safe for concurrent use.
type Tally struct {
	mu struct {
		sync.Mutex
		retired Counters
		report  FailureReport
		live    *Pipeline
	}
}

// NewTally returns an empty tally for rank.
func NewTally(rank int) *Tally {
	t := &Tally{}
	t.mu.retired = Counters{raw: &rawStats{rank: rank, ranks: 1}}
	return t
}

// Use makes p (nil: none) the rank's pipeline from now on; the previous
// one's counters and failures are kept as they are now.
func (t *Tally) Use(p *Pipeline) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.live == p {
		return
	}
	if old := t.mu.live; old != nil {
		t.mu.retired = t.mu.retired.Add(old.Counters())
		t.mu.report = MergeReports(t.mu.report, old.Failures())
	}
	t.mu.live = p
}

// Live is the rank's pipeline now (Use), or nil.
func (t *Tally) Live() *Pipeline {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.live
}

// Counters returns the rank's counters over every pipeline it had.
func (t *Tally) Counters() Counters {
	t.mu.Lock()
	c, live := t.mu.retired, t.mu.live
	t.mu.Unlock()
	if live != nil {
		c = c.Add(live.Counters())
	}
	return c
}

// Failures returns the rank's failure report over every pipeline it had.
func (t *Tally) Failures() FailureReport {
	t.mu.Lock()
	r, live := t.mu.report, t.mu.live
	t.mu.Unlock()
	if live != nil {
		r = MergeReports(r, live.Failures())
	}
	return r
}

// MergeReports adds up failure reports of separate failure books (ranks
// or pipelines with budgets of their own): counts add up, groups of the
// same stage and class merge (keeping the first examples), records are
// kept up to DefaultConfig().MaxFailureRecords. The budget is b's (or
// a's, if b has none).
func MergeReports(a, b FailureReport) FailureReport {
	out := FailureReport{
		Attempted: a.Attempted + b.Attempted, Failed: a.Failed + b.Failed, Budget: b.Budget,
		Allowed: a.Allowed + b.Allowed, Dropped: a.Dropped + b.Dropped,
	}
	if out.Budget == "" {
		out.Budget = a.Budget
	}
	groups := map[groupKey]*FailureGroup{}
	var order []groupKey
	for _, g := range slices.Concat(a.Groups, b.Groups) {
		k := groupKey{g.Stage, g.Class}
		m := groups[k]
		if m == nil {
			m = &FailureGroup{Stage: g.Stage, Class: g.Class}
			groups[k] = m
			order = append(order, k)
		}
		m.Count += g.Count
		for _, e := range g.Examples {
			if len(m.Examples) < groupExamples {
				m.Examples = append(m.Examples, e)
			}
		}
	}
	for _, k := range order {
		out.Groups = append(out.Groups, *groups[k])
	}
	sortGroups(out.Groups)
	limit := DefaultConfig().MaxFailureRecords
	for _, f := range slices.Concat(a.Records, b.Records) {
		if len(out.Records) < limit {
			out.Records = append(out.Records, f)
		} else {
			out.Dropped++
		}
	}
	return out
}
