package s3

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/storage"
)

// maxSinglePut is S3's limit for one PUT; Put never uses multipart uploads,
// whose completion would not carry the conditional headers.
const maxSinglePut = 5 << 30

// Store is a Store on an S3 bucket (and optional key prefix) through
// minio-go v7. Open or New make one; it is safe for concurrent use.
//
// Every operation retries retryable failures itself (see Options), with
// full-jitter exponential backoff, waiting longer when a throttled answer
// asks for it with Retry-After; minio-go's internal retries are off so
// the counts in Stats are exact, by cause. Each attempt has its own
// deadline (RequestTimeout), and waits first for the request rate limiter
// (MaxRequestRate, AdaptiveRate: halved when the service throttles). A
// GET's answer is checked before the caller sees it: a body shorter than
// its Content-Length, a whole object whose MD5 is not its ETag
// (VerifyChecksums) or a ranged answer for another range is
// ErrBadResponse, retried; so is a failure no retry fixes returned at
// once: 403 and 404 are answers about the object. Errors map to the package's sentinels:
// NoSuchKey and NoSuchBucket to ErrNotFound; AccessDenied,
// InvalidAccessKeyId and SignatureDoesNotMatch to ErrAccess;
// PreconditionFailed to ErrPrecondition; InvalidRange to ErrRange.
//
// Get and GetRange read the response body straight into the caller's
// buffer, growing it only when its capacity is short.
//
// Conditional Put sends If-None-Match: * (IfAbsent) or If-Match: "etag"
// (IfMatch) with a single PUT; MinIO and AWS S3 (since 2024) honour both.
// If a conditional put is retried after a lost response and the retry
// finds the precondition failed, the store reads the object's ETag: if it
// is the MD5 of the data being put, the earlier attempt won and Put
// reports success.
type Store struct {
	client *minio.Client
	tr     *http.Transport
	core   minio.Core
	bucket string
	prefix string // "" or ending in '/'
	opts   Options
	stats  counters
	rate   *rateLimiter
	hedge  *hedger // nil: no hedging
	creds  resolvedCredentials
	clock  clock.Clock // Options.Clock, or the system's
}

var (
	_ storage.Store         = (*Store)(nil)
	_ storage.PrefixLister  = (*Store)(nil)
	_ storage.LimitedGetter = (*Store)(nil)
)

// Stats are cumulative counts since the store was made.
type Stats struct {
	// Requests is the number of HTTP requests sent (each retry, each page
	// of a listing, and minio-go's bucket-location lookups included).
	Requests int64 `json:"requests"`
	// Retries is the number of attempts repeated after a retryable error;
	// RetriesByCause splits them by why.
	Retries        int64          `json:"retries"`
	RetriesByCause RetriesByCause `json:"retries_by_cause"`
	// Throttled is the number of responses with status 429 or 503
	// (SlowDown and its kin).
	Throttled int64 `json:"throttled"`
	// RetryAfterHonoured counts the waits that a Retry-After header made
	// longer than the backoff; Backoff is the time slept between attempts
	// in all (nanoseconds in JSON).
	RetryAfterHonoured int64         `json:"retry_after_honoured"`
	Backoff            time.Duration `json:"backoff_ns"`
	// Timeouts counts attempts ended by RequestTimeout.
	Timeouts int64 `json:"timeouts"`
	// Stalls counts response bodies abandoned for making no progress
	// within ProgressTimeout (hedges' included).
	Stalls int64 `json:"stalls"`
	// BadResponses counts answers refused as short, corrupt (MD5 not the
	// ETag) or for the wrong range; Verified counts whole-object GETs
	// whose MD5 was checked against the ETag and matched.
	BadResponses int64 `json:"bad_responses"`
	Verified     int64 `json:"verified"`
	// RateWaits is how many requests the rate limiter held back, for
	// RateWait in all; Rate is its limit now and RateLow the lowest it
	// went, in requests/s (0: no limit); RateCuts is how many times
	// throttling cut it.
	RateWaits int64         `json:"rate_waits"`
	RateWait  time.Duration `json:"rate_wait_ns"`
	Rate      float64       `json:"rate"`
	RateLow   float64       `json:"rate_low"`
	RateCuts  int64         `json:"rate_cuts"`
	// Budget is the job-wide share of requests/s the coordinator gave
	// this node (SetRequestBudget; 0: none), and Ceiling the limit in
	// force: the lower of it and MaxRequestRate (0: none).
	Budget  float64 `json:"budget"`
	Ceiling float64 `json:"ceiling"`
	// Hedges counts second requests sent for slow GETs (HedgeQuantile);
	// HedgeWins those that answered first; HedgesCancelled the losers
	// (first or second) cancelled once the other answered; HedgesDenied
	// the GETs slow enough to hedge that the budget or throttling kept
	// from it.
	Hedges          int64 `json:"hedges"`
	HedgeWins       int64 `json:"hedge_wins"`
	HedgesCancelled int64 `json:"hedges_cancelled"`
	HedgesDenied    int64 `json:"hedges_denied"`
	// Errors is the number of operations that failed, after any retries,
	// with an error other than ErrNotFound, ErrPrecondition, ErrRange or
	// the caller's context ending (those are answers, not failures).
	Errors int64 `json:"errors"`
	// BytesRead and BytesWritten count object payload bytes.
	BytesRead    int64 `json:"bytes_read"`
	BytesWritten int64 `json:"bytes_written"`
}

