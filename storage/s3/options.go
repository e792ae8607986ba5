package s3

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"time"

	"github.com/longshore/longshore/internal/clock"
)

// Environment variables DefaultOptions reads. AWS_ENDPOINT_URL_S3, the
// S3-specific one, wins over AWS_ENDPOINT_URL, as in the AWS SDKs and CLI.
// Credentials are taken as a pair from the first source that sets both
// halves: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (with AWS_SESSION_TOKEN),
// then MinIO's MINIO_ROOT_USER/MINIO_ROOT_PASSWORD, then the older
// MINIO_ACCESS_KEY/MINIO_SECRET_KEY.
const (
	EnvEndpointS3      = "AWS_ENDPOINT_URL_S3"
	EnvEndpoint        = "AWS_ENDPOINT_URL"
	EnvRegion          = "AWS_REGION"
	EnvDefaultRegion   = "AWS_DEFAULT_REGION"
	EnvAccessKeyID     = "AWS_ACCESS_KEY_ID"
	EnvSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	EnvSessionToken    = "AWS_SESSION_TOKEN"
	EnvMinioRootUser   = "MINIO_ROOT_USER"
	EnvMinioRootPass   = "MINIO_ROOT_PASSWORD"
	EnvMinioAccessKey  = "MINIO_ACCESS_KEY"
	EnvMinioSecretKey  = "MINIO_SECRET_KEY"
)

// AWSEndpoint is the endpoint used when Options.Endpoint is empty.
const AWSEndpoint = "https://s3.amazonaws.com"

