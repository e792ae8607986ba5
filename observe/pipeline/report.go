package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/observe"
)

// RankCounters is one rank's counters under its name ("0", or "n1/0" in a
// cluster): the metrics' rank label.
type RankCounters struct {
	Name string
	actors.Counters
}

// Reporter is the live bottleneck report: each Step takes the ranks'
// counters and applies the summary's rule to the interval since the
// previous Step.
type Reporter struct {
	// Ranks snapshots every rank's counters, in a stable order.
	Ranks func() []RankCounters
	// Throttled, if set, is how many throttling answers (429, 503
	// SlowDown) the store has given so far: a fetch bottleneck with
	// throttling in its interval is the store's doing.
	Throttled func() int64
	// Logger gets one line per Run step; nil: none.
	Logger *slog.Logger

	mu struct {
		sync.Mutex
		prev      map[string]actors.Counters
		throttled int64
		last      Figures
		have      bool
	}
}

// Figures is the figures of one interval.
type Figures struct {
	// Interval is its length (the longest rank's).
	Interval time.Duration
	// Node is the interval's figures merged over the ranks.
	Node actors.Stats
	// Ranks are each rank's figures in the interval, by the names Ranks
	// gave.
	Ranks []RankStats
	// Bottleneck is the node's limiting stage in the interval, with what
	// to change.
	Bottleneck actors.Bottleneck
	// Throttled counts the store's throttling answers in the interval.
	Throttled int64
}

// RankStats is one rank's interval.
type RankStats struct {
	Name string
	actors.Stats
}

// Step takes a snapshot and returns the report of the interval since the
// previous Step (the first interval starts when the ranks did).
func (r *Reporter) Step() Figures {
	now := r.Ranks()
	var thr int64
	if r.Throttled != nil {
		thr = r.Throttled()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.mu.prev
	r.mu.prev = make(map[string]actors.Counters, len(now))
	wins := make([]actors.Counters, 0, len(now))
	rep := Figures{Throttled: max(thr-r.mu.throttled, 0)}
	for _, rc := range now {
		r.mu.prev[rc.Name] = rc.Counters
		w := rc.Counters
		if p, ok := prev[rc.Name]; ok {
			w = w.Since(p)
		}
		wins = append(wins, w)
		rep.Ranks = append(rep.Ranks, RankStats{Name: rc.Name, Stats: w.Stats()})
		rep.Interval = max(rep.Interval, w.Elapsed())
	}
	r.mu.throttled = thr
	rep.Node = actors.MergeCounters(wins...).Stats()
	rep.Bottleneck = rep.Node.Bottleneck
	if rep.Bottleneck.Stage == actors.StageFetch.String() && rep.Throttled > 0 {
		rep.Bottleneck.Advice = fmt.Sprintf("the store is throttling (%d throttled answers in the interval): fewer fetchers, more prefixes, or a store that allows more requests", rep.Throttled)
	}
	r.mu.last, r.mu.have = rep, true
	return rep
}

// Last returns the latest report, if a Step was taken.
func (r *Reporter) Last() (Figures, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.last, r.mu.have
}

// interval is rep in the table's neutral form.
func (rep Figures) interval() *observe.Interval {
	iv := &observe.Interval{Bottleneck: rep.Bottleneck.Stage, SamplesPerSecond: rep.Node.SamplesPerSecond}
	for _, rs := range rep.Ranks {
		ir := observe.IntervalRank{Name: rs.Name}
		for _, s := range rs.Stages {
			ir.Stages = append(ir.Stages, observe.IntervalStage{Stage: s.Stage.String(), Busy: s.Busy, Occupancy: s.Queue.Occupancy})
		}
		iv.Ranks = append(iv.Ranks, ir)
	}
	return iv
}

// NodeReport is the node's report for the coordinator's status page
// (observe.Table.NodeReport) of ranks and waits, with live's latest
// bottleneck (live may be nil). Its throughput is the caller's.
func NodeReport(ranks []RankCounters, waits []TrainerWait, live *Reporter) *wire.NodeReport {
	r := observe.Metrics.NodeReport(observe.Snapshot{Node: &observe.NodeSnapshot{Ranks: Ranks(ranks)}, Trainers: Trainers(waits)})
	if live != nil {
		if last, ok := live.Last(); ok {
			r.Bottleneck, r.BottleneckReason, r.BottleneckAdvice = last.Bottleneck.Stage, last.Bottleneck.Reason, last.Bottleneck.Advice
		}
	}
	return r
}

// Run takes a Step on every tick until ctx is done, logging each
// interval's report when Logger is set.
func (r *Reporter) Run(ctx context.Context, tick <-chan time.Time) {
	for {
		select {
		case <-tick:
			rep := r.Step()
			if r.Logger != nil {
				r.log(rep)
			}
		case <-ctx.Done():
			return
		}
	}
}

func (r *Reporter) log(rep Figures) {
	b := rep.Bottleneck
	attrs := []any{"interval", rep.Interval.Round(time.Millisecond).String(),
		"images_per_second", fmt.Sprintf("%.0f", rep.Node.SamplesPerSecond), "batches", rep.Node.Batches,
		"bottleneck", b.Stage}
	for _, s := range rep.Node.Stages {
		attrs = append(attrs, s.Stage.String()+"_busy", fmt.Sprintf("%.2f", s.Busy))
	}
	if rep.Throttled > 0 {
		attrs = append(attrs, "throttled", rep.Throttled)
	}
	attrs = append(attrs, "reason", b.Reason)
	if b.Advice != "" {
		attrs = append(attrs, "advice", b.Advice)
	}
	r.Logger.Info("loader report", attrs...)
}

// Summary is the end-of-run summary's figures of src now
// (observe.Table.NodeSummary): what its metrics say.
func Summary(src NodeSource) observe.Summary {
	return observe.Metrics.NodeSummary(src.Snapshot())
}
