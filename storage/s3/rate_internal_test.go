package s3

import (
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// TestAIMDBudget: under a fixed budget of 100/s (5 back to back), a
// stream of requests asked at once is spaced 10 ms apart after the burst,
// whatever the answers.
func TestAIMDBudget(t *testing.T) {
	l := newAIMD(100, false)
	var waits []time.Duration
	for range 8 {
		waits = append(waits, l.reserve(t0))
	}
	want := []time.Duration{0, 0, 0, 0, 0, 10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond}
	for i := range want {
		if d := waits[i] - want[i]; d < -time.Microsecond || d > time.Microsecond {
			t.Fatalf("waits %v; want %v", waits, want)
		}
	}
	l.throttled(t0, t0)
	if l.rate != 100 || l.cuts != 0 {
		t.Errorf("a fixed budget moved on a throttle: rate %v, cuts %d", l.rate, l.cuts)
	}
	// Idle for a second: the burst is back, not a second's worth.
	later := t0.Add(time.Second)
	n := 0
	for l.reserve(later) == 0 {
		n++
	}
	if n != 5 {
		t.Errorf("after idling, %d requests went back to back; want the burst of 5", n)
	}
}

// TestAIMDCutsAndGrows: a throttle halves the rate, throttles of requests
// sent before the cut do not cut again, answered requests add alpha/rate
// (alpha: a twentieth of the knee) up to the ceiling, and the rate never
// falls below rateMin.
func TestAIMDCutsAndGrows(t *testing.T) {
	l := newAIMD(200, true)
	l.share = 1 // a store throttling all it is asked
	sent := t0
	cut := t0.Add(time.Millisecond)
	l.throttled(sent, cut)
	if l.rate != 100 || l.knee != 200 || l.cuts != 1 {
		t.Fatalf("after one throttle: rate %v knee %v cuts %d; want 100, 200, 1", l.rate, l.knee, l.cuts)
	}
	for range 10 { // the rest of the requests in flight at the cut
		l.throttled(sent, cut.Add(time.Millisecond))
	}
	if l.rate != 100 || l.cuts != 1 {
		t.Errorf("stale throttles cut again: rate %v, cuts %d", l.rate, l.cuts)
	}
	// One second of traffic at ~100/s adds about alpha = 10.
	for range 100 {
		l.answered()
	}
	if l.rate < 109 || l.rate > 110 {
		t.Errorf("after 100 answers at ~100/s the rate is %v; want about 110", l.rate)
	}
	for range 10000 {
		l.answered()
	}
	if l.rate != 200 {
		t.Errorf("the rate grew to %v; want the ceiling 200", l.rate)
	}
	at := cut
	for range 20 {
		at = at.Add(time.Second)
		l.throttled(at, at)
	}
	if l.rate != rateMin || l.low != rateMin {
		t.Errorf("after 20 cuts the rate is %v (low %v); want the floor %v", l.rate, l.low, rateMin)
	}
}

// TestAIMDUnlimited: without a ceiling no request waits until the first
// throttle; the cut starts from the rate measured (here 50 requests in
// half a second: 100/s), and the limit is lifted again at twice the knee.
func TestAIMDUnlimited(t *testing.T) {
	l := newAIMD(0, true)
	at := t0
	for range 50 {
		if d := l.reserve(at); d != 0 {
			t.Fatalf("an unlimited store waited %v", d)
		}
		at = at.Add(10 * time.Millisecond)
	}
	l.share = 1
	l.throttled(at, at)
	if l.rate < 45 || l.rate > 55 {
		t.Fatalf("first cut to %v (knee %v); want about half the measured 100/s", l.rate, l.knee)
	}
	for range 100000 {
		if l.answered(); l.rate == 0 {
			break
		}
	}
	if l.rate != 0 {
		t.Errorf("the limit was not lifted: rate %v", l.rate)
	}
}

// TestRateLimiterBudget: a job-wide share lowers the ceiling below the
// node's own, never raises it above, and 0 gives the node's own back; a
// budget alone turns the limiter on, and the stats say what is in force.
func TestRateLimiterBudget(t *testing.T) {
	for _, tc := range []struct {
		name               string
		cap                float64
		adaptive           bool
		budgets            []float64
		wantCeil, wantRate float64
		wantBudget         float64
		wantOn             bool
	}{
		{name: "no cap, no budget", wantOn: false},
		{name: "budget alone", budgets: []float64{40}, wantCeil: 40, wantRate: 40, wantBudget: 40, wantOn: true},
		{name: "budget under the cap", cap: 100, budgets: []float64{40}, wantCeil: 40, wantRate: 40, wantBudget: 40, wantOn: true},
		{name: "budget over the cap", cap: 100, budgets: []float64{400}, wantCeil: 100, wantRate: 100, wantBudget: 400, wantOn: true},
		{name: "budget lifted", cap: 100, budgets: []float64{40, 0}, wantCeil: 100, wantRate: 100, wantOn: true},
		{name: "budget raised, never throttled", cap: 100, adaptive: true, budgets: []float64{10, 80}, wantCeil: 80, wantRate: 80, wantBudget: 80, wantOn: true},
		{name: "budget lifted, no cap, adaptive", adaptive: true, budgets: []float64{10, 0}, wantCeil: 0, wantRate: 0, wantOn: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRateLimiter(Options{MaxRequestRate: tc.cap, AdaptiveRate: tc.adaptive}, &counters{})
			for _, b := range tc.budgets {
				r.setBudget(b)
			}
			ceil, budget := r.ceiling()
			rate, _, _ := r.snapshot()
			if ceil != tc.wantCeil || budget != tc.wantBudget || rate != tc.wantRate || r.on.Load() != tc.wantOn {
				t.Errorf("ceiling %v budget %v rate %v on %v; want %v %v %v %v", ceil, budget, rate, r.on.Load(), tc.wantCeil, tc.wantBudget, tc.wantRate, tc.wantOn)
			}
		})
	}
}

