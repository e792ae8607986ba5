package dataset_test

import (
	"bytes"
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
