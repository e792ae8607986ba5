package dataset_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// noTars is a store that fails every read of a tar and, unless list,
// every listing: what a process that reads a WebDataset's manifest must
// not need.
type noTars struct {
	storage.Store
	list bool
}

func (n noTars) List(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	if n.list {
		return n.Store.List(ctx, prefix, fn)
	}
	return fmt.Errorf("list %q: the manifest should have been read instead", prefix)
}

func (n noTars) Get(ctx context.Context, key string, dst []byte) ([]byte, error) {
	if strings.Contains(key, ".tar") {
		return nil, fmt.Errorf("get %s: the manifest should have been read instead", key)
	}
	return n.Store.Get(ctx, key, dst)
}

func (n noTars) GetRange(ctx context.Context, key string, off, length int64, dst []byte) ([]byte, error) {
	if strings.Contains(key, ".tar") {
		return nil, fmt.Errorf("get range %s: the manifest should have been read instead", key)
	}
	return n.Store.GetRange(ctx, key, off, length, dst)
}

// denyPuts is a bucket the process may only read.
type denyPuts struct{ storage.Store }

func (denyPuts) Put(context.Context, string, []byte, storage.Cond) (string, error) {
	return "", fmt.Errorf("put: access denied")
}

// sameDataset fails unless b is a, sample for sample: keys, labels,
// where each lies, and every field.
func sameDataset(t *testing.T, what string, a, b *dataset.Dataset) {
	t.Helper()
	if da, db := dataset.ManifestDigest(a), dataset.ManifestDigest(b); da != db {
		t.Errorf("%s: digest %s, want %s", what, db, da)
	}
	if len(a.Samples) != len(b.Samples) {
		t.Fatalf("%s: %d samples, want %d", what, len(b.Samples), len(a.Samples))
	}
	if sa, sb := a.Fields.Schema().String(), b.Fields.Schema().String(); sa != sb {
		t.Errorf("%s: fields %s, want %s", what, sb, sa)
	}
	for i, s := range a.Samples {
		o := b.Samples[i]
		if s.Key != o.Key || s.Label != o.Label || s.Offset != o.Offset || s.Size != o.Size || a.ObjectOf(s) != b.ObjectOf(o) {
			t.Errorf("%s: sample %d is %+v in %s, want %+v in %s", what, i, o, b.ObjectOf(o), s, a.ObjectOf(s))
		}
		for _, f := range a.Fields.Schema() {
			va, _ := a.Fields.Get(i, f.Name)
			vb, _ := b.Fields.Get(i, f.Name)
			if fmt.Sprint(va) != fmt.Sprint(vb) {
				t.Errorf("%s: sample %d field %s: %v, want %v", what, i, f.Name, vb, va)
			}
		}
	}
}

