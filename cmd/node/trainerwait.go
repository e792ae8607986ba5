package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/longshore/longshore/actors/feedserver"
)

// TrainerWaitSummary is the summary's trainer_wait: what the trainers'
// clients reported of their time (feed sink): over Steps batches,
// WaitSeconds waiting for them and ComputeSeconds between them, and
// StallShare = wait / (wait + compute), job-wide (every rank of the
// node) and per rank.
type TrainerWaitSummary struct {
	Steps          int64      `json:"steps"`
	WaitSeconds    float64    `json:"wait_seconds"`
	ComputeSeconds float64    `json:"compute_seconds"`
	StallShare     float64    `json:"stall_share"`
	Ranks          []RankWait `json:"ranks"`
}

// RankWait is one rank's part of TrainerWaitSummary.
type RankWait struct {
	Rank           int     `json:"rank"`
	Steps          int64   `json:"steps"`
	WaitSeconds    float64 `json:"wait_seconds"`
	ComputeSeconds float64 `json:"compute_seconds"`
	StallShare     float64 `json:"stall_share"`
}

// trainerWait sums ws up; nil when no trainer reported (an older client,
// or no feed).
func trainerWait(ws []feedserver.TrainerWait) *TrainerWaitSummary {
	var s TrainerWaitSummary
	var total feedserver.TrainerWait
	for _, w := range ws {
		if w.Steps == 0 {
			continue
		}
		s.Ranks = append(s.Ranks, RankWait{Rank: w.Rank, Steps: w.Steps, WaitSeconds: w.Wait.Seconds(), ComputeSeconds: w.Compute.Seconds(), StallShare: w.Share()})
		total.Steps += w.Steps
		total.Wait += w.Wait
		total.Compute += w.Compute
	}
	if total.Steps == 0 {
		return nil
	}
	s.Steps, s.WaitSeconds, s.ComputeSeconds, s.StallShare = total.Steps, total.Wait.Seconds(), total.Compute.Seconds(), total.Share()
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
}