// TestAIMDCeilingAfterCut: a rate throttling cut keeps climbing under a
// raised ceiling instead of jumping to it, and follows a lowered one down
// at once.
func TestAIMDCeilingAfterCut(t *testing.T) {
	now := time.Unix(0, 0)
	l := newAIMD(100, true)
	l.share = 1
	l.throttled(now, now)
	if l.rate != 50 {
		t.Fatalf("cut to %v, want 50", l.rate)
	}
	l.setCeiling(200)
	if l.rate != 50 {
		t.Errorf("a raised ceiling moved a cut rate to %v", l.rate)
	}
	l.setCeiling(20)
	if l.rate != 20 || l.low != 20 {
		t.Errorf("a lowered ceiling: rate %v low %v, want 20 and 20", l.rate, l.low)
	}
}

// simAIMD runs l under a demand of 1,000 requests/s, each answered 10 ms
// after it is sent and throttled with probability p (a seeded draw), for
// 20 s of simulated time, and returns the requests sent.
func simAIMD(l *aimd, p float64, seed uint64) int {
	r := rand.New(rand.NewPCG(seed, 7))
	now, end := t0, t0.Add(20*time.Second)
	type req struct{ sent, done time.Time }
	var q []req
	sent := 0
	for now.Before(end) {
		now = now.Add(max(l.reserve(now), time.Millisecond))
		sent++
		q = append(q, req{now, now.Add(10 * time.Millisecond)})
		for len(q) > 0 && !q[0].done.After(now) {
			if r.Float64() < p {
				l.throttled(q[0].sent, q[0].done)
			} else {
				l.answered()
			}
			q = q[1:]
		}
	}
	return sent
}

// TestAIMDSporadicThrottles: throttles on a few percent of requests at
// random (a store's own hiccups: S3 answers SlowDown now and then while
// it moves a partition, a fault proxy's mix) are not overload and cut
// (almost) nothing: the node keeps sending at its demand. A store that
// throttles a third of what it is asked is cut well below it.
func TestAIMDSporadicThrottles(t *testing.T) {
	const demand = 20 * 1000 // 20 s at 1,000/s
	for seed := range uint64(5) {
		l := newAIMD(0, true)
		if sent := simAIMD(&l, 0.03, seed); sent < demand*8/10 {
			t.Errorf("seed %d: 3%% of requests throttled at random: %d sent of a demand of %d (rate %.1f/s, %d cuts); want at least 80%%", seed, sent, demand, l.rate, l.cuts)
		}
		l = newAIMD(0, true)
		if sent := simAIMD(&l, 0.33, seed); sent > demand/4 || l.cuts == 0 {
			t.Errorf("seed %d: a third throttled: %d sent of %d, %d cuts; want the rate cut below a quarter", seed, sent, demand, l.cuts)
		}
	}
}

// TestRateCapAndBudget: the ceiling is the lower of the node's own cap
// (or this store's part of it: setCap) and the job-wide share, either
// 0 for none, whichever order they come in.
func TestRateCapAndBudget(t *testing.T) {
	r := newRateLimiter(Options{MaxRequestRate: 100}, &counters{})
	for _, step := range []struct {
		name       string
		do         func()
		want, with float64 // ceiling, budget
	}{
		{"the cap given at open", func() {}, 100, 0},
		{"its part of the cap", func() { r.setCap(25) }, 25, 0},
		{"a lower share", func() { r.setBudget(10) }, 10, 10},
		{"a higher share", func() { r.setBudget(50) }, 25, 50},
		{"no cap", func() { r.setCap(0) }, 50, 50},
		{"no share", func() { r.setBudget(0) }, 0, 0},
		{"a cap again", func() { r.setCap(30) }, 30, 0},
	} {
		step.do()
		if c, b := r.ceiling(); c != step.want || b != step.with {
			t.Errorf("%s: ceiling %v, budget %v; want %v and %v", step.name, c, b, step.want, step.with)
		}
	}
}
