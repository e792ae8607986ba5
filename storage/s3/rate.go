package s3

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// The store's request rate: a token bucket (GCRA) under a fixed per-store
// ceiling (Options.MaxRequestRate: one store per node process, so a
// per-node budget), made adaptive (Options.AdaptiveRate) by AIMD: a
// throttled answer (429, 503) halves the rate, and each answered request
// adds back alpha/rate, so the rate climbs alpha requests/s per second of
// traffic (alpha: a twentieth of the rate that was cut), until the
// ceiling. A throttle of a request sent before the last
// cut is the old rate's and cuts nothing, so a burst of 503s from the
// requests in flight at once counts as one.
//
// The ceiling may be lowered later by a job-wide budget
// (Store.SetRequestBudget: the coordinator's share for this node), never
// raised above the node's own cap: MaxRequestRate, or the part of it
// this store was given when several stores share it
// (Store.SetRequestCap: a mixture's sources).
//
// aimd is the pure part: time comes in as arguments, nothing blocks.

const (
	// rateBeta is the cut: TCP's halving relieves a throttling service
	// within one round of requests.
	rateBeta = 0.5
	// rateMin keeps a throttled node making progress: S3 lets every
	// prefix do thousands a second, a node far below that is not the cause.
	rateMin = 1.0
	// rateBurst is the time's worth of requests that may go back to back:
	// the fetchers ask in bursts when a batch's fetches start together.
	rateBurst = 50 * time.Millisecond
	// rateAlphaShare: alpha is this share of the knee per second, so the
	// rate recovers from a cut in about 10 s.
	rateAlphaShare = 1.0 / 20
	// rateSpanMin is the shortest span the rate is measured over: the
	// first requests come all at once.
	rateSpanMin = 100 * time.Millisecond
	// rateShareMin is the share of recent answers that must be throttles
	// before a throttle cuts: an overloaded store throttles most of what
	// is asked beyond its limit, a store with hiccups a few percent.
	rateShareMin = 0.1
	// rateShareN is how many answers the throttled share is averaged
	// over (an EWMA): at a 3% share, ten in a hundred at random is rare
	// (p < 0.002), while eleven throttles in a row reach the threshold.
	rateShareN = 100
	// rateBucket and rateBuckets measure the request rate while no limit
	// applies (the first cut starts from it).
	rateBucket  = 250 * time.Millisecond
	rateBuckets = 4
)

type aimd struct {
	ceiling  float64 // requests/s; 0: none
	adaptive bool
	rate     float64   // the current limit; 0: none
	tat      time.Time // GCRA's theoretical arrival time
	lastCut  time.Time
	knee     float64 // the rate just before the last cut
	cuts     int64
	first    time.Time // of the first request: the measurement's start
	low      float64   // the lowest rate so far; 0: never limited
	share    float64   // EWMA of the throttled share of answers
	counts   [rateBuckets]struct {
		slot int64
		n    int64
	}
}

func newAIMD(ceiling float64, adaptive bool) aimd {
	return aimd{ceiling: ceiling, adaptive: adaptive, rate: ceiling, low: ceiling}
}

// setCeiling moves the ceiling to c (0: none). The rate follows down at
// once; up, a rate that throttling cut climbs to it as after a cut, and
// any other takes it (0: unlimited).
func (l *aimd) setCeiling(c float64) {
	l.ceiling = c
	switch {
	case c > 0 && (l.rate <= 0 || l.rate > c):
		l.rate = c
	case !l.adaptive || l.cuts == 0:
		l.rate = c
	}
	if c > 0 && (l.low == 0 || l.rate < l.low) {
		l.low = l.rate
	}
}

// reserve takes the next request's place at now and returns how long it
// must wait before it is sent.
func (l *aimd) reserve(now time.Time) time.Duration {
	l.count(now)
	if l.rate <= 0 {
		return 0
	}
	interval := time.Duration(float64(time.Second) / l.rate)
	burst := max(1, l.rate*rateBurst.Seconds())
	tau := time.Duration((burst - 1) * float64(interval))
	if l.tat.Before(now) {
		l.tat = now
	}
	wait := l.tat.Sub(now) - tau
	l.tat = l.tat.Add(interval)
	return max(wait, 0)
}

// throttled cuts the rate for a request sent at sent and throttled at now,
// unless it was sent before the last cut or throttles are under
// rateShareMin of the recent answers.
func (l *aimd) throttled(sent, now time.Time) {
	if !l.adaptive {
		return
	}
	l.share += (1 - l.share) / rateShareN
	if l.share < rateShareMin || (!l.lastCut.IsZero() && sent.Before(l.lastCut)) {
		return
	}
	r := l.rate
	if r <= 0 {
		r = l.measured(now)
	}
	l.knee = r
	l.rate = max(rateMin, r*rateBeta)
	if l.low == 0 || l.rate < l.low {
		l.low = l.rate
	}
	l.lastCut = now
	l.cuts++
}