// RetriesByCause splits Stats.Retries by the failure that was retried.
type RetriesByCause struct {
	Throttle    int64 `json:"throttle"`     // 429, 503
	Server      int64 `json:"server"`       // other 5xx
	Timeout     int64 `json:"timeout"`      // headers or the whole request too slow
	Conn        int64 `json:"conn"`         // refused, reset, closed
	BadResponse int64 `json:"bad_response"` // short, corrupt, wrong range
	Stall       int64 `json:"stall"`        // a body without progress for ProgressTimeout
}

type counters struct {
	requests, retries, throttled, errors, bytesRead, bytesWritten atomic.Int64
	byCause                                                       [causeStall + 1]atomic.Int64
	retryAfterHonoured, backoffNanos, timeouts, bad, verified     atomic.Int64
	stalls                                                        atomic.Int64
	rateWaits, rateWaitNanos                                      atomic.Int64
	hedges, hedgeWins, hedgeCancelled, hedgesDenied               atomic.Int64
}

// SetRequestBudget applies a job-wide budget's share for this store, in
// requests per second (0: none): the coordinator divides the job's
// budget among the nodes as they join and leave. The store's ceiling
// becomes the lower of it and Options.MaxRequestRate; adaptation to
// throttling goes on under it. Safe for concurrent use.
func (s *Store) SetRequestBudget(rps float64) { s.rate.setBudget(rps) }

// SetRequestCap replaces the node's own request rate cap
// (Options.MaxRequestRate) with rps requests per second (0: none): a
// store that reads one source of several that share the node's cap gets
// its part of it. A job-wide budget (SetRequestBudget) still lowers it.
// Safe for concurrent use.
func (s *Store) SetRequestCap(rps float64) { s.rate.setCap(rps) }

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	rate, low, cuts := s.rate.snapshot()
	ceil, budget := s.rate.ceiling()
	return Stats{
		Budget:   budget,
		Ceiling:  ceil,
		Requests: s.stats.requests.Load(),
		Retries:  s.stats.retries.Load(),
		RetriesByCause: RetriesByCause{
			Throttle:    s.stats.byCause[causeThrottle].Load(),
			Server:      s.stats.byCause[causeServer].Load(),
			Timeout:     s.stats.byCause[causeTimeout].Load(),
			Conn:        s.stats.byCause[causeConn].Load(),
			BadResponse: s.stats.byCause[causeBad].Load(),
			Stall:       s.stats.byCause[causeStall].Load(),
		},
		Throttled:          s.stats.throttled.Load(),
		RetryAfterHonoured: s.stats.retryAfterHonoured.Load(),
		Backoff:            time.Duration(s.stats.backoffNanos.Load()),
		Timeouts:           s.stats.timeouts.Load(),
		Stalls:             s.stats.stalls.Load(),
		BadResponses:       s.stats.bad.Load(),
		Verified:           s.stats.verified.Load(),
		RateWaits:          s.stats.rateWaits.Load(),
		RateWait:           time.Duration(s.stats.rateWaitNanos.Load()),
		Rate:               rate,
		RateLow:            low,
		RateCuts:           cuts,
		Hedges:             s.stats.hedges.Load(),
		HedgeWins:          s.stats.hedgeWins.Load(),
		HedgesCancelled:    s.stats.hedgeCancelled.Load(),
		HedgesDenied:       s.stats.hedgesDenied.Load(),
		Errors:             s.stats.errors.Load(),
		BytesRead:          s.stats.bytesRead.Load(),
		BytesWritten:       s.stats.bytesWritten.Load(),
	}
}