// TestWebDatasetManifestOnFirstUse: WebDataset tars indexed in place get
// their manifest and index written by WriteFolderManifest, the same
// bytes longshore-pack --index writes, put only if absent; the next
// open reads them without listing or reading a tar, and finds the same
// dataset (digest, order, fields); a store that refuses writes leaves
// nothing behind; two writers racing write it once.
func TestWebDatasetManifestOnFirstUse(t *testing.T) {
	ctx := context.Background()
	opts := dataset.DefaultDiscoverOptions()
	for name, s := range freshStores(t) {
		t.Run(name, func(t *testing.T) {
			wdsShards(t, s, "", 3, 5)
			first := discover(t, s, opts)
			if first.Format != "webdataset" {
				t.Fatalf("format %q", first.Format)
			}
			if why := dataset.ManifestUnwritable(first, opts.Extensions); why != "" {
				t.Fatalf("the tars may not get a manifest: %s", why)
			}

			// A bucket the process may only read: an error, nothing there.
			if _, err := dataset.WriteFolderManifest(ctx, denyPuts{s}, first, dataset.FolderManifestOptions{}); err == nil {
				t.Errorf("a read-only store: no error")
			}
			for _, k := range []string{dataset.ManifestJSONLName, dataset.IndexKey(dataset.ManifestJSONLName)} {
				if _, err := s.Stat(ctx, k); !errors.Is(err, storage.ErrNotFound) {
					t.Errorf("a read-only store: %s: %v, want none", k, err)
				}
			}

			x, err := dataset.WriteFolderManifest(ctx, s, first, dataset.FolderManifestOptions{})
			if err != nil {
				t.Fatalf("WriteFolderManifest: %v", err)
			}
			if x.Samples != 15 || x.Digest != dataset.ManifestDigest(first) {
				t.Errorf("the index: %d samples digesting %s, want 15, %s", x.Samples, x.Digest, dataset.ManifestDigest(first))
			}
			// What longshore-pack --index writes: the manifest of
			// IndexWebDataset's dataset.
			indexed, _, err := dataset.IndexWebDataset(ctx, s, "", opts)
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			if err := dataset.WriteManifestJSONL(&want, indexed); err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, dataset.ManifestJSONLName, nil)
			if err != nil || !bytes.Equal(got, want.Bytes()) {
				t.Errorf("the manifest written (%v) differs from longshore-pack --index's:\n%s\nwant\n%s", err, got, want.Bytes())
			}

			// The next open, as the daemons make it: the index, then the
			// manifest's pieces; no LIST, no tar read.
			c := storage.NewCountingStore(noTars{Store: s})
			ps, m, _, err := dataset.OpenLazy(ctx, c, dataset.NodeOpen{Raw: name, Discover: opts, ManifestCache: 1 << 20, Block: 4, Window: 1})
			if err != nil || m == nil {
				t.Fatalf("OpenLazy: %v, indexed %v", err, m)
			}
			defer storage.Close(ps)
			if m.Digest() != dataset.ManifestDigest(first) || m.Len() != 15 {
				t.Errorf("the index: %d samples digesting %s, want 15, %s", m.Len(), m.Digest(), dataset.ManifestDigest(first))
			}
			for i, smp := range first.Samples {
				got, object, err := m.Sample(ctx, int64(i))
				if err != nil || got.Key != smp.Key || got.Label != smp.Label || got.Offset != smp.Offset || got.Size != smp.Size || object != first.ObjectOf(smp) {
					t.Errorf("sample %d through the index: %+v in %s (%v), want %+v in %s", i, got, object, err, smp, first.ObjectOf(smp))
				}
				fs, err := m.Fields(ctx, int64(i))
				if err != nil || fmt.Sprint(fs) != fmt.Sprint(first.Fields.Row(i)) {
					t.Errorf("sample %d's fields through the index: %v (%v), want %v", i, fs, err, first.Fields.Row(i))
				}
			}
			st := c.Stats()
			if n := st.Count(storage.OpList, storage.OutcomeOK) + st.Count(storage.OpListPrefixes, storage.OutcomeOK); n != 0 {
				t.Errorf("the lazy open listed %d times", n)
			}

			// Discover (a process that reads the manifest whole): the
			// manifest's dataset, no tar read; its one LIST is the format
			// detection's first page.
			c = storage.NewCountingStore(noTars{Store: s, list: true})
			again, err := dataset.Discover(ctx, c, opts)
			if err != nil {
				t.Fatalf("Discover with the manifest: %v", err)
			}
			if again.Format != "manifest-jsonl" {
				t.Errorf("read as %q, want the manifest", again.Format)
			}
			sameDataset(t, "read from the manifest", first, again)
			var lists int64
			for _, o := range []storage.Outcome{storage.OutcomeOK, storage.OutcomeCanceled, storage.OutcomeError} {
				lists += c.Stats().Count(storage.OpList, o)
			}
			if lists > 1 {
				t.Errorf("Discover listed %d times, want at most the detection's one page", lists)
			}

			// Once there it is not written again.
			if _, err := dataset.WriteFolderManifest(ctx, s, first, dataset.FolderManifestOptions{}); !errors.Is(err, storage.ErrPrecondition) {
				t.Errorf("a second write: %v, want ErrPrecondition", err)
			}
		})
	}

	t.Run("race", func(t *testing.T) {
		s := storage.NewMemStore("race")
		wdsShards(t, s, "", 2, 4)
		ds := discover(t, s, opts)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() { _, errs[i] = dataset.WriteFolderManifest(ctx, s, ds, dataset.FolderManifestOptions{}) })
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, storage.ErrPrecondition):
				t.Errorf("a racing writer: %v", err)
			}
		}
		if won != 1 {
			t.Errorf("%d writers won, want 1", won)
		}
		sameDataset(t, "after the race", ds, discover(t, noTars{Store: s, list: true}, opts))
	})
}

