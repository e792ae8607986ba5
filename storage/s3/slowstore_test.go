package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/faultproxy"
	"github.com/longshore/longshore/storage/miniotest"
	"github.com/longshore/longshore/storage/s3"
)

type result struct {
	b   []byte
	err error
}

// driveStalls advances clk by d whenever a body read waits on it (the
// only timers on the store's clock in these tests are its bodies'
// progress deadlines), until the store has counted want stalls or the
// read ended (res, whose result is put back). An advance made while no
// read waits (between the reads of the bytes before a stall) fires
// nothing, and the next wait is advanced again; once want stalls are
// counted no more time passes, so the retry's body is read whole.
func driveStalls(t *testing.T, clk *clock.Fake, s *s3.Store, d time.Duration, want int64, res chan result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hedgeBackstop)
	defer cancel()
	for s.Stats().Stalls < want {
		wctx, wcancel := context.WithCancel(ctx)
		ended, gone := make(chan result, 1), make(chan struct{})
		go func() {
			defer close(gone)
			select {
			case r := <-res:
				ended <- r
				wcancel()
			case <-wctx.Done():
			}
		}()
		err := clk.BlockUntil(wctx, 1)
		wcancel()
		<-gone
		select {
		case r := <-ended:
			res <- r
			if st := s.Stats(); st.Stalls < want {
				t.Fatalf("the read ended (%v) after %d stalls; want %d", r.err, st.Stalls, want)
			}
			return
		default:
		}
		if err != nil {
			t.Fatalf("no body read waited on the clock within %v (stalls %d, want %d)", hedgeBackstop, s.Stats().Stalls, want)
		}
		if s.Stats().Stalls >= want {
			return
		}
		clk.Advance(d)
	}
}

