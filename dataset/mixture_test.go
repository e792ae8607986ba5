package dataset_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// plainFixture puts n plain samples "c<i%2>/p<i>.jpg" in a MemStore and
// returns their catalog, store and bytes by key.
func plainFixture(t *testing.T, name string, n int) (dataset.Catalog, storage.Store, map[string][]byte) {
	t.Helper()
	s := storage.NewMemStore(name)
	ds := &dataset.Dataset{Classes: []string{"x", "y"}}
	want := map[string][]byte{}
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("c%d/p%03d.jpg", i%2, i)
		data := []byte(fmt.Sprintf("%s:%d", name, i))
		if _, err := s.Put(context.Background(), key, data, storage.Cond{}); err != nil {
			t.Fatal(err)
		}
		ds.Samples = append(ds.Samples, dataset.Sample{Key: key, Label: int32(i % 2)})
		want[key] = data
	}
	return dataset.DatasetCatalog(ds), s, want
}

// TestMixtureCatalog: one index space over a plain and a packed source:
// keys prefixed by the source's name, labels offset past the earlier
// sources' classes, and every sample read through the mixture's store by
// key and by index, from its own source.
func TestMixtureCatalog(t *testing.T) {
	ctx := context.Background()
	plainCat, plainStore, plainWant := plainFixture(t, "plain", 7)
	inner := storage.NewMemStore("packed")
	ds, packedWant := packFixture(t, inner, 1, 20, 6, 300)
	ps := packedStore(t, inner, ds, 4, 1<<20)
	c, err := dataset.NewMixtureCatalog([]dataset.MixtureSource{
		{Name: "a", Catalog: plainCat, Store: plainStore},
		{Name: "b", Catalog: dataset.DatasetCatalog(ds), Store: ps},
	}, "mixture/1 test")
	if err != nil {
		t.Fatal(err)
	}
	if c.Len() != 27 {
		t.Fatalf("Len %d, want 27", c.Len())
	}
	if got := strings.Join(c.Classes(), ","); got != "a/x,a/y,b/0,b/1,b/2" {
		t.Errorf("Classes %s", got)
	}
	if !dataset.InMemory(c) {
		t.Error("a mixture of catalogs in memory is not InMemory")
	}
	st, ok := c.Store().(storage.SampleStore)
	if !ok {
		t.Fatalf("the store of a mixture with a packed source is a %T, not a SampleStore", c.Store())
	}
	for i := int64(0); i < c.Len(); i++ {
		smp, object, err := c.Sample(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		name, key, _ := strings.Cut(smp.Key, "/")
		want, wantLabel := plainWant[key], int32(0)
		if name == "b" {
			want, wantLabel = packedWant[key], 2
			if !strings.HasPrefix(object, "b/shards/") {
				t.Errorf("sample %d: object %q", i, object)
			}
		}
		if (i < 7) != (name == "a") || want == nil {
			t.Fatalf("sample %d is %q: not of its source", i, smp.Key)
		}
		if smp.Label < wantLabel || smp.Label >= wantLabel+3 {
			t.Errorf("sample %d (%s): label %d not among its source's", i, smp.Key, smp.Label)
		}
		got, err := st.GetSample(ctx, i, smp.Key, nil)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("GetSample(%d, %s) = %q, %v; want %q", i, smp.Key, got, err, want)
		}
		if name == "a" {
			if got, err := st.Get(ctx, smp.Key, nil); err != nil || !bytes.Equal(got, want) {
				t.Errorf("Get(%s) = %q, %v", smp.Key, got, err)
			}
		}
	}
	if _, err := st.GetSample(ctx, 3, "b/c0/img0000.jpg", nil); !errors.Is(err, storage.ErrInvalidKey) {
		t.Errorf("GetSample of another source's key: %v, want ErrInvalidKey", err)
	}
	if _, err := st.Get(ctx, "nosuch/x", nil); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Get of no source: %v, want ErrNotFound", err)
	}
	var listed []string
	if err := st.List(ctx, "a/c1/", func(o storage.ObjectInfo) error { listed = append(listed, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(listed, ",") != "a/c1/p001.jpg,a/c1/p003.jpg,a/c1/p005.jpg" {
		t.Errorf("List(a/c1/) = %v", listed)
	}
	if s := st.String(); !strings.HasPrefix(s, "mixture(a=") || !strings.Contains(s, ", b=") {
		t.Errorf("String %q", s)
	}
}

// TestMixtureCatalogDigest: the digest counts every source's samples and
// changes with the mixture's identity (its weights), a source's digest
// or a source's name, so a resume under other weights is refused like
// one over another dataset of the same count.
func TestMixtureCatalogDigest(t *testing.T) {
	a, as, _ := plainFixture(t, "a", 5)
	b, bs, _ := plainFixture(t, "b", 9)
	b2, bs2, _ := plainFixture(t, "b2", 9) // other bytes, the same keys and labels: the same digest
	digest := func(ident string, srcs ...dataset.MixtureSource) string {
		c, err := dataset.NewMixtureCatalog(srcs, ident)
		if err != nil {
			t.Fatal(err)
		}
		return c.Digest()
	}
	base := digest("w=1/2,1/2", dataset.MixtureSource{Name: "a", Catalog: a, Store: as}, dataset.MixtureSource{Name: "b", Catalog: b, Store: bs})
	if !strings.HasPrefix(base, "14:") {
		t.Errorf("digest %q does not count 14 samples", base)
	}
	if got := digest("w=1/2,1/2", dataset.MixtureSource{Name: "a", Catalog: a, Store: as}, dataset.MixtureSource{Name: "b", Catalog: b2, Store: bs2}); got != base {
		t.Errorf("same sources, same identity: %q, want %q", got, base)
	}
	otherDS := &dataset.Dataset{Samples: []dataset.Sample{{Key: "z", Label: 1}, {Key: "y"}, {Key: "x"}, {Key: "w"}, {Key: "v"}}}
	for name, got := range map[string]string{
		"weights":       digest("w=7/10,3/10", dataset.MixtureSource{Name: "a", Catalog: a, Store: as}, dataset.MixtureSource{Name: "b", Catalog: b, Store: bs}),
		"source digest": digest("w=1/2,1/2", dataset.MixtureSource{Name: "a", Catalog: dataset.DatasetCatalog(otherDS), Store: as}, dataset.MixtureSource{Name: "b", Catalog: b, Store: bs}),
		"source name":   digest("w=1/2,1/2", dataset.MixtureSource{Name: "a2", Catalog: a, Store: as}, dataset.MixtureSource{Name: "b", Catalog: b, Store: bs}),
	} {
		if got == base || !strings.HasPrefix(got, "14:") {
			t.Errorf("another %s: digest %q (base %q)", name, got, base)
		}
	}
	for _, bad := range [][]dataset.MixtureSource{
		nil,
		{{Name: "a", Catalog: a, Store: as}, {Name: "a", Catalog: b, Store: bs}},
		{{Name: "a/b", Catalog: a, Store: as}},
	} {
		if _, err := dataset.NewMixtureCatalog(bad, ""); err == nil {
			t.Errorf("sources %v: no error", bad)
		}
	}
}

// TestMixtureDigestWithoutCatalogs: a coordinator's digest of a mixture,
// from each source's count and digest alone (MixtureDigest), is the
// catalog's; DigestFor is the digest under another identity.
func TestMixtureDigestWithoutCatalogs(t *testing.T) {
	a, as, _ := plainFixture(t, "a", 5)
	b, bs, _ := plainFixture(t, "b", 9)
	c, err := dataset.NewMixtureCatalog([]dataset.MixtureSource{{Name: "a", Catalog: a, Store: as}, {Name: "b", Catalog: b, Store: bs}}, "id-1")
	if err != nil {
		t.Fatal(err)
	}
	srcs := []dataset.MixtureDigestSource{{Name: "a", Samples: 5, Digest: a.Digest()}, {Name: "b", Samples: 9, Digest: b.Digest()}}
	if got := dataset.MixtureDigest("id-1", srcs); got != c.Digest() {
		t.Errorf("MixtureDigest %q, the catalog's %q", got, c.Digest())
	}
	if got, want := c.DigestFor("id-2"), dataset.MixtureDigest("id-2", srcs); got != want || got == c.Digest() {
		t.Errorf("DigestFor(id-2) %q, want %q (not the catalog's %q)", got, want, c.Digest())
	}
}

// TestSplitMixtureExclusions: a mixture's excluded keys go to their
// sources without the source's name; a key of no source is refused.
func TestSplitMixtureExclusions(t *testing.T) {
	got, err := dataset.SplitMixtureExclusions(dataset.Exclusions{"a/c0/x.jpg": "decode", "b/shards/s1.tar/y.jpg": "", "a/z.jpg": ""}, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "map[a:map[c0/x.jpg:decode z.jpg:] b:map[shards/s1.tar/y.jpg:] c:map[]]" {
		t.Errorf("split %v", got)
	}
	for _, bad := range []string{"d/x.jpg", "x.jpg", "a/"} {
		if _, err := dataset.SplitMixtureExclusions(dataset.Exclusions{bad: ""}, []string{"a", "b"}); err == nil || !strings.Contains(err.Error(), "names no source") {
			t.Errorf("%q: %v, want an error naming no source", bad, err)
		}
	}
}

// TestMixtureCatalogNoLabel: a sample without a label (NoLabel, as a
// Hugging Face test split's -1) stays without one in a mixture; only
// labels are offset past the earlier sources' classes.
func TestMixtureCatalogNoLabel(t *testing.T) {
	a, sa, _ := plainFixture(t, "a", 4)
	ds := &dataset.Dataset{Classes: []string{"z"}, Samples: []dataset.Sample{{Key: "u.jpg", Label: dataset.NoLabel}, {Key: "l.jpg", Label: 0}}}
	c, err := dataset.NewMixtureCatalog([]dataset.MixtureSource{
		{Name: "a", Catalog: a, Store: sa},
		{Name: "b", Catalog: dataset.DatasetCatalog(ds), Store: storage.NewMemStore("b")},
	}, "mixture/2 test")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int32{"b/u.jpg": dataset.NoLabel, "b/l.jpg": 2}
	for i := int64(4); i < c.Len(); i++ {
		smp, _, err := c.Sample(context.Background(), i)
		if err != nil {
			t.Fatal(err)
		}
		if smp.Label != want[smp.Key] {
			t.Errorf("%s: label %d, want %d", smp.Key, smp.Label, want[smp.Key])
		}
	}
}

// wrapped is a store wrapper, as a node's counting or limiting ones.
type wrapped struct{ storage.Store }

func (w wrapped) Unwrap() storage.Store { return w.Store }

// TestPackedStores: a packed dataset's store is its one packed store, a
// mixture's (under a wrapper too) its packed sources' in source order,
// and a plain store has none.
func TestPackedStores(t *testing.T) {
	newPacked := func(name string) *dataset.PackedStore {
		ps, err := dataset.NewPackedStore(storage.NewMemStore(name), &dataset.Dataset{}, dataset.PackedConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	a, b := newPacked("a"), newPacked("b")
	plainCat, plainStore, _ := plainFixture(t, "plain", 3)
	empty := dataset.DatasetCatalog(&dataset.Dataset{})
	cat, err := dataset.NewMixtureCatalog([]dataset.MixtureSource{
		{Name: "b", Catalog: empty, Store: b},
		{Name: "plain", Catalog: plainCat, Store: plainStore},
		{Name: "a", Catalog: empty, Store: wrapped{a}},
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	for _, tc := range []struct {
		name  string
		store storage.Store
		want  []*dataset.PackedStore
	}{
		{"plain", storage.NewMemStore("m"), nil},
		{"packed", a, []*dataset.PackedStore{a}},
		{"wrapped packed", storage.NewCountingStore(b), []*dataset.PackedStore{b}},
		{"mixture", cat.Store(), []*dataset.PackedStore{b, a}},
		{"wrapped mixture", wrapped{cat.Store()}, []*dataset.PackedStore{b, a}},
	} {
		got := dataset.PackedStores(tc.store)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %d packed stores, want %d", tc.name, len(got), len(tc.want))
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: packed store %d is %s, want %s", tc.name, i, got[i], tc.want[i])
			}
		}
	}
}