// TestWebDatasetManifestUnwritable: a manifest is written only for what
// a later open reads the same way whatever its --media: image samples
// (the default media) of uncompressed tars, or an ImageFolder; not for
// --media raw:json (a later image run would read the JSON samples), nor
// compressed shards (a manifest's sample is a byte range), nor Parquet.
func TestWebDatasetManifestUnwritable(t *testing.T) {
	s := storage.NewMemStore(t.Name())
	wdsShards(t, s, "", 2, 3)
	img := discover(t, s, dataset.DiscoverOptions{})
	for _, exts := range [][]string{nil, dataset.DefaultExtensions, {"JPG", ".jpeg", "png", ".WebP"}} {
		if why := dataset.ManifestUnwritable(img, exts); why != "" {
			t.Errorf("image samples, extensions %q: %s", exts, why)
		}
	}
	raw, err := dataset.MediaExtensions("raw:json")
	if err != nil {
		t.Fatal(err)
	}
	js := discover(t, s, dataset.DiscoverOptions{Extensions: raw})
	if why := dataset.ManifestUnwritable(js, raw); !strings.Contains(why, "--media") {
		t.Errorf("raw:json samples: %q, want a reason naming --media", why)
	}
	for _, media := range []string{"raw", "video", "raw:jpg"} {
		exts, _ := dataset.MediaExtensions(media)
		if why := dataset.ManifestUnwritable(img, exts); why == "" {
			t.Errorf("--media %s: writable", media)
		}
	}
	gzs, gz := gzipShards(t)
	if why := dataset.ManifestUnwritable(gz, nil); !strings.Contains(why, "compressed") {
		t.Errorf("compressed shards: %q", why)
	}
	if _, err := dataset.WriteFolderManifest(context.Background(), gzs, gz, dataset.FolderManifestOptions{}); err == nil {
		t.Errorf("compressed shards: a manifest written")
	}
	if _, err := gzs.Stat(context.Background(), dataset.ManifestJSONLName); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("compressed shards: %s: %v, want none", dataset.ManifestJSONLName, err)
	}
	for _, f := range []string{"imagefolder", ""} {
		if why := dataset.ManifestUnwritable(&dataset.Dataset{Format: f}, []string{".mp4"}); why != "" {
			t.Errorf("an ImageFolder (%q): %s", f, why)
		}
	}
	for _, f := range []string{"parquet", "manifest-jsonl", "manifest-csv"} {
		if why := dataset.ManifestUnwritable(&dataset.Dataset{Format: f}, nil); why == "" {
			t.Errorf("format %s: writable", f)
		}
	}
}

// gzipShards returns a store of compressed shards and its dataset.
func gzipShards(t *testing.T) (storage.Store, *dataset.Dataset) {
	t.Helper()
	ctx := context.Background()
	plain := storage.NewMemStore("plain")
	wdsShards(t, plain, "", 1, 2)
	b, err := plain.Get(ctx, "shard-000.tar", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := storage.NewMemStore("gz")
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(b)
	zw.Close()
	fillData(t, s, "shard-000.tar.gz", z.String())
	ds := discover(t, s, dataset.DiscoverOptions{})
	if ds.Unpacker == nil {
		t.Fatal("no unpacker for compressed shards")
	}
	return s, ds
}

// TestWebDatasetManifestSparseLabels: labels with gaps, and names that
// sort otherwise than their numbers ("11" before "5"), are the same
// integers read back from the manifest written for the tars.
func TestWebDatasetManifestSparseLabels(t *testing.T) {
	ctx := context.Background()
	s := storage.NewMemStore("m")
	var names []string
	var datas [][]byte
	for i, l := range []int{0, 5, 11, 2, 11, 0} {
		names = append(names, fmt.Sprintf("s%05d.jpg", i), fmt.Sprintf("s%05d.cls", i))
		datas = append(datas, []byte("x"), []byte(fmt.Sprint(l)))
	}
	var b bytes.Buffer
	dataset.WriteTarShard(&b, names, datas)
	s.Put(ctx, "a.tar", b.Bytes(), storage.Cond{})
	ds := discover(t, s, dataset.DiscoverOptions{})
	if _, err := dataset.WriteFolderManifest(ctx, s, ds, dataset.FolderManifestOptions{}); err != nil {
		t.Fatal(err)
	}
	again := discover(t, s, dataset.DiscoverOptions{})
	sameDataset(t, "labels", ds, again)
	if fmt.Sprint(ds.Classes) != fmt.Sprint(again.Classes) {
		t.Errorf("classes %q from the manifest, %q from the tars", again.Classes, ds.Classes)
	}
}
