package s3

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/longshore/longshore/storage"
)

// maxSinglePut is S3's limit for one PUT; Put never uses multipart uploads,
// whose completion would not carry the conditional headers.
const maxSinglePut = 5 << 30

// Store is a Store on an S3 bucket (and optional key prefix) through
// minio-go v7. Open or New make one; it is safe for concurrent use.
//
// Every operation retries retryable failures itself (see Options), with
// full-jitter exponential backoff; minio-go's internal retries are off so
// the counts in Stats are exact. Errors map to the package's sentinels:
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
}

var (
	_ storage.Store        = (*Store)(nil)
	_ storage.PrefixLister = (*Store)(nil)
)

// Stats are cumulative counts since the store was made.
type Stats struct {
	// Requests is the number of HTTP requests sent (each retry, each page
	// of a listing, and minio-go's bucket-location lookups included).
	Requests int64
	// Retries is the number of attempts repeated after a retryable error.
	Retries int64
	// Throttled is the number of responses with status 429 or 503
	// (SlowDown and its kin).
	Throttled int64
	// Errors is the number of operations that failed, after any retries,
	// with an error other than ErrNotFound, ErrPrecondition, ErrRange or
	// the caller's context ending (those are answers, not failures).
	Errors int64
	// BytesRead and BytesWritten count object payload bytes.
	BytesRead    int64
	BytesWritten int64
}

type counters struct {
	requests, retries, throttled, errors, bytesRead, bytesWritten atomic.Int64
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Requests:     s.stats.requests.Load(),
		Retries:      s.stats.retries.Load(),
		Throttled:    s.stats.throttled.Load(),
		Errors:       s.stats.errors.Load(),
		BytesRead:    s.stats.bytesRead.Load(),
		BytesWritten: s.stats.bytesWritten.Load(),
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
	if err == nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
		t.stats.throttled.Add(1)
	}
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
	s := &Store{bucket: bucket, prefix: prefix, opts: opts, tr: tr}
	client, err := minio.New(host, &minio.Options{
		Creds:      credentials.NewStaticV4(opts.AccessKey, opts.SecretKey, opts.SessionToken),
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
	err = s.retry(ctx, func(int) error {
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
	return nil
}

// String returns "s3://bucket/prefix".
func (s *Store) String() string { return "s3://" + s.bucket + "/" + s.prefix }

// Bucket and Prefix return where the store is rooted.
func (s *Store) Bucket() string { return s.bucket }
func (s *Store) Prefix() string { return s.prefix }

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
	if ctxErr := contextError(err); ctxErr != nil {
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

// retryable reports whether err is worth another attempt.
func retryable(err error) bool {
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		switch er.Code {
		case "SlowDown", "SlowDownRead", "SlowDownWrite", "Throttling", "ThrottlingException",
			"RequestLimitExceeded", "RequestThrottled", "TooManyRequests", "InternalError",
			"RequestTimeout", "ServiceUnavailable", "XMinioServerNotInitialized",
			"ConditionalRequestConflict": // AWS: a concurrent conditional write is in flight
			return true
		}
		return er.StatusCode >= 500 || er.StatusCode == http.StatusTooManyRequests ||
			er.StatusCode == http.StatusRequestTimeout
	}
	return isConnError(err)
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

// retry runs attempt until it succeeds, fails for good, or runs out of
// retries, sleeping with full-jitter exponential backoff between attempts.
func (s *Store) retry(ctx context.Context, attempt func(n int) error) error {
	for n := 0; ; n++ {
		err := attempt(n)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if n >= s.opts.MaxRetries || !retryable(err) {
			return err
		}
		s.stats.retries.Add(1)
		if err := sleepCtx(ctx, s.backoff(n)); err != nil {
			return err
		}
	}
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
	if err := storage.CheckKey(key); err != nil {
		return dst[:0], fmt.Errorf("get %s: %w", s, err)
	}
	out, err := s.get(ctx, "get", key, minio.GetObjectOptions{}, -1, dst)
	if err != nil {
		return dst[:0], s.mapError("get", key, err)
	}
	return out, nil
}

// get runs one GET (ranged if opts says so) with retries, reading the body
// into dst. want is the expected length, or -1 for "what the server says".
func (s *Store) get(ctx context.Context, op, key string, opts minio.GetObjectOptions, want int64, dst []byte) ([]byte, error) {
	var out []byte
	err := s.retry(ctx, func(int) error {
		body, info, _, err := s.core.GetObject(ctx, s.bucket, s.prefix+key, opts)
		if err != nil {
			return err
		}
		defer body.Close()
		size := info.Size
		if want >= 0 && size > want {
			size = want
		}
		out, err = readBody(body, size, dst)
		s.stats.bytesRead.Add(int64(len(out)))
		return err
	})
	return out, err
}

// readBody reads size bytes (or, for size < 0, everything) from body into
// dst's backing array, growing it only if needed.
func readBody(body io.Reader, size int64, dst []byte) ([]byte, error) {
	if size >= 0 {
		buf := slices.Grow(dst[:0], int(size))[:size]
		n, err := io.ReadFull(body, buf)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the body ended early: retryable
			}
			return buf[:n], err
		}
		return buf, nil
	}
	buf := dst[:0]
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, 32<<10)
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
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
	var opts minio.GetObjectOptions
	end := int64(0) // "bytes=off-"
	if length > 0 {
		end = off + length - 1
	}
	if err := opts.SetRange(off, end); err != nil {
		return dst[:0], rangeErr(-1, err)
	}
	out, err := s.get(ctx, "get range", key, opts, length, dst)
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
	err := s.retry(ctx, func(int) error {
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
	err := s.retry(ctx, func(n int) error {
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
	err := s.retry(ctx, func(int) error {
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
	err := s.retry(ctx, func(int) error {
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
	err := s.retry(ctx, func(int) error {
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
