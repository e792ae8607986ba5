package dataset_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// wdsShards writes shards WebDataset tars of per samples under root:
// sample i is i.jpg (its bytes), i.cls (i%3), i.json ({"w": i}) and,
// for odd i, i.txt. It returns every sample's image by key.
func wdsShards(t *testing.T, s storage.Store, root string, shards, per int) map[string][]byte {
	t.Helper()
	want := map[string][]byte{}
	for sh := range shards {
		var names []string
		var datas [][]byte
		key := fmt.Sprintf("%sshard-%03d.tar", root, sh)
		for k := range per {
			i := sh*per + k
			img := testJPEG(t, i)
			names = append(names, fmt.Sprintf("s%04d.jpg", i), fmt.Sprintf("s%04d.cls", i), fmt.Sprintf("s%04d.json", i))
			datas = append(datas, img, []byte(fmt.Sprint(i%3)), []byte(fmt.Sprintf(`{"w": %d}`, i)))
			if i%2 == 1 {
				names = append(names, fmt.Sprintf("s%04d.txt", i))
				datas = append(datas, []byte(fmt.Sprintf("a photo of %d", i)))
			}
			want[fmt.Sprintf("%s/s%04d.jpg", key, i)] = img
		}
		var b bytes.Buffer
		if _, err := dataset.WriteTarShard(&b, names, datas); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(context.Background(), key, b.Bytes(), storage.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// TestWebDatasetCompressed: .tar.gz shards are read in place too: a
// sample's range is its whole shard, one GET per block per shard,
// decompressed once per read; a root mixing .tar and .tar.gz is refused.
func TestWebDatasetCompressed(t *testing.T) {
	ctx := context.Background()
	plain := storage.NewMemStore("plain")
	want := wdsShards(t, plain, "", 3, 6)
	s := storage.NewMemStore(t.Name())
	sizes := map[string]int64{}
	for k := range 3 {
		key := fmt.Sprintf("shard-%03d.tar", k)
		b, err := plain.Get(ctx, key, nil)
		if err != nil {
			t.Fatal(err)
		}
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(b)
		zw.Close()
		fillData(t, s, key+".gz", z.String())
		sizes[key+".gz"] = int64(z.Len())
	}
	ds := discover(t, s, dataset.DiscoverOptions{})
	if len(ds.Samples) != 18 || ds.Unpacker == nil {
		t.Fatalf("%d samples, unpacker %v", len(ds.Samples), ds.Unpacker)
	}
	log := &rangeLog{Store: s}
	ps, err := dataset.NewPackedStore(log, ds, dataset.PackedConfig{Block: 4, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	for i, smp := range ds.Samples {
		shard := fmt.Sprintf("shard-%03d.tar", i/6)
		if smp.Key != fmt.Sprintf("%s.gz/s%04d.jpg", shard, i) || smp.Label != int32(i%3) || smp.Offset != 0 || smp.Size != sizes[shard+".gz"] {
			t.Errorf("sample %d: %+v", i, smp)
		}
		b, err := ps.GetSample(ctx, int64(i), smp.Key, nil)
		if err != nil || !bytes.Equal(b, want[fmt.Sprintf("%s/s%04d.jpg", shard, i)]) {
			t.Fatalf("sample %d: %d bytes, %v", i, len(b), err)
		}
		if w, _ := ds.Fields.Get(i, "json.w"); w.Int != int64(i) {
			t.Errorf("sample %d: json.w %v", i, w)
		}
	}
	// Blocks of 4 over shards of 6 touch 1, 2, 1, 2 and 1 shards: each
	// reads every shard it touches whole, at most 7 GETs of whole shards
	// (fewer when a shard's chunk still cached serves the next block).
	got := log.take()
	if len(got) < 3 || len(got) > 7 {
		t.Errorf("%d ranged GETs, want 3 to 7 (one per shard per block): %q", len(got), got)
	}
	for _, g := range got {
		key, rng, _ := strings.Cut(g, "@")
		if rng != fmt.Sprintf("0+%d", sizes[key]) {
			t.Errorf("GET %s: not the whole shard", g)
		}
	}
	fillData(t, s, "more.tar", "")
	if _, err := dataset.Discover(ctx, s, dataset.DiscoverOptions{}); !errors.Is(err, dataset.ErrBadTar) || !strings.Contains(err.Error(), "one or the other") {
		t.Errorf("a mix of .tar and .tar.gz: %v", err)
	}
}

// TestWebDatasetInPlace: a directory or prefix of WebDataset tars is a
// dataset as it is, no manifest written: every sample with its label and
// every member a field, its bytes served from its tar.
func TestWebDatasetInPlace(t *testing.T) {
	ctx := context.Background()
	for name, s := range freshStores(t) {
		t.Run(name, func(t *testing.T) {
			want := wdsShards(t, s, "wds/", 3, 5)
			ds := discover(t, s, dataset.DiscoverOptions{Root: "wds"})
			if len(ds.Samples) != 15 || len(ds.Objects) != 3 || !slices.Equal(ds.Classes, []string{"0", "1", "2"}) {
				t.Fatalf("%d samples in %d objects, classes %q", len(ds.Samples), len(ds.Objects), ds.Classes)
			}
			if got := ds.Fields.Schema().String(); got != "json.w:int,txt:string" {
				t.Errorf("fields %s", got)
			}
			ps, err := dataset.NewPackedStore(s, ds, dataset.PackedConfig{Block: 4, CacheBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer ps.Close()
			for i, smp := range ds.Samples {
				if smp.Key != fmt.Sprintf("wds/shard-%03d.tar/s%04d.jpg", i/5, i) || smp.Label != int32(i%3) || !smp.Packed() {
					t.Errorf("sample %d: %+v", i, smp)
				}
				b, err := ps.GetSample(ctx, int64(i), smp.Key, nil)
				if err != nil || !bytes.Equal(b, want[smp.Key]) {
					t.Errorf("sample %d: %d bytes, %v", i, len(b), err)
				}
				w, _ := ds.Fields.Get(i, "json.w")
				txt, _ := ds.Fields.Get(i, "txt")
				if w.Int != int64(i) || txt.Present() != (i%2 == 1) || (i%2 == 1 && txt.Str != fmt.Sprintf("a photo of %d", i)) {
					t.Errorf("sample %d: json.w %v, txt %v", i, w, txt)
				}
			}
			var keys []string
			s.List(ctx, "wds/", func(info storage.ObjectInfo) error { keys = append(keys, info.Key); return nil })
			if len(keys) != 3 {
				t.Errorf("discovery wrote beside the tars: %q", keys)
			}
			// Indexed (longshore-pack --index): the manifest is the dataset.
			fillData(t, s, "wds/manifest.jsonl", `{"key":"shard-000.tar/s0000.jpg","label":0}`+"\n")
			if ds := discover(t, s, dataset.DiscoverOptions{Root: "wds"}); len(ds.Samples) != 1 {
				t.Errorf("with a manifest beside the tars: %d samples, want the manifest's 1", len(ds.Samples))
			}
		})
	}
	s := storage.NewMemStore("bad")
	fillData(t, s, "a.tar", strings.Repeat("x", 1000))
	if _, err := dataset.Discover(ctx, s, dataset.DiscoverOptions{}); !errors.Is(err, dataset.ErrBadTar) {
		t.Errorf("a tar that is not one: %v, want ErrBadTar", err)
	}
}