// Options configure an S3 store. The zero value is valid: AWS S3,
// anonymous, no retries, no timeouts, no checksum checks, no rate limit,
// 16 connections. DefaultOptions is what the binaries use.
type Options struct {
	// Endpoint is the service URL, "http://host:port" or "https://host";
	// the scheme decides TLS. Empty means AWSEndpoint.
	Endpoint string
	// Region of the bucket. Empty means ask the service once per bucket
	// (GetBucketLocation, cached by minio-go).
	Region string
	// AccessKey and SecretKey are static credentials, SessionToken the
	// optional STS token that goes with them. Both keys empty means
	// anonymous requests (public buckets).
	AccessKey    string
	SecretKey    string
	SessionToken string
	// Credentials chooses where keys come from (credentials.go,
	// docs/credentials.md): "" uses AccessKey/SecretKey, or none
	// (anonymous); CredsAuto ("auto", what DefaultOptions sets) tries the
	// environment's keys, then a profile, a web identity token file,
	// container credentials and instance metadata, refreshing keys that
	// expire; "env", "profile", "profile:NAME", "web-identity",
	// "container", "imds" and "anonymous" name one source. A source other
	// than auto or env wins over keys DefaultOptions read from the
	// environment, as --profile does in the AWS CLI.
	Credentials string

	// FetchConcurrency is how many requests the caller keeps in flight at
	// once. The HTTP transport keeps at least that many idle connections
	// per host: minio-go's default keeps 16, and every fetch beyond that
	// would pay a new TCP (and TLS) handshake. 0 means 16.
	FetchConcurrency int

	// MaxRetries is how many times one operation is retried after a
	// retryable failure: 5xx, SlowDown and other throttling, connection
	// refused or reset, timeouts. 0 means no retries. minio-go's own retry
	// loop is turned off, so these are the only retries, and Stats counts
	// them.
	MaxRetries int
	// RetryBase and RetryCap shape full-jitter exponential backoff: before
	// retry n (from 0) the store sleeps a uniform random time in
	// [0, min(RetryCap, RetryBase*2^n)]. Zero RetryBase retries at once;
	// zero RetryCap means no cap.
	RetryBase time.Duration
	RetryCap  time.Duration
	// MaxRetryAfter bounds the wait a throttled answer's Retry-After
	// header may ask for: the store waits the longer of its backoff and
	// min(Retry-After, MaxRetryAfter). 0 means RetryCap (and with no
	// RetryCap, a day).
	MaxRetryAfter time.Duration

	// ResponseHeaderTimeout bounds the wait for a response's headers after
	// a request is sent; when it fires the attempt fails as a (retryable)
	// timeout. 0 means no limit beyond the caller's context.
	ResponseHeaderTimeout time.Duration
	// RequestTimeout bounds one attempt from sending the request to the
	// last byte of its body, plus a second for every MinThroughput bytes
	// of body (so a large object gets the time it needs at that speed);
	// a body that trickles past it fails the attempt with
	// ErrRequestTimeout, which is retried on a fresh connection. 0 means
	// no limit beyond ResponseHeaderTimeout and the caller's context.
	RequestTimeout time.Duration
	// MinThroughput is the body speed, in bytes/s, that RequestTimeout
	// allows for; 0 means none: RequestTimeout is the whole allowance.
	MinThroughput int64
	// ProgressTimeout is a response body's progress deadline: a read of
	// the body that waits this long for a byte abandons the attempt with
	// ErrStalled, which is retried on a fresh connection, however much
	// of RequestTimeout is left. Timed on Clock. 0: none. With hedging
	// on, once hedgeWarmup bodies of a kind were read whole, the deadline
	// is the shorter of this and 4x the p99 of their longest waits for
	// bytes (at least 100 ms): see progressDeadline.
	ProgressTimeout time.Duration

	// VerifyChecksums checks every whole-object GET whose ETag is a plain
	// MD5 (objects written in one PUT, without SSE-KMS or SSE-C) against
	// the MD5 of the bytes read, so that a body damaged on the way is
	// retried instead of decoded. Ranged GETs (packed chunks) are checked
	// by length and Content-Range only; S3 has no checksum of a range.
	// false: no check.
	VerifyChecksums bool

	// MaxRequestRate is the store's budget of requests per second (every
	// operation and retry counts; one store per node process, so a
	// per-node budget); 0 means no budget.
	MaxRequestRate float64
	// AdaptiveRate lowers the request rate when the service throttles
	// (429, 503): AIMD, halved at a throttle and grown back by a
	// twentieth of the rate it was cut from per second of answered
	// traffic, never above
	// MaxRequestRate (without one, the limit is lifted once the rate is
	// back at twice where it was cut). false: the rate is only the budget.
	AdaptiveRate bool

	// HedgeQuantile turns on hedged GETs (hedge.go): a GET still
	// unanswered after this quantile of recent GETs' latencies (0.95: the
	// p95 so far; whole objects and ranges apart) is sent a second time;
	// the first good answer wins and the other is cancelled. Only after
	// 20 GETs of a kind were answered. 0: no hedging (DefaultOptions: 0.95).
	HedgeQuantile float64
	// HedgeMin is the least wait before a hedge, a floor under the
	// quantile (a store that answers in a millisecond is not worth asking
	// twice); 0: none.
	HedgeMin time.Duration
	// HedgeBudget bounds hedges to this share of GETs (each GET earns it,
	// a hedge spends 1, at most 10 saved up), so a slow store is never
	// asked for much more than its load; 0: DefaultHedgeBudget.
	HedgeBudget float64
	// Clock times hedges (their timers and the latencies they learn
	// from) and credential expiry; nil: the system clock. Tests give a
	// fake one.
	Clock clock.Clock

	// credSource names the environment variables DefaultOptions took
	// AccessKey and SecretKey from.
	credSource string
	// resolvedSource says where New found the credentials, for error
	// hints.
	resolvedSource string
}

// DefaultOptions returns Options filled from the environment (see the Env
// constants) and tuned for feeding GPUs.
func DefaultOptions() Options { return optionsFromEnv(os.Getenv) }

