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
