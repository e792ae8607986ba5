package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cmd/internal/mixing"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// mixSets are the class-sorted datasets the mixing checks use: classes x
// samples per class, in ImageFolder order (class by class); the last is
// about `make demo`'s (512 images, 10 classes).
var mixSets = []struct{ classes, per int }{{48, 64}, {100, 50}, {10, 51}}

// mixSeeds are the job seeds measured (fixed: the figures are
// deterministic).
var mixSeeds = []uint64{1, 2, 3, 4}

const mixBatch = 32

// classSorted is an ImageFolder-like dataset sorted by class: sample i
// has label i/per. packed puts the samples in tars of tar samples each
// (only the layout: the order does not read them).
func classSorted(classes, per int, packed bool, tar int) *dataset.Dataset {
	ds := &dataset.Dataset{}
	for c := range classes {
		ds.Classes = append(ds.Classes, fmt.Sprintf("c%03d", c))
	}
	for i := range classes * per {
		s := dataset.Sample{Key: fmt.Sprintf("c%03d/%05d.jpg", i/per, i), Label: int32(i / per)}
		if packed {
			obj := fmt.Sprintf("shards/shard-%06d.tar", i/tar)
			if i%tar == 0 {
				ds.AddObject(obj)
			}
			s.Key, s.Object, s.Offset, s.Size = obj+"/"+s.Key, dataset.ObjectID(len(ds.Objects)), int64(i%tar)*4096, 4096
		}
		ds.Samples = append(ds.Samples, s)
	}
	return ds
}

// feederMixing measures the batches of every rank of world that
// actors.Feeder serves over ds with order, for the seeds.
func feederMixing(t *testing.T, ds *dataset.Dataset, world int, order actors.OrderFunc) mixing.Stats {
	t.Helper()
	var all mixing.Stats
	for _, seed := range mixSeeds {
		for r := range world {
			f, err := actors.NewFeeder(ds, actors.Config{Seed: seed, Epochs: 1, BatchSize: mixBatch}, r, world, order)
			if err != nil {
				t.Fatal(err)
			}
			var labels []int32
			for {
				w := f.Next(1000)
				for _, it := range w.Items {
					labels = append(labels, it.Label)
				}
				if w.Last {
					break
				}
			}
			all = all.Add(mixing.Stream(labels, mixBatch))
		}
	}
	return all
}

func fixedOrder(block, window int) actors.OrderFunc {
	return func(seed uint64, epoch int, n int64) actors.Order {
		return cluster.NewOrder(seed, epoch, n, block, window)
	}
}

