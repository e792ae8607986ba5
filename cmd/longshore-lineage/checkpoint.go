package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/longshore/longshore/cluster/journal"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
	"github.com/longshore/longshore/storage/stores"
)

// whyNotCluster is why a cluster job's steps have no answer from its
// journal (docs/lineage.md says what the core would need).
const whyNotCluster = "a cluster job's rank streams are the leases the coordinator granted as ranks asked (their order, speed, failures and restarts decide which positions each rank got), and the journal keeps, per open epoch, the committed positions merged across ranks and each rank's last commit (session, step, stream offset) only: not which positions each session's steps held. No exact answer follows from it, so none is given"

// Checkpoint is what --checkpoint --json prints.
type Checkpoint struct {
	Generation uint64            `json:"generation"`
	Samples    int64             `json:"samples"`
	Seed       uint64            `json:"seed"`
	Block      int               `json:"block"`
	Window     int               `json:"window"`
	Epochs     []CheckpointEpoch `json:"epochs"`
	Refused    string            `json:"refused"`
}

// CheckpointEpoch is one started epoch in the journal.
type CheckpointEpoch struct {
	Epoch     int                `json:"epoch"`
	Complete  bool               `json:"complete"`
	Committed int64              `json:"committed_positions"`
	Commits   []CheckpointCommit `json:"last_commits"`
}

// CheckpointCommit is a rank's last commit in an epoch.
type CheckpointCommit struct {
	Rank   string `json:"rank"`
	Step   int64  `json:"step"`
	Offset int64  `json:"stream_offset"`
	Gen    uint64 `json:"generation"`
}

// checkpoint reads a cluster job's journal, prints what it records and
// refuses the question, with the reason: exit status 3.
func checkpoint(ctx context.Context, o options, stdout, stderr io.Writer) int {
	sopts := s3.DefaultOptions()
	if o.s3Endpoint != "" {
		sopts.Endpoint = o.s3Endpoint
	}
	st, err := stores.Open(ctx, o.checkpoint, sopts)
	if err != nil {
		fmt.Fprintf(stderr, "longshore-lineage: --checkpoint %s: %v\n", o.checkpoint, err)
		return 1
	}
	defer storage.Close(st)
	j, err := journal.Open(ctx, journal.Config{Store: st})
	if err == nil {
		var e journal.Entry
		if e, err = j.Latest(ctx); err == nil {
			c := Checkpoint{Generation: e.Gen, Samples: e.State.Samples, Seed: e.State.Seed, Block: e.State.Block,
				Window: e.State.Window, Refused: whyNotCluster}
			for n, es := range e.State.Epochs {
				ce := CheckpointEpoch{Epoch: n, Complete: es.Complete}
				for _, r := range es.Committed {
					ce.Committed += r.Len()
				}
				for _, rc := range es.Commits {
					ce.Commits = append(ce.Commits, CheckpointCommit{Rank: rc.Rank, Step: rc.Step, Offset: rc.Offset, Gen: rc.Gen})
				}
				c.Epochs = append(c.Epochs, ce)
			}
			err = printCheckpoint(stdout, o.json, c)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "longshore-lineage: --checkpoint %s: %v\n", o.checkpoint, err)
		return 1
	}
	fmt.Fprintf(stderr, "longshore-lineage: refused: %s (docs/lineage.md)\n", whyNotCluster)
	return 3
}

func printCheckpoint(w io.Writer, asJSON bool, c Checkpoint) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(c)
	}
	fmt.Fprintf(w, "journal generation %d: %d samples, seed %d, block %d, window %d\n", c.Generation, c.Samples, c.Seed, c.Block, c.Window)
	for _, e := range c.Epochs {
		if e.Complete {
			fmt.Fprintf(w, "epoch %d: complete\n", e.Epoch)
		} else {
			fmt.Fprintf(w, "epoch %d: %d positions committed\n", e.Epoch, e.Committed)
		}
		for _, rc := range e.Commits {
			fmt.Fprintf(w, "  rank %s: last commit step %d (stream offset %d, generation %d)\n", rc.Rank, rc.Step, rc.Offset, rc.Gen)
		}
	}
	return nil
}
