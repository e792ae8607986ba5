// Package clock is longshore's time source, injected into the shells so
// that tests control it (in the manner of tailscale's tstime). Real reads
// the system clock. Fake moves only when a test calls Advance: it fires
// timers and tickers in time order, and BlockUntil lets a test wait until
// the code under test is waiting on the clock, instead of sleeping and
// hoping it got there.
//
// Shells take a Clock in their config (nil: Real) and use it for every
// reading of the time and every timer whose expiry changes what they do:
// retry backoffs, tick loops, watchdogs. I/O deadlines on sockets stay on
// the system clock (the kernel keeps them).
//
// Every Clock, Timer and Ticker here is safe for concurrent use.
package clock

import "time"

// Clock tells the time and makes timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Since returns the time elapsed since t: Now().Sub(t).
	Since(t time.Time) time.Duration
	// NewTimer returns a timer that sends the time on the channel once,
	// after d (at once if d <= 0).
	NewTimer(d time.Duration) (Timer, <-chan time.Time)
	// NewTicker returns a ticker that sends the time on the channel every
	// d, dropping ticks for a slow reader; d must be > 0.
	NewTicker(d time.Duration) (Ticker, <-chan time.Time)
	// After is NewTimer's channel, for a wait that is never stopped.
	After(d time.Duration) <-chan time.Time
}

// Timer is a Clock's one-shot timer. As with time.Timer since Go 1.23,
// no value sent before a Stop or Reset is received after it returns.
type Timer interface {
	// Stop prevents the timer from firing; it reports whether the call
	// stopped it (false: its value had been received, or it had been
	// stopped).
	Stop() bool
	// Reset makes the timer fire after d from now; it reports whether the
	// timer had been active.
	Reset(d time.Duration) bool
}

// Ticker is a Clock's ticker.
type Ticker interface {
	// Stop turns the ticker off; no more ticks are sent.
	Stop()
	// Reset stops the ticker and restarts it with period d (> 0).
	Reset(d time.Duration)
}

// Or returns c, or Real if c is nil: what a config's nil Clock means.
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// Real is the system clock.
type Real struct{}

var _ Clock = Real{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Since returns time.Since(t).
func (Real) Since(t time.Time) time.Duration { return time.Since(t) }

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) (Timer, <-chan time.Time) {
	t := time.NewTimer(d)
	return t, t.C
}

// NewTicker wraps time.NewTicker.
func (Real) NewTicker(d time.Duration) (Ticker, <-chan time.Time) {
	t := time.NewTicker(d)
	return t, t.C
}

// After returns time.After(d).
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }
