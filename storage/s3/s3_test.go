package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/miniotest"
	"github.com/longshore/longshore/storage/s3"
	"github.com/longshore/longshore/storage/stores"
)

func openS3(t *testing.T, srv *miniotest.Server, bucket, prefix string, opts s3.Options) *s3.Store {
	t.Helper()
	s, err := stores.Open(context.Background(), srv.URL(bucket, prefix), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s.(*s3.Store)
}

func TestS3OpenErrors(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	ctx := context.Background()

	t.Run("WrongSecret", func(t *testing.T) {
		opts := srv.Options()
		opts.SecretKey = "not-the-secret"
		_, err := stores.Open(ctx, srv.URL(bucket, "p"), opts)
		if !errors.Is(err, storage.ErrAccess) {
			t.Fatalf("Open with a wrong secret: %v, want ErrAccess", err)
		}
		if !strings.Contains(err.Error(), "s3://"+bucket+"/p/") || !strings.Contains(err.Error(), "check") {
			t.Errorf("message should name the URL and say what to check: %v", err)
		}
	})
	t.Run("UnknownAccessKeyFromEnv", func(t *testing.T) {
		t.Setenv(s3.EnvEndpoint, srv.Endpoint)
		t.Setenv(s3.EnvEndpointS3, "")
		t.Setenv(s3.EnvRegion, "us-east-1")
		t.Setenv(s3.EnvAccessKeyID, "nobody")
		t.Setenv(s3.EnvSecretAccessKey, "nothing-at-all")
		_, err := stores.Open(ctx, srv.URL(bucket, ""), s3.DefaultOptions())
		if !errors.Is(err, storage.ErrAccess) {
			t.Fatalf("Open with an unknown access key: %v, want ErrAccess", err)
		}
		want := "open s3://" + bucket + "/: storage: access denied: check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
		if !strings.HasPrefix(err.Error(), want) {
			t.Errorf("message\n  %v\nwant it to start with\n  %s", err, want)
		}
	})
	t.Run("Anonymous", func(t *testing.T) {
		opts := srv.Options()
		opts.AccessKey, opts.SecretKey = "", ""
		if _, err := stores.Open(ctx, srv.URL(bucket, ""), opts); !errors.Is(err, storage.ErrAccess) {
			t.Fatalf("anonymous Open of a private bucket: %v, want ErrAccess", err)
		}
	})
	t.Run("MissingBucket", func(t *testing.T) {
		_, err := stores.Open(ctx, srv.URL("no-such-bucket", "x"), srv.Options())
		if !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("Open of a missing bucket: %v, want ErrNotFound", err)
		}
		if !strings.Contains(err.Error(), `bucket "no-such-bucket" does not exist`) {
			t.Errorf("message should say the bucket does not exist: %v", err)
		}
	})
	t.Run("Unreachable", func(t *testing.T) {
		opts := srv.Options()
		opts.Endpoint = "http://" + closedAddr(t)
		opts.MaxRetries = 2
		start := time.Now()
		_, err := stores.Open(ctx, srv.URL(bucket, ""), opts)
		if err == nil || errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrAccess) {
			t.Fatalf("Open of a closed port: %v, want a connection error", err)
		}
		if !strings.Contains(err.Error(), "cannot reach") {
			t.Errorf("message should say the endpoint cannot be reached: %v", err)
		}
		// It gives up after its two retries rather than hanging; the
		// minute is a backstop, not a timing claim.
		if time.Since(start) > time.Minute {
			t.Errorf("Open took %v to give up", time.Since(start))
		}
	})
	t.Run("BadOptions", func(t *testing.T) {
		opts := srv.Options()
		opts.Endpoint = "ftp://x"
		opts.MaxRetries = -1
		_, err := stores.Open(ctx, srv.URL(bucket, ""), opts)
		if err == nil || !strings.Contains(err.Error(), "ftp://x") || !strings.Contains(err.Error(), "MaxRetries") {
			t.Fatalf("Open with bad options: %v, want both problems reported", err)
		}
	})
}

// closedAddr returns a 127.0.0.1 address nothing listens on.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestS3ErrorsAfterOpen(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	ctx := context.Background()
	s := openS3(t, srv, bucket, "", srv.Options())
	if _, err := s.Put(ctx, "k", []byte("v"), storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	// The bucket disappears under a running store.
	client := srv.Client(t)
	if err := client.RemoveObject(ctx, bucket, "k", minioRemoveOpts()); err != nil {
		t.Fatal(err)
	}
	if err := client.RemoveBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	// MinIO may bring a bucket it just removed back, empty: the first bucket
	// a fresh server removes came back 100-250 ms later in nearly every
	// run (after which BucketExists says true, a listing comes back empty
	// and a delete succeeds, for good; the kind of resurrection of
	// minio/minio#17672). Its answers also differ by API for a moment. So
	// each operation is asked until it reports the bucket missing, and a
	// bucket seen back is removed again; a store that mapped NoSuchBucket
	// wrongly never reports it, and fails at the backstop with what it
	// returned last.
	notFound := func(what string, op func() error) {
		t.Helper()
		var err error
		for deadline := time.Now().Add(time.Minute); ; { // a failure backstop only
			if back, _ := client.BucketExists(ctx, bucket); back {
				t.Logf("MinIO brought the removed bucket back; removing it again: %v", client.RemoveBucket(ctx, bucket))
			}
			if err = op(); errors.Is(err, storage.ErrNotFound) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: %v, want ErrNotFound", what, err)
				return
			}
			time.Sleep(10 * time.Millisecond) // polling pace
		}
	}
	notFound("Get from a deleted bucket", func() error {
		_, err := s.Get(ctx, "k", nil)
		return err
	})
	notFound("List of a deleted bucket", func() error {
		return s.List(ctx, "", func(storage.ObjectInfo) error { return nil })
	})
	notFound("Delete in a deleted bucket (the bucket, not the key, is missing)", func() error {
		return s.Delete(ctx, "k")
	})
}

// TestS3RetriesWhileServerDown stops MinIO and checks that operations
// retry (and count it) and then fail, and that a restart within the retry
// budget makes them succeed.
func TestS3RetriesWhileServerDown(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	ctx := context.Background()
	opts := srv.Options()
	opts.MaxRetries = 3
	opts.RetryBase = time.Millisecond
	opts.RetryCap = 5 * time.Millisecond
	s := openS3(t, srv, bucket, "", opts)
	if _, err := s.Put(ctx, "obj", []byte("payload"), storage.Cond{}); err != nil {
		t.Fatal(err)
	}

	srv.Stop(t)
	before := s.Stats()
	_, err := s.Get(ctx, "obj", nil)
	if err == nil || errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get with the server down: %v, want a connection error", err)
	}
	after := s.Stats()
	if got := after.Retries - before.Retries; got != int64(opts.MaxRetries) {
		t.Errorf("Get with the server down retried %d times, want MaxRetries=%d", got, opts.MaxRetries)
	}
	if got := after.Requests - before.Requests; got != int64(opts.MaxRetries+1) {
		t.Errorf("Get with the server down sent %d requests, want %d", got, opts.MaxRetries+1)
	}
	if got := after.Errors - before.Errors; got != 1 {
		t.Errorf("Errors went up by %d, want 1", got)
	}

	// Down for a moment, back within the retry budget.
	opts.MaxRetries = 100
	opts.RetryBase = 20 * time.Millisecond
	opts.RetryCap = 100 * time.Millisecond
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		time.Sleep(300 * time.Millisecond)
		srv.Restart(t)
	}()
	s2, err := s3.New(ctx, bucket, "", opts) // Open rides out the outage too
	if err != nil {
		t.Fatalf("Open during a brief outage: %v", err)
	}
	<-restarted
	got, err := s2.Get(ctx, "obj", nil)
	if err != nil || string(got) != "payload" {
		t.Fatalf("Get after restart = %q, %v", got, err)
	}
	st := s2.Stats()
	if st.Retries == 0 || st.Errors != 0 || st.BytesRead != int64(len("payload")) {
		t.Errorf("stats after riding out an outage: %+v; want retries > 0, no errors, %d bytes read", st, len("payload"))
	}
}

// fakeS3 answers just enough S3 for a store: HEAD bucket, and GET/PUT of
// objects, failing the first n requests to an object with status/code.
type fakeS3 struct {
	mu       sync.Mutex
	objects  map[string][]byte
	failures int
	status   int
	code     string
}

