package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/longshore/longshore/internal/clock"
)

// ErrBadResponse: the service answered, but not with what was asked: a
// body shorter than its Content-Length, a body whose MD5 is not the
// object's ETag, or a ranged answer for another range. The store retries
// it (a fresh request usually gets the right bytes) and, when retries run
// out, returns it wrapped with what was wrong, so the sample fails rather
// than decodes garbage.
var ErrBadResponse = errors.New("s3: bad response")

// ErrRequestTimeout: one attempt took longer than Options.RequestTimeout
// (plus its allowance per byte). Retried like any timeout.
var ErrRequestTimeout = errors.New("s3: request timed out")

// ErrStalled: a response body delivered no bytes for
// Options.ProgressTimeout. The attempt is abandoned and retried on a
// fresh connection (a stalled connection rarely recovers sooner than a
// new request answers).
var ErrStalled = errors.New("s3: body stalled")

// badResponse is an ErrBadResponse with detail; its failure class groups
// it in the pipeline's failure reports.
type badResponse struct{ msg string }

func (e *badResponse) Error() string        { return ErrBadResponse.Error() + ": " + e.msg }
func (e *badResponse) Is(target error) bool { return target == ErrBadResponse }
func (e *badResponse) FailureClass() string { return "bad_response" }

func errBadResponse(format string, args ...any) error {
	return &badResponse{msg: fmt.Sprintf(format, args...)}
}

// cause is why an attempt failed, for retrying and counting.
type cause int

const (
	causeNone     cause = iota // an answer (or a failure no retry fixes)
	causeThrottle              // 429, 503: SlowDown and its kin
	causeServer                // other 5xx: InternalError, ...
	causeTimeout               // no headers in time, or the attempt's deadline
	causeConn                  // refused, reset, closed: a fresh connection may work
	causeBad                   // ErrBadResponse: short, corrupt or wrong-range body
	causeStall                 // ErrStalled: a body without progress for ProgressTimeout
)

func (c cause) String() string {
	return [...]string{"none", "throttle", "server", "timeout", "conn", "bad_response", "stall"}[c]
}

// causeOf classifies an attempt's error; causeNone means do not retry.
func causeOf(err error) cause {
	if err == nil {
		return causeNone
	}
	if errors.Is(err, ErrRequestTimeout) {
		return causeTimeout
	}
	if errors.Is(err, ErrBadResponse) {
		return causeBad
	}
	if errors.Is(err, ErrStalled) {
		return causeStall
	}
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		switch er.Code {
		case "SlowDown", "SlowDownRead", "SlowDownWrite", "Throttling", "ThrottlingException",
			"RequestLimitExceeded", "RequestThrottled", "TooManyRequests":
			return causeThrottle
		case "RequestTimeout":
			return causeTimeout
		case "InternalError", "ServiceUnavailable", "XMinioServerNotInitialized",
			"ConditionalRequestConflict": // AWS: a concurrent conditional write is in flight
			if er.StatusCode == http.StatusServiceUnavailable {
				return causeThrottle
			}
			return causeServer
		}
		switch {
		case er.StatusCode == http.StatusTooManyRequests || er.StatusCode == http.StatusServiceUnavailable:
			return causeThrottle
		case er.StatusCode == http.StatusRequestTimeout:
			return causeTimeout
		case er.StatusCode >= 500:
			return causeServer
		}
		return causeNone
	}
	// The caller's context has not ended (retry checks it first), so a
	// deadline here is the transport's: net/http's "timeout awaiting
	// response headers" matches context.DeadlineExceeded.
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return causeTimeout
	}
	if errors.Is(err, context.Canceled) || !isConnError(err) {
		return causeNone
	}
	return causeConn
}

// sporadicBackoff is the most a first or second retry waits after a 503
// or 500 while the store is not overloaded (rateLimiter.overloaded).
const sporadicBackoff = 10 * time.Millisecond

// quickRetries is how many retries of one operation skip the backoff
// (a broken body) or cut it to sporadicBackoff (a 503 or 500) while the
// store is not overloaded: a hiccup may strike the same key twice
// (a broken body, then a 503 from another front end) without the store
// refusing load. From the third retry on, the backoff rules, so a key
// that keeps failing is not hammered.
const quickRetries = 2

