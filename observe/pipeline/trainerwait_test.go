package pipeline

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/longshore/longshore/delivery"
	"github.com/longshore/longshore/observe/observetest"
)

func TestTrainerWaitMetrics(t *testing.T) {
	buckets := make([]uint64, len(delivery.WaitBuckets))
	for i, b := range delivery.WaitBuckets {
		if b >= 0.1 {
			buckets[i] = 10 // ten waits of 90 ms
		}
	}
	waits := []TrainerWait{
		{"0", delivery.TrainerWait{Rank: 0, Steps: 10, Wait: 900 * time.Millisecond, Compute: 100 * time.Millisecond, Buckets: buckets}},
		{"1", delivery.TrainerWait{Rank: 1, Buckets: make([]uint64, len(delivery.WaitBuckets))}}, // nothing reported
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewTrainerWaitCollector(func() []TrainerWait { return waits }))
	mfs := observetest.Families(t, reg)
	if got := observetest.Sum(mfs, "longshore_trainer_wait_seconds", map[string]string{"rank": "0"}); got != 10 {
		t.Errorf("rank 0: %v waits, want 10", got)
	}
	h := mfs["longshore_trainer_wait_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleSum() != 0.9 || h.GetBucket()[len(h.GetBucket())-1].GetCumulativeCount() != 10 {
		t.Errorf("rank 0 histogram: sum %v, buckets %v", h.GetSampleSum(), h.GetBucket())
	}
	if got := observetest.Sum(mfs, "longshore_trainer_compute_seconds_total", map[string]string{"rank": "0"}); got != 0.1 {
		t.Errorf("rank 0 compute %v s, want 0.1", got)
	}
	if got := observetest.Sum(mfs, "longshore_trainer_stall_ratio", map[string]string{"rank": "0"}); got < 0.8999 || got > 0.9001 {
		t.Errorf("rank 0 stall ratio %v, want 0.9", got)
	}
	if got := observetest.Sum(mfs, "longshore_trainer_stall_ratio", map[string]string{"rank": "1"}); got != 0 {
		t.Errorf("rank 1, which reported nothing, has a stall ratio (%v)", got)
	}
	if got := observetest.Sum(mfs, "longshore_trainer_wait_seconds", map[string]string{"rank": "1"}); got != 0 {
		t.Errorf("rank 1: %v waits, want 0", got)
	}
}
