package pipeline

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/longshore/longshore/delivery"
	"github.com/longshore/longshore/observe"
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

// Trainers reads ws into the table's neutral form.
func Trainers(ws []TrainerWait) []observe.TrainerCounts {
	out := make([]observe.TrainerCounts, 0, len(ws))
	for _, w := range ws {
		cum := w.Buckets
		if len(cum) != len(delivery.WaitBuckets) {
			cum = make([]uint64, len(delivery.WaitBuckets))
		}
		out = append(out, observe.TrainerCounts{Rank: w.Rank, Steps: w.Steps,
			Wait:           observe.Hist{Bounds: delivery.WaitBuckets, Cumulative: cum, Count: uint64(w.Steps), Sum: w.Wait.Seconds()},
			ComputeSeconds: w.Compute.Seconds(), HeadspaceSteps: w.HeadspaceSteps, HeadspaceSeconds: w.HeadspaceCompute.Seconds()})
	}
	return out
}

// NewTrainerWaitCollector exports what waits reports, the table's rows
// of observe.GroupTrainer: longshore_trainer_wait_seconds{rank} (a
// histogram of the trainer's wait for each batch,
// delivery.WaitBuckets), longshore_trainer_compute_seconds_total{rank}
// (its time between batches), longshore_trainer_stall_ratio{rank} (wait
// / (wait + compute) over the run, for ranks that reported) and the
// headspace steps and their time.
func NewTrainerWaitCollector(waits func() []TrainerWait) prometheus.Collector {
	return observe.Metrics.Collector(func() observe.Snapshot { return observe.Snapshot{Trainers: Trainers(waits())} },
		[]observe.Group{observe.GroupTrainer})
}