// countingTransport counts requests and throttling responses at the HTTP
// layer, where every request minio-go makes passes.
type countingTransport struct {
	base  http.RoundTripper
	stats *counters
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.stats.requests.Add(1)
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		t.stats.throttled.Add(1)
	}
	noteResponse(r, resp)
	return resp, err
}

// New opens bucket (keys under prefix) and probes it with
// BucketExists, so a wrong bucket, endpoint or credential fails here, with
// a message saying what to check, rather than at the first fetch.
func New(ctx context.Context, bucket, prefix string, opts Options) (*Store, error) {
	name := "s3://" + bucket + "/" + prefix
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	if prefix != "" {
		if err := storage.CheckPrefix(prefix); err != nil || strings.HasPrefix(prefix, "/") {
			return nil, fmt.Errorf("open %s: bad prefix: %w", name, storage.ErrInvalidKey)
		}
		if !strings.HasSuffix(prefix, "/") {
			prefix += "/"
		}
	}
	host, secure, err := parseEndpoint(opts.endpoint())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	conc := opts.FetchConcurrency
	if conc == 0 {
		conc = 16
	}
	// Idle connections for every concurrent fetch, plus a few for listing
	// and puts running beside them. MaxConnsPerHost stays 0 (no cap): the
	// caller bounds concurrency, and a cap would queue requests inside the
	// transport where no timeout sees them.
	tr.MaxIdleConnsPerHost = conc + 8
	tr.MaxIdleConns = max(tr.MaxIdleConns, conc+8)
	tr.ResponseHeaderTimeout = opts.ResponseHeaderTimeout
	creds, err := resolveCredentials(ctx, opts, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	if creds.refresher != nil {
		opts.resolvedSource = creds.source
	}
	s := &Store{bucket: bucket, prefix: prefix, opts: opts, tr: tr, creds: creds}
	s.rate = newRateLimiter(opts, &s.stats)
	s.hedge = newHedger(opts)
	s.clock = clock.Or(opts.Clock)
	client, err := minio.New(host, &minio.Options{
		Creds:      creds.creds,
		Secure:     secure,
		Transport:  countingTransport{base: tr, stats: &s.stats},
		Region:     opts.Region,
		MaxRetries: 1, // one attempt: retries are ours
	})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	s.client = client
	s.core = minio.Core{Client: client}

	var exists bool
	err = s.retry(ctx, func(ctx context.Context, _ int) error {
		var err error
		exists, err = client.BucketExists(ctx, bucket)
		return err
	})
	if err != nil {
		return nil, s.openError(err)
	}
	if !exists {
		return nil, fmt.Errorf("open %s: %w: bucket %q does not exist at %s (create it, or check the URL and %s)",
			s, storage.ErrNotFound, bucket, opts.endpoint(), EnvEndpoint)
	}
	return s, nil
}

func (s *Store) openError(err error) error {
	var er minio.ErrorResponse
	if errors.As(err, &er) && er.Code == "NoSuchBucket" {
		return fmt.Errorf("open %s: %w: bucket %q does not exist at %s (create it, or check the URL and %s)",
			s, storage.ErrNotFound, s.bucket, s.opts.endpoint(), EnvEndpoint)
	}
	if isConnError(err) {
		return fmt.Errorf("open %s: cannot reach %s (check %s): %w", s, s.opts.endpoint(), EnvEndpoint, err)
	}
	return s.mapError("open", "", err)
}

// Close releases the store's idle connections. Calls in flight finish; a
// store used after Close dials anew.
func (s *Store) Close() error {
	s.tr.CloseIdleConnections()
	s.creds.closeIdle()
	return nil
}

// String returns "s3://bucket/prefix".
func (s *Store) String() string { return "s3://" + s.bucket + "/" + s.prefix }

// Bucket and Prefix return where the store is rooted.
func (s *Store) Bucket() string { return s.bucket }
func (s *Store) Prefix() string { return s.prefix }

// CredentialSource says where the store's keys come from (a profile, a
// role, the environment, none), for the binaries' start-up line; it never
// holds a secret.
func (s *Store) CredentialSource() string { return s.creds.source }

// CredentialRefreshes is how many times the store fetched keys from a
// source that issues them (0 for static keys and anonymous access), and
// the error of the last refresh if it failed and older keys, still
// valid, are in use.
func (s *Store) CredentialRefreshes() (int, error) {
	if s.creds.refresher == nil {
		return 0, nil
	}
	return s.creds.refresher.state()
}

// Client returns the underlying minio-go client, for tests and tools.
func (s *Store) Client() *minio.Client { return s.client }

func (s *Store) url(key string) string { return s.String() + key }

// mapError wraps err with the operation, the object URL and the matching
// sentinel, and counts it.
func (s *Store) mapError(op, key string, err error) error {
	what := s.url(key)
	if key == "" {
		what = s.String()
	}
	if ctxErr := contextError(err); ctxErr != nil || errors.Is(err, storage.ErrTooLarge) {
		return fmt.Errorf("%s %s: %w", op, what, err)
	}
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		switch er.Code {
		case "NoSuchKey", "NoSuchBucket", "NotFound":
			return fmt.Errorf("%s %s: %w: %w", op, what, storage.ErrNotFound, err)
		case "PreconditionFailed":
			return fmt.Errorf("%s %s: %w: %w", op, what, storage.ErrPrecondition, err)
		case "InvalidRange":
			return fmt.Errorf("%s %s: %w: %w", op, what, storage.ErrRange, err)
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken":
			s.stats.errors.Add(1)
			return fmt.Errorf("%s %s: %w: %s (%w)", op, what, storage.ErrAccess, s.opts.credHint(), err)
		}
		if er.StatusCode == http.StatusNotFound {
			return fmt.Errorf("%s %s: %w: %w", op, what, storage.ErrNotFound, err)
		}
		if er.StatusCode == http.StatusForbidden {
			s.stats.errors.Add(1)
			return fmt.Errorf("%s %s: %w: %s (%w)", op, what, storage.ErrAccess, s.opts.credHint(), err)
		}
	}
	s.stats.errors.Add(1)
	return fmt.Errorf("%s %s: %w", op, what, err)
}