// bodyError is a connection failure while reading a body whose headers
// had arrived: the store answered, and the connection broke mid-body.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// brokenBody reports whether an attempt failed after the store answered,
// for its body: short, corrupt, wrong range, stalled or cut by a reset.
func brokenBody(err error, c cause) bool {
	var be *bodyError
	return c == causeBad || c == causeStall || (c == causeConn && errors.As(err, &be))
}

// attemptKey carries an *attempt in a request's context, so that the
// transport can note what the response said (Retry-After) for the retry
// loop.
type attemptKey struct{}

// attempt is one try of an operation: the request's deadline and what
// the transport saw.
type attempt struct {
	sent       time.Time
	retryAfter time.Duration // from the last response's Retry-After
	timer      *time.Timer   // fires the RequestTimeout; nil: none
	timeout    time.Duration // what timer is set to now
}

// allow extends the attempt's deadline for a body of size bytes, at
// Options.MinThroughput: a large object may take longer than a small one.
func (s *Store) allow(ctx context.Context, size int64) {
	a, _ := ctx.Value(attemptKey{}).(*attempt)
	if a == nil || a.timer == nil || s.opts.MinThroughput <= 0 || size <= 0 {
		return
	}
	extra := time.Duration(float64(size) / float64(s.opts.MinThroughput) * float64(time.Second))
	d := s.opts.RequestTimeout + extra
	if d > a.timeout {
		a.timer.Reset(d - time.Since(a.sent))
		a.timeout = d
	}
}

// noteResponse records a response's Retry-After in the attempt in r's
// context, if any.
func noteResponse(r *http.Request, resp *http.Response) {
	a, _ := r.Context().Value(attemptKey{}).(*attempt)
	if a == nil {
		return
	}
	a.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an
// HTTP-date. Anything else, or a time in the past, is 0.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(min(secs, 24*3600)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), 24*time.Hour)
	}
	return 0
}

// retry runs try until it succeeds, fails for good, or runs out of
// retries. Each attempt first waits for the request rate limiter, runs
// under its own deadline (Options.RequestTimeout) and reports to the
// limiter whether it was throttled; between attempts the store sleeps
// full-jitter exponential backoff, or the Retry-After the service asked
// for when that is longer (up to MaxRetryAfter).
func (s *Store) retry(ctx context.Context, try func(ctx context.Context, n int) error) error {
	for n := 0; ; n++ {
		if err := s.rate.wait(ctx); err != nil {
			return err
		}
		a, err := s.attemptOnce(ctx, n, try)
		c := causeOf(err)
		s.rate.done(a.sent, c == causeThrottle)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if c == causeNone {
			return err
		}
		if n >= s.opts.MaxRetries {
			return fmt.Errorf("%w (%s; gave up after %d attempts)", err, c, n+1)
		}
		s.stats.retries.Add(1)
		s.stats.byCause[c].Add(1)
		wait := s.backoff(n)
		switch {
		case n == 0 && brokenBody(err, c), n < quickRetries && brokenBody(err, c) && !s.rate.overloaded():
			// The store answered; the body broke on the way (cut short,
			// reset, stalled, corrupt). Nothing says the store is
			// loaded: ask again at once, on a fresh connection; again
			// at once the second time while the store answers the rest.
			wait = 0
		case n < quickRetries && (c == causeThrottle || c == causeServer) && !s.rate.overloaded():
			// A lone 503 or 500 from a store that answers the rest (under
			// rateShareMin of the answers throttled): a hiccup, which
			// another front end answers; the backoff is for a store that
			// refuses load. Retry-After, if asked for, still rules.
			wait = min(wait, sporadicBackoff)
		}
		if ra := min(a.retryAfter, s.maxRetryAfter()); ra > wait {
			wait = ra
			s.stats.retryAfterHonoured.Add(1)
		}
		s.stats.backoffNanos.Add(int64(wait))
		if err := sleepCtx(ctx, wait); err != nil {
			return err
		}
	}
}

