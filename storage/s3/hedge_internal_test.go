package s3

import (
	"testing"
	"time"
)

// TestHedgeBookQuantile: no hedge before the warm-up; then the wait is
// the quantile of the recent latencies of that kind (never below the
// floor), and ranged GETs learn apart from whole ones.
func TestHedgeBookQuantile(t *testing.T) {
	b := newHedgeBook(0.9, 5*time.Millisecond, 1)
	for i := range hedgeWarmup {
		if _, ok := b.start(hedgeWhole); ok {
			t.Fatalf("hedge armed after %d latencies, want none before %d", i, hedgeWarmup)
		}
		b.record(hedgeWhole, time.Duration(i+1)*time.Millisecond) // 1..20 ms
	}
	wait, ok := b.start(hedgeWhole)
	if !ok || wait != 19*time.Millisecond {
		t.Errorf("p90 of 1..20 ms: %v %v, want 19ms", wait, ok)
	}
	if _, ok := b.start(hedgeRange); ok {
		t.Error("ranged GETs hedged on whole GETs' latencies")
	}
	// Latencies all under the floor: the floor.
	f := newHedgeBook(0.5, 5*time.Millisecond, 1)
	for range hedgeWarmup {
		f.record(hedgeRange, time.Millisecond)
	}
	if wait, _ := f.start(hedgeRange); wait != 5*time.Millisecond {
		t.Errorf("wait %v, want the 5ms floor", wait)
	}
	// The window follows a store that slows down: after hedgeWindow
	// latencies of 100ms (and the next recomputation) the quantile is
	// 100ms.
	for range hedgeWindow {
		b.record(hedgeWhole, 100*time.Millisecond)
	}
	if wait, _ := b.start(hedgeWhole); wait != 100*time.Millisecond {
		t.Errorf("after the store slowed down: wait %v, want 100ms", wait)
	}
}

// TestHedgeBookBudget: however many GETs are slow, hedges stay under
// budget x GETs + the burst.
func TestHedgeBookBudget(t *testing.T) {
	for _, budget := range []float64{0.01, 0.05, 0.2} {
		b := newHedgeBook(0.95, 0, budget)
		hedges := 0
		const gets = 10000
		for range gets {
			b.start(hedgeWhole)
			if b.take() { // every GET slow: each would hedge
				hedges++
			}
		}
		if limit := budget*gets + hedgeBurst; float64(hedges) > limit || float64(hedges) < budget*gets {
			t.Errorf("budget %v: %d hedges of %d GETs, want about %v and at most %v", budget, hedges, gets, budget*gets, limit)
		}
	}
	if b := newHedgeBook(0.95, 0, 0); b.budget != DefaultHedgeBudget {
		t.Errorf("budget 0 is %v, want DefaultHedgeBudget", b.budget)
	}
}

// TestProgressDeadline: with latencies learnt, a body's progress
// deadline is progressFactor times the p99 of its kind's GETs, never
// under progressFloor nor over ProgressTimeout; before the warm-up, and
// without hedging (no latencies learnt), ProgressTimeout itself.
func TestProgressDeadline(t *testing.T) {
	s := &Store{opts: Options{ProgressTimeout: 2 * time.Second, HedgeQuantile: 0.95}}
	s.hedge = newHedger(s.opts)
	if d := s.progressDeadline(hedgeWhole); d != 2*time.Second {
		t.Errorf("before any latency: %v, want ProgressTimeout", d)
	}
	for _, tc := range []struct {
		kind    int
		latency time.Duration
		want    time.Duration
	}{
		{hedgeWhole, 5 * time.Millisecond, progressFloor},
		{hedgeWhole, 100 * time.Millisecond, progressFactor * 100 * time.Millisecond},
		{hedgeRange, time.Second, 2 * time.Second},
	} {
		for range hedgeWindow {
			s.hedge.record(tc.kind, tc.latency)
		}
		s.hedge.start(tc.kind) // recompute
		if d := s.progressDeadline(tc.kind); d != tc.want {
			t.Errorf("GETs of %v: deadline %v, want %v", tc.latency, d, tc.want)
		}
	}
	off := &Store{opts: Options{ProgressTimeout: time.Second}}
	if d := off.progressDeadline(hedgeWhole); d != time.Second {
		t.Errorf("without hedging: %v, want ProgressTimeout", d)
	}
	if d := (&Store{}).progressDeadline(hedgeWhole); d != 0 {
		t.Errorf("ProgressTimeout 0: %v, want 0 (none)", d)
	}
}

// TestHedgeBudgetCoversFaults: at the default quantile the tail alone
// crosses the threshold on 1 GET in 20; a store that also stalls 3% of
// bodies (the fault mix of docs/faults.md: a fifth of its 15%) must
// still get every one of those hedged with the default budget. At 5% the
// tail spent it all and, 333 GETs in, every stalled body waited out its
// progress deadline instead.
func TestHedgeBudgetCoversFaults(t *testing.T) {
	b := newHedgeBook(0.95, 0, 0) // the defaults: p95, DefaultHedgeBudget
	for i := range hedgeWarmup {
		b.start(hedgeWhole)
		b.record(hedgeWhole, time.Duration(i+1)*time.Millisecond)
	}
	denied := 0
	for i := range 4000 {
		b.start(hedgeWhole)
		slow := i%20 == 0 || i%33 == 0 // the tail, and a stalled body
		if slow && !b.take() {
			denied++
		}
	}
	if denied > 0 {
		t.Errorf("%d of the slow GETs among 4,000 (5%% tail, 3%% stalled) denied a hedge with the default budget %v; want none", denied, DefaultHedgeBudget)
	}
}
