package delivery

import (
	"sync"
	"time"

	"github.com/longshore/longshore/feed"
)

// WaitBuckets are the upper bounds, in seconds, of the histogram of a
// trainer's waits for its batches (TrainerWait.Buckets): from a batch
// that was ready (tens of microseconds) to a trainer starved for seconds.
var WaitBuckets = []float64{100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10, 30}

// TrainerWait is a rank's data-stall accounting as its trainers reported
// it (feed.StallReport on releases), over every connection the rank had:
// Steps batches, the trainers' summed Wait for them and Compute between
// them, and Buckets, the cumulative count of steps whose wait was at most
// WaitBuckets[i]. A trainer whose client does not report adds nothing.
type TrainerWait struct {
	Rank    int
	Steps   int64
	Wait    time.Duration
	Compute time.Duration
	Buckets []uint64
	// HeadspaceSteps steps on replayed cached batches (the trainer's
	// headspace mode) took HeadspaceCompute: its compute ceiling.
	HeadspaceSteps   int64
	HeadspaceCompute time.Duration
}

// Gain is how many times faster the trainer's steps would be with a
// perfect loader, from its headspace run: its mean step time (wait and
// compute) over its mean headspace step; 0 without a headspace run.
func (w TrainerWait) Gain() float64 {
	if w.HeadspaceSteps == 0 || w.HeadspaceCompute <= 0 || w.Steps == 0 {
		return 0
	}
	step := float64(w.Wait+w.Compute) / float64(w.Steps)
	return step / (float64(w.HeadspaceCompute) / float64(w.HeadspaceSteps))
}

// Share is the fraction of the trainers' time spent waiting for data:
// Wait / (Wait + Compute); 0 with nothing reported.
func (w TrainerWait) Share() float64 {
	if t := w.Wait + w.Compute; t > 0 {
		return float64(w.Wait) / float64(t)
	}
	return 0
}

// waitBook adds up a rank's reports.
type waitBook struct {
	mu sync.Mutex
	w  TrainerWait // Buckets per bucket, not cumulative
}

func (b *waitBook) add(r *feed.StallReport) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.w.Buckets == nil {
		b.w.Buckets = make([]uint64, len(WaitBuckets))
	}
	if h := r.Headspace; h != nil {
		b.w.HeadspaceSteps += h.Steps
		b.w.HeadspaceCompute += time.Duration(h.ComputeUS) * time.Microsecond
	}
	for i, us := range r.WaitUS {
		wait := time.Duration(us) * time.Microsecond
		b.w.Steps++
		b.w.Wait += wait
		b.w.Compute += time.Duration(r.ComputeUS[i]) * time.Microsecond
		s := wait.Seconds()
		for j, ub := range WaitBuckets {
			if s <= ub {
				b.w.Buckets[j]++
				break
			}
		}
	}
}

func (b *waitBook) snapshot(rank int) TrainerWait {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.w
	w.Rank = rank
	w.Buckets = make([]uint64, len(WaitBuckets))
	var cum uint64
	for i := range w.Buckets {
		if i < len(b.w.Buckets) {
			cum += b.w.Buckets[i]
		}
		w.Buckets[i] = cum
	}
	return w
}

// TrainerWait returns every rank's data-stall accounting so far, by rank.
// Safe for concurrent use (a metrics scrape, the summary).
func (s *Server) TrainerWait() []TrainerWait {
	out := make([]TrainerWait, len(s.ranks))
	for i, r := range s.ranks {
		out[i] = r.waits.snapshot(r.rank)
	}
	return out
}