func contextError(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// isConnError reports network failures a retry on a new connection may fix.
func isConnError(err error) bool {
	if contextError(err) != nil {
		return false
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		// "No such host" too: an orchestrator's DNS (Docker's, a Kubernetes
		// Service without ready endpoints) answers it while the store
		// restarts. MaxRetries bounds what a mistyped endpoint costs.
		return dnsErr.IsTemporary || dnsErr.IsTimeout || dnsErr.IsNotFound
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return true // dial, read or write on the connection failed
	}
	for _, target := range []error{syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.ECONNABORTED, syscall.EPIPE, io.ErrUnexpectedEOF} {
		if errors.Is(err, target) {
			return true
		}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		// The connection closed under us: minio-go turns the transport's
		// EOF into "Connection closed by foreign host ...".
		msg := ue.Err.Error()
		return errors.Is(ue.Err, io.EOF) || strings.Contains(msg, "Connection closed by foreign host") ||
			strings.Contains(msg, "connection reset") || strings.Contains(msg, "server closed")
	}
	return false
}

// backoff is the full-jitter wait before retry n: uniform in
// [0, min(cap, base*2^n)].
func (s *Store) backoff(n int) time.Duration {
	return fullJitter(s.opts.RetryBase, s.opts.RetryCap, n)
}

func fullJitter(base, ceiling time.Duration, n int) time.Duration {
	if base <= 0 {
		return 0
	}
	d := base
	for i := 0; i < n && (ceiling <= 0 || d < ceiling) && d < 1<<40; i++ {
		d *= 2
	}
	if ceiling > 0 && d > ceiling {
		d = ceiling
	}
	return rand.N(d + 1)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Get implements Store.
func (s *Store) Get(ctx context.Context, key string, dst []byte) ([]byte, error) {
	return s.GetLimit(ctx, key, -1, dst)
}

// GetLimit implements storage.LimitedGetter: Get, refusing an object
// whose Content-Length is over limit (< 0: no limit) before reading its
// body, with an error wrapping storage.ErrTooLarge.
func (s *Store) GetLimit(ctx context.Context, key string, limit int64, dst []byte) ([]byte, error) {
	if err := storage.CheckKey(key); err != nil {
		return dst[:0], fmt.Errorf("get %s: %w", s, err)
	}
	out, err := s.get(ctx, key, nil, limit, dst)
	if err != nil {
		return dst[:0], s.mapError("get", key, err)
	}
	return out, nil
}

// byteRange is a ranged GET's request: length bytes from off; length < 0
// means to the end.
type byteRange struct{ off, length int64 }

// check compares a 206 answer's Content-Range and Content-Length with
// the range asked, and returns how many bytes to read. A range clipped at
// the object's end is the object's answer (GetRange reports it); anything
// else that differs is ErrBadResponse. A 200 (no Content-Range: the whole
// object) is the right answer only to a range starting at 0.
func (r byteRange) check(contentRange string, size int64) (int64, error) {
	if contentRange == "" {
		if r.off != 0 {
			return 0, errBadResponse("asked for bytes from %d, the answer has no Content-Range (the whole object?)", r.off)
		}
		// The whole object (200), from byte 0: read what was asked of it,
		// also when its length is not given (-1: read to the end only if
		// the end was asked for).
		if r.length > 0 && (size < 0 || size > r.length) {
			return r.length, nil
		}
		return max(size, -1), nil
	}
	var start, end, total int64
	if _, err := fmt.Sscanf(contentRange, "bytes %d-%d/%d", &start, &end, &total); err != nil {
		if _, err := fmt.Sscanf(contentRange, "bytes %d-%d/*", &start, &end); err != nil {
			return 0, errBadResponse("unreadable Content-Range %q", contentRange)
		}
		total = -1
	}
	want := int64(-1)
	if r.length > 0 {
		want = r.off + r.length - 1
	}
	clipped := total >= 0 && end == total-1
	switch {
	case start != r.off || end < start || (want >= 0 && end != want && !(clipped && end < want)) || (want < 0 && total >= 0 && !clipped):
		return 0, errBadResponse("asked for bytes %d-%s, the answer is for %q", r.off, rangeEnd(want), contentRange)
	case size >= 0 && size != end-start+1:
		return 0, errBadResponse("Content-Range %q with Content-Length %d", contentRange, size)
	}
	return end - start + 1, nil
}

func rangeEnd(end int64) string {
	if end < 0 {
		return ""
	}
	return strconv.FormatInt(end, 10)
}

// get runs one GET (ranged when rng is not nil) with retries, reading the
// body into dst. The answer must be what was asked: a body as long as its
// Content-Length, for a ranged GET the range asked (byteRange.check), and
// for a whole object whose ETag is a plain MD5 (a single-part object
// without SSE-KMS or SSE-C), bytes with that MD5 when
// Options.VerifyChecksums. Otherwise the attempt fails with
// ErrBadResponse and is retried, so a caller never gets garbage. A whole
// object longer than limit (>= 0) fails with storage.ErrTooLarge before
// its body is read.
func (s *Store) get(ctx context.Context, key string, rng *byteRange, limit int64, dst []byte) ([]byte, error) {
	kind := hedgeWhole
	if rng != nil {
		kind = hedgeRange
	}
	var out []byte
	err := s.retry(ctx, func(ctx context.Context, _ int) error {
		var err error
		out, err = s.hedged(ctx, kind, dst, func(ctx context.Context, dst []byte) ([]byte, error) {
			return s.getOnce(ctx, kind, key, rng, limit, dst)
		})
		return err
	})
	return out, err
}

// getOnce is one attempt of get (or its hedge), into dst.
func (s *Store) getOnce(ctx context.Context, kind int, key string, rng *byteRange, limit int64, dst []byte) ([]byte, error) {
	var opts minio.GetObjectOptions
	if rng != nil {
		end := int64(0) // "bytes=off-"
		if rng.length > 0 {
			end = rng.off + rng.length - 1
		}
		if err := opts.SetRange(rng.off, end); err != nil {
			return nil, err
		}
	}
	// The request's own context, for the progress deadline to end.
	gctx, gcancel := context.WithCancelCause(ctx)
	defer gcancel(nil)
	body, info, h, err := s.core.GetObject(gctx, s.bucket, s.prefix+key, opts)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	var r io.Reader = body
	var pb *progressBody
	deadline := s.progressDeadline(kind)
	if deadline > 0 {
		pb = watchProgress(body, func() time.Duration { return s.progressDeadline(kind) }, s.clock, func() { gcancel(ErrStalled) })
		defer pb.Close()
		r = pb
	}
	size := info.Size
	if rng != nil {
		if size, err = rng.check(h.Get("Content-Range"), info.Size); err != nil {
			s.stats.bad.Add(1)
			return nil, err
		}
	} else if limit >= 0 && size > limit {
		return nil, fmt.Errorf("%w: %d bytes, over the limit of %d", storage.ErrTooLarge, size, limit)
	}
	s.allow(ctx, size)
	out, err := readBody(r, size, limit, dst)
	s.stats.bytesRead.Add(int64(len(out)))
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(gctx), ErrStalled) {
		s.stats.stalls.Add(1)
		deadline = s.progressDeadline(kind) // the one in force when it stalled
		return out, fmt.Errorf("%w: no bytes for %v after %d (ProgressTimeout %v, or 4× the p99 of the longest waits inside recent bodies; --progress-timeout)", ErrStalled, deadline, len(out), s.opts.ProgressTimeout)
	}
	if err != nil {
		if errors.Is(err, ErrBadResponse) {
			s.stats.bad.Add(1)
		} else if ctx.Err() == nil && isConnError(err) {
			err = &bodyError{err}
		}
		return out, err
	}
	if rng == nil {
		if err := s.verify(out, info.ETag, h); err != nil {
			s.stats.bad.Add(1)
			return out, err
		}
	}
	if pb != nil && s.hedge != nil {
		s.hedge.recordGap(kind, pb.longestWait())
	}
	return out, nil
}

// verify checks a whole object's bytes against its ETag when that is the
// MD5 of the content, which S3 and MinIO guarantee for objects written in
// one PUT without SSE-KMS or SSE-C (multipart ETags carry a "-N" suffix).
func (s *Store) verify(data []byte, etag string, h http.Header) error {
	if !s.opts.VerifyChecksums || len(etag) != 32 {
		return nil
	}
	switch h.Get("X-Amz-Server-Side-Encryption") {
	case "aws:kms", "aws:kms:dsse":
		return nil
	}
	if h.Get("X-Amz-Server-Side-Encryption-Customer-Algorithm") != "" {
		return nil
	}
	var want [md5.Size]byte
	if _, err := hex.Decode(want[:], []byte(etag)); err != nil {
		return nil // not a hex MD5: nothing to check against
	}
	if got := md5.Sum(data); got != want {
		return errBadResponse("%d bytes with MD5 %x, the ETag says %s", len(data), got, etag)
	}
	s.stats.verified.Add(1)
	return nil
}

// readBody reads size bytes (or, for size < 0, everything) from body into
// dst's backing array, growing it only if needed. A body that ends early
// is ErrBadResponse. A body of unknown size (no Content-Length) longer
// than limit (>= 0) is cut there with storage.ErrTooLarge, having read
// at most limit+1 bytes.
func readBody(body io.Reader, size, limit int64, dst []byte) ([]byte, error) {
	if size >= 0 {
		buf := slices.Grow(dst[:0], int(size))[:size]
		n, err := io.ReadFull(body, buf)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = errBadResponse("body ended after %d of %d bytes", n, size)
			}
			return buf[:n], err
		}
		return buf, nil
	}
	buf := dst[:0]
	for {
		if limit >= 0 && int64(len(buf)) > limit {
			return buf, fmt.Errorf("%w: a body with no Content-Length ran past the limit of %d bytes", storage.ErrTooLarge, limit)
		}
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, 32<<10)
		}
		room := buf[len(buf):cap(buf)]
		if limit >= 0 && int64(len(room)) > limit+1-int64(len(buf)) {
			room = room[:limit+1-int64(len(buf))]
		}
		n, err := body.Read(room)
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// GetRange implements Store with one ranged GET.
func (s *Store) GetRange(ctx context.Context, key string, off, length int64, dst []byte) ([]byte, error) {
	if err := storage.CheckKey(key); err != nil {
		return dst[:0], fmt.Errorf("get range %s: %w", s, err)
	}
	rangeErr := func(size int64, cause error) error {
		err := fmt.Errorf("get range %s [%d,+%d) of %d bytes: %w", s.url(key), off, length, size, storage.ErrRange)
		if cause != nil {
			err = fmt.Errorf("%w (%w)", err, cause)
		}
		return err
	}
	if off < 0 {
		return dst[:0], rangeErr(-1, nil)
	}
	if length == 0 || (length < 0 && off == 0) {
		if length < 0 {
			return s.Get(ctx, key, dst)
		}
		// S3 cannot express an empty range: check off against the size.
		info, err := s.Stat(ctx, key)
		if err != nil {
			return dst[:0], err
		}
		if off > info.Size {
			return dst[:0], rangeErr(info.Size, nil)
		}
		return dst[:0], nil
	}
	out, err := s.get(ctx, key, &byteRange{off: off, length: length}, -1, dst)
	if err != nil {
		mapped := s.mapError("get range", key, err)
		if !errors.Is(mapped, storage.ErrRange) {
			return dst[:0], mapped
		}
		// 416: off is at or past the end. At the end is a valid, empty
		// read when length < 0.
		info, serr := s.Stat(ctx, key)
		if serr != nil {
			return dst[:0], serr
		}
		if length < 0 && off == info.Size {
			return dst[:0], nil
		}
		return dst[:0], rangeErr(info.Size, err)
	}
	if length > 0 && int64(len(out)) < length {
		// S3 clips a range that runs past the end; the contract does not.
		info, serr := s.Stat(ctx, key)
		size := int64(-1)
		if serr == nil {
			size = info.Size
		}
		return dst[:0], rangeErr(size, nil)
	}
	return out, nil
}

