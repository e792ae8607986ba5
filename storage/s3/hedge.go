package s3

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/longshore/longshore/internal/clock"
)

// Hedged GETs (Options.HedgeQuantile): a GET still unanswered after the
// HedgeQuantile of recent GETs' latencies gets a second, identical
// request; the first good answer wins, and the other is cancelled and
// waited for before the GET returns (it may be writing into the caller's
// buffer). Whole-object GETs and ranged GETs (packed chunks, many times
// larger) keep apart latencies. A token bucket bounds the load: every GET
// earns HedgeBudget of a hedge and a hedge spends one, at most hedgeBurst
// saved, so hedges stay under HedgeBudget of the GETs however slow the
// store becomes; no hedge is sent while the rate limiter is cut back by
// throttling (a second request would only add to what the store refuses).
//
// hedgeBook is the pure part: latencies and tokens in, decisions out;
// time comes in as arguments.

const (
	// hedgeWindow is how many recent latencies of a kind the quantile is
	// taken over: enough for a p99, recent enough to follow a store that
	// slows down.
	hedgeWindow = 512
	// hedgeWarmup GETs of a kind are answered before any of that kind is
	// hedged: a quantile of a handful says nothing.
	hedgeWarmup = 20
	// hedgeEvery: the quantile is recomputed after this many new
	// latencies (a sort of hedgeWindow durations), not at every GET.
	hedgeEvery = 32
	// hedgeBurst is the most hedges saved up: a burst of slow answers may
	// each be hedged, a long slowness may not.
	hedgeBurst = 10.0
	// DefaultHedgeBudget is HedgeBudget's value when it is 0: three GETs
	// in twenty may be asked for twice. The default quantile's tail alone
	// crosses the threshold on one GET in twenty: at 5% it spent the whole
	// budget and a stalled body (3% of GETs in the fault mix of
	// docs/faults.md) waited out its progress deadline instead (22 such
	// per epoch of 2,048 against 7 at 15%; the epoch 3.9x its clean time
	// against 2.3x). A healthy store is still hedged about 5% by the
	// quantile; the budget is headroom for a sick one.
	DefaultHedgeBudget = 0.15
)

// hedge kinds: whole-object GETs and ranged GETs.
const (
	hedgeWhole = iota
	hedgeRange
	hedgeKinds
)

type hedgeBook struct {
	quantile float64
	floor    time.Duration
	budget   float64
	tokens   float64
	kinds    [hedgeKinds]struct {
		latencies durations // of answered GETs: the hedge threshold
		threshold time.Duration

		// gaps: the longest wait for bytes inside each recent body read
		// whole (progressBody.longestWait), for the progress deadline.
		gaps   durations
		gapP99 time.Duration // 0: not computed yet
	}
}

// durations is a window of the last hedgeWindow durations recorded.
type durations struct {
	ring  []time.Duration
	next  int
	seen  int // recorded in all
	since int // since the last quantile was taken
}

func (w *durations) record(d time.Duration) {
	if len(w.ring) < hedgeWindow {
		w.ring = append(w.ring, d)
	} else {
		w.ring[w.next] = d
		w.next = (w.next + 1) % hedgeWindow
	}
	w.seen++
	w.since++
}

// quantile is the q quantile of the window (at least 1 ns); it starts
// since over.
func (w *durations) quantile(q float64) time.Duration {
	s := slices.Clone(w.ring)
	slices.Sort(s)
	w.since = 0
	return max(s[min(len(s)-1, int(q*float64(len(s))))], time.Nanosecond)
}

func newHedgeBook(quantile float64, floor time.Duration, budget float64) *hedgeBook {
	if budget <= 0 {
		budget = DefaultHedgeBudget
	}
	return &hedgeBook{quantile: quantile, floor: floor, budget: budget, tokens: hedgeBurst}
}

// start is a GET of kind starting: it earns its share of a hedge, and
// gets how long to wait before hedging it (ok false: none, still
// warming up).
func (b *hedgeBook) start(kind int) (wait time.Duration, ok bool) {
	b.tokens = min(hedgeBurst, b.tokens+b.budget)
	k := &b.kinds[kind]
	if k.latencies.seen < hedgeWarmup {
		return 0, false
	}
	if k.latencies.since >= hedgeEvery || k.threshold == 0 {
		k.threshold = k.latencies.quantile(b.quantile)
	}
	return max(k.threshold, b.floor), true
}

// recordGap notes the longest wait for bytes inside a body of kind that
// was read whole.
func (b *hedgeBook) recordGap(kind int, d time.Duration) { b.kinds[kind].gaps.record(d) }

// slowestGap is the p99 of the longest waits inside recent bodies of
// kind (recomputed every hedgeEvery bodies); ok false before
// hedgeWarmup bodies.
func (b *hedgeBook) slowestGap(kind int) (time.Duration, bool) {
	k := &b.kinds[kind]
	if k.gaps.seen < hedgeWarmup {
		return 0, false
	}
	if k.gaps.since >= hedgeEvery || k.gapP99 == 0 {
		k.gapP99 = k.gaps.quantile(0.99)
	}
	return k.gapP99, true
}

