package observe

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/longshore/longshore/delivery"
)

// TrainerWait is a rank's data-stall accounting under the rank's name
// (the rank label of the node's other metrics).
type TrainerWait struct {
	Rank string
	delivery.TrainerWait
}

// TrainerWaits reads the trainers' data-stall accounting of the feed
// server p holds once it started (nothing before), naming rank r
// name(r) (nil: its number).
func TrainerWaits(p *atomic.Pointer[delivery.Server], name func(rank int) string) func() []TrainerWait {
	return func() []TrainerWait {
		s := p.Load()
		if s == nil {
			return nil
		}
		ws := s.TrainerWait()
		out := make([]TrainerWait, len(ws))
		for i, w := range ws {
			out[i] = TrainerWait{Rank: strconv.Itoa(w.Rank), TrainerWait: w}
			if name != nil {
				out[i].Rank = name(w.Rank)
			}
		}
		return out
	}
}

// trainerWaitCollector exports, per rank, what the rank's trainers
// reported of their waits for batches and their compute between them
// (delivery.TrainerWait), read at scrape time.
type trainerWaitCollector struct {
	waits           func() []TrainerWait
	wait            *prometheus.Desc
	compute, ratio  *prometheus.Desc
	hsSteps, hsTime *prometheus.Desc
}

// NewTrainerWaitCollector exports what waits reports:
// longshore_trainer_wait_seconds{rank} (a histogram of the trainer's wait
// for each batch, delivery.WaitBuckets), longshore_trainer_compute_seconds_total{rank}
// (its time between batches) and longshore_trainer_stall_ratio{rank}
// (wait / (wait + compute) over the run, for ranks that reported).
func NewTrainerWaitCollector(waits func() []TrainerWait) prometheus.Collector {
	r := []string{"rank"}
	return &trainerWaitCollector{waits: waits,
		wait: prometheus.NewDesc(Namespace+"_trainer_wait_seconds",
			"Time the rank's trainer waited for each batch, from asking for it to having it, as its client reported.", r, nil),
		compute: prometheus.NewDesc(Namespace+"_trainer_compute_seconds_total",
			"Time the rank's trainer spent between having a batch and asking for the next, as its client reported.", r, nil),
		ratio: prometheus.NewDesc(Namespace+"_trainer_stall_ratio",
			"Fraction of the rank's trainer time spent waiting for data over the run: wait / (wait + compute).", r, nil),
		hsSteps: prometheus.NewDesc(Namespace+"_trainer_headspace_steps_total",
			"Steps the rank's trainer ran on replayed cached batches (its headspace mode).", r, nil),
		hsTime: prometheus.NewDesc(Namespace+"_trainer_headspace_compute_seconds_total",
			"Time those headspace steps took: the trainer's compute ceiling with a perfect loader.", r, nil),
	}
}

func (c *trainerWaitCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.wait
	ch <- c.compute
	ch <- c.ratio
	ch <- c.hsSteps
	ch <- c.hsTime
}

func (c *trainerWaitCollector) Collect(ch chan<- prometheus.Metric) {
	for _, w := range c.waits() {
		rank := w.Rank
		buckets := make(map[float64]uint64, len(delivery.WaitBuckets))
		for i, b := range delivery.WaitBuckets {
			buckets[b] = w.Buckets[i]
		}
		ch <- prometheus.MustNewConstHistogram(c.wait, uint64(w.Steps), w.Wait.Seconds(), buckets, rank)
		ch <- prometheus.MustNewConstMetric(c.compute, prometheus.CounterValue, w.Compute.Seconds(), rank)
		if w.Steps > 0 {
			ch <- prometheus.MustNewConstMetric(c.ratio, prometheus.GaugeValue, w.Share(), rank)
		}
		ch <- prometheus.MustNewConstMetric(c.hsSteps, prometheus.CounterValue, float64(w.HeadspaceSteps), rank)
		ch <- prometheus.MustNewConstMetric(c.hsTime, prometheus.CounterValue, w.HeadspaceCompute.Seconds(), rank)
	}
}
