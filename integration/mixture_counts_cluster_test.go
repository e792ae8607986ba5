package integration

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/longshore/longshore/cluster"
)

// TestClusterMixtureCounts: the three sources (121, 40, 200) as counts
// per epoch — all of a, 60 of b (repeats), 43 of c (a sample): 224, 28
// whole rounds of 8 — on two 2-rank nodes, two epochs: each epoch's
// committed samples are exactly its positions' (the mixture's stream),
// with exactly 121, 60 and 43 of the sources, every sample of a once per
// epoch, b's once per its own epoch, c's 86 draws all different, and
// every committed batch (one round) within one of its quota.
func TestClusterMixtureCounts(t *testing.T) {
	spec, keys := mixFixture(t)
	parts := strings.Split(spec, ",")
	counts := []string{"all/epoch", "60/epoch", "43/epoch"}
	for s := range parts {
		parts[s] += ":" + counts[s]
	}
	spec = strings.Join(parts, ",")

	var srcs []core.MixSource
	for s, n := range mixSizes {
		srcs = append(srcs, core.MixSource{Name: string(rune('a' + s)), Samples: int64(n)})
	}
	m, err := core.NewMixture(core.MixSpec{Seed: 11, Block: 1, Window: core.EffectiveWindow(1, core.DefaultWindow),
		Round: mixBatch, Sources: srcs, Phases: []core.MixPhase{{Weights: counts}}})
	if err != nil {
		t.Fatal(err)
	}
	if m.Len() != 224 {
		t.Fatalf("an epoch of %d positions, want 224", m.Len())
	}
	const epochs = 2
	want := make([][]string, epochs)
	for e := range epochs {
		for p := range m.Len() {
			want[e] = append(want[e], keys[m.At(int64(e)*m.Len()+p)])
		}
	}

	j := job{epochs: epochs, batch: mixBatch, shard: 16, balance: "equal", commit: 2, stepTime: 20 * time.Millisecond,
		minRanks: 4, extraCoord: []string{"--mixture", spec}}
	c := startCluster(t, j)
	c.addNode("--mixture", spec)
	c.addNode("--mixture", spec)
	c.finish()
	h, err := readHistory(c.nodeLogs, filepath.Join(c.dir, "coord.acks"))
	if err != nil {
		t.Fatal(err)
	}
	perSource, batches := checkMixtureEpochs(t, h, want, func(k stepKey, n []int64, pads, size int) {
		if size != mixBatch || pads != 0 {
			t.Errorf("committed batch %v: %d samples, %d padding; want a round of %d, no padding (28 rounds on 4 ranks)", k, size, pads, mixBatch)
			return
		}
		for s, c := range n {
			q := float64(mixBatch) * float64(m.DrawsIn(0, []core.Range{{Start: 0, End: m.Len()}})[s]) / float64(m.Len())
			if d := float64(c) - q; d <= -1 || d >= 1 {
				t.Errorf("committed batch %v holds %v of the sources: %c's %d not within one of its quota %.2f", k, n, 'a'+s, c, q)
			}
		}
	})
	for e := range epochs {
		for s, wantN := range []int{121, 60, 43} {
			if n := len(perSource[fmt.Sprintf("%d/%c", e, 'a'+s)]); n != wantN {
				t.Errorf("epoch %d: %d of %c committed, want %d", e, n, 'a'+s, wantN)
			}
		}
		if a := slices.Compact(slices.Sorted(slices.Values(perSource[fmt.Sprintf("%d/a", e)]))); len(a) != 121 {
			t.Errorf("epoch %d: %d distinct samples of a, want all 121 once", e, len(a))
		}
	}
	// b: 120 draws over the two epochs, its epochs 0-2 of 40: each sample
	// 3 times; c: 86 draws of its first epoch of 200, all different.
	count := map[string]int{}
	var cs []string
	for e := range epochs {
		for _, k := range perSource[fmt.Sprintf("%d/b", e)] {
			count[k]++
		}
		cs = append(cs, perSource[fmt.Sprintf("%d/c", e)]...)
	}
	for k, n := range count {
		if n != 3 {
			t.Errorf("b's %s committed %d times in 3 of b's epochs, want 3", k, n)
		}
	}
	if len(count) != 40 {
		t.Errorf("%d distinct samples of b, want 40", len(count))
	}
	if u := slices.Compact(slices.Sorted(slices.Values(cs))); len(u) != len(cs) {
		t.Errorf("c: %d draws, %d distinct: a sample twice within its epoch", len(cs), len(u))
	}
	t.Logf("%d committed batches of %d", batches, mixBatch)
}