func optionsFromEnv(getenv func(string) string) Options {
	o := Options{
		// Service-specific wins over global, as in the AWS SDKs.
		Endpoint: firstNonEmpty(getenv(EnvEndpointS3), getenv(EnvEndpoint)),
		Region:   firstNonEmpty(getenv(EnvRegion), getenv(EnvDefaultRegion)),
		// A GPU host's decoders keep tens of GETs in flight; an idle
		// connection costs a few KiB, a handshake per GET costs latency.
		FetchConcurrency: 64,
		// Six attempts over 0-10 s of backoff ride out a MinIO restart or a
		// burst of SlowDown without hiding a real outage for long.
		MaxRetries: 5,
		// AWS's guidance for SlowDown: start backing off around 100 ms.
		RetryBase: 100 * time.Millisecond,
		// A single wait longer than this stalls the pipeline more than a
		// reported error would.
		RetryCap: 5 * time.Second,
		// S3 answers within a second; 30 s without headers means a hung
		// connection, which a retry on a fresh one fixes.
		ResponseHeaderTimeout: 30 * time.Second,
		// Throttling services send Retry-After of a few seconds; a minute
		// is as long as a node should wait on one answer.
		MaxRetryAfter: time.Minute,
		// A GET of an image takes tens of milliseconds; one that has not
		// finished in a minute, plus a second per MiB, is stuck on a bad
		// connection or a stalled server, and a fresh request is faster.
		RequestTimeout: time.Minute,
		MinThroughput:  1 << 20,
		// An MD5 costs about 2 ms per MiB of one core, a few percent of
		// decoding the same bytes; a corrupt body decoded is a wrong
		// sample in the training set.
		VerifyChecksums: true,
		// A body that delivers no byte for 2 s is on a stalled or dead
		// connection: an image's whole GET takes tens of milliseconds on
		// S3 (its p99 a few hundred), a lost segment costs TCP a
		// retransmission timeout of 0.2-1 s, so 2 s is ten times the
		// slowest healthy GET and a retransmission or two. A fresh
		// request is faster than waiting out RequestTimeout.
		ProgressTimeout: 2 * time.Second,
		// S3 answers SlowDown above 5,500 GETs/s per prefix: back off
		// instead of hammering it. No fixed budget: --max-request-rate.
		AdaptiveRate: true,
		// The AWS CLI's chain: keys that expire (instance and container
		// roles, web identity) are refreshed, and a user of one profile
		// or role needs no key in the environment.
		Credentials: CredsAuto,
		// A GET slower than the p95 of its kind is asked again: a slow
		// answer is usually one slow server or connection, and a second
		// request rarely meets the same. HedgeBudget (15%) bounds the
		// extra load; no hedge is sent while the store throttles.
		HedgeQuantile: 0.95,
	}
	for _, pair := range [][3]string{
		{EnvAccessKeyID, EnvSecretAccessKey, EnvSessionToken},
		{EnvMinioRootUser, EnvMinioRootPass, ""},
		{EnvMinioAccessKey, EnvMinioSecretKey, ""},
	} {
		ak, sk := getenv(pair[0]), getenv(pair[1])
		if ak != "" && sk != "" {
			o.AccessKey, o.SecretKey = ak, sk
			if pair[2] != "" {
				o.SessionToken = getenv(pair[2])
			}
			o.credSource = pair[0] + "/" + pair[1]
			break
		}
	}
	return o
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// Validate reports every problem with o at once (errors.Join), or nil.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("storage options: "+format, args...))
	}
	if o.Endpoint != "" {
		if _, _, err := parseEndpoint(o.Endpoint); err != nil {
			bad("%v", err)
		}
	}
	if (o.AccessKey == "") != (o.SecretKey == "") {
		bad("AccessKey and SecretKey must be set together (or both empty for anonymous access)")
	}
	if o.SessionToken != "" && o.AccessKey == "" {
		bad("SessionToken needs AccessKey and SecretKey")
	}
	if spec, err := parseCredentialSpec(o.Credentials); err != nil {
		bad("%v", err)
	} else if o.AccessKey != "" && o.credSource == "" && spec.source != "" && spec.source != CredsAuto && spec.source != CredsEnv {
		bad("AccessKey is set and Credentials asks for %q: use one of them", o.Credentials)
	}
	if o.FetchConcurrency < 0 {
		bad("FetchConcurrency %d is negative", o.FetchConcurrency)
	}
	if o.MaxRetries < 0 {
		bad("MaxRetries %d is negative", o.MaxRetries)
	}
	if o.RetryBase < 0 {
		bad("RetryBase %v is negative", o.RetryBase)
	}
	if o.RetryCap < 0 {
		bad("RetryCap %v is negative", o.RetryCap)
	}
	if o.RetryCap > 0 && o.RetryBase > o.RetryCap {
		bad("RetryBase %v is above RetryCap %v", o.RetryBase, o.RetryCap)
	}
	if o.ResponseHeaderTimeout < 0 {
		bad("ResponseHeaderTimeout %v is negative", o.ResponseHeaderTimeout)
	}
	if o.MaxRetryAfter < 0 {
		bad("MaxRetryAfter %v is negative", o.MaxRetryAfter)
	}
	if o.RequestTimeout < 0 {
		bad("RequestTimeout %v is negative", o.RequestTimeout)
	}
	if o.MinThroughput < 0 {
		bad("MinThroughput %d is negative", o.MinThroughput)
	}
	if o.ProgressTimeout < 0 {
		bad("ProgressTimeout %v is negative", o.ProgressTimeout)
	}
	if !(o.MaxRequestRate >= 0) || math.IsInf(o.MaxRequestRate, 0) {
		bad("MaxRequestRate %v: want requests per second, 0 for no budget", o.MaxRequestRate)
	}
	if !(o.HedgeQuantile >= 0 && o.HedgeQuantile < 1) {
		bad("HedgeQuantile %v: want a quantile in (0, 1), like 0.95, or 0 for no hedging", o.HedgeQuantile)
	}
	if o.HedgeMin < 0 {
		bad("HedgeMin %v is negative", o.HedgeMin)
	}
	if !(o.HedgeBudget >= 0 && o.HedgeBudget <= 1) {
		bad("HedgeBudget %v: want a share of GETs in [0, 1] (0: %v)", o.HedgeBudget, DefaultHedgeBudget)
	}
	return errors.Join(errs...)
}

