package node

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// TestAdoptJobOrder: a packed store takes the job's block and window
// (which only the coordinator knows), once; other stores are left alone.
func TestAdoptJobOrder(t *testing.T) {
	ps, err := dataset.NewPackedStore(storage.NewMemStore("mem"), &dataset.Dataset{}, dataset.PackedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	j := Job{Block: 256, Window: 16}
	if !AdoptJobOrder(ps, j) || ps.Block() != 256 || ps.Window() != 16 {
		t.Errorf("first job: block %d, window %d; want the job's 256, 16, changed", ps.Block(), ps.Window())
	}
	if AdoptJobOrder(ps, j) {
		t.Error("the same job again: changed; want nothing to change")
	}
	if !AdoptJobOrder(ps, Job{Block: 64, Window: 1}) || ps.Block() != 64 || ps.Window() != 1 {
		t.Errorf("a new coordinator's job: block %d, window %d; want 64, 1", ps.Block(), ps.Window())
	}
	if AdoptJobOrder(storage.NewMemStore("plain"), j) {
		t.Error("a store that is not packed: changed")
	}
}

// TestAdoptJobOrderMixture: a mixture's store (dataset.MixtureCatalog)
// passes the job's block and window to every packed source's store, so
// that each reads chunks of its own order's blocks; its other sources
// are left alone.
func TestAdoptJobOrderMixture(t *testing.T) {
	var packed []*dataset.PackedStore
	var srcs []dataset.MixtureSource
	for _, name := range []string{"p", "f", "q"} {
		st := storage.Store(storage.NewMemStore(name))
		ds := &dataset.Dataset{Samples: []dataset.Sample{{Key: "k"}}}
		if name != "f" {
			ps, err := dataset.NewPackedStore(st, ds, dataset.PackedConfig{CacheBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			packed, st = append(packed, ps), ps
		}
		srcs = append(srcs, dataset.MixtureSource{Name: name, Catalog: dataset.DatasetCatalog(ds), Store: st})
	}
	cat, err := dataset.NewMixtureCatalog(srcs, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	j := Job{Block: 16, Window: 8}
	if !AdoptJobOrder(cat.Store(), j) {
		t.Error("a mixture with packed sources: nothing changed")
	}
	for i, ps := range packed {
		if ps.Block() != 16 || ps.Window() != 8 {
			t.Errorf("packed source %d: block %d, window %d; want the job's 16, 8", i, ps.Block(), ps.Window())
		}
	}
	if AdoptJobOrder(cat.Store(), j) {
		t.Error("the same job again: changed")
	}
}

// budgeted is a store with a request rate (as S3's), under a wrapper.
type budgeted struct {
	storage.Store
	got []float64
}

func (b *budgeted) SetRequestBudget(rps float64) { b.got = append(b.got, rps) }
func (b *budgeted) SetRequestCap(float64)        {}

// TestStoreBudget: each new share reaches the store once (resends do
// not), and is logged; a store with no request rate is warned about.
func TestStoreBudget(t *testing.T) {
	var logs bytes.Buffer
	inner := &budgeted{Store: storage.NewMemStore("s3-like")}
	b := NewStoreBudget(storage.NewCountingStore(inner), 50, slog.New(slog.NewTextHandler(&logs, nil)))
	for _, rps := range []float64{100, 100, 100, 40, 40, 0} {
		b.Apply(rps)
	}
	if want := []float64{100, 40, 0}; len(inner.got) != len(want) || inner.got[0] != 100 || inner.got[1] != 40 || inner.got[2] != 0 {
		t.Errorf("the store was given %v; want %v", inner.got, want)
	}
	if n := strings.Count(logs.String(), "store budget: the job's share for this node"); n != 3 || !strings.Contains(logs.String(), "own_cap=50") {
		t.Errorf("logs:\n%s\nwant the shares 100, 40 and 0 logged with the node's own cap", logs.String())
	}
	logs.Reset()
	plain := NewStoreBudget(storage.NewMemStore("dir"), 0, slog.New(slog.NewTextHandler(&logs, nil)))
	plain.Apply(10)
	plain.Apply(10)
	if n := strings.Count(logs.String(), "no request rate to limit"); n != 1 {
		t.Errorf("a store without a request rate: logs\n%s\nwant one warning", logs.String())
	}
}

// TestStoreBudgetMixture: a mixture's store passes the node's share on
// to its sources that have a request rate, split among them so that
// together they keep to the share (their weights: equal here); a source
// without one (a directory) gets none and is not warned about.
func TestStoreBudgetMixture(t *testing.T) {
	var logs bytes.Buffer
	a, b := &budgeted{Store: storage.NewMemStore("a")}, &budgeted{Store: storage.NewMemStore("b")}
	var srcs []dataset.MixtureSource
	for name, st := range map[string]storage.Store{"a": storage.NewCountingStore(a), "b": b, "dir": storage.NewMemStore("dir")} {
		ds := &dataset.Dataset{Samples: []dataset.Sample{{Key: "k"}}}
		srcs = append(srcs, dataset.MixtureSource{Name: name, Catalog: dataset.DatasetCatalog(ds), Store: st})
	}
	cat, err := dataset.NewMixtureCatalog(srcs, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	sb := NewStoreBudget(cat.Store(), 0, slog.New(slog.NewTextHandler(&logs, nil)))
	sb.Apply(100)
	sb.Apply(100)
	sb.Apply(0)
	for name, st := range map[string]*budgeted{"a": a, "b": b} {
		if len(st.got) != 2 || st.got[0] != 50 || st.got[1] != 0 {
			t.Errorf("source %s was given %v; want [50 0]: half the node's 100 requests/s, then none", name, st.got)
		}
	}
	if strings.Contains(logs.String(), "no request rate to limit") {
		t.Errorf("logs:\n%s\nwant no warning: two sources take the budget", logs.String())
	}
}

// TestStoreBudgetMixtureWeights: the sources' parts follow their
// BudgetWeight and add up to the node's share; a source of weight 0
// still gets a part above 0 (0 would lift its limit).
func TestStoreBudgetMixtureWeights(t *testing.T) {
	a, b, z := &budgeted{Store: storage.NewMemStore("a")}, &budgeted{Store: storage.NewMemStore("b")}, &budgeted{Store: storage.NewMemStore("z")}
	var srcs []dataset.MixtureSource
	for _, s := range []struct {
		name string
		st   *budgeted
		w    float64
	}{{"a", a, 0.75}, {"b", b, 0.25}, {"z", z, 0}} {
		ds := &dataset.Dataset{Samples: []dataset.Sample{{Key: "k"}}}
		srcs = append(srcs, dataset.MixtureSource{Name: s.name, Catalog: dataset.DatasetCatalog(ds), Store: s.st, BudgetWeight: s.w})
	}
	cat, err := dataset.NewMixtureCatalog(srcs, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	NewStoreBudget(cat.Store(), 0, nil).Apply(200)
	if len(a.got) != 1 || len(b.got) != 1 || len(z.got) != 1 || a.got[0] != 150 || b.got[0] != 50 || z.got[0] != 1 {
		t.Errorf("parts a %v, b %v, z %v; want 150, 50 and the least part, 1", a.got, b.got, z.got)
	}
}
