package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/storage"
)

// Checkpoint is what --checkpoint --json prints.
type Checkpoint struct {
	Generation uint64            `json:"generation"`
	Samples    int64             `json:"samples"`
	Seed       uint64            `json:"seed"`
	Block      int               `json:"block"`
	Window     int               `json:"window"`
	BatchSize  int               `json:"batch_size"`
	Epochs     []CheckpointEpoch `json:"epochs"`
}

// CheckpointEpoch is one started epoch in the journal.
type CheckpointEpoch struct {
	Epoch     int                `json:"epoch"`
	Complete  bool               `json:"complete"`
	Committed int64              `json:"committed_positions"`
	Commits   []CheckpointCommit `json:"last_commits"`
	// Sessions is how many rank sessions committed in the epoch
	// (its trails); -1: not recorded (a journal before version 5).
	Sessions int `json:"sessions"`
	// WithCuts of them said where their node cut its runs, WithoutCuts
	// did not (an older node's, or a journal before version 6): only
	// their steps can be uncertain.
	WithCuts    int `json:"trails_with_cuts"`
	WithoutCuts int `json:"trails_without_cuts"`
	// Untraced is how many of the epoch's committed positions no trail
	// holds (all of them where its trails are not recorded); Stray how
	// many positions trails hold that the epoch did not commit.
	Untraced int64 `json:"untraced"`
	Stray    int64 `json:"stray,omitempty"`
	// CommittedAll is every position the epoch committed (a complete
	// epoch's too), what Untraced is out of.
	CommittedAll int64 `json:"committed"`
}

// CheckpointCommit is a rank's last commit in an epoch.
type CheckpointCommit struct {
	Rank   string `json:"rank"`
	Step   int64  `json:"step"`
	Offset int64  `json:"stream_offset"`
	Gen    uint64 `json:"generation"`
}

// checkpoint reads a cluster job's journal and prints what it records
// (no question was asked).
func checkpoint(ctx context.Context, o options, stdout, stderr io.Writer) int {
	st, j, e, err := openJournal(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "longshore-lineage: %v\n", err)
		return 1
	}
	defer storage.Close(st)
	c := Checkpoint{Generation: e.Gen, Samples: e.State.Samples, Seed: e.State.Seed, Block: e.State.Block,
		Window: e.State.Window, BatchSize: e.BatchSize}
	for n, es := range e.State.Epochs {
		ce := CheckpointEpoch{Epoch: n, Complete: es.Complete, Sessions: -1}
		var ts []cluster.Trail
		if t, err := j.Trails(ctx, e, n); err == nil {
			ts, ce.Sessions = t, len(t)
			for _, t := range ts {
				if t.CutsTold {
					ce.WithCuts++
				} else {
					ce.WithoutCuts++
				}
			}
		}
		cv := cluster.CoverTrails(cluster.EpochCommitted(es, e.State.Samples), e.State.Samples, ts)
		ce.Untraced, ce.Stray, ce.CommittedAll = cv.Untraced, cv.Stray, cv.Committed
		for _, r := range es.Committed {
			ce.Committed += r.Len()
		}
		for _, rc := range es.Commits {
			ce.Commits = append(ce.Commits, CheckpointCommit{Rank: rc.Rank, Step: rc.Step, Offset: rc.Offset, Gen: rc.Gen})
		}
		c.Epochs = append(c.Epochs, ce)
	}
	if err := printCheckpoint(stdout, o.json, c); err != nil {
		fmt.Fprintf(stderr, "longshore-lineage: %v\n", err)
		return 1
	}
	return 0
}

func printCheckpoint(w io.Writer, asJSON bool, c Checkpoint) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(c)
	}
	fmt.Fprintf(w, "journal generation %d: %d samples, seed %d, block %d, window %d, batch size %d\n", c.Generation, c.Samples, c.Seed, c.Block, c.Window, c.BatchSize)
	for _, e := range c.Epochs {
		if e.Complete {
			fmt.Fprintf(w, "epoch %d: complete", e.Epoch)
		} else {
			fmt.Fprintf(w, "epoch %d: %d positions committed", e.Epoch, e.Committed)
		}
		if e.Sessions < 0 {
			fmt.Fprintf(w, ", which steps held what not recorded (a journal from before lineage records)\n")
		} else {
			fmt.Fprintf(w, ", %d rank session(s) committed steps", e.Sessions)
			if e.Sessions > 0 {
				its := "their"
				if e.WithoutCuts == 1 {
					its = "its"
				}
				fmt.Fprintf(w, ": %d said where their node cut its runs, %d did not", e.WithCuts, e.WithoutCuts)
				if e.WithoutCuts > 0 {
					fmt.Fprintf(w, " (%s steps may be uncertain)", its)
				}
			}
			if e.Untraced > 0 || e.Stray > 0 {
				fmt.Fprintf(w, "; %s: %s", untracedCount(UntracedEpoch{Epoch: e.Epoch, Untraced: e.Untraced, Committed: e.CommittedAll, Stray: e.Stray}), untracedWhy)
			}
			fmt.Fprintln(w)
		}
		for _, rc := range e.Commits {
			fmt.Fprintf(w, "  rank %s: last commit step %d (stream offset %d, generation %d)\n", rc.Rank, rc.Step, rc.Offset, rc.Gen)
		}
	}
	return nil
}