// Stat implements Store.
func (s *Store) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	if err := storage.CheckKey(key); err != nil {
		return storage.ObjectInfo{}, fmt.Errorf("stat %s: %w", s, err)
	}
	var info minio.ObjectInfo
	err := s.retry(ctx, func(ctx context.Context, _ int) error {
		var err error
		info, err = s.client.StatObject(ctx, s.bucket, s.prefix+key, minio.StatObjectOptions{})
		return err
	})
	if err != nil {
		return storage.ObjectInfo{}, s.mapError("stat", key, err)
	}
	return storage.ObjectInfo{Key: key, Size: info.Size, ETag: info.ETag, ModTime: info.LastModified}, nil
}

// Put implements Store with a single PUT (up to 5 GiB).
func (s *Store) Put(ctx context.Context, key string, data []byte, c storage.Cond) (string, error) {
	if err := storage.CheckKey(key); err != nil {
		return "", fmt.Errorf("put %s: %w", s, err)
	}
	if len(data) > maxSinglePut {
		return "", fmt.Errorf("put %s: %d bytes is over the 5 GiB single-PUT limit", s.url(key), len(data))
	}
	if c.IfAbsent && c.IfMatch != "" {
		// Absent and matching an ETag cannot both hold (MemStore agrees).
		return "", fmt.Errorf("put %s if absent and if-match %q: %w", s.url(key), c.IfMatch, storage.ErrPrecondition)
	}
	sum := md5.Sum(data)
	md5b64 := base64.StdEncoding.EncodeToString(sum[:])
	ours := fmt.Sprintf("%x", sum[:])
	var opts minio.PutObjectOptions
	switch {
	case c.IfAbsent:
		opts.SetMatchETagExcept("*")
	case c.IfMatch != "":
		opts.SetMatchETag(c.IfMatch)
	}
	var etag string
	err := s.retry(ctx, func(ctx context.Context, n int) error {
		info, err := s.core.PutObject(ctx, s.bucket, s.prefix+key, bytes.NewReader(data), int64(len(data)), md5b64, "", opts)
		if err == nil {
			etag = info.ETag
			s.stats.bytesWritten.Add(int64(len(data)))
			return nil
		}
		var er minio.ErrorResponse
		if n > 0 && errors.As(err, &er) && er.Code == "PreconditionFailed" {
			// An earlier attempt may have won before its response was
			// lost: if the object now holds exactly our bytes, it did.
			if cur, serr := s.client.StatObject(ctx, s.bucket, s.prefix+key, minio.StatObjectOptions{}); serr == nil && cur.ETag == ours {
				etag = ours
				return nil
			}
		}
		return err
	})
	if err != nil {
		mapped := s.mapError("put", key, err)
		if c.IfMatch != "" && errors.Is(mapped, storage.ErrNotFound) && !isNoSuchBucket(err) {
			// If-Match on a missing object: AWS answers 404, the contract
			// says the precondition failed.
			return "", fmt.Errorf("put %s if-match %q: object missing: %w", s.url(key), c.IfMatch, storage.ErrPrecondition)
		}
		return "", mapped
	}
	if etag == "" {
		etag = ours
	}
	return etag, nil
}

