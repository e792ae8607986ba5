package main

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cmd/internal/mixing"
)

// mixSets are class-sorted datasets (ImageFolder order): classes x
// samples per class.
var mixSets = []struct{ classes, per int }{{48, 64}, {100, 50}}

var mixSeeds = []uint64{1, 2, 3, 4}

const mixBatch = 32

// clusterMixing runs one epoch of cfg's job on a pure coordinator with
// ranks ranks (two nodes), the ranks asking for a batch more in turn as
// trainers pulling work would, and measures the batches each rank's
// stream (its leases in order, padding included) cuts into, labelled as
// a class-sorted dataset of per samples a class.
func clusterMixing(t *testing.T, cfg cluster.Config, ranks, per int) mixing.Stats {
	t.Helper()
	var all mixing.Stats
	for _, seed := range mixSeeds {
		cfg.Seed, cfg.Epochs = seed, 1
		c, err := cluster.NewCoordinator(cfg)
		if err != nil {
			t.Fatal(err)
		}
		session := map[string]cluster.Fence{}
		leases := map[string][]cluster.Lease{}
		var names []string
		collect := func() {
			rd := c.Ready()
			for _, w := range rd.Welcomes {
				for _, rs := range w.Ranks {
					session[rs.Rank] = rs.Session
				}
			}
			for _, l := range rd.Grants {
				leases[l.Rank] = append(leases[l.Rank], l)
			}
			c.Advance()
		}
		for n := range 2 {
			var rs []string
			for r := n; r < ranks; r += 2 {
				rs = append(rs, fmt.Sprintf("node%d/%d", n, r))
			}
			names = append(names, rs...)
			if err := c.Step(cluster.Join{Node: fmt.Sprintf("node%d", n), Incarnation: 1, Ranks: rs}); err != nil {
				t.Fatal(err)
			}
			collect()
		}
		quota := (cfg.Samples + int64(ranks) - 1) / int64(ranks)
		for through := int64(mixBatch); through < quota+mixBatch; through += mixBatch {
			for _, r := range names {
				if err := c.Step(cluster.Request{Rank: r, Session: session[r], Epoch: 0, Through: through}); err != nil {
					t.Fatal(err)
				}
				collect()
			}
		}
		o := cfg.Order(0)
		for _, r := range names {
			var labels []int32
			for _, l := range leases[r] {
				for p := l.Start; p < l.End; p++ {
					i, _ := o.Sample(p)
					labels = append(labels, int32(i/int64(per)))
				}
			}
			if int64(len(labels)) != quota {
				t.Fatalf("rank %s: stream of %d, want the quota %d", r, len(labels), quota)
			}
			all = all.Add(mixing.Stream(labels, mixBatch))
		}
	}
	return all
}

// TestClusterMixing: the job a coordinator runs by default (parseFlags,
// then shape for the dataset) mixes a class-sorted dataset, plain or
// packed, within 10% of a full shuffle's distinct classes per batch of
// 32, on every rank; the packed default before windows (block 256) did
// not. With -v it prints the figures.
func TestClusterMixing(t *testing.T) {
	o, err := parseFlags([]string{"--dataset", "d", "--listen", "127.0.0.1:1", "--gossip", "127.0.0.1:2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	for _, set := range mixSets {
		for _, packed := range []bool{false, true} {
			for _, ranks := range []int{1, 4} {
				cfg := o.cluster
				cfg.Samples = int64(set.classes * set.per)
				full := cfg
				full.Block, full.Window = 1, 1
				before := cfg
				before.Block, before.Window = 256, 1
				cfg.Block, cfg.Window, cfg.ShardSize = o.shape(packed, nil)
				f, b, a := clusterMixing(t, full, ranks, set.per), clusterMixing(t, before, ranks, set.per), clusterMixing(t, cfg, ranks, set.per)
				name := fmt.Sprintf("%dx%d packed=%v ranks=%d (block %d, window %d, shard %d)", set.classes, set.per, packed, ranks, cfg.Block, cfg.Window, cfg.ShardSize)
				if !a.Within(f, 0.1) || a.MaxCount() > 1.25*f.MaxCount() {
					t.Errorf("%s: %v, full shuffle %v: want within 10%% of its distinct classes", name, a, f)
				}
				if b.Within(f, 0.3) {
					t.Errorf("%s: block 256 without windows %v mixes like a full shuffle %v: is the check blind?", name, b, f)
				}
				fmt.Fprintf(&table, "\n%s: full %.1f (max %.1f), block 256 %.1f (max %.1f), default %.1f (max %.1f)",
					name, f.Distinct(), f.MaxCount(), b.Distinct(), b.MaxCount(), a.Distinct(), a.MaxCount())
			}
		}
	}
	t.Logf("distinct classes per batch of %d, every rank, %d seeds:%s", mixBatch, len(mixSeeds), table.String())
}
