package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/longshore/longshore/delivery"
)

// TrainerWaitSummary is the summary's trainer_wait: what the trainers'
// clients reported of their time (feed sink): over Steps batches,
// WaitSeconds waiting for them and ComputeSeconds between them, and
// StallShare = wait / (wait + compute), job-wide (every rank of the
// node) and per rank.
type TrainerWaitSummary struct {
	Steps          int64   `json:"steps"`
	WaitSeconds    float64 `json:"wait_seconds"`
	ComputeSeconds float64 `json:"compute_seconds"`
	StallShare     float64 `json:"stall_share"`
	Headspace
	Ranks []RankWait `json:"ranks"`
}

// Headspace is what the trainers' headspace runs (Python
// Loader.headspace) measured: HeadspaceSteps steps on replayed cached
// batches took HeadspaceComputeSeconds, and Gain is how many times faster
// the steps would be with a perfect loader (the mean step over the mean
// headspace step; 0: no headspace run).
type Headspace struct {
	HeadspaceSteps          int64   `json:"headspace_steps,omitempty"`
	HeadspaceComputeSeconds float64 `json:"headspace_compute_seconds,omitempty"`
	Gain                    float64 `json:"gain,omitempty"`
}

func headspaceOf(w delivery.TrainerWait) Headspace {
	return Headspace{HeadspaceSteps: w.HeadspaceSteps, HeadspaceComputeSeconds: w.HeadspaceCompute.Seconds(), Gain: w.Gain()}
}

// RankWait is one rank's part of TrainerWaitSummary.
type RankWait struct {
	Rank           int     `json:"rank"`
	Steps          int64   `json:"steps"`
	WaitSeconds    float64 `json:"wait_seconds"`
	ComputeSeconds float64 `json:"compute_seconds"`
	StallShare     float64 `json:"stall_share"`
	Headspace
}

// trainerWait sums ws up; nil when no trainer reported (an older client,
// or no feed).
func trainerWait(ws []delivery.TrainerWait) *TrainerWaitSummary {
	var s TrainerWaitSummary
	var total delivery.TrainerWait
	for _, w := range ws {
		if w.Steps == 0 {
			continue
		}
		s.Ranks = append(s.Ranks, RankWait{Rank: w.Rank, Steps: w.Steps, WaitSeconds: w.Wait.Seconds(), ComputeSeconds: w.Compute.Seconds(), StallShare: w.Share(),
			Headspace: headspaceOf(w)})
		total.Steps += w.Steps
		total.Wait += w.Wait
		total.Compute += w.Compute
		total.HeadspaceSteps += w.HeadspaceSteps
		total.HeadspaceCompute += w.HeadspaceCompute
	}
	if total.Steps == 0 {
		return nil
	}
	s.Steps, s.WaitSeconds, s.ComputeSeconds, s.StallShare = total.Steps, total.Wait.Seconds(), total.Compute.Seconds(), total.Share()
	s.Headspace = headspaceOf(total)
	return &s
}

func printTrainerWait(w io.Writer, s *TrainerWaitSummary) {
	if s == nil {
		return
	}
	fmt.Fprintf(w, "  trainer wait  %.1f%% of the trainers' time waiting for data: %.2f s waiting, %.2f s computing over %d steps",
		100*s.StallShare, s.WaitSeconds, s.ComputeSeconds, s.Steps)
	if len(s.Ranks) > 1 {
		parts := make([]string, len(s.Ranks))
		for i, r := range s.Ranks {
			parts[i] = fmt.Sprintf("rank %d %.1f%%", r.Rank, 100*r.StallShare)
		}
		fmt.Fprintf(w, " (%s)", strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
	if s.Gain > 0 {
		verdict := fmt.Sprintf("a perfect loader would make the trainers %.2fx faster", s.Gain)
		if s.Gain <= 1 {
			// replayed steps no faster than real ones: the loader costs the
			// trainers nothing measurable (or the headspace ran cold)
			verdict = fmt.Sprintf("a perfect loader would not make the trainers faster (%.2fx)", s.Gain)
		}
		fmt.Fprintf(w, "  headspace     %.2f ms a step on replayed batches against %.2f ms measured: %s\n",
			1e3*s.HeadspaceComputeSeconds/float64(s.HeadspaceSteps), 1e3*(s.WaitSeconds+s.ComputeSeconds)/float64(s.Steps), verdict)
	}
}