// TestStandaloneMixing: the order a standalone node uses by default
// (options.orderFunc, what standalone and serveFeed pass actors.Feeder)
// mixes a class-sorted dataset, plain or packed, within 10% of a full
// shuffle's distinct classes per batch of 32, for one rank and for two
// (which take alternate positions); the order before windows (block
// 256, the old standalone default) did not. With -v it prints the
// table in docs/packed-datasets.md.
func TestStandaloneMixing(t *testing.T) {
	o, err := parseFlags([]string{"--standalone", "--dataset", "x"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n| dataset | layout | full shuffle | before (block 256) | after (default: block %d, window %d) |\n|---|---|---|---|---|\n",
		o.orderBlock(true), o.window)
	for _, set := range mixSets {
		for _, packed := range []bool{false, true} {
			ds := classSorted(set.classes, set.per, packed, o.orderBlock(true))
			layout := "plain"
			if packed {
				layout = fmt.Sprintf("packed, tars of %d", o.orderBlock(true))
			}
			for _, world := range []int{1, 2} {
				full := feederMixing(t, ds, world, fixedOrder(1, 1))
				before := feederMixing(t, ds, world, fixedOrder(256, 1))
				after := feederMixing(t, ds, world, o.orderFunc(ds.Packed()))
				name := fmt.Sprintf("%dx%d %s, %d rank(s)", set.classes, set.per, layout, world)
				if !after.Within(full, 0.1) {
					t.Errorf("%s: default order %v, full shuffle %v: want within 10%% of its distinct classes", name, after, full)
				}
				// The most frequent class of a batch: a full shuffle's
				// about 3; allow a little more, not a block's worth.
				if after.MaxCount() > 1.25*full.MaxCount() {
					t.Errorf("%s: default order %v, full shuffle %v: the most frequent class is over-represented", name, after, full)
				}
				if before.Within(full, 0.3) {
					t.Errorf("%s: block 256 without windows %v mixes like a full shuffle %v: is the check blind?", name, before, full)
				}
				if world == 1 {
					fmt.Fprintf(&table, "| %d classes x %d | %s | %.1f (max %.1f) | %.1f (max %.1f) | %.1f (max %.1f) |\n", set.classes, set.per, layout,
						full.Distinct(), full.MaxCount(), before.Distinct(), before.MaxCount(), after.Distinct(), after.MaxCount())
				}
			}
		}
	}
	t.Logf("distinct classes per batch of %d (mean over %d seeds; max: the most frequent class's count):%s", mixBatch, len(mixSeeds), table.String())
}

// TestStandalonePackedWindowReads reads a class-sorted packed dataset in
// the default standalone order through the PackedStore as the pipeline
// does (each work item announced to Prefetch as it arrives, then read),
// for two ranks: every block of every tar is one ranged GET, nothing is
// read alone or evicted, and the chunks held stay within two windows'
// bytes (the window being read and the next one's first chunks).
func TestStandalonePackedWindowReads(t *testing.T) {
	o, err := parseFlags([]string{"--standalone", "--dataset", "x"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	const classes, per, size, ranks = 48, 64, 2000, 2
	block := o.orderBlock(true)
	mem := storage.NewMemStore(t.Name())
	ds := &dataset.Dataset{}
	for c := range classes {
		ds.Classes = append(ds.Classes, fmt.Sprintf("c%03d", c))
	}
	var maxSpan int64
	for first := 0; first < classes*per; first += block { // tars of a block
		obj := fmt.Sprintf("shards/shard-%06d.tar", first/block)
		id := ds.AddObject(obj)
		var names []string
		var datas [][]byte
		for i := first; i < first+block; i++ {
			names, datas = append(names, fmt.Sprintf("c%03d/%05d.jpg", i/per, i)), append(datas, bytes.Repeat([]byte{byte(i)}, size))
		}
		var buf bytes.Buffer
		members, err := dataset.WriteTarShard(&buf, names, datas)
		if err != nil {
			t.Fatal(err)
		}
		for k, m := range members {
			ds.Samples = append(ds.Samples, m.Sample(ds, id, int32((first+k)/per)))
		}
		maxSpan = max(maxSpan, members[len(members)-1].Offset+size-members[0].Offset)
		if _, err := mem.Put(context.Background(), obj, buf.Bytes(), storage.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	window := int64(o.window) * maxSpan
	ps, err := dataset.NewPackedStore(mem, ds, dataset.PackedConfig{Block: block, Window: o.window, CacheBytes: 2 * window})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	order := o.orderFunc(ds.Packed())
	var feeders []*actors.Feeder
	for r := range ranks {
		f, err := actors.NewFeeder(ds, actors.Config{Seed: 7, Epochs: 2, BatchSize: mixBatch}, r, ranks, order)
		if err != nil {
			t.Fatal(err)
		}
		feeders = append(feeders, f)
	}
	readAhead := actors.Config{BatchSize: mixBatch}.WithDefaults().ReadAhead
	var buf []byte
	for done := 0; done < ranks; {
		done = 0
		for _, f := range feeders { // the ranks take turns, a read-ahead at a time
			w := f.Next(readAhead)
			for _, it := range w.Items {
				ps.PrefetchSample(it.Index)
			}
			for _, it := range w.Items {
				if buf, err = ps.GetSample(context.Background(), it.Index, it.Key, buf); err != nil || len(buf) != size || buf[0] != byte(it.Index) {
					t.Fatalf("GetSample %d %s: %v", it.Index, it.Key, err)
				}
			}
			if w.Last {
				done++
			}
		}
	}
	st := ps.Stats()
	blocks := int64(2 * classes * per / block) // two epochs
	t.Logf("%d blocks of %d in tars of %d, windows of %d blocks (%d KiB): %d chunk reads, %d prefetched, peak %d KiB held (%.2f windows)",
		blocks, block, block, o.window, window>>10, st.Chunks, st.Prefetches, st.PeakBytes>>10, float64(st.PeakBytes)/float64(window))
	if st.Chunks != blocks || st.ReadAlone != 0 || st.Evictions != 0 || st.PeakBytes > 2*window {
		t.Errorf("stats %+v: want %d chunk reads (one per block and epoch), none alone, no evictions, at most %d bytes held", st, blocks, 2*window)
	}
}
