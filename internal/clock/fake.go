package clock

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// Fake is a Clock that moves only when told to. Advance moves it forward,
// firing the timers and tickers that come due, in time order (ties in the
// order they were set). BlockUntil waits until enough timers are pending,
// so a test can drive code that waits on the clock without sleeping:
//
//	fc := clock.NewFake(time.Time{})
//	go retryWithBackoff(ctx, fc) // waits on fc.NewTimer
//	fc.BlockUntil(ctx, 1)        // it is waiting now
//	fc.Advance(time.Second)      // and its timer fires
//
// A fired timer's value is sent without blocking into a channel that holds
// one, as the runtime does: a ticker whose reader is behind drops ticks.
// The zero Fake is not usable; call NewFake. Safe for concurrent use.
type Fake struct {
	mu struct {
		sync.Mutex
		now     time.Time
		pending fakeHeap // active timers and tickers, soonest first
		seq     uint64   // orders timers set at the same instant
		waiters []*blockWaiter
	}
}

var _ Clock = (*Fake)(nil)

// FakeStart is when a Fake made with a zero start begins: a fixed instant,
// so a test's times and logs are the same on every run.
var FakeStart = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// NewFake returns a Fake reading start (FakeStart if start is zero).
func NewFake(start time.Time) *Fake {
	if start.IsZero() {
		start = FakeStart
	}
	f := &Fake{}
	f.mu.now = start
	return f
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.now
}

// Since returns Now().Sub(t).
func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// NewTimer returns a timer that fires once the clock has been advanced by
// d; with d <= 0 it fires at once.
func (f *Fake) NewTimer(d time.Duration) (Timer, <-chan time.Time) {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1), index: -1}
	f.mu.Lock()
	f.scheduleLocked(t, d)
	f.mu.Unlock()
	return t, t.c
}

// After returns NewTimer's channel.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	_, c := f.NewTimer(d)
	return c
}

// NewTicker returns a ticker that fires every d of advanced time. It
// panics if d <= 0, as time.NewTicker does.
func (f *Fake) NewTicker(d time.Duration) (Ticker, <-chan time.Time) {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	t := &fakeTimer{f: f, c: make(chan time.Time, 1), period: d, index: -1}
	f.mu.Lock()
	f.scheduleLocked(t, d)
	f.mu.Unlock()
	return fakeTicker{t}, t.c
}

// Advance moves the clock forward by d (a negative d is taken as 0),
// firing every timer and tick due by then in time order; Now reads each
// one's time while it fires. It returns once all of them are sent (what
// their readers do next is up to them and the scheduler).
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	target := f.mu.now.Add(max(d, 0))
	for len(f.mu.pending) > 0 {
		t := f.mu.pending[0]
		if t.when.After(target) {
			break
		}
		f.mu.now = t.when
		sent := t.send()
		if t.period <= 0 {
			heap.Pop(&f.mu.pending)
			continue
		}
		next := t.when.Add(t.period)
		if !sent && !next.After(target) {
			// The reader is behind: the ticks due before target would be
			// dropped too, so skip them (a long Advance over a short
			// period stays cheap).
			next = t.when.Add(t.period * (target.Sub(t.when)/t.period + 1))
		}
		t.when = next
		t.seq = f.nextSeqLocked()
		heap.Fix(&f.mu.pending, t.index)
	}
	f.mu.now = target
}

// Pending returns how many timers and tickers are active: set, not yet
// fired (timers) and not stopped.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.mu.pending)
}

// BlockUntil waits until at least n timers and tickers are pending, or ctx
// is done (then it returns ctx.Err()). A test calls it to know that the
// code under test has reached its wait on the clock before it Advances.
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	f.mu.Lock()
	if len(f.mu.pending) >= n {
		f.mu.Unlock()
		return nil
	}
	w := &blockWaiter{n: n, ready: make(chan struct{})}
	f.mu.waiters = append(f.mu.waiters, w)
	f.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, x := range f.mu.waiters {
			if x == w {
				f.mu.waiters = append(f.mu.waiters[:i], f.mu.waiters[i+1:]...)
				break
			}
		}
		select {
		case <-w.ready: // met just as ctx ended: the condition wins
			return nil
		default:
		}
		return ctx.Err()
	}
}

type blockWaiter struct {
	n     int
	ready chan struct{}
}

func (f *Fake) nextSeqLocked() uint64 {
	f.mu.seq++
	return f.mu.seq
}

// scheduleLocked makes t due d from now (at once if d <= 0 and t is a
// timer), dropping any value it sent earlier.
func (f *Fake) scheduleLocked(t *fakeTimer, d time.Duration) {
	t.drain()
	if d <= 0 && t.period <= 0 {
		t.when = f.mu.now
		t.send()
		return
	}
	t.when = f.mu.now.Add(d)
	t.seq = f.nextSeqLocked()
	heap.Push(&f.mu.pending, t)
	f.wakeLocked()
}

// unscheduleLocked removes t if it is pending, reporting whether it was,
// and drops any value it sent.
func (f *Fake) unscheduleLocked(t *fakeTimer) bool {
	was := t.index >= 0
	if was {
		heap.Remove(&f.mu.pending, t.index)
	}
	// A value sent and not read has not been delivered: dropping it
	// stops the timer, as Go 1.23's synchronous timer channels have it.
	return t.drain() || was
}

// wakeLocked releases the BlockUntil calls whose count is met.
func (f *Fake) wakeLocked() {
	keep := f.mu.waiters[:0]
	for _, w := range f.mu.waiters {
		if len(f.mu.pending) >= w.n {
			close(w.ready)
		} else {
			keep = append(keep, w)
		}
	}
	clear(f.mu.waiters[len(keep):])
	f.mu.waiters = keep
}

// fakeTimer is a Fake's timer or, with a period, ticker. Its fields are
// guarded by f.mu.
type fakeTimer struct {
	f      *Fake
	c      chan time.Time
	when   time.Time
	period time.Duration // > 0: a ticker
	seq    uint64
	index  int // in f.mu.pending; -1 when not pending
}

func (t *fakeTimer) send() bool {
	select {
	case t.c <- t.when:
		return true
	default:
		return false
	}
}

// drain drops a value sent and not read, reporting whether there was one.
func (t *fakeTimer) drain() bool {
	select {
	case <-t.c:
		return true
	default:
		return false
	}
}

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.f.unscheduleLocked(t)
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.f.unscheduleLocked(t)
	t.f.scheduleLocked(t, d)
	return was
}

// fakeTicker gives a ticker its Ticker methods.
type fakeTicker struct{ t *fakeTimer }

func (k fakeTicker) Stop() { k.t.Stop() }

func (k fakeTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic("clock: non-positive interval for Ticker.Reset")
	}
	k.t.Reset(d)
}

// fakeHeap orders pending timers by when, then by seq.
type fakeHeap []*fakeTimer

func (h fakeHeap) Len() int { return len(h) }
func (h fakeHeap) Less(i, j int) bool {
	if !h[i].when.Equal(h[j].when) {
		return h[i].when.Before(h[j].when)
	}
	return h[i].seq < h[j].seq
}
func (h fakeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *fakeHeap) Push(x any) {
	t := x.(*fakeTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *fakeHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*h = old[:len(old)-1]
	return t
}

var (
	_ Timer  = (*fakeTimer)(nil)
	_ Ticker = fakeTicker{}
)
