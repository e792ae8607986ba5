package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/longshore/longshore/feed"
)

// TestStandaloneMixturePerEpochCounts: a standalone node over a mixture of
// counts per epoch — all of a (12 samples) and 8 of b (20) — delivers
// epochs of 20, each with every sample of a once and 8 of b, b's
// samples once over the run (16 draws of its first epoch); a trainer's
// token resumes a restart over the same counts (spelled with the flags
// or, all as the size, in a file) at the exact stream it left, and a
// restart over another count (the same epoch length) refuses it as
// another dataset's unless --force-resume.
func TestStandaloneMixturePerEpochCounts(t *testing.T) {
	a, aKeys := makeDataset(t, 12)
	slices.Sort(aKeys)
	b, _ := makeDataset(t, 20)
	common := []string{"--epochs", "2", "--batch-size", "4", "--seed", "9", "--mixture-round", "4"}
	mix := func(spec string) []string { return append([]string{"--mixture", spec}, common...) }
	counts := "a=" + a + ":all/epoch,b=" + b + ":8/epoch"
	type batchKeys struct {
		epoch int
		step  int64
		keys  []string
	}
	take := func(r *feedNode, c *feed.Client, commitAt int) (got []batchKeys, tok []byte) {
		for i := 0; ; i++ {
			bt, err := c.Next(r.ctx)
			if err != nil {
				return got, tok
			}
			got = append(got, batchKeys{bt.Epoch, bt.Step, slices.Clone(bt.Keys)})
			if i == commitAt {
				if tok, err = c.Commit(r.ctx, bt.Epoch, bt.Step); err != nil {
					t.Fatal(err)
				}
			}
			bt.Release()
		}
	}
	r := startFeedNode(t, mix(counts)...)
	c, err := r.dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	full, tok := take(r, c, 2)
	r.drain(c)
	if len(full) != 10 {
		t.Fatalf("%d batches, want 10 (2 epochs of 20 in batches of 4)", len(full))
	}
	var bDrawn []string
	for e := 0; e < 2; e++ {
		var aDrawn []string
		for _, bk := range full[5*e : 5*e+5] {
			for _, k := range bk.keys {
				if rest, ok := strings.CutPrefix(k, "a/"); ok {
					aDrawn = append(aDrawn, rest)
				} else {
					bDrawn = append(bDrawn, strings.TrimPrefix(k, "b/"))
				}
			}
		}
		if got := slices.Sorted(slices.Values(aDrawn)); !slices.Equal(got, aKeys) {
			t.Errorf("epoch %d: a drawn %v, want each of its 12 once", e, got)
		}
		if len(bDrawn) != 8*(e+1) {
			t.Errorf("epoch %d: %d of b in the run so far, want %d", e, len(bDrawn), 8*(e+1))
		}
	}
	if got := slices.Compact(slices.Sorted(slices.Values(bDrawn))); len(got) != len(bDrawn) {
		t.Errorf("b drawn %v: a sample twice within its epoch", bDrawn)
	}

	r = startFeedNode(t, mix(counts)...)
	if c, err = r.dial(tok); err != nil {
		t.Fatalf("resume: %v", err)
	}
	rest, _ := take(r, c, -1)
	r.drain(c)
	if fmt.Sprint(rest) != fmt.Sprint(full[3:]) {
		t.Errorf("resumed after step 2:\n%v\nwant the first run's\n%v", rest, full[3:])
	}

	// The same counts in a file, all written as a's size: the same digest.
	file := filepath.Join(t.TempDir(), "mix.yaml")
	if err := os.WriteFile(file, []byte("sources:\n  - {name: a, dataset: "+a+", count: 12}\n  - {name: b, dataset: "+b+", count: 8}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = startFeedNode(t, mix(file)...)
	if c, err = r.dial(tok); err != nil {
		t.Fatalf("resume with the counts in a file: %v", err)
	}
	rest, _ = take(r, c, -1)
	r.drain(c)
	if fmt.Sprint(rest) != fmt.Sprint(full[3:]) {
		t.Errorf("resumed from the file after step 2:\n%v\nwant the first run's\n%v", rest, full[3:])
	}

	other := "a=" + a + ":8/epoch,b=" + b + ":12/epoch" // another mixture, epochs of 20 still
	r = startFeedNode(t, mix(other)...)
	if c, err := r.dial(tok); err == nil || !strings.Contains(err.Error(), "dataset digest") || !strings.Contains(err.Error(), "--force-resume") {
		t.Errorf("other counts: %v, want bad_token naming the dataset digest and --force-resume", err)
		if err == nil {
			c.Close()
		}
	}
	if c, err = r.dial(nil); err != nil {
		t.Fatal(err)
	}
	r.drain(c)

	r = startFeedNode(t, append(mix(other), "--force-resume")...)
	if c, err = r.dial(tok); err != nil {
		t.Fatalf("other counts, --force-resume: %v", err)
	}
	r.drain(c)
}
