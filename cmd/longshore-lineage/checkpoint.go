package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

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
		if ts, err := j.Trails(ctx, e, n); err == nil {
			ce.Sessions = len(ts)
		}
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
		if e.Sessions >= 0 {
			fmt.Fprintf(w, ", %d rank session(s) committed steps\n", e.Sessions)
		} else {
			fmt.Fprintf(w, ", which steps held what not recorded (a journal from before lineage records)\n")
		}
		for _, rc := range e.Commits {
			fmt.Fprintf(w, "  rank %s: last commit step %d (stream offset %d, generation %d)\n", rc.Rank, rc.Step, rc.Offset, rc.Gen)
		}
	}
	return nil
}