// TestStalledBody: through the fault proxy in front of a real MinIO, a
// body that stops mid-way (after 64 KiB of 256 KiB, held at a gate that
// never opens) is abandoned once a read of it has waited ProgressTimeout
// on the store's clock (a fake one, advanced once), and read again on a
// fresh request: the object's bytes, the stall counted as such (not as a
// RequestTimeout, an hour here), the stalled request's client seen to
// hang up by the proxy. Whole objects and ranged GETs alike.
func TestStalledBody(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	ctx := context.Background()
	obj := randomBytes(11, 256<<10)
	{
		s := openS3(t, srv, bucket, "", srv.Options())
		for _, k := range []string{"whole.jpg", "shard.tar"} {
			if _, err := s.Put(ctx, k, obj, storage.Cond{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	const off, length = 1000, 200 << 10
	for _, tc := range []struct {
		name string
		ops  faultproxy.Op
		key  string
		read func(s *s3.Store) ([]byte, error)
		want []byte
	}{
		{"whole object", faultproxy.OpGet, "whole.jpg", func(s *s3.Store) ([]byte, error) { return s.Get(ctx, "whole.jpg", nil) }, obj},
		{"range", faultproxy.OpGetRange, "shard.tar", func(s *s3.Store) ([]byte, error) { return s.GetRange(ctx, "shard.tar", off, length, nil) }, obj[off : off+length]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := faultproxy.NewGate()
			p := faultproxy.Start(t, srv.Endpoint, faultproxy.Rule{Ops: tc.ops, FirstN: 1, Fault: faultproxy.StallAt(64<<10, g)})
			clk := clock.NewFake(time.Unix(1000, 0))
			o := faultOptions(srv, p.URL)
			o.RequestTimeout = time.Hour // not what ends the stalled read
			o.ProgressTimeout = 3 * time.Second
			o.Clock = clk
			s := openS3(t, srv, bucket, "", o)
			res := make(chan result, 1)
			go func() {
				b, err := tc.read(s)
				res <- result{b, err}
			}()
			if k := recv(t, g.Held(), "stalled body"); k != tc.key {
				t.Fatalf("stalled %q", k)
			}
			driveStalls(t, clk, s, o.ProgressTimeout, 1, res)
			if k := recv(t, g.HungUp(), "the stalled request abandoned"); k != tc.key {
				t.Fatalf("hung up: %q", k)
			}
			var r result
			select {
			case r = <-res:
			case <-time.After(hedgeBackstop):
				t.Fatalf("the read did not finish after its stall was abandoned (stats %+v)", s.Stats())
			}
			if r.err != nil || !bytes.Equal(r.b, tc.want) {
				t.Fatalf("read: %d bytes, %v; want the %d bytes asked for", len(r.b), r.err, len(tc.want))
			}
			st := s.Stats()
			if st.Stalls != 1 || st.RetriesByCause.Stall != 1 || st.Retries != 1 || st.Timeouts != 0 {
				t.Errorf("stats %+v: want one stall, retried once for it, no timeouts", st)
			}
			if p.Fired(0) != 1 {
				t.Errorf("the proxy stalled %d bodies; want 1", p.Fired(0))
			}
		})
	}
}

// TestProgressTimeoutErr: a body that stalls on every attempt fails
// after MaxRetries with ErrStalled, saying the deadline.
func TestProgressTimeoutErr(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	ctx := context.Background()
	obj := randomBytes(12, 128<<10)
	{
		s := openS3(t, srv, bucket, "", srv.Options())
		if _, err := s.Put(ctx, "k.jpg", obj, storage.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	g := faultproxy.NewGate()
	t.Cleanup(g.Open)
	p := faultproxy.Start(t, srv.Endpoint, faultproxy.Rule{Ops: faultproxy.OpGet, Fault: faultproxy.StallAt(1000, g)})
	clk := clock.NewFake(time.Unix(1000, 0))
	o := faultOptions(srv, p.URL)
	o.MaxRetries = 1
	o.RequestTimeout = time.Hour
	o.ProgressTimeout = time.Second
	o.Clock = clk
	s := openS3(t, srv, bucket, "", o)
	errc := make(chan result, 1)
	go func() {
		b, err := s.Get(ctx, "k.jpg", nil)
		errc <- result{b, err}
	}()
	recv(t, g.Held(), "stalled body")
	driveStalls(t, clk, s, o.ProgressTimeout, 2, errc)
	recv(t, g.HungUp(), "the first stalled request abandoned")
	recv(t, g.HungUp(), "the second stalled request abandoned")
	err := (<-errc).err
	if !errors.Is(err, s3.ErrStalled) || !strings.Contains(err.Error(), "no bytes for 1s") || !strings.Contains(err.Error(), "gave up after 2 attempts") {
		t.Fatalf("err %v; want ErrStalled, the deadline and the attempts", err)
	}
	if st := s.Stats(); st.Stalls != 2 || st.Errors != 1 {
		t.Errorf("stats %+v: want 2 stalls, 1 error", st)
	}
}

// TestUnsizedBodyCapped: a body without a Content-Length (the proxy
// strips it: chunked) longer than GetLimit's limit is cut at the limit
// with storage.ErrTooLarge saying so, having read no more than the limit
// and a byte; one within the limit is read whole and checked by its MD5.
func TestUnsizedBodyCapped(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	ctx := context.Background()
	big := randomBytes(13, 1<<20)
	small := randomBytes(14, 4000)
	{
		s := openS3(t, srv, bucket, "", srv.Options())
		for k, v := range map[string][]byte{"big.png": big, "small.png": small} {
			if _, err := s.Put(ctx, k, v, storage.Cond{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	p := faultproxy.Start(t, srv.Endpoint, faultproxy.Rule{Ops: faultproxy.OpGet, Fault: faultproxy.Unsized()})
	s := openS3(t, srv, bucket, "", faultOptions(srv, p.URL))
	const limit = 64 << 10
	got, err := storage.GetLimit(ctx, s, "big.png", limit, nil)
	if !errors.Is(err, storage.ErrTooLarge) || !strings.Contains(err.Error(), "no Content-Length") || !strings.Contains(err.Error(), "limit of 65536") {
		t.Fatalf("GetLimit of 1 MiB without a length, limit 64 KiB: %d bytes, %v; want ErrTooLarge naming the missing length and the limit", len(got), err)
	}
	st := s.Stats()
	if st.BytesRead > limit+1 {
		t.Errorf("read %d bytes of a body capped at %d", st.BytesRead, limit)
	}
	if st.Retries != 0 {
		t.Errorf("a refusal is an answer, retried %d times", st.Retries)
	}
	got, err = storage.GetLimit(ctx, s, "small.png", limit, nil)
	if err != nil || !bytes.Equal(got, small) {
		t.Fatalf("GetLimit of 4000 bytes without a length: %d bytes, %v", len(got), err)
	}
	if st := s.Stats(); st.Verified != 1 || p.Fired(0) != 2 {
		t.Errorf("verified %d, proxy unsized %d; want 1 and 2", st.Verified, p.Fired(0))
	}
}

// TestBrokenBodyRetriedAtOnce: an answer whose body broke on the way (cut
// short, reset mid-body) was no refusal by the store: its first retry
// goes at once, without the backoff (here an hour: the read would not
// finish within the test's backstop otherwise). A throttle still backs
// off (TestFaultSchedules).
func TestBrokenBodyRetriedAtOnce(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	obj := randomBytes(15, 64<<10)
	{
		s := openS3(t, srv, bucket, "", srv.Options())
		if _, err := s.Put(context.Background(), "k.jpg", obj, storage.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []faultproxy.Fault{faultproxy.ShortBody(100), faultproxy.ResetAfter(1000)} {
		// Twice: a key whose body breaks again on its first retry (the
		// slow-store mix faults a key up to twice) is still no sign of
		// a loaded store.
		for _, times := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/%d", f.Kind, times), func(t *testing.T) {
				p := faultproxy.Start(t, srv.Endpoint, faultproxy.Rule{Ops: faultproxy.OpGet, FirstN: times, Fault: f})
				o := faultOptions(srv, p.URL)
				o.RetryBase, o.RetryCap, o.AdaptiveRate = time.Hour, time.Hour, true
				s := openS3(t, srv, bucket, "", o)
				ctx, cancel := context.WithTimeout(context.Background(), hedgeBackstop)
				defer cancel()
				got, err := s.Get(ctx, "k.jpg", nil)
				if err != nil || !bytes.Equal(got, obj) {
					t.Fatalf("get: %d bytes, %v (stats %+v); want the object, retried at once", len(got), err, s.Stats())
				}
				if st := s.Stats(); st.Retries != int64(times) || st.Backoff != 0 {
					t.Errorf("stats %+v: want %d retries, no backoff", st, times)
				}
			})
		}
	}
}

// TestSporadicErrorRetriedSoon: a lone 503 or 500 from a store that
// answers everything else is retried within sporadicBackoff (10 ms), not
// after RetryBase's backoff (an hour here: the read would not finish
// within the test's backstop otherwise), and the rate is not cut.
func TestSporadicErrorRetriedSoon(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	obj := randomBytes(16, 4<<10)
	{
		s := openS3(t, srv, bucket, "", srv.Options())
		if _, err := s.Put(context.Background(), "k.jpg", obj, storage.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []faultproxy.Fault{faultproxy.SlowDown(0), faultproxy.Status(500, "InternalError")} {
		t.Run(f.Code, func(t *testing.T) {
			p := faultproxy.Start(t, srv.Endpoint, faultproxy.Rule{Ops: faultproxy.OpGet, FirstN: 1, Fault: f})
			o := faultOptions(srv, p.URL)
			o.RetryBase, o.RetryCap, o.AdaptiveRate = time.Hour, time.Hour, true
			s := openS3(t, srv, bucket, "", o)
			ctx, cancel := context.WithTimeout(context.Background(), hedgeBackstop)
			defer cancel()
			got, err := s.Get(ctx, "k.jpg", nil)
			if err != nil || !bytes.Equal(got, obj) {
				t.Fatalf("get: %d bytes, %v (stats %+v); want the object, retried soon", len(got), err, s.Stats())
			}
			if st := s.Stats(); st.Retries != 1 || st.Backoff > 10*time.Millisecond || st.RateCuts != 0 {
				t.Errorf("stats %+v: want one retry, at most 10ms of backoff, no rate cut", st)
			}
		})
	}
}