// Delete implements Store. Deleting a missing key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := storage.CheckKey(key); err != nil {
		return fmt.Errorf("delete %s: %w", s, err)
	}
	err := s.retry(ctx, func(ctx context.Context, _ int) error {
		return s.client.RemoveObject(ctx, s.bucket, s.prefix+key, minio.RemoveObjectOptions{})
	})
	if err != nil {
		mapped := s.mapError("delete", key, err)
		if errors.Is(mapped, storage.ErrNotFound) && !isNoSuchBucket(err) {
			return nil
		}
		return mapped
	}
	return nil
}

func isNoSuchBucket(err error) bool {
	var er minio.ErrorResponse
	return errors.As(err, &er) && er.Code == "NoSuchBucket"
}

// List implements Store. A listing that fails mid-way is resumed after the
// last key delivered, so a retry never repeats or skips a key.
func (s *Store) List(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	if err := storage.CheckPrefix(prefix); err != nil {
		return fmt.Errorf("list %s: %w", s, err)
	}
	fetchOwner := false
	last := ""
	var fnErr error
	err := s.retry(ctx, func(ctx context.Context, _ int) error {
		opts := minio.ListObjectsOptions{
			Prefix:     s.prefix + prefix,
			Recursive:  true,
			StartAfter: last,
			FetchOwner: &fetchOwner,
		}
		for obj := range s.client.ListObjectsIter(ctx, s.bucket, opts) {
			if obj.Err != nil {
				return obj.Err
			}
			last = obj.Key
			info := storage.ObjectInfo{Key: strings.TrimPrefix(obj.Key, s.prefix), Size: obj.Size, ETag: obj.ETag, ModTime: obj.LastModified}
			if fnErr = fn(info); fnErr != nil {
				return nil
			}
		}
		return ctx.Err()
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return s.mapError("list", prefix, err)
	}
	return nil
}

// ListPrefixes implements PrefixLister with a delimiter listing: one
// request per 1000 prefixes, however many objects lie below them.
func (s *Store) ListPrefixes(ctx context.Context, prefix string) ([]string, error) {
	if err := storage.CheckPrefix(prefix); err != nil {
		return nil, fmt.Errorf("list prefixes %s: %w", s, err)
	}
	fetchOwner := false
	var out []string
	err := s.retry(ctx, func(ctx context.Context, _ int) error {
		out = out[:0] // a retry starts over; the listing is small
		opts := minio.ListObjectsOptions{Prefix: s.prefix + prefix, FetchOwner: &fetchOwner}
		for obj := range s.client.ListObjectsIter(ctx, s.bucket, opts) {
			if obj.Err != nil {
				return obj.Err
			}
			key := strings.TrimPrefix(obj.Key, s.prefix)
			if p, ok := storage.CommonPrefix(key, prefix); ok && p == key {
				out = append(out, p)
			}
		}
		return ctx.Err()
	})
	if err != nil {
		return nil, s.mapError("list prefixes", prefix, err)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