func (f *fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 2)
	if len(parts) < 2 || parts[1] == "" { // bucket-level request
		w.WriteHeader(http.StatusOK)
		return
	}
	if f.failures > 0 {
		f.failures--
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(f.status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected</Message></Error>`, f.code)
		return
	}
	switch r.Method {
	case http.MethodPut:
		var b bytes.Buffer
		b.ReadFrom(r.Body)
		f.objects[parts[1]] = b.Bytes()
		w.Header().Set("ETag", `"x"`)
		w.WriteHeader(http.StatusOK)
	case http.MethodGet:
		data, ok := f.objects[parts[1]]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>no</Message></Error>`)
			return
		}
		w.Header().Set("ETag", `"x"`)
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.Write(data)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func TestS3RetryClassification(t *testing.T) {
	for _, tc := range []struct {
		name        string
		status      int
		code        string
		failures    int
		wantRetries int64
		wantThrot   int64
		wantOK      bool
		wantErr     error
	}{
		{"SlowDown", 503, "SlowDown", 2, 2, 2, true, nil},
		{"InternalError", 500, "InternalError", 1, 1, 0, true, nil},
		{"TooManyRequests", 429, "TooManyRequests", 3, 3, 3, true, nil},
		{"RetriesExhausted", 503, "SlowDown", 10, 4, 5, false, nil},
		{"AccessDeniedNotRetried", 403, "AccessDenied", 1, 0, 0, false, storage.ErrAccess},
		{"NoSuchKeyNotRetried", 404, "NoSuchKey", 1, 0, 0, false, storage.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeS3{objects: map[string][]byte{"k": []byte("value")}}
			ts := httptest.NewServer(fake)
			defer ts.Close()
			opts := s3.Options{Endpoint: ts.URL, Region: "us-east-1", AccessKey: "a", SecretKey: "b",
				MaxRetries: 4, RetryBase: time.Millisecond, RetryCap: 2 * time.Millisecond}
			s, err := s3.New(context.Background(), "bucket", "", opts)
			if err != nil {
				t.Fatal(err)
			}
			fake.mu.Lock()
			fake.failures, fake.status, fake.code = tc.failures, tc.status, tc.code
			fake.mu.Unlock()
			got, err := s.Get(context.Background(), "k", nil)
			if tc.wantOK != (err == nil) {
				t.Fatalf("Get = %q, %v; want ok=%v", got, err, tc.wantOK)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Get error %v, want %v", err, tc.wantErr)
			}
			st := s.Stats()
			if st.Retries != tc.wantRetries || st.Throttled != tc.wantThrot {
				t.Errorf("stats %+v: want %d retries, %d throttled", st, tc.wantRetries, tc.wantThrot)
			}
		})
	}
}

// TestS3ConditionalPutLostResponse drops the response to a conditional
// PUT after MinIO applied it; the retry then meets PreconditionFailed, and
// the store must recognise its own write and report success.
func TestS3ConditionalPutLostResponse(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	var dropped atomic.Int32
	proxy := newProxy(t, srv.Endpoint, nil, func(w http.ResponseWriter, r *http.Request, forward func(http.ResponseWriter, *http.Request)) {
		if r.Method == http.MethodPut && dropped.Add(1) == 1 {
			forward(httptest.NewRecorder(), r) // MinIO applies it...
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close() // ...and the client never hears back
			return
		}
		forward(w, r)
	})
	opts := srv.Options()
	opts.Endpoint = proxy.URL
	s := openS3(t, srv, bucket, "", opts)
	ctx := context.Background()
	etag, err := s.Put(ctx, "ckpt", []byte("state 1"), storage.Cond{IfAbsent: true})
	if err != nil {
		t.Fatalf("IfAbsent put whose first response was lost: %v", err)
	}
	if s.Stats().Retries != 1 {
		t.Errorf("want exactly one retry, stats %+v", s.Stats())
	}
	if _, err := s.Put(ctx, "ckpt", []byte("state 2"), storage.Cond{IfAbsent: true}); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("a second IfAbsent put must lose: %v", err)
	}
	if _, err := s.Put(ctx, "ckpt", []byte("state 2"), storage.Cond{IfMatch: etag}); err != nil {
		t.Fatalf("IfMatch with the recovered ETag: %v", err)
	}
}

// newProxy puts a reverse proxy in front of endpoint, keeping the Host
// header (S3 signatures cover it). handle decides what to do with each
// request.
func newProxy(t *testing.T, endpoint string, connState func(net.Conn, http.ConnState), handle func(w http.ResponseWriter, r *http.Request, forward func(http.ResponseWriter, *http.Request))) *httptest.Server {
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.Host = pr.In.Host
	}}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handle(w, r, rp.ServeHTTP)
	}))
	ts.Config.ConnState = connState
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

// TestS3TransportKeepsConnections checks that FetchConcurrency sizes the
// idle pool: rounds of that many concurrent GETs reuse connections instead
// of dialing anew (minio-go's default pool keeps only 16).
func TestS3TransportKeepsConnections(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	var conns atomic.Int64
	countNew := func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	proxy := newProxy(t, srv.Endpoint, countNew, func(w http.ResponseWriter, r *http.Request, forward func(http.ResponseWriter, *http.Request)) {
		forward(w, r)
	})
	const conc, rounds = 48, 4
	opts := srv.Options()
	opts.Endpoint = proxy.URL
	opts.FetchConcurrency = conc
	s := openS3(t, srv, bucket, "", opts)
	ctx := context.Background()
	if _, err := s.Put(ctx, "k", bytes.Repeat([]byte("x"), 4096), storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	for range rounds {
		var wg sync.WaitGroup
		for range conc {
			wg.Go(func() {
				if _, err := s.Get(ctx, "k", nil); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	// One round may dial up to conc connections; later rounds should reuse
	// them. With 16 idle slots, each later round would dial ~conc-16 more.
	if got := conns.Load(); got > conc+8 {
		t.Errorf("%d rounds of %d concurrent GETs opened %d connections; want at most %d (idle pool too small?)", rounds, conc, got, conc+8)
	}
}

func minioRemoveOpts() minio.RemoveObjectOptions { return minio.RemoveObjectOptions{} }
