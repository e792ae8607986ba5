package actors

import (
	"math"
	"time"
)

// The automatic fetch concurrency (Config.FetchAuto). Fetches in flight
// must cover the store's latency at the rate the pipeline consumes:
// by Little's law, in flight = rate × latency. fetchTuner measures both
// over windows of fetches (the rate of fetches completed, their mean
// duration) and sets the limit to fetchHeadroom times their product.
// While the limit binds, the rate it measures is limit/latency, so the
// next limit is fetchHeadroom × the current one: it grows geometrically
// until something else (decoders, slots, the trainer) sets the pace, and
// then settles at fetchHeadroom × what that pace needs. It starts at
// Config.FetchConcurrency's default share and never passes its maximum.
//
// It rises at once but falls only to the largest limit the windows of
// the last fetchShrinkSpan asked for: a fetch held by the store (a
// stalled body, a retry) holds its batch, the slots fill and the
// fetches behind it wait, so the windows while it is held measure a
// rate the stall set, not the pipeline. Cutting the limit then left the
// next batches under-fetched for the windows it took to grow back
// (5 to 20 reads in flight against 64 under 15% faulted GETs). A pace
// that stays lower for the whole span (slower decoders, a faster store)
// still brings it down.
//
// Pure: times come in as arguments (the pipeline's clock).
type fetchTuner struct {
	min, max int
	limit    int

	start   time.Time     // of the window
	n       int           // fetches completed in it
	busy    time.Duration // their durations summed
	slowest time.Duration // the longest of them
	second  time.Duration // the second longest: what the read-ahead covers
	changes int           // how many times the limit moved

	// wants are the limits the windows of the last fetchShrinkSpan
	// asked for, oldest first; the limit falls to their largest.
	wants []tunerWant

	// ahead is the read-ahead asked for (readAheadFor): raised as soon
	// as the current window's second slowest fetch needs more, set anew
	// when a window closes; 0 before the first 16 fetches. The second,
	// not the slowest: one stall alone (a pause of the process, a
	// request retried) does not raise it for a whole window; a store
	// whose round trips are slow shows many.
	ahead int
}

const (
	// fetchHeadroom over Little's product: bursts (a batch's fetches start
	// together) and the latency's tail.
	fetchHeadroom = 2.0
	// fetchWindow is the shortest window, and fetchWindowN the fewest
	// fetches in it, for one measurement: a few hundred ms of traffic.
	fetchWindow  = 250 * time.Millisecond
	fetchWindowN = 16
	// fetchMinAuto is the lowest automatic limit: a local disk needs one
	// or two, but a burst after a stall should not queue behind them.
	fetchMinAuto = 4
	// fetchStartAuto is where the limit starts: the fixed default.
	fetchStartAuto = 16
	// fetchShrinkSpan is how long every window must ask for less before
	// the limit falls: longer than a fetch the store holds (a stalled
	// body is abandoned after --progress-timeout, 2 s at most by default).
	fetchShrinkSpan = 2 * time.Second
)

// tunerWant is the limit one window asked for, and when it closed.
type tunerWant struct {
	at   time.Time
	want int
}

func newFetchTuner(max int) *fetchTuner {
	lo := min(fetchMinAuto, max)
	return &fetchTuner{min: lo, max: max, limit: min(max, fetchStartAuto)}
}

// done records a fetch that completed at now after d; it returns the new
// limit and true when a window closed and the limit moved.
func (t *fetchTuner) done(now time.Time, d time.Duration) (int, bool) {
	if t.start.IsZero() {
		t.start = now.Add(-d)
	}
	t.n++
	t.busy += d
	if d > t.slowest {
		t.slowest, t.second = d, t.slowest
	} else {
		t.second = max(t.second, d)
	}
	span := now.Sub(t.start)
	if t.n >= fetchWindowN && span > 0 {
		// The read-ahead rises as soon as a slow fetch is seen, at the
		// window's rate so far: waiting for the window to close would
		// leave the next round trips uncovered for 250 ms. It falls only
		// when a window closes.
		t.ahead = max(t.ahead, readAheadFor(float64(t.n)/span.Seconds(), t.second))
	}
	if t.n < fetchWindowN || span < fetchWindow {
		return t.limit, false
	}
	rate := float64(t.n) / span.Seconds()
	latency := t.busy.Seconds() / float64(t.n)
	t.ahead = readAheadFor(rate, t.second)
	t.start, t.n, t.busy, t.slowest, t.second = now, 0, 0, 0, 0
	want := int(math.Ceil(fetchHeadroom * rate * latency))
	want = min(max(want, t.min), t.max)
	t.wants = append(t.wants, tunerWant{now, want})
	covered := false // the remembered windows span fetchShrinkSpan
	for len(t.wants) > 1 && now.Sub(t.wants[1].at) >= fetchShrinkSpan {
		t.wants = t.wants[1:]
		covered = true
	}
	covered = covered || now.Sub(t.wants[0].at) >= fetchShrinkSpan
	if want < t.limit {
		if !covered {
			return t.limit, false
		}
		for _, w := range t.wants {
			want = max(want, w.want)
		}
	}
	if want == t.limit {
		return t.limit, false
	}
	t.limit = want
	t.changes++
	return want, true
}

// maxAutoReadAhead bounds the automatic read-ahead (Config.ReadAheadAuto):
// a window of the packed order's default 128 blocks of 16 is 2,048
// items, and the next window's first chunks are what the read-ahead is
// for.
const maxAutoReadAhead = 4096

// readAheadFor is the read-ahead that covers a fetch as slow as slowest
// at rate fetches a second, with fetchHeadroom: the items between a work
// item's arrival (which prefetches its chunk) and its fetch must take at
// least that long to consume. A slow fetch, not the mean: with a packed
// dataset most fetches are served from a chunk at once, and the few
// that wait for a chunk's round trip are the ones to cover (fetchTuner
// passes its window's second slowest). At most maxAutoReadAhead.
func readAheadFor(rate float64, slowest time.Duration) int {
	return int(min(math.Ceil(fetchHeadroom*rate*slowest.Seconds()), maxAutoReadAhead))
}

// readAhead returns the read-ahead the fetches measured ask for, never
// below base (Config.ReadAhead).
func (t *fetchTuner) readAhead(base int) int { return max(base, t.ahead) }