// parseEndpoint splits an endpoint URL into minio-go's host and TLS flag.
func parseEndpoint(endpoint string) (host string, secure bool, err error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", false, fmt.Errorf("endpoint %q: %v", endpoint, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", false, fmt.Errorf("endpoint %q: want an http:// or https:// URL (the scheme decides TLS)", endpoint)
	case u.Host == "":
		return "", false, fmt.Errorf("endpoint %q: no host", endpoint)
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.User != nil:
		return "", false, fmt.Errorf("endpoint %q: want scheme://host[:port] only, without path, query or user", endpoint)
	}
	return u.Host, u.Scheme == "https", nil
}

// endpoint returns the effective endpoint URL.
func (o Options) endpoint() string {
	if o.Endpoint == "" {
		return AWSEndpoint
	}
	return o.Endpoint
}

// credHint says what to check when the service refuses the credentials.
func (o Options) credHint() string {
	switch {
	case o.resolvedSource != "":
		return "the credentials came from " + o.resolvedSource + ": check them, or choose a source with --s3-credentials (docs/credentials.md)"
	case o.credSource != "":
		return "check " + o.credSource
	case o.AccessKey == "":
		return "no credentials were given: set " + EnvAccessKeyID + "/" + EnvSecretAccessKey
	}
	return "check the access key and secret key (or " + EnvAccessKeyID + "/" + EnvSecretAccessKey + ")"
}