// answered grows the rate after a request the service did not throttle,
// by alpha/rate: alpha a second at full pace, alpha a twentieth of the
// knee (the rate that was last cut), so that the rate is back at the knee
// in about 10 s whatever its scale. Without a ceiling the limit is lifted
// once the rate is at twice the knee.
func (l *aimd) answered() {
	if !l.adaptive {
		return
	}
	l.share -= l.share / rateShareN
	if l.rate <= 0 {
		return
	}
	ceil := l.ceiling
	if ceil <= 0 {
		ceil = 2 * l.knee
	}
	alpha := max(1, l.knee*rateAlphaShare)
	l.rate += alpha / l.rate
	if l.rate >= ceil {
		l.rate = l.ceiling // 0 without one: unlimited again
	}
}

// count notes a request at now in the rate measurement.
func (l *aimd) count(now time.Time) {
	if l.first.IsZero() {
		l.first = now
	}
	slot := now.UnixNano() / int64(rateBucket)
	c := &l.counts[slot%rateBuckets]
	if c.slot != slot {
		c.slot, c.n = slot, 0
	}
	c.n++
}

// measured is the request rate over the last rateBuckets buckets.
func (l *aimd) measured(now time.Time) float64 {
	slot := now.UnixNano() / int64(rateBucket)
	var n int64
	for _, c := range l.counts {
		if c.slot > slot-rateBuckets && c.slot <= slot {
			n += c.n
		}
	}
	span := time.Duration(rateBuckets-1)*rateBucket + time.Duration(now.UnixNano()%int64(rateBucket))
	span = max(rateSpanMin, min(span, now.Sub(l.first)))
	return max(rateMin, float64(n)/span.Seconds())
}

// rateLimiter is aimd behind a mutex, on the system clock.
type rateLimiter struct {
	on    atomic.Bool // a ceiling, a budget or adaptation: the limiter is asked
	stats *counters
	mu    struct {
		sync.Mutex
		l      aimd
		cap    float64 // the node's own ceiling (MaxRequestRate, or this store's part of it); 0: none
		budget float64 // the job-wide share in force; 0: none
	}
}

func newRateLimiter(o Options, stats *counters) *rateLimiter {
	r := &rateLimiter{stats: stats}
	r.mu.cap = o.MaxRequestRate
	r.on.Store(o.MaxRequestRate > 0 || o.AdaptiveRate)
	r.mu.l = newAIMD(o.MaxRequestRate, o.AdaptiveRate)
	return r
}

// setBudget applies a job-wide share of rps requests/s (0: none): the
// ceiling becomes the lower of it and the node's own.
func (r *rateLimiter) setBudget(rps float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.budget = rps
	r.apply()
}

// setCap replaces the node's own ceiling with rps requests/s (0: none):
// the ceiling becomes the lower of it and the job-wide share.
func (r *rateLimiter) setCap(rps float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.cap = rps
	r.apply()
}

// apply sets the ceiling to the lower of the cap and the budget, either
// 0 for none. r.mu held.
func (r *rateLimiter) apply() {
	c, b := r.mu.cap, r.mu.budget
	if b > 0 && (c <= 0 || b < c) {
		c = b
	}
	r.mu.l.setCeiling(c)
	if c > 0 {
		r.on.Store(true)
	}
}

// ceiling returns the ceiling in force and the job-wide budget (0: none).
func (r *rateLimiter) ceiling() (ceiling, budget float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.l.ceiling, r.mu.budget
}

// wait blocks until the next request may go, or ctx ends.
func (r *rateLimiter) wait(ctx context.Context) error {
	if !r.on.Load() {
		return nil
	}
	r.mu.Lock()
	d := r.mu.l.reserve(time.Now())
	r.mu.Unlock()
	if d <= 0 {
		return nil
	}
	r.stats.rateWaits.Add(1)
	r.stats.rateWaitNanos.Add(int64(d))
	return sleepCtx(ctx, d)
}

// done reports an attempt sent at sent: throttled or answered otherwise.
func (r *rateLimiter) done(sent time.Time, throttled bool) {
	if !r.on.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if throttled {
		r.mu.l.throttled(sent, time.Now())
	} else {
		r.mu.l.answered()
	}
}

// overloaded reports whether throttles are over rateShareMin of the
// recent answers: the store is refusing load, not hiccuping. Without
// AdaptiveRate the share is not kept, and every throttle counts as load.
func (r *rateLimiter) overloaded() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.mu.l.adaptive || r.mu.l.share >= rateShareMin
}

// snapshot returns the current and lowest rate (0: none) and the cuts.
func (r *rateLimiter) snapshot() (rate, low float64, cuts int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.l.rate, r.mu.l.low, r.mu.l.cuts
}
