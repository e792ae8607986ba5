package cluster_test

import (
	"fmt"
	"testing"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/dataset"
)

// feederSteps runs the standalone pipeline's own source (actors.Feeder,
// over cluster.NewOrder as the node passes it) through epoch epoch and
// returns, per rank and step, the items it handed out, cut into batches
// by stream offset as the pipeline cuts them.
func feederSteps(t *testing.T, n int64, world, batch int, seed uint64, block, window, epoch int) map[[2]int64][]actors.Item {
	t.Helper()
	ds := &dataset.Dataset{}
	for i := int64(0); i < n; i++ {
		ds.Samples = append(ds.Samples, dataset.Sample{Key: fmt.Sprintf("k%d", i), Size: 1})
	}
	cfg := actors.DefaultConfig()
	cfg.Seed, cfg.BatchSize, cfg.Epochs, cfg.FirstEpoch = seed, batch, 1, epoch
	order := func(seed uint64, epoch int, n int64) actors.Order {
		return cluster.NewOrder(seed, epoch, n, block, window)
	}
	got := map[[2]int64][]actors.Item{}
	for r := 0; r < world; r++ {
		f, err := actors.NewFeeder(ds, cfg, r, world, order)
		if err != nil {
			t.Fatal(err)
		}
		for {
			w := f.Next(7) // runs cut anywhere: steps come from offsets
			if w.Epoch != epoch {
				t.Fatalf("feeder gave epoch %d, want %d", w.Epoch, epoch)
			}
			for _, it := range w.Items {
				k := [2]int64{int64(r), it.Pos / int64(batch)}
				got[k] = append(got[k], it)
			}
			if w.Last {
				break
			}
		}
	}
	return got
}

func TestLineageMatchesFeeder(t *testing.T) {
	for _, c := range []struct {
		n                    int64
		world, batch         int
		block, window, epoch int
	}{
		{n: 100, world: 1, batch: 8, block: 1, window: 1, epoch: 0},
		{n: 103, world: 3, batch: 5, block: 8, window: 4, epoch: 2},
		{n: 61, world: 4, batch: 4, block: 16, window: 1, epoch: 1},
		{n: 5, world: 8, batch: 2, block: 1, window: 1, epoch: 3}, // more ranks than samples: pads of pads
		{n: 1000, world: 2, batch: 32, block: 64, window: 8, epoch: 5},
	} {
		t.Run(fmt.Sprintf("n%d_w%d_b%d_block%d", c.n, c.world, c.batch, c.block), func(t *testing.T) {
			const seed = 42
			want := feederSteps(t, c.n, c.world, c.batch, seed, c.block, c.window, c.epoch)
			o := cluster.NewOrder(seed, c.epoch, c.n, c.block, c.window)
			l := cluster.Lineage{Samples: c.n, World: c.world, Batch: int64(c.batch)}
			steps := 0
			for r := 0; r < c.world; r++ {
				for s := int64(0); s < l.Steps(); s++ {
					got, err := l.Step(o, r, s)
					if err != nil {
						t.Fatal(err)
					}
					w := want[[2]int64{int64(r), s}]
					if len(got) != len(w) {
						t.Fatalf("rank %d step %d: %d samples, feeder gave %d", r, s, len(got), len(w))
					}
					for i := range got {
						if got[i].Index != w[i].Index || got[i].Offset != w[i].Pos || got[i].Pad != w[i].Pad || got[i].Slot != i {
							t.Fatalf("rank %d step %d slot %d: lineage %+v, feeder %+v", r, s, i, got[i], w[i])
						}
					}
					steps++
				}
				if _, err := l.Step(o, r, l.Steps()); err == nil {
					t.Fatalf("rank %d: step %d past the epoch answered", r, l.Steps())
				}
			}
			if steps != len(want) {
				t.Fatalf("lineage has %d steps, feeder %d", steps, len(want))
			}
			// The reverse: every delivery of every index is found, and
			// nothing else.
			seen := map[int64][]cluster.LineageHit{}
			for k, items := range want {
				for i, it := range items {
					seen[it.Index] = append(seen[it.Index], cluster.LineageHit{Rank: int(k[0]), Step: k[1], Slot: i, Offset: it.Pos, Pad: it.Pad})
				}
			}
			for idx := int64(0); idx < c.n; idx++ {
				hits, err := l.Find(o, idx)
				if err != nil {
					t.Fatal(err)
				}
				if len(hits) != len(seen[idx]) {
					t.Fatalf("index %d: found %v, feeder delivered it at %v", idx, hits, seen[idx])
				}
				for _, h := range hits {
					ok := false
					for _, s := range seen[idx] {
						ok = ok || s == h
					}
					if !ok {
						t.Fatalf("index %d: found at %+v, feeder delivered it at %v", idx, h, seen[idx])
					}
				}
			}
		})
	}
}

