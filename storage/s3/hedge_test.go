package s3_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/faultproxy"
	"github.com/longshore/longshore/storage/miniotest"
	"github.com/longshore/longshore/storage/s3"
)

// hedgeBackstop bounds each wait on an event in TestHedgedGet: a failure
// backstop only, the test's order comes from the proxy's gates and the
// fake clock.
const hedgeBackstop = time.Minute

func recv(t *testing.T, ch <-chan string, what string) string {
	t.Helper()
	select {
	case k := <-ch:
		return k
	case <-time.After(hedgeBackstop):
		t.Fatalf("no %s within %v", what, hedgeBackstop)
		return ""
	}
}

// TestHedgedGet: through the fault proxy in front of a real MinIO, with
// the hedge timers on a fake clock. A GET held by the proxy past the
// hedge threshold gets a second request; when that answers first it wins
// and the held one is cancelled (the proxy sees its client hang up);
// when the first answers first, the hedge is the one cancelled. Either
// way the bytes are the object's, and the counts say what happened.
func TestHedgedGet(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.NewBucket(t)
	ctx := context.Background()
	obj := randomBytes(7, 32<<10)
	{
		s := openS3(t, srv, bucket, "", srv.Options())
		for i := range 20 {
			if _, err := s.Put(ctx, fmt.Sprintf("warm/%d.jpg", i), obj, storage.Cond{}); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range []string{"slow.jpg", "slow2.jpg"} {
			if _, err := s.Put(ctx, k, obj, storage.Cond{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	first, second, firstOf2 := faultproxy.NewGate(), faultproxy.NewGate(), faultproxy.NewGate()
	p := faultproxy.Start(t, srv.Endpoint,
		// slow.jpg: the first request waits (until its client hangs up);
		// the hedge passes.
		faultproxy.Rule{Name: "hold first", Ops: faultproxy.OpGet, Key: faultproxy.Keys("slow.jpg"), FirstN: 1, Fault: faultproxy.Hold(first)},
		// slow2.jpg: both wait, each at its own gate.
		faultproxy.Rule{Name: "hold first of 2", Ops: faultproxy.OpGet, Key: faultproxy.Keys("slow2.jpg"), FirstN: 1, Fault: faultproxy.Hold(firstOf2)},
		faultproxy.Rule{Name: "hold hedge of 2", Ops: faultproxy.OpGet, Key: faultproxy.Keys("slow2.jpg"), FirstN: 1, Fault: faultproxy.Hold(second)},
	)
	clk := clock.NewFake(time.Unix(1000, 0))
	o := faultOptions(srv, p.URL)
	o.RequestTimeout = 0 // the held requests wait on events, not on a deadline
	o.ResponseHeaderTimeout = 0
	o.HedgeQuantile, o.HedgeMin, o.Clock = 0.95, 40*time.Millisecond, clk
	s := openS3(t, srv, bucket, "", o)
	for i := range 20 { // warm up: 20 answered GETs, none hedged
		if _, err := s.Get(ctx, fmt.Sprintf("warm/%d.jpg", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Hedges != 0 || clk.Pending() != 0 {
		t.Fatalf("warm-up: %d hedges, %d timers: want none before 20 GETs were answered", st.Hedges, clk.Pending())
	}

	get := func(key string) <-chan []byte {
		ch := make(chan []byte, 1)
		go func() {
			b, err := s.Get(ctx, key, nil)
			if err != nil {
				t.Errorf("get %s: %v", key, err)
			}
			ch <- b
		}()
		return ch
	}
	hedge := func() {
		t.Helper()
		bctx, cancel := context.WithTimeout(ctx, hedgeBackstop)
		defer cancel()
		if err := clk.BlockUntil(bctx, 1); err != nil {
			t.Fatal("the GET never armed its hedge timer")
		}
		clk.Advance(39 * time.Millisecond)
		if clk.Pending() != 1 {
			t.Fatal("the hedge fired before its threshold (HedgeMin 40ms, every latency so far 0)")
		}
		clk.Advance(time.Millisecond)
	}

	// The hedge wins.
	res := get("slow.jpg")
	recv(t, first.Held(), "first request held")
	hedge()
	if b := <-res; !bytes.Equal(b, obj) {
		t.Fatalf("hedged get: %d bytes, not the object's", len(b))
	}
	if k := recv(t, first.HungUp(), "the losing first request cancelled"); k != "slow.jpg" {
		t.Fatalf("hung up: %q", k)
	}
	st := s.Stats()
	if st.Hedges != 1 || st.HedgeWins != 1 || st.HedgesCancelled != 1 || st.Errors != 0 {
		t.Errorf("after a winning hedge: %d hedges, %d wins, %d cancelled, %d errors: want 1, 1, 1, 0", st.Hedges, st.HedgeWins, st.HedgesCancelled, st.Errors)
	}

	// The first answers first: the hedge is cancelled.
	res = get("slow2.jpg")
	recv(t, firstOf2.Held(), "first request held")
	hedge()
	recv(t, second.Held(), "hedge held")
	firstOf2.Open()
	if b := <-res; !bytes.Equal(b, obj) {
		t.Fatalf("get: %d bytes, not the object's", len(b))
	}
	recv(t, second.HungUp(), "the losing hedge cancelled")
	st = s.Stats()
	if st.Hedges != 2 || st.HedgeWins != 1 || st.HedgesCancelled != 2 {
		t.Errorf("after a losing hedge: %d hedges, %d wins, %d cancelled: want 2, 1, 2", st.Hedges, st.HedgeWins, st.HedgesCancelled)
	}
	if n := p.Fired(0) + p.Fired(1) + p.Fired(2); n != 3 {
		t.Errorf("the proxy held %d requests, want 3", n)
	}
	t.Logf("stats: %+v", st)
}

// TestHedgeOptions: Validate refuses a quantile or budget out of range.
func TestHedgeOptions(t *testing.T) {
	for _, o := range []s3.Options{{HedgeQuantile: 1}, {HedgeQuantile: -0.1}, {HedgeQuantile: 0.9, HedgeBudget: 2}, {HedgeMin: -time.Second}} {
		if o.Validate() == nil {
			t.Errorf("%+v: valid, want an error", o)
		}
	}
	if err := (s3.Options{HedgeQuantile: 0.95, HedgeBudget: 0.1, HedgeMin: time.Millisecond}).Validate(); err != nil {
		t.Error(err)
	}
}

// BenchmarkHedgeSlowBodies: 400 GETs of 32 KiB objects, 8 in flight,
// through the fault proxy on MinIO with 2% of GETs' bodies trickled at
// 64 KiB/s (half a second each), without and with hedging at the p95.
// It reports the p50 and p99 GET latency and the time for all 400 (the
// figures in docs/faults.md).
func BenchmarkHedgeSlowBodies(b *testing.B) {
	srv := miniotest.Start(b)
	bucket := srv.NewBucket(b)
	ctx := context.Background()
	const objects, gets, inFlight = 64, 400, 8
	{
		s, err := s3.New(ctx, bucket, "", srv.Options())
		if err != nil {
			b.Fatal(err)
		}
		for i := range objects {
			if _, err := s.Put(ctx, fmt.Sprintf("o/%d", i), randomBytes(uint64(i), 32<<10), storage.Cond{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, q := range []float64{0, 0.95} {
		b.Run(fmt.Sprintf("hedge=%v", q), func(b *testing.B) {
			for range b.N {
				p := faultproxy.Start(b, srv.Endpoint, faultproxy.Rule{Ops: faultproxy.OpGet, Prob: 0.02, Seed: 5, Fault: faultproxy.Trickle(64 << 10)})
				o := srv.Options()
				o.Endpoint = p.URL
				o.HedgeQuantile = q
				s, err := s3.New(ctx, bucket, "", o)
				if err != nil {
					b.Fatal(err)
				}
				lat := make([]time.Duration, gets)
				next := make(chan int)
				var wg sync.WaitGroup
				t0 := time.Now()
				for range inFlight {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range next {
							t := time.Now()
							if _, err := s.Get(ctx, fmt.Sprintf("o/%d", i%objects), nil); err != nil {
								b.Error(err)
							}
							lat[i] = time.Since(t)
						}
					}()
				}
				for i := range gets {
					next <- i
				}
				close(next)
				wg.Wait()
				total := time.Since(t0)
				slices.Sort(lat)
				st := s.Stats()
				b.ReportMetric(float64(lat[gets/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[gets*99/100].Microseconds())/1000, "p99-ms")
				b.ReportMetric(total.Seconds(), "total-s")
				b.ReportMetric(float64(st.Hedges), "hedges")
				b.ReportMetric(float64(st.HedgeWins), "hedge-wins")
				b.ReportMetric(float64(p.Fired(0)), "slow-bodies")
				s.Close()
				p.Close()
			}
		})
	}
}
