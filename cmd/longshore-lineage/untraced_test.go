package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/journal"
	"github.com/longshore/longshore/storage/s3"
	"github.com/longshore/longshore/storage/stores"
)

// writeJournal writes s as the newest generation of a new journal in a
// temporary directory, and returns the directory.
func writeJournal(t *testing.T, s cluster.State) string {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	st, err := stores.Open(ctx, dir, s3.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(ctx, journal.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Start(ctx, journal.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Write(ctx, s, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runJSON runs lineage with --json and decodes what it printed as
// generic JSON (exit status and stderr too).
func runJSON(t *testing.T, args ...string) (int, map[string]any, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append(args, "--json"), &out, &errb)
	var m map[string]any
	if code == 0 {
		if err := json.Unmarshal(out.Bytes(), &m); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
	}
	return code, m, errb.String()
}

// TestClusterUntracedPositions: an epoch whose committed positions are
// not all in trails (a coordinator that took over an epoch a journal of
// version 4 started: what was committed before it has no trail) is
// named, with how many of its committed positions have none, in the
// summary, in --key's answer (text and JSON), and a step question that
// may fall among them is an error naming the cause, not an answer that
// leaves them out.
func TestClusterUntracedPositions(t *testing.T) {
	root := makeDataset(t, 12)
	now := cluster.Fence{Incarnation: 2, Seq: 1}
	// Batch size 4. Epoch 0 (complete, the last to): n2/0 committed steps
	// 0 and 1 (order positions 0-7) under a coordinator that recorded no
	// trails; the next one took over and recorded n1/0's step 0 (8-11).
	// Epoch 1 (open): 4 positions committed, no trail (as a version 4
	// journal holds it), no last commits either.
	s := cluster.State{Incarnation: 2, Seq: 3, Samples: 12, Seed: 9, Block: 1, Window: 1, Epochs: []cluster.EpochState{
		{
			Complete: true,
			Commits: []cluster.RankCommit{
				{Rank: "n1/0", Session: now, Epoch: 0, Step: 0, Offset: 4, Gen: 2},
				{Rank: "n2/0", Session: cluster.Fence{Incarnation: 1, Seq: 2}, Epoch: 0, Step: 1, Offset: 8, Gen: 1},
			},
			Trails: []cluster.Trail{{Rank: "n1/0", Session: now, Segs: []cluster.Range{{Start: 8, End: 12}},
				Commits: []cluster.TrailCommit{{Step: 0, Offset: 4}}, CutsTold: true}},
		},
		{Committed: []cluster.Range{{Start: 0, End: 4}}},
	}}
	dir := writeJournal(t, s)
	job := []string{"--checkpoint", dir, "--dataset", root, "--batch-size", "4", "--transforms=false"}

	// The summary.
	code, m, errs := runJSON(t, "--checkpoint", dir)
	if code != 0 {
		t.Fatalf("summary: exit %d, %s", code, errs)
	}
	eps, _ := m["epochs"].([]any)
	if len(eps) != 2 {
		t.Fatalf("summary: epochs %v", m["epochs"])
	}
	for e, want := range []float64{8, 4} {
		if got := eps[e].(map[string]any)["untraced"]; got != want {
			t.Errorf("summary: epoch %d untraced %v, want %v", e, got, want)
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--checkpoint", dir}, &out, &errb); code != 0 {
		t.Fatalf("summary: exit %d, %s", code, errb.String())
	}
	for _, want := range []string{"8 of its 12 committed positions have no trail", "4 of its 4 committed positions have no trail"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary does not say %q:\n%s", want, out.String())
		}
	}

	// --key: the epochs and their counts are named, and where the key's
	// sample was committed among them.
	a := lineage(t, append(job, "--epoch", "0", "--rank", "n1/0", "--step", "0")...)
	if len(a.Steps) != 1 || len(a.Steps[0].Samples) != 4 || a.Steps[0].Samples[0].OrderPos != 8 {
		t.Fatalf("n1/0 step 0 of epoch 0: %+v, want order positions 8-11", a.Steps)
	}
	if !strings.Contains(a.Note, "epoch 0: 8 of its 12 committed positions have no trail") {
		t.Errorf("a step answered in an epoch with untraced positions: note %q does not say so", a.Note)
	}
	key := a.Steps[0].Samples[0].Key
	code, m, errs = runJSON(t, append(job, "--key", key)...)
	if code != 0 {
		t.Fatalf("--key: exit %d, %s", code, errs)
	}
	un, _ := json.Marshal(m["untraced_epochs"])
	// The key (index 4) is at order position 8 of epoch 0 (n1/0's step
	// 0) and 0 of epoch 1 (committed, no trail).
	if p := cluster.NewOrder(9, 1, 12, 1, 1).PositionOf(4); p != 0 {
		t.Fatalf("index 4 is at position %d of epoch 1; the test wants 0", p)
	}
	if string(un) != `[{"committed":12,"epoch":0,"untraced":8},{"committed":4,"epoch":1,"key_positions":[0],"untraced":4}]` {
		t.Errorf("--key: untraced_epochs %s, want epoch 0's 8 of 12 and epoch 1's 4 of 4, the key at epoch 1's position 0", un)
	}
	note, _ := m["note"].(string)
	for _, want := range []string{"epoch 0: 8 of its 12 committed positions have no trail", "epoch 1: 4 of its 4", "version 4", "committed at epoch 1 position 0, in a step with no trail"} {
		if !strings.Contains(note, want) {
			t.Errorf("--key: note %q does not say %q", note, want)
		}
	}
	if text := lineageText(t, append(job, "--key", key)...); !strings.Contains(text, "note: ") || !strings.Contains(text, "8 of its 12 committed positions have no trail") {
		t.Errorf("--key text does not name the untraced positions:\n%s", text)
	}

	// Steps that may be among the untraced positions: an error naming
	// the cause. n2/0's steps 0-1 of epoch 0 (its last commit says it
	// committed them); any step of epoch 1, which has no last commits.
	for _, q := range [][]string{
		{"--epoch", "0", "--rank", "n2/0", "--step", "1"},
		{"--epoch", "0", "--rank", "n2/0", "--steps", "0-5"},
		{"--epoch", "1", "--rank", "n1/0", "--step", "0"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), append(append([]string(nil), job...), q...), &out, &errb)
		if code != 1 || !strings.Contains(errb.String(), "committed positions have no trail") {
			t.Errorf("%v: exit %d, %q%s; want 1 and the untraced positions named", q, code, errb.String(), out.String())
		}
	}
	// Past a rank's last commit nothing is missing: n1/0 committed step 0
	// alone in epoch 0, and n3/0 nothing.
	if a := lineage(t, append(job, "--epoch", "0", "--rank", "n1/0", "--steps", "0-9")...); len(a.Steps) != 1 {
		t.Errorf("n1/0 steps 0-9 of epoch 0: %d steps, want its one", len(a.Steps))
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), append(append([]string(nil), job...), "--epoch", "0", "--rank", "n3/0", "--step", "0"), &out, &errb); code != 2 || !strings.Contains(errb.String(), "committed nothing") {
		t.Errorf("n3/0 of epoch 0: exit %d, %q; want 2, committed nothing", code, errb.String())
	}
}

// TestCheckpointSummarySaysCuts: the summary says, per epoch, how many
// trails say where their node cut its runs and how many do not (whose
// steps may be uncertain).
func TestCheckpointSummarySaysCuts(t *testing.T) {
	tr := func(rank string, seq uint64, start int64, told bool) cluster.Trail {
		return cluster.Trail{Rank: rank, Session: cluster.Fence{Incarnation: 1, Seq: seq}, Segs: []cluster.Range{{Start: start, End: start + 4}},
			Commits: []cluster.TrailCommit{{Step: 0, Offset: 4}}, CutsTold: told}
	}
	s := cluster.State{Incarnation: 1, Seq: 5, Samples: 40, Seed: 9, Block: 1, Window: 1, Epochs: []cluster.EpochState{{
		Committed: []cluster.Range{{Start: 0, End: 12}},
		Trails:    []cluster.Trail{tr("n1/0", 2, 0, true), tr("n1/1", 3, 4, true), tr("n2/0", 4, 8, false)},
	}}}
	dir := writeJournal(t, s)
	code, m, errs := runJSON(t, "--checkpoint", dir)
	if code != 0 {
		t.Fatalf("exit %d, %s", code, errs)
	}
	ep := m["epochs"].([]any)[0].(map[string]any)
	if ep["trails_with_cuts"] != 2.0 || ep["trails_without_cuts"] != 1.0 || ep["untraced"] != 0.0 {
		t.Errorf("epoch 0: %v; want trails_with_cuts 2, trails_without_cuts 1, untraced 0", ep)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--checkpoint", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, %s", code, errb.String())
	}
	if want := "3 rank session(s) committed steps: 2 said where their node cut its runs, 1 did not (its steps may be uncertain)"; !strings.Contains(out.String(), want) {
		t.Errorf("summary does not say %q:\n%s", want, out.String())
	}
}