func TestLineageDropLast(t *testing.T) {
	l := cluster.Lineage{Samples: 103, World: 3, Batch: 5, DropLast: true} // 35 a rank: 7 whole steps
	if got := l.Steps(); got != 7 {
		t.Fatalf("Steps = %d, want 7", got)
	}
	l.Batch = 6 // 35 = 5*6 + 5: the short 6th batch dropped
	if got := l.Steps(); got != 5 {
		t.Fatalf("Steps = %d, want 5", got)
	}
	o := cluster.NewOrder(1, 0, 103, 1, 1)
	if _, err := l.Step(o, 0, 5); err == nil {
		t.Fatal("the dropped step answered")
	}
	for idx := int64(0); idx < 103; idx++ {
		hits, err := l.Find(o, idx)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hits {
			if h.Step >= 5 {
				t.Fatalf("index %d found in dropped step %d", idx, h.Step)
			}
		}
	}
}

func TestLineageRefuses(t *testing.T) {
	l := cluster.Lineage{Samples: 10, World: 2, Batch: 4}
	o := cluster.NewOrder(1, 0, 10, 1, 1)
	for _, c := range []struct {
		rank int
		step int64
	}{{-1, 0}, {2, 0}, {0, -1}, {0, 2}} {
		if _, err := l.Step(o, c.rank, c.step); err == nil {
			t.Errorf("rank %d step %d answered", c.rank, c.step)
		}
	}
	if _, err := l.Step(cluster.NewOrder(1, 0, 11, 1, 1), 0, 0); err == nil {
		t.Error("an order of another dataset answered")
	}
	if _, err := l.Find(o, 10); err == nil {
		t.Error("index past the dataset answered")
	}
}

// TestPositionOfInvertsAt: PositionOf is At's inverse for every position
// of orders with and without blocks, a short block anywhere, windows of
// several sizes, and the empty and one-sample epochs' edges.
func TestPositionOfInvertsAt(t *testing.T) {
	for _, c := range []struct {
		n             int64
		block, window int
	}{
		{1, 1, 1}, {2, 1, 1}, {1000, 1, 1}, {1000, 16, 1}, {1003, 16, 1}, {1003, 16, 4}, {1003, 16, 128},
		{97, 8, 3}, {5, 8, 2}, {4096, 64, 7}, {777, 1, 128},
	} {
		for epoch := 0; epoch < 3; epoch++ {
			o := cluster.NewOrder(uint64(epoch)*7+3, epoch, c.n, c.block, c.window)
			for pos := int64(0); pos < c.n; pos++ {
				if got := o.PositionOf(o.At(pos)); got != pos {
					t.Fatalf("n %d block %d window %d epoch %d: PositionOf(At(%d) = %d) = %d", c.n, c.block, c.window, epoch, pos, o.At(pos), got)
				}
			}
		}
	}
}

func BenchmarkPositionOf(b *testing.B) {
	o := cluster.NewOrder(1, 3, 1_281_167, 16, 128)
	for i := 0; i < b.N; i++ {
		o.PositionOf(int64(i) % 1_281_167)
	}
}
