package s3

import (
	"io"
	"testing"
	"time"

	"github.com/longshore/longshore/internal/clock"
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

// TestProgressDeadline: once bodies have been read, a body's progress
// deadline is progressFactor times the p99 of their longest waits for
// bytes, never under progressFloor nor over ProgressTimeout; before the
// warm-up, and without hedging (nothing learnt), ProgressTimeout itself.
func TestProgressDeadline(t *testing.T) {
	s := &Store{opts: Options{ProgressTimeout: 2 * time.Second, HedgeQuantile: 0.95}}
	s.hedge = newHedger(s.opts)
	if d := s.progressDeadline(hedgeWhole); d != 2*time.Second {
		t.Errorf("before any body: %v, want ProgressTimeout", d)
	}
	for _, tc := range []struct {
		kind int
		gap  time.Duration
		want time.Duration
	}{
		{hedgeWhole, 5 * time.Millisecond, progressFloor},
		{hedgeWhole, 100 * time.Millisecond, progressFactor * 100 * time.Millisecond},
		{hedgeRange, time.Second, 2 * time.Second},
	} {
		for range hedgeWindow {
			s.hedge.recordGap(tc.kind, tc.gap)
		}
		if d := s.progressDeadline(tc.kind); d != tc.want {
			t.Errorf("bodies waiting at most %v: deadline %v, want %v", tc.gap, d, tc.want)
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

// TestProgressDeadlineFollowsGapsNotLatency: a store whose answers are
// slow to start (100 ms to the first byte: its queue) but whose bodies
// flow (2 ms at most between bytes) must abandon a body that stopped
// after progressFloor, not after 4× the answers' latency: the deadline
// was progressFactor × the whole GETs' p99 (400 ms here; 250 ms at least),
// and in the fault mix of docs/faults.md each stalled sample held its
// batch, and so the rank's slots, that long.
func TestProgressDeadlineFollowsGapsNotLatency(t *testing.T) {
	s := &Store{opts: Options{ProgressTimeout: 2 * time.Second, HedgeQuantile: 0.95}}
	s.hedge = newHedger(s.opts)
	for range hedgeWindow {
		s.hedge.record(hedgeWhole, 100*time.Millisecond)
		s.hedge.recordGap(hedgeWhole, 2*time.Millisecond)
	}
	s.hedge.start(hedgeWhole) // the hedge threshold: the answers' p95
	if d := s.progressDeadline(hedgeWhole); d > 100*time.Millisecond {
		t.Errorf("answers of 100 ms whose bodies wait at most 2 ms: a stall is abandoned after %v, want at most 100 ms", d)
	}
	// A body's gaps, not its answer's latency: a progressBody measures
	// the longest its Reads waited, not the time before its first Read.
	clk := clock.NewFake(time.Unix(1000, 0))
	pr, pw := io.Pipe()
	b := watchProgress(pr, func() time.Duration { return time.Hour }, clk, func() {})
	defer b.Close()
	clk.Advance(time.Second) // the answer's latency, before the body is read
	go func() {
		pw.Write([]byte("ab"))
		pw.Close()
	}()
	buf := make([]byte, 1)
	for {
		if _, err := b.Read(buf); err != nil {
			break
		}
	}
	if w := b.longestWait(); w != 0 {
		t.Errorf("a body whose bytes were there at once waited %v (fake clock not advanced while reading)", w)
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
