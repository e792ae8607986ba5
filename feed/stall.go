package feed

import (
	"sync"
	"time"
)

// Clock is the client's time source for its data-stall accounting: a
// monotonic clock (time.Now's readings carry one). internal/clock's
// clocks satisfy it; nil in DialConfig: the system clock.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// DefaultStallEvery is how many steps the client accounts before its
// report rides on a release: a report is a few hundred bytes every so
// many steps, never a message of its own.
const DefaultStallEvery = 16

// Stall is a trainer's data-stall accounting so far: over Steps batches,
// how long it waited for them (Wait: from asking for a batch to having
// it) and how long it spent between having one and asking for the next
// (Compute).
type Stall struct {
	Steps   int64
	Wait    time.Duration
	Compute time.Duration
}

// Share is the fraction of the trainer's time spent waiting for data:
// Wait / (Wait + Compute); 0 with no time accounted.
func (s Stall) Share() float64 {
	if t := s.Wait + s.Compute; t > 0 {
		return float64(s.Wait) / float64(t)
	}
	return 0
}

// stallMeter is the accounting itself, with no clock of its own: ask
// and handed take the time. A step is complete (its wait and compute
// known) when the trainer asks for the batch after it.
type stallMeter struct {
	mu      sync.Mutex
	every   int
	inHand  bool      // a batch was handed out and not yet followed by an ask
	gotAt   time.Time // when it was
	wait    time.Duration
	pending StallReport
	total   Stall
}

// ask notes that the trainer asks for a batch at now: the batch in hand,
// if any, completes its step.
func (m *stallMeter) ask(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.inHand {
		return
	}
	m.inHand = false
	compute := max(0, now.Sub(m.gotAt))
	m.pending.WaitUS = append(m.pending.WaitUS, m.wait.Microseconds())
	m.pending.ComputeUS = append(m.pending.ComputeUS, compute.Microseconds())
	m.total.Steps++
	m.total.Wait += m.wait
	m.total.Compute += compute
}

// handed notes that a batch asked for at asked was handed out at now.
func (m *stallMeter) handed(asked, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inHand, m.gotAt, m.wait = true, now, max(0, now.Sub(asked))
}

// take returns the steps accounted since the last report when there
// are at least every of them (all: any at all), else nil.
func (m *stallMeter) take(all bool) *StallReport {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.pending.WaitUS)
	if n == 0 || !all && n < m.every {
		return nil
	}
	k := min(n, MaxStallSteps)
	r := &StallReport{WaitUS: m.pending.WaitUS[:k:k], ComputeUS: m.pending.ComputeUS[:k:k]}
	if k == n {
		m.pending = StallReport{}
	} else {
		m.pending = StallReport{WaitUS: m.pending.WaitUS[k:], ComputeUS: m.pending.ComputeUS[k:]}
	}
	return r
}

func (m *stallMeter) stall() Stall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.total
}
