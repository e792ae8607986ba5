package clock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/longshore/longshore/internal/clock"
)

// backstop bounds a wait that should end at once; it is a failure
// backstop only, generous for a loaded machine.
const backstop = 60 * time.Second

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// TestFakeFiresInTimeOrder: each case sets timers (t) and tickers (k),
// optionally stops (s) or resets (r) some, advances in steps and checks
// which fired at what fake time, in order.
func TestFakeFiresInTimeOrder(t *testing.T) {
	type op struct {
		kind string // "t": timer, "k": ticker, "s": stop, "r": reset, "a": advance and read, "A": advance only
		name string
		d    time.Duration
	}
	for _, tc := range []struct {
		name string
		ops  []op
		want []string // name@ms, in firing order
	}{
		{"timers out of order", []op{{"t", "c", ms(30)}, {"t", "a", ms(10)}, {"t", "b", ms(20)}, {"a", "", ms(100)}},
			[]string{"a@10", "b@20", "c@30"}},
		{"ties in the order set", []op{{"t", "x", ms(5)}, {"t", "y", ms(5)}, {"t", "z", ms(5)}, {"a", "", ms(5)}},
			[]string{"x@5", "y@5", "z@5"}},
		{"not yet due", []op{{"t", "a", ms(10)}, {"a", "", ms(9)}}, nil},
		{"due in a later step", []op{{"t", "a", ms(10)}, {"a", "", ms(9)}, {"a", "", ms(1)}}, []string{"a@10"}},
		{"zero fires at once", []op{{"t", "now", 0}}, []string{"now@0"}},
		{"negative fires at once", []op{{"t", "now", -time.Second}}, []string{"now@0"}},
		{"stopped never fires", []op{{"t", "a", ms(10)}, {"s", "a", 0}, {"a", "", ms(20)}}, nil},
		{"reset moves it", []op{{"t", "a", ms(10)}, {"a", "", ms(5)}, {"r", "a", ms(10)}, {"a", "", ms(9)}, {"a", "", ms(1)}},
			[]string{"a@15"}},
		{"reset after firing re-arms", []op{{"t", "a", ms(10)}, {"a", "", ms(10)}, {"r", "a", ms(5)}, {"a", "", ms(5)}},
			[]string{"a@10", "a@15"}},
		{"ticker ticks each period", []op{{"k", "k", ms(10)}, {"a", "", ms(10)}, {"a", "", ms(10)}, {"a", "", ms(5)}},
			[]string{"k@10", "k@20"}},
		{"ticker among timers", []op{{"k", "k", ms(10)}, {"t", "t", ms(15)}, {"a", "", ms(10)}, {"a", "", ms(10)}},
			[]string{"k@10", "t@15", "k@20"}},
		// A reader that does not keep up gets one tick per Advance, the
		// first one due, as from a real ticker's one-slot channel.
		{"slow reader drops ticks", []op{{"k", "k", ms(10)}, {"a", "", ms(35)}, {"a", "", ms(10)}},
			[]string{"k@10", "k@40"}},
		{"stopped ticker", []op{{"k", "k", ms(10)}, {"a", "", ms(10)}, {"s", "k", 0}, {"a", "", ms(50)}}, []string{"k@10"}},
		{"reset ticker", []op{{"k", "k", ms(10)}, {"a", "", ms(5)}, {"r", "k", ms(20)}, {"a", "", ms(19)}, {"a", "", ms(1)}},
			[]string{"k@25"}},
		// A stop or reset drops a value sent and not yet read.
		{"stop drops an unread value", []op{{"t", "a", ms(10)}, {"A", "", ms(10)}, {"s", "a", 0}, {"a", "", 0}}, nil},
		{"reset drops an unread value", []op{{"t", "a", ms(10)}, {"A", "", ms(10)}, {"r", "a", ms(10)}, {"a", "", ms(10)}},
			[]string{"a@20"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := clock.NewFake(time.Time{})
			start := fc.Now()
			type ch struct {
				name string
				c    <-chan time.Time
			}
			var chans []ch
			timers := map[string]clock.Timer{}
			tickers := map[string]clock.Ticker{}
			var got []string
			collect := func() {
				// Read what each channel holds, in fired-time order.
				type fired struct {
					name string
					at   time.Time
				}
				var fs []fired
				for _, c := range chans {
					select {
					case at := <-c.c:
						fs = append(fs, fired{c.name, at})
					default:
					}
				}
				slices.SortStableFunc(fs, func(a, b fired) int { return a.at.Compare(b.at) })
				for _, f := range fs {
					got = append(got, fmt.Sprintf("%s@%d", f.name, f.at.Sub(start).Milliseconds()))
				}
			}
			for _, o := range tc.ops {
				switch o.kind {
				case "t":
					tm, c := fc.NewTimer(o.d)
					timers[o.name] = tm
					chans = append(chans, ch{o.name, c})
					collect()
				case "k":
					tk, c := fc.NewTicker(o.d)
					tickers[o.name] = tk
					chans = append(chans, ch{o.name, c})
				case "s":
					if tm, ok := timers[o.name]; ok {
						tm.Stop()
					} else {
						tickers[o.name].Stop()
					}
				case "r":
					if tm, ok := timers[o.name]; ok {
						tm.Reset(o.d)
					} else {
						tickers[o.name].Reset(o.d)
					}
				case "a":
					fc.Advance(o.d)
					collect()
				case "A":
					fc.Advance(o.d)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("fired %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFakeOneAdvanceFiresAllDue: within a single Advance, timers fire in
// time order, and Now reads each one's time as it fires.
func TestFakeOneAdvanceFiresAllDue(t *testing.T) {
	fc := clock.NewFake(time.Time{})
	start := fc.Now()
	var cs []<-chan time.Time
	for _, d := range []int{40, 10, 30, 20} {
		_, c := fc.NewTimer(ms(d))
		cs = append(cs, c)
	}
	fc.Advance(time.Minute)
	for i, want := range []int{40, 10, 30, 20} {
		if at := <-cs[i]; at.Sub(start) != ms(want) {
			t.Errorf("timer %d fired at %v, want %v", i, at.Sub(start), ms(want))
		}
	}
	if got := fc.Since(start); got != time.Minute {
		t.Errorf("Since(start) = %v after Advance(1m)", got)
	}
	if n := fc.Pending(); n != 0 {
		t.Errorf("%d pending after every timer fired", n)
	}
}

func TestFakeStopAndResetReport(t *testing.T) {
	fc := clock.NewFake(time.Time{})
	tm, _ := fc.NewTimer(time.Second)
	if fc.Pending() != 1 {
		t.Fatalf("pending %d, want 1", fc.Pending())
	}
	if !tm.Stop() {
		t.Error("Stop of an active timer reported false")
	}
	if tm.Stop() {
		t.Error("second Stop reported true")
	}
	if tm.Reset(time.Second) {
		t.Error("Reset of a stopped timer reported it active")
	}
	if !tm.Reset(2 * time.Second) {
		t.Error("Reset of an active timer reported it inactive")
	}
	fc.Advance(2 * time.Second)
	if !tm.Stop() {
		t.Error("Stop of a timer whose value was not read reported false (it stops the delivery)")
	}
	tm2, c := fc.NewTimer(0)
	<-c
	if tm2.Stop() {
		t.Error("Stop of a timer whose value was read reported true")
	}
	if fc.Pending() != 0 {
		t.Errorf("pending %d, want 0", fc.Pending())
	}
}

func TestFakeTickerPanicsOnNonPositive(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewTicker(0) did not panic")
		}
	}()
	clock.NewFake(time.Time{}).NewTicker(0)
}

// TestFakeBlockUntil: BlockUntil returns once enough timers are set, at
// once if they already are, and with ctx's error if they never are.
func TestFakeBlockUntil(t *testing.T) {
	fc := clock.NewFake(time.Time{})
	ctx, cancel := context.WithTimeout(context.Background(), backstop)
	defer cancel()
	if err := fc.BlockUntil(ctx, 0); err != nil {
		t.Fatalf("BlockUntil(0): %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- fc.BlockUntil(ctx, 2) }()
	fc.NewTimer(time.Second)
	select {
	case err := <-done:
		t.Fatalf("BlockUntil(2) returned with one timer set: %v", err)
	default:
	}
	fc.NewTicker(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("BlockUntil(2): %v", err)
	}
	if err := fc.BlockUntil(ctx, 2); err != nil {
		t.Fatalf("BlockUntil(2) with 2 set: %v", err)
	}
	short, cancelShort := context.WithCancel(context.Background())
	cancelShort()
	if err := fc.BlockUntil(short, 3); err != context.Canceled {
		t.Fatalf("BlockUntil(3) on a canceled ctx: %v, want context.Canceled", err)
	}
}

// TestFakeDrivesAWaiter is the intended use: code waits on the clock in
// a loop with backoff, and the test drives it without sleeping.
func TestFakeDrivesAWaiter(t *testing.T) {
	fc := clock.NewFake(time.Time{})
	start := fc.Now()
	ctx, cancel := context.WithTimeout(context.Background(), backstop)
	defer cancel()
	var waits []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wait := ms(250); wait <= 2*time.Second; wait *= 2 {
			tm, c := fc.NewTimer(wait)
			select {
			case <-c:
				waits = append(waits, wait)
			case <-ctx.Done():
				tm.Stop()
				return
			}
		}
	}()
	for range 4 {
		if err := fc.BlockUntil(ctx, 1); err != nil {
			t.Fatal(err)
		}
		fc.Advance(2 * time.Second)
	}
	<-done
	if want := []time.Duration{ms(250), ms(500), ms(1000), ms(2000)}; !slices.Equal(waits, want) {
		t.Errorf("waited %v, want %v", waits, want)
	}
	if got := fc.Since(start); got != 8*time.Second {
		t.Errorf("%v passed, want 8s", got)
	}
}

// TestFakeConcurrent: goroutines set, stop and wait on timers while
// others advance and read the clock (run with -race). Every timer that
// is not stopped fires exactly once.
func TestFakeConcurrent(t *testing.T) {
	fc := clock.NewFake(time.Time{})
	ctx, cancel := context.WithTimeout(context.Background(), backstop)
	defer cancel()
	const workers, each = 8, 50
	var wg sync.WaitGroup
	var mu sync.Mutex
	fired := 0
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				tm, c := fc.NewTimer(ms(1 + (w*each+i)%7))
				if i%5 == 0 {
					if tm.Stop() {
						continue
					}
				}
				select {
				case <-c:
					mu.Lock()
					fired++
					mu.Unlock()
				case <-ctx.Done():
					t.Error("a timer never fired")
					return
				}
			}
		})
	}
	tk, tc := fc.NewTicker(ms(3))
	defer tk.Stop()
	stop := make(chan struct{})
	var adv sync.WaitGroup
	adv.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-tc:
			default:
			}
			_ = fc.BlockUntil(ctx, 2) // the ticker and someone's timer
			fc.Advance(ms(1))
			_ = fc.Now()
		}
	})
	wg.Wait()
	close(stop)
	fc.NewTimer(time.Hour) // lets the advancer's last BlockUntil return
	adv.Wait()
	if fired < workers*each*4/5 || fired > workers*each {
		t.Errorf("%d timers fired, want %d to %d", fired, workers*each*4/5, workers*each)
	}
}

// TestReal: the real clock's timers and tickers fire (waiting without a
// bound but the backstop: a loaded machine only makes them late).
func TestReal(t *testing.T) {
	var c clock.Clock = clock.Or(nil)
	if _, ok := c.(clock.Real); !ok {
		t.Fatalf("Or(nil) = %T, want Real", c)
	}
	start := c.Now()
	tm, tc := c.NewTimer(time.Millisecond)
	defer tm.Stop()
	tk, kc := c.NewTicker(time.Millisecond)
	defer tk.Stop()
	for _, ch := range []<-chan time.Time{tc, kc, c.After(time.Millisecond)} {
		select {
		case <-ch:
		case <-time.After(backstop):
			t.Fatal("a real timer did not fire")
		}
	}
	if c.Since(start) < time.Millisecond {
		t.Error("less than a millisecond passed while 1 ms timers fired")
	}
	fc := clock.NewFake(time.Time{})
	if clock.Or(fc) != clock.Clock(fc) {
		t.Error("Or(fake) is not the fake")
	}
}