// take spends a hedge's token, reporting whether there was one.
func (b *hedgeBook) take() bool {
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// record notes how long an answered GET of kind took.
func (b *hedgeBook) record(kind int, d time.Duration) { b.kinds[kind].latencies.record(d) }

// hedger is the store's hedging shell: the book under a lock and the
// clock its timers run on.
type hedger struct {
	clock clock.Clock
	mu    struct {
		sync.Mutex
		book *hedgeBook
	}
}

func newHedger(o Options) *hedger {
	if o.HedgeQuantile <= 0 {
		return nil
	}
	h := &hedger{clock: clock.Or(o.Clock)}
	h.mu.book = newHedgeBook(o.HedgeQuantile, o.HedgeMin, o.HedgeBudget)
	return h
}

func (h *hedger) start(kind int) (time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.book.start(kind)
}

func (h *hedger) slowestGap(kind int) (time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.book.slowestGap(kind)
}

func (h *hedger) recordGap(kind int, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.book.recordGap(kind, d)
}

// A body's progress deadline follows the gaps inside the bodies the
// store delivers, once it has seen hedgeWarmup of the kind read whole:
// progressFactor times the p99 of each body's longest wait for bytes.
// A stall is a gap (the fault mix of docs/faults.md stops a body for 5 s
// after 200 bytes), and gaps inside a healthy body are short whatever
// the answer's latency: the store's queue and its time to the first
// byte come before the body, so a deadline from the whole GET's p99
// (what it was) waited 4× a latency the body never shows, and a stalled
// sample held its batch, and with it the rank's slots, that long. A
// wrong guess costs one GET asked again at once. At least progressFloor
// (a loaded node's scheduling pauses), at most Options.ProgressTimeout.
const (
	progressFactor = 4
	progressFloor  = 100 * time.Millisecond
)

// progressDeadline is the progress deadline for a body of kind (0: none).
func (s *Store) progressDeadline(kind int) time.Duration {
	d := s.opts.ProgressTimeout
	if d <= 0 || s.hedge == nil {
		return d
	}
	if p99, ok := s.hedge.slowestGap(kind); ok {
		d = min(d, max(progressFloor, progressFactor*p99))
	}
	return d
}

func (h *hedger) take() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.book.take()
}

func (h *hedger) record(kind int, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.book.record(kind, d)
}

// throttledNow reports whether the rate limiter is cut back below where
// it would be without throttling.
func (s *Store) throttledNow() bool {
	if !s.opts.AdaptiveRate {
		return false
	}
	rate, _, cuts := s.rate.snapshot()
	ceil, _ := s.rate.ceiling()
	return cuts > 0 && rate > 0 && (ceil <= 0 || rate < ceil)
}

type fetchResult struct {
	out   []byte
	err   error
	hedge bool
	took  time.Duration
}

// hedged runs fetch (one attempt of a GET of kind, into dst) and, if it
// is still unanswered at the hedge threshold and the budget allows, a
// second fetch into a buffer of its own. It returns the first good
// answer, once the other fetch has been cancelled and has returned; if
// both fail, the first fetch's error.
func (s *Store) hedged(ctx context.Context, kind int, dst []byte, fetch func(ctx context.Context, dst []byte) ([]byte, error)) ([]byte, error) {
	h := s.hedge
	if h == nil {
		return fetch(ctx, dst)
	}
	clk := h.clock
	t0 := clk.Now()
	wait, ok := h.start(kind)
	if !ok {
		out, err := fetch(ctx, dst)
		if err == nil {
			h.record(kind, clk.Since(t0))
		}
		return out, err
	}
	results := make(chan fetchResult, 2)
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	go func() {
		out, err := fetch(pctx, dst)
		results <- fetchResult{out: out, err: err, took: clk.Since(t0)}
	}()
	timer, fire := clk.NewTimer(wait)
	defer timer.Stop()
	// The hedge has no attempt of its own: the first fetch's deadline
	// (its context's parent) bounds both, and only the first fetch
	// extends it for a large body.
	hctx, hcancel := context.WithCancel(context.WithValue(ctx, attemptKey{}, (*attempt)(nil)))
	defer hcancel()
	running := 1
	var primaryErr error
	for {
		select {
		case <-fire:
			fire = nil
			if s.throttledNow() || !h.take() {
				s.stats.hedgesDenied.Add(1)
				continue
			}
			running++
			s.stats.hedges.Add(1)
			go func() {
				t1 := clk.Now()
				if err := s.rate.wait(hctx); err != nil {
					results <- fetchResult{err: err, hedge: true}
					return
				}
				sent := time.Now()
				out, err := fetch(hctx, nil)
				s.rate.done(sent, causeOf(err) == causeThrottle)
				results <- fetchResult{out: out, err: err, hedge: true, took: clk.Since(t1)}
			}()
		case r := <-results:
			running--
			if r.err == nil {
				pcancel()
				hcancel()
				for ; running > 0; running-- {
					if l := <-results; l.err != nil {
						s.stats.hedgeCancelled.Add(1)
					}
				}
				if r.hedge {
					s.stats.hedgeWins.Add(1)
				}
				h.record(kind, r.took)
				return r.out, nil
			}
			if !r.hedge {
				primaryErr = r.err
				fire = nil // a failed first fetch is the retry loop's to repeat
			} else if primaryErr == nil && running == 0 {
				primaryErr = r.err
			}
			if running == 0 {
				return nil, primaryErr
			}
		}
	}
}
