package dataset_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// TestNodeOpen: a node opens a packed dataset whole or, with an index
// and a manifest cache, lazily; either way a PackedStore over chunks
// sized for the node's windows, the lazy one given the order's block.
func TestNodeOpen(t *testing.T) {
	ctx := context.Background()
	mem := storage.NewMemStore(t.Name())
	ds, want := packFixture(t, mem, 11, 120, 16, 1000)
	var total int64
	for _, s := range ds.Samples {
		total += s.Size
	}
	mean := total / int64(len(ds.Samples))
	if got := dataset.PackedMean(ds, nil); got != mean {
		t.Fatalf("PackedMean: %d; want %d", got, mean)
	}
	disk := t.TempDir()
	c := dataset.NodeOpen{Raw: "mem://x", ManifestCache: 1 << 20, SpillDirs: []string{disk},
		Pack:  dataset.PackPlanConfig{CacheAuto: true, SpillAuto: true, Probe: fastDisk},
		Block: 8, Window: 4, SizeBlock: 100, SizeWindow: 100, Windows: 4000} // windows enough to spill
	if got := c.WindowBytes(1000); got != 1000*8*4*4000 {
		t.Errorf("WindowBytes with the order's block: %d", got)
	}
	before := c
	before.Block, before.Window = 0, 0
	if got := before.WindowBytes(1000); got != 1000*100*100*4000 {
		t.Errorf("WindowBytes before the job: %d", got)
	}
	check := func(name string, s storage.Store) *dataset.PackedStore {
		t.Helper()
		ps, ok := s.(*dataset.PackedStore)
		if !ok {
			t.Fatalf("%s: store %T, want a PackedStore", name, s)
		}
		if ps.Block() != c.Block || ps.Window() != c.Window {
			t.Errorf("%s: block %d window %d; want %d, %d", name, ps.Block(), ps.Window(), c.Block, c.Window)
		}
		for i, smp := range ds.Samples[:20] {
			b, err := ps.GetSample(ctx, int64(i), smp.Key, nil)
			if err != nil || !bytes.Equal(b, want[smp.Key]) {
				t.Fatalf("%s: sample %d: %d bytes, %v", name, i, len(b), err)
			}
		}
		return ps
	}

	// No index: the lazy path leaves the store to OpenNode.
	s, m, _, err := dataset.OpenLazy(ctx, mem, c)
	if err != nil || m != nil || s != storage.Store(mem) {
		t.Fatalf("OpenLazy without an index: %T, %v, %v; want the store as it was", s, m, err)
	}
	s, got, plan, err := dataset.OpenNode(ctx, mem, c)
	if err != nil || len(got.Samples) != len(ds.Samples) {
		t.Fatalf("OpenNode: %v", err)
	}
	if plan.SpillDir != disk || plan.CacheBytes == 0 || plan.Why == "" {
		t.Errorf("OpenNode's plan from afar: %+v; want chunks spilled to %s", plan, disk)
	}
	check("OpenNode", s)
	bad := c
	bad.Block, bad.Window = -1, 0
	if _, _, _, err := dataset.OpenNode(ctx, mem, bad); err == nil || !strings.HasPrefix(err.Error(), "dataset mem://x: ") {
		t.Errorf("OpenNode with a bad block: %v", err)
	}

	// With an index: the manifest piece by piece.
	if _, err := dataset.WriteManifestIndex(ctx, mem, dataset.ManifestJSONLName, 32, nil); err != nil {
		t.Fatal(err)
	}
	s, m, plan, err = dataset.OpenLazy(ctx, mem, c)
	if err != nil || m == nil {
		t.Fatalf("OpenLazy with an index: %v, %v", m, err)
	}
	if m.Len() != int64(len(ds.Samples)) || plan.SpillDir != disk {
		t.Errorf("OpenLazy: %d samples, plan %+v", m.Len(), plan)
	}
	check("OpenLazy", s)
	m.Close()

	// The whole manifest: no manifest cache, or exclusions.
	for name, cc := range map[string]dataset.NodeOpen{"no cache": {Raw: "x"},
		"exclusions": {Raw: "x", ManifestCache: 1 << 20, Discover: dataset.DiscoverOptions{Exclude: dataset.Exclusions{ds.Samples[0].Key: "bad"}}}} {
		if s, m, _, err := dataset.OpenLazy(ctx, mem, cc); err != nil || m != nil || s != storage.Store(mem) {
			t.Errorf("OpenLazy, %s: %v, %v; want the manifest left whole", name, m, err)
		}
	}
	// Two indexed manifests: which one is ambiguous.
	if _, err := mem.Put(ctx, dataset.ManifestCSVName, []byte("key,label\nc0/a.jpg,0\n"), storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dataset.WriteManifestIndex(ctx, mem, dataset.ManifestCSVName, 32, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := dataset.OpenLazy(ctx, mem, c); err == nil || !strings.Contains(err.Error(), "pick one with --manifest") {
		t.Errorf("OpenLazy with two indexes: %v", err)
	}
}
