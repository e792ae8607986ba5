package actors

import (
	"math"
	"testing"
	"time"
)

// TestFetchTuner drives the tuner with a model of a rank: fetches take
// latency each, in flight the tuner's limit, and the rank consumes at
// most capacity samples/s (its decoders). The limit must settle where
// the fetches cover the latency at that pace, with the headroom, within
// the bounds.
func TestFetchTuner(t *testing.T) {
	for _, tc := range []struct {
		name      string
		latency   time.Duration
		capacity  float64 // samples/s the rest of the pipeline takes
		max, want int
	}{
		{"local disk: the floor", 200 * time.Microsecond, 500, 64, 4},
		{"5 ms", 5 * time.Millisecond, 800, 64, 8},
		{"20 ms, decode-bound at 400/s", 20 * time.Millisecond, 400, 64, 16},
		{"20 ms, fast decoders", 20 * time.Millisecond, 1500, 64, 60},
		{"50 ms: the ceiling", 50 * time.Millisecond, 2000, 64, 64},
		{"a low maximum", 20 * time.Millisecond, 1500, 8, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tu := newFetchTuner(tc.max)
			now := time.Unix(0, 0)
			// 30 s of fetches, each at the pace the limit in force allows.
			for end := now.Add(30 * time.Second); now.Before(end); {
				rate := math.Min(float64(tu.limit)/tc.latency.Seconds(), tc.capacity)
				now = now.Add(time.Duration(float64(time.Second) / rate))
				tu.done(now, tc.latency)
			}
			// One above: the model's pace is rounded to whole nanoseconds.
			if tu.limit < tc.want || tu.limit > tc.want+1 {
				t.Errorf("settled at %d, want %d (%d changes)", tu.limit, tc.want, tu.changes)
			}
			if tu.changes > 8 {
				t.Errorf("%d changes: the limit does not settle", tu.changes)
			}
		})
	}
}

// TestTunerReadAhead drives the tuner with a packed rank's fetches: most
// are served from a chunk at once, one in chunk (a block's first) waits
// for the store's round trip. The read-ahead it asks for must cover that
// round trip at the rank's pace, with the headroom, whatever the mean;
// never below the configured one, never above maxAutoReadAhead.
func TestTunerReadAhead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rtt   time.Duration
		pace  float64 // samples/s
		chunk int     // samples a chunk serves
		want  int     // read-ahead asked for
	}{
		{"local directory", 100 * time.Microsecond, 20000, 16, 128},               // 2 × 20,000 × 0.1 ms = 4: the base
		{"20 ms, 1,500/s (ImageNet-sized)", 20 * time.Millisecond, 1500, 16, 128}, // 60: the base
		{"20 ms, 28,000/s (small images)", 20 * time.Millisecond, 28000, 16, 1120},
		{"100 ms, 28,000/s: the cap", 100 * time.Millisecond, 28000, 16, maxAutoReadAhead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tu := newFetchTuner(64)
			now := time.Unix(0, 0)
			step := time.Duration(float64(time.Second) / tc.pace)
			for k := 0; k < int(tc.pace*5); k++ { // 5 s of fetches
				now = now.Add(step)
				d := time.Duration(0)
				if k%tc.chunk == 0 {
					d = tc.rtt
				}
				tu.done(now, d)
			}
			got := tu.readAhead(128)
			// The pace is rounded to whole nanoseconds: within 1%.
			if math.Abs(float64(got-tc.want)) > 0.01*float64(tc.want)+1 {
				t.Errorf("read-ahead %d, want %d", got, tc.want)
			}
		})
	}
	// One stall in a window of fast fetches does not raise the
	// read-ahead; two do.
	for _, stalls := range []int{1, 2} {
		tu := newFetchTuner(64)
		now := time.Unix(0, 0)
		for k := 0; k < 1000; k++ { // 10,000 fetches a second, one window
			now = now.Add(100 * time.Microsecond)
			d := 100 * time.Microsecond
			if k >= 500 && k < 500+stalls {
				d = 200 * time.Millisecond
			}
			tu.done(now, d)
		}
		// 2 × 10,000/s × 200 ms = 4,000 items for two stalls.
		if got, want := tu.readAhead(128), map[int]int{1: 128, 2: 4000}[stalls]; math.Abs(float64(got-want)) > 0.02*float64(want) {
			t.Errorf("%d stall(s) of 200 ms among 100 us fetches: read-ahead %d, want %d", stalls, got, want)
		}
	}
	if got := newFetchTuner(16).readAhead(256); got != 256 {
		t.Errorf("before any window closed: %d, want the base 256", got)
	}
}

// TestFetchTunerHoldsThroughStalls: fetches of 20 ms with decoders that
// take 5,000/s hold the limit at its maximum; then every second one fetch
// is held by the store for 1.5 s (a stalled body abandoned and read
// again) and its batch with it: the slots fill and only 40 fetches finish
// while it is held. Those windows measure the stall's pace, not the
// pipeline's; the limit must not fall for them. When the pace drops for
// good (decoders at 400/s) it must still come down to what that pace
// needs.
func TestFetchTunerHoldsThroughStalls(t *testing.T) {
	const latency = 20 * time.Millisecond
	tu := newFetchTuner(64)
	now := time.Unix(0, 0)
	steady := func(d time.Duration, capacity float64) {
		for end := now.Add(d); now.Before(end); {
			rate := math.Min(float64(tu.limit)/latency.Seconds(), capacity)
			now = now.Add(time.Duration(float64(time.Second) / rate))
			tu.done(now, latency)
		}
	}
	steady(5*time.Second, 5000)
	if tu.limit != 64 {
		t.Fatalf("clean: settled at %d, want 64", tu.limit)
	}
	lowest := tu.limit
	for range 10 {
		steady(time.Second, 5000)
		lowest = min(lowest, tu.limit)
		const hold, drained = 1500 * time.Millisecond, 40
		for range drained {
			now = now.Add(hold / drained)
			tu.done(now, latency)
			lowest = min(lowest, tu.limit)
		}
		tu.done(now, hold) // the held fetch itself
		lowest = min(lowest, tu.limit)
	}
	if lowest != 64 {
		t.Errorf("fetches held 1.5 s every second cut the limit to %d, want it held at 64", lowest)
	}
	steady(4*time.Second, 400) // 2 × 400/s × 20 ms
	if tu.limit < 16 || tu.limit > 17 {
		t.Errorf("decoders at 400/s for 4 s: limit %d, want 16", tu.limit)
	}
}
