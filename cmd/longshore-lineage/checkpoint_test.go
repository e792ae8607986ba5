package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/dataset"
)

// TestCheckpointSummary: --checkpoint without a question says what the
// journal records: the job, each epoch's committed positions, its ranks'
// last commits and how many rank sessions' steps it holds.
func TestCheckpointSummary(t *testing.T) {
	ctx := context.Background()
	s := cluster.State{Incarnation: 1, Seq: 3, Samples: 100, Seed: 9, Block: 1, Window: 1, Epochs: []cluster.EpochState{{
		Committed: []cluster.Range{{Start: 0, End: 40}},
		Commits:   []cluster.RankCommit{{Rank: "n1/0", Epoch: 0, Step: 4, Offset: 40, Gen: 1}},
		Trails: []cluster.Trail{{Rank: "n1/0", Session: cluster.Fence{Incarnation: 1, Seq: 2}, Segs: []cluster.Range{{Start: 0, End: 40}},
			Commits: []cluster.TrailCommit{{Step: 4, Offset: 40}}}},
	}}}
	dir := writeJournal(t, s)
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"--checkpoint", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"rank n1/0: last commit step 4 (stream offset 40", "40 positions committed, 1 rank session(s) committed steps"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the journal's records are not said (%q):\n%s", want, out.String())
		}
	}
	// A question needs the dataset and, for steps, the rank's name.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--checkpoint", dir, "--step", "3", "--rank", "n1/0"}, "--dataset is required"},
		{[]string{"--checkpoint", dir, "--dataset", "x", "--step", "3"}, "name the rank"},
		{[]string{"--dataset", "x", "--step", "3", "--rank", "n1/0"}, "needs --checkpoint"},
	} {
		var out, errb bytes.Buffer
		if code := run(ctx, c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

func TestFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--dataset", "x"}, "ask a question"},
		{[]string{"--dataset", "x", "--step", "3", "--steps", "1-2"}, "give one"},
		{[]string{"--dataset", "x", "--steps", "5-2"}, "A <= B"},
		{[]string{"--dataset", "x", "--step", "2-3"}, "a range is --steps"},
		{[]string{"--dataset", "x", "--step", "1", "--rank", "2", "--ranks", "2"}, "ranks 0..1"},
		{[]string{"--dataset", "x", "--step", "1", "--epoch", "3", "--epochs", "3"}, "epochs 0..2"},
		{[]string{"--dataset", "x", "--step", "1", "--key", "a"}, "give one question"},
		{[]string{"--step", "1"}, "--dataset is required"},
		{[]string{"--mixture", "a=x", "--dataset", "x", "--step", "1"}, "in place of --dataset"},
		{[]string{"--dataset", "x", "--step", "1", "--mixture-round", "4"}, "need --mixture"},
		{[]string{"--mixture", "a=x:1,b", "--step", "1"}, "--mixture"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

func TestFindKey(t *testing.T) {
	ds := &dataset.Dataset{Objects: []string{"s/0.tar", "s/1.tar"}, Samples: []dataset.Sample{
		{Key: "plain.jpg"},
		{Key: "s/0.tar/c1/a.jpg", Object: 1},
		{Key: "s/0.tar/c1/b.jpg", Object: 1},
		{Key: "s/1.tar/c1/b.jpg", Object: 2},
	}}
	for key, want := range map[string]int64{"plain.jpg": 0, "c1/a.jpg": 1, "s/0.tar/c1/b.jpg": 2, "s/1.tar/c1/b.jpg": 3} {
		if got, err := findKey(ds, key); err != nil || got != want {
			t.Errorf("findKey(%q) = %d, %v; want %d", key, got, err, want)
		}
	}
	for key, want := range map[string]string{"c1/b.jpg": "member of 2 tars", "a.jpg": "not in the dataset", "c1": "not in the dataset"} {
		if _, err := findKey(ds, key); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("findKey(%q): %v, want %q", key, err, want)
		}
	}
}

// TestConfigAndEnvironment: the job comes from the node's config file
// (its other keys ignored) and LONGSHORE_*, the command line winning; the
// question comes from the command line only.
func TestConfigAndEnvironment(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(cfg, []byte("dataset: /data\nbatch-size: 16\nblock: 4\ndecoders: 3\nsink: feed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LONGSHORE_CHECKPOINT", "/somewhere") // the coordinator's
	t.Setenv("LONGSHORE_RANKS", "4")
	o, err := parseFlags([]string{"--config", cfg, "--step", "3", "--rank", "2", "--seed", "5"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.dataset != "/data" || o.batchSize != 16 || o.block != 4 || !o.blockSet || o.ranks != 4 || o.seed != 5 || o.rank != 2 || o.steps != (stepRange{3, 3}) {
		t.Errorf("options %+v", o)
	}
	if o.checkpoint != "" {
		t.Errorf("LONGSHORE_CHECKPOINT set --checkpoint %q: the question is not configuration", o.checkpoint)
	}
	if err := os.WriteFile(cfg, []byte("dataset: /data\nstep: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := parseFlags([]string{"--config", cfg, "--step", "1"}, io.Discard); err == nil || !strings.Contains(err.Error(), "step") {
		t.Errorf("a config file's step: %v, want an error naming it", err)
	}
}

// TestFields: a sample's fields (a JSON-lines manifest's other members)
// come with it in the answer.
func TestFields(t *testing.T) {
	root := makeDataset(t, 6)
	var lines []string
	for i := range 6 {
		lines = append(lines, fmt.Sprintf(`{"key": "c%d/img%03d.jpg", "label": %d, "caption": "photo %d", "score": %d.5}`, i%3, i, i%3, i, i))
	}
	if err := os.WriteFile(filepath.Join(root, "manifest.jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := lineage(t, "--dataset", root, "--manifest", "manifest.jsonl", "--batch-size", "6", "--step", "0", "--transforms=false")
	if len(a.Steps) != 1 || len(a.Steps[0].Samples) != 6 {
		t.Fatalf("steps %+v", a.Steps)
	}
	for _, x := range a.Steps[0].Samples {
		i := x.Index
		if x.Fields["caption"] != fmt.Sprintf("photo %d", i) || x.Fields["score"] != float64(i)+0.5 {
			t.Errorf("sample %d (%s): fields %v, want caption \"photo %d\" and score %d.5", i, x.Key, x.Fields, i, i)
		}
	}
}

// TestClusterKeyCommittedHistory: a cluster job's --key answers from the
// journal's trails, each appearance with the session that committed
// it and the step the trail numbers, padding included, exactly where
// the node told where its runs were cut. An appearance in a trail of an
// older node (no cuts), where the steps fit more than one way, is
// marked uncertain, in the text too, with a note. An epoch whose trails
// the journal does not hold (a journal from before lineage records) is
// named in the note, not a failure of the whole question.
func TestClusterKeyCommittedHistory(t *testing.T) {
	root := makeDataset(t, 12)
	ctx := context.Background()
	told, old := cluster.Fence{Incarnation: 1, Seq: 2}, cluster.Fence{Incarnation: 1, Seq: 3}
	// Batch size 4. n1/0 delivered order positions 0-8: a stream end at
	// 5 whose short batch's commit was lost, the node told the cut: steps
	// 0 [0,4), 1 [4,5), 2 [5,9). n2/0, an older node, delivered 9-11 and
	// padding (positions 12-17: the order's 0-5), the same commits and
	// stream end but no cuts: steps 1 and 2 fit with a short batch at 5
	// or without.
	s := cluster.State{Incarnation: 1, Seq: 3, Samples: 12, Seed: 9, Block: 1, Window: 1, Epochs: []cluster.EpochState{
		{Complete: true},
		{
			Committed: []cluster.Range{{Start: 0, End: 12}},
			Trails: []cluster.Trail{
				{Rank: "n1/0", Session: told, Segs: []cluster.Range{{Start: 0, End: 9}},
					Commits: []cluster.TrailCommit{{Step: 0, Offset: 4}, {Step: 2, Offset: 9}}, Ends: []int64{5}, Cuts: []int64{5}, CutsTold: true},
				{Rank: "n2/0", Session: old, Segs: []cluster.Range{{Start: 9, End: 18}},
					Commits: []cluster.TrailCommit{{Step: 0, Offset: 4}, {Step: 2, Offset: 9}}, Ends: []int64{5}},
			},
		},
	}}
	dir := writeJournal(t, s)
	job := []string{"--checkpoint", dir, "--dataset", root, "--batch-size", "4", "--transforms=false"}
	// The key at order position 4 of epoch 1: n1/0's step 1, alone.
	a := lineage(t, append(job, "--epoch", "1", "--rank", "n1/0", "--steps", "1-1")...)
	if len(a.Steps) != 1 || len(a.Steps[0].Samples) != 1 || a.Steps[0].Uncertain || a.Steps[0].Samples[0].OrderPos != 4 {
		t.Fatalf("n1/0 step 1: %+v, want the short batch of order position 4 alone", a.Steps)
	}
	key := a.Steps[0].Samples[0].Key
	a = lineage(t, append(job, "--key", key)...)
	want := []Appearance{
		{Epoch: 1, Rank: -1, RankName: "n1/0", Session: told.String(), Step: 1, Slot: 0, Offset: 4},
		{Epoch: 1, Rank: -1, RankName: "n2/0", Session: old.String(), Step: 1, Slot: 3, Offset: 7, Pad: true, Uncertain: true},
	}
	if !reflect.DeepEqual(a.Appearances, want) {
		t.Errorf("--key %s: %+v\nwant %+v", key, a.Appearances, want)
	}
	for _, w := range []string{"uncertain", "epoch(s) 0 "} {
		if !strings.Contains(a.Note, w) {
			t.Errorf("--key %s: note %q does not say %q", key, a.Note, w)
		}
	}
	if !reflect.DeepEqual(a.UnrecordedEpochs, []int{0}) {
		t.Errorf("--key %s: unrecorded epochs %v, want [0]", key, a.UnrecordedEpochs)
	}
	text := lineageText(t, append(job, "--key", key)...)
	if !strings.Contains(text, "step 1 slot 3 (stream offset 7) (padding) (uncertain)") || strings.Count(text, "(uncertain)") != 1 {
		t.Errorf("--key %s: the uncertain appearance is not marked, or more are:\n%s", key, text)
	}
	// Asked about epoch 0 alone, there is nothing to answer from.
	var out, errb bytes.Buffer
	if code := run(ctx, append(job, "--key", key, "--epoch", "0"), &out, &errb); code != 1 || !strings.Contains(errb.String(), "no lineage recorded") {
		t.Errorf("--key --epoch 0: exit %d, %q; want 1 and no lineage recorded", code, errb.String())
	}
}