func (s *Store) attemptOnce(ctx context.Context, n int, try func(ctx context.Context, n int) error) (*attempt, error) {
	a := &attempt{sent: time.Now()}
	actx, cancel := context.WithCancelCause(context.WithValue(ctx, attemptKey{}, a))
	defer cancel(nil)
	if d := s.opts.RequestTimeout; d > 0 {
		a.timeout = d
		a.timer = time.AfterFunc(d, func() { cancel(ErrRequestTimeout) })
		defer a.timer.Stop()
	}
	err := try(actx, n)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(actx), ErrRequestTimeout) {
		s.stats.timeouts.Add(1)
		// The transport's error is only "context canceled": say what
		// happened instead, without wrapping it (this is no cancellation
		// of the caller's).
		return a, fmt.Errorf("%w after %v (RequestTimeout %v, MinThroughput %d B/s): %v",
			ErrRequestTimeout, time.Since(a.sent).Round(time.Millisecond), s.opts.RequestTimeout, s.opts.MinThroughput, err)
	}
	return a, err
}

// progressBody is a response body under a progress deadline: each Read
// may wait at most d() for its bytes, timed on the store's clock; a Read
// that waits longer abandons the attempt (stall cancels the request's
// context with ErrStalled, which ends the Read). The timer runs only
// while a Read waits, so time spent between Reads (copying, checking) is
// not counted against the store. d is asked again every progressPoll
// while a Read waits: a GET sent before the store had learnt its latency
// (a run's first, all sent at once) falls under the deadline learnt
// since, not ProgressTimeout. Not safe for concurrent Reads.
type progressBody struct {
	r     io.Reader
	d     func() time.Duration
	clk   clock.Clock
	stall func()
	done  chan struct{}

	mu      sync.Mutex
	timer   clock.Timer
	waiting bool          // a Read waits
	since   time.Time     // since when
	stalled bool          // its deadline passed
	longest time.Duration // the longest a Read has waited
}

// progressPoll is how often a waiting Read's deadline is asked again.
const progressPoll = progressFloor

// watchProgress puts body under a progress deadline of d() on clk: stall
// is called (once or more) when a Read waits longer. Close stops it.
func watchProgress(body io.Reader, d func() time.Duration, clk clock.Clock, stall func()) *progressBody {
	timer, fire := clk.NewTimer(time.Hour)
	timer.Stop()
	b := &progressBody{r: body, d: d, clk: clk, timer: timer, stall: stall, done: make(chan struct{})}
	go func() {
		for {
			select {
			case <-fire:
			case <-b.done:
				return
			}
			b.mu.Lock()
			if !b.waiting || b.stalled {
				b.mu.Unlock()
				continue
			}
			waited, dl := b.clk.Since(b.since), b.d()
			if waited < dl {
				b.timer.Reset(min(dl-waited, progressPoll))
				b.mu.Unlock()
				continue
			}
			b.stalled = true
			b.mu.Unlock()
			stall()
		}
	}()
	return b
}

func (b *progressBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	b.waiting, b.since = true, b.clk.Now()
	b.timer.Reset(min(b.d(), progressPoll))
	b.mu.Unlock()
	n, err := b.r.Read(p)
	b.mu.Lock()
	b.waiting = false
	b.timer.Stop()
	b.longest = max(b.longest, b.clk.Since(b.since))
	stalled := b.stalled
	b.mu.Unlock()
	if stalled {
		// The deadline passed while this Read waited: whatever it got,
		// the attempt is being abandoned.
		b.stall()
		return n, ErrStalled
	}
	return n, err
}

// longestWait is the longest a Read has waited for its bytes so far.
func (b *progressBody) longestWait() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.longest
}

// Close stops the watch (not the body).
func (b *progressBody) Close() {
	b.mu.Lock()
	b.timer.Stop()
	b.mu.Unlock()
	close(b.done)
}

// maxRetryAfter is the longest Retry-After honoured: MaxRetryAfter, else
// RetryCap, else (no cap at all) a day.
func (s *Store) maxRetryAfter() time.Duration {
	switch {
	case s.opts.MaxRetryAfter > 0:
		return s.opts.MaxRetryAfter
	case s.opts.RetryCap > 0:
		return s.opts.RetryCap
	}
	return 24 * time.Hour
}

// minio-go's retry loop sleeps a backoff after every attempt that failed
// retryably, the last one included (retry.go: newRetryTimer sleeps after
// each yield), so with its retries off (MaxRetries: 1) every 5xx, SlowDown
// or reset cost 0-200 ms before this package's loop even saw it, on top
// of our own backoff. Its unit is a package variable, set once here,
// before any client exists; the store's retries are the only ones.
func init() { minio.DefaultRetryUnit = 0 }
