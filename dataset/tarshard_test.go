package dataset_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// shardFiles are the names and contents of tarMembers' regular files:
// every header form WriteTarShard can produce (ustar, ustar's prefix
// field, PAX for long and non-ASCII names) and sizes around the 512-byte
// block, an empty member among them.
func shardFiles() ([]string, [][]byte) {
	var names []string
	var datas [][]byte
	for _, f := range tarMembers() {
		if f.typ == 0 {
			names, datas = append(names, f.name), append(datas, f.data)
		}
	}
	return names, datas
}

// checkShard checks that the members WriteTarShard returned are what
// IndexTar reads from the archive, seeking or not, and that each range
// holds the member's data.
func checkShard(t *testing.T, raw []byte, members []dataset.TarMember, names []string, datas [][]byte) {
	t.Helper()
	if len(members) != len(names) {
		t.Fatalf("%d members returned for %d written", len(members), len(names))
	}
	for i, m := range members {
		if m.Name != names[i] || m.Size != int64(len(datas[i])) || !bytes.Equal(raw[m.Offset:m.Offset+m.Size], datas[i]) {
			t.Errorf("member %d: %q [%d,+%d), wrote %q (%d bytes)", i, m.Name, m.Offset, m.Size, names[i], len(datas[i]))
		}
	}
	seeking, err := dataset.ReadTarIndex(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	streaming, err := dataset.ReadTarIndex(io.MultiReader(bytes.NewReader(raw))) // no Seek
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seeking, members) || !slices.Equal(streaming, members) {
		t.Errorf("IndexTar reads\n%v (seeking)\n%v (streaming)\nWriteTarShard returned\n%v", seeking, streaming, members)
	}
}

func TestWriteTarShard(t *testing.T) {
	names, datas := shardFiles()
	var buf bytes.Buffer
	members, err := dataset.WriteTarShard(&buf, names, datas)
	if err != nil {
		t.Fatal(err)
	}
	checkShard(t, buf.Bytes(), members, names, datas)

	// The headers: regular files, 0644, the epoch; long and non-ASCII
	// names through PAX records.
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	pax := 0
	for i := 0; ; i++ {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg || h.Mode != 0o644 || !h.ModTime.Equal(time.Unix(0, 0)) || h.Name != names[i] {
			t.Errorf("member %d: %+v", i, h)
		}
		if h.Format == tar.FormatPAX {
			pax++
		}
	}
	if pax < 2 {
		t.Errorf("%d PAX headers, want the long and the non-ASCII name's", pax)
	}

	// The same input gives the same bytes.
	var again bytes.Buffer
	if _, err := dataset.WriteTarShard(&again, names, datas); err != nil || !bytes.Equal(again.Bytes(), buf.Bytes()) {
		t.Errorf("a second write differs (%v)", err)
	}

	// No members: just the end of the archive.
	var empty bytes.Buffer
	if ms, err := dataset.WriteTarShard(&empty, nil, nil); err != nil || len(ms) != 0 || empty.Len() != 1024 {
		t.Errorf("no members: %v, %v, %d bytes", ms, err, empty.Len())
	}
}

// TestWriteTarShardRandom: random names (ustar, prefix field, PAX) and
// sizes, empty members included; the ranges returned are always those
// IndexTar reads.
func TestWriteTarShardRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 50 {
		n := rng.IntN(20)
		names := make([]string, n)
		datas := make([][]byte, n)
		for i := range n {
			var parts []string
			for range 1 + rng.IntN(6) {
				parts = append(parts, strings.Repeat(string(rune('a'+rng.IntN(26))), 1+rng.IntN(60)))
			}
			if rng.IntN(5) == 0 {
				parts = append(parts, "ümlaut")
			}
			names[i] = fmt.Sprintf("%s/%d.jpg", strings.Join(parts, "/"), i)
			sizes := []int{0, 1, 511, 512, 513, rng.IntN(5000)}
			datas[i] = make([]byte, sizes[rng.IntN(len(sizes))])
			for j := range datas[i] {
				datas[i][j] = byte(rng.Uint32())
			}
		}
		var buf bytes.Buffer
		members, err := dataset.WriteTarShard(&buf, names, datas)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		checkShard(t, buf.Bytes(), members, names, datas)
	}
}

type failingWriter struct{ left int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.left {
		n := w.left
		w.left = 0
		return n, errors.New("disk full")
	}
	w.left -= len(p)
	return len(p), nil
}

func TestWriteTarShardErrors(t *testing.T) {
	if _, err := dataset.WriteTarShard(io.Discard, []string{"a"}, nil); err == nil || !strings.Contains(err.Error(), "1 names for 0 members") {
		t.Errorf("names without data: %v", err)
	}
	if _, err := dataset.WriteTarShard(io.Discard, []string{"a\x00b"}, [][]byte{nil}); err == nil || !strings.Contains(err.Error(), `"a\x00b"`) {
		t.Errorf("a NUL in a name: %v", err)
	}
	names, datas := shardFiles()
	for _, left := range []int{0, 600, 5000} {
		if _, err := dataset.WriteTarShard(&failingWriter{left: left}, names, datas); err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Errorf("writer failing after %d bytes: %v", left, err)
		}
	}
}

func TestWriteManifestJSONL(t *testing.T) {
	objects := []string{"s.tar"}
	packed := dataset.TarMember{Name: "c/x.jpg", Offset: 512, Size: 3}.Sample(&dataset.Dataset{Objects: objects}, 1, 1)
	plain := dataset.Sample{Key: "b/<y>.jpg", Label: 0}
	for _, tc := range []struct {
		name    string
		classes []string
		want    string
	}{
		{"integers", []string{"0", "1"}, `{"key":"b/\u003cy\u003e.jpg","label":0}` + "\n" +
			`{"key":"s.tar/c/x.jpg","label":1,"object":"s.tar","offset":512,"size":3}` + "\n"},
		{"names", []string{"b", "c"}, `{"key":"b/\u003cy\u003e.jpg","label":"b"}` + "\n" +
			`{"key":"s.tar/c/x.jpg","label":"c","object":"s.tar","offset":512,"size":3}` + "\n"},
		{"not in order", []string{"1", "0"}, `{"key":"b/\u003cy\u003e.jpg","label":"1"}` + "\n" +
			`{"key":"s.tar/c/x.jpg","label":"0","object":"s.tar","offset":512,"size":3}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			samples := []dataset.Sample{plain, packed}
			if err := dataset.WriteManifestJSONL(&buf, &dataset.Dataset{Classes: tc.classes, Samples: samples, Objects: objects}); err != nil {
				t.Fatal(err)
			}
			if buf.String() != tc.want {
				t.Errorf("wrote\n%s\nwant\n%s", buf.String(), tc.want)
			}
			// Two calls append to one manifest.
			var parts bytes.Buffer
			dataset.WriteManifestJSONL(&parts, &dataset.Dataset{Classes: tc.classes, Samples: samples[:1]})
			dataset.WriteManifestJSONL(&parts, &dataset.Dataset{Classes: tc.classes, Samples: samples[1:], Objects: objects})
			if parts.String() != tc.want {
				t.Errorf("in two calls:\n%s", parts.String())
			}
			ds, err := dataset.ParseManifest(&buf, dataset.ManifestJSONL)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ds.Objects, objects) {
				t.Errorf("objects %q, wrote %q", ds.Objects, objects)
			}
			// Each sample comes back with its class's name (names are
			// sorted: "not in order" gets other label numbers).
			for i, got := range ds.Samples {
				want := samples[i]
				if ds.Classes[got.Label] != tc.classes[want.Label] {
					t.Errorf("sample %d: class %q, wrote %q", i, ds.Classes[got.Label], tc.classes[want.Label])
				}
				if got.Label = want.Label; got != want {
					t.Errorf("sample %d: parsed %+v, wrote %+v", i, got, want)
				}
			}
		})
	}

	for _, tc := range []struct {
		name    string
		classes []string
		objects []string
		sample  dataset.Sample
		msg     string
	}{
		{"label past the classes", []string{"0"}, nil, dataset.Sample{Key: "a", Label: 1}, "label 1 outside the 1 classes"},
		{"negative label", []string{"0"}, nil, dataset.Sample{Key: "a", Label: -1}, "label -1 outside"},
		{"key not UTF-8", []string{"0"}, nil, dataset.Sample{Key: "a\xff"}, "not valid UTF-8"},
		{"class not UTF-8", []string{"c\xff"}, nil, dataset.Sample{Key: "a"}, "not valid UTF-8"},
		{"object not UTF-8", []string{"0"}, []string{"s\xff.tar"}, dataset.Sample{Key: "a", Object: 1}, "not valid UTF-8"},
		{"object past the objects", []string{"0"}, []string{"s.tar"}, dataset.Sample{Key: "a", Object: 2}, "object ID 2 outside the 1 objects"},
		{"negative object", []string{"0"}, []string{"s.tar"}, dataset.Sample{Key: "a", Object: -1}, "object ID -1 outside"},
	} {
		var buf bytes.Buffer
		ds := &dataset.Dataset{Classes: tc.classes, Objects: tc.objects, Samples: []dataset.Sample{{Key: "ok", Label: 0}, tc.sample}}
		if err := dataset.WriteManifestJSONL(&buf, ds); err == nil || !strings.Contains(err.Error(), tc.msg) || buf.Len() != 0 {
			t.Errorf("%s: %v, %d bytes written; want %q and nothing written", tc.name, err, buf.Len(), tc.msg)
		}
	}
}

// packShards writes the samples into tar shards of perShard at
// shards/NNN.tar of s with WriteTarShard, and their manifest.jsonl with
// WriteManifestJSONL: a packed dataset made only with the package's
// writers. It returns the dataset as written.
func packShards(t *testing.T, s storage.Store, classes, names []string, labels []int32, datas [][]byte, perShard int) *dataset.Dataset {
	t.Helper()
	ctx := context.Background()
	ds := &dataset.Dataset{Classes: classes}
	for first := 0; first < len(names); first += perShard {
		last := min(first+perShard, len(names))
		object := fmt.Sprintf("shards/%03d.tar", first/perShard)
		id := ds.AddObject(object)
		var buf bytes.Buffer
		members, err := dataset.WriteTarShard(&buf, names[first:last], datas[first:last])
		if err != nil {
			t.Fatal(err)
		}
		for j, m := range members {
			ds.Samples = append(ds.Samples, m.Sample(ds, id, labels[first+j]))
		}
		if _, err := s.Put(ctx, object, buf.Bytes(), storage.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	var manifest bytes.Buffer
	if err := dataset.WriteManifestJSONL(&manifest, ds); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, dataset.ManifestJSONLName, manifest.Bytes(), storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestPackedRoundTrip: a dataset packed with WriteTarShard and
// WriteManifestJSONL (long PAX names, empty members, class names and
// integer labels) is discovered as written, and OpenDataset's
// PackedStore reads every sample back byte for byte.
func TestPackedRoundTrip(t *testing.T) {
	names, datas := shardFiles()
	for _, classes := range [][]string{{"cat", "dog", "ünï"}, {"0", "1", "2"}} {
		t.Run(classes[0], func(t *testing.T) {
			dir := t.TempDir()
			s, err := storage.NewDirStore(dir)
			if err != nil {
				t.Fatal(err)
			}
			labels := make([]int32, len(names))
			for i := range labels {
				labels[i] = int32(i % len(classes))
			}
			written := packShards(t, s, classes, names, labels, datas, 3)

			for _, block := range []int{0, 3, 256} {
				store, ds, err := dataset.Open(context.Background(), dirStore(t, dir), dir, dataset.DiscoverOptions{}, &dataset.PackedConfig{Block: block, CacheBytes: 1 << 20})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(ds.Classes, classes) || !slices.Equal(ds.Samples, written.Samples) || !slices.Equal(ds.Objects, written.Objects) {
					t.Fatalf("discovered %q %+v %q\nwrote %q %+v %q", ds.Classes, ds.Samples, ds.Objects, classes, written.Samples, written.Objects)
				}
				if _, ok := store.(*dataset.PackedStore); !ok {
					t.Fatalf("store %T, want a *dataset.PackedStore", store)
				}
				for i, smp := range ds.Samples {
					got, err := store.Get(context.Background(), smp.Key, nil)
					if err != nil || !bytes.Equal(got, datas[i]) {
						t.Errorf("block %d: Get %s: %d bytes, %v; want the %d written", block, smp.Key, len(got), err, len(datas[i]))
					}
				}
				store.(io.Closer).Close()
			}
		})
	}
}

func TestOpenDataset(t *testing.T) {
	ctx := context.Background()
	plain := t.TempDir()
	for _, k := range []string{"cat/1.jpg", "dog/2.jpg"} {
		os.MkdirAll(filepath.Join(plain, filepath.Dir(k)), 0o755)
		os.WriteFile(filepath.Join(plain, k), []byte(k), 0o644)
	}
	packed := t.TempDir()
	ps, err := storage.NewDirStore(packed)
	if err != nil {
		t.Fatal(err)
	}
	packShards(t, ps, []string{"0"}, []string{"a.jpg", "b.jpg"}, []int32{0, 0}, [][]byte{[]byte("a"), []byte("b")}, 1)
	cfg := dataset.DefaultPackedConfig()

	for _, tc := range []struct {
		name    string
		dir     string
		packed  *dataset.PackedConfig
		wrapped bool
	}{
		{"plain", plain, &cfg, false},
		{"packed", packed, &cfg, true},
		{"packed, nil config", packed, nil, false},
	} {
		store, ds, err := dataset.Open(ctx, dirStore(t, tc.dir), tc.dir, dataset.DefaultDiscoverOptions(), tc.packed)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if _, ok := store.(*dataset.PackedStore); ok != tc.wrapped || len(ds.Samples) != 2 {
			t.Errorf("%s: store %T, %d samples; want wrapped %v, 2 samples", tc.name, store, len(ds.Samples), tc.wrapped)
		}
		if c, ok := store.(io.Closer); ok {
			c.Close()
		}
	}

	// A store whose directory is gone after it was opened.
	missing := filepath.Join(plain, "nope")
	gone := dirStore(t, missing)
	os.Remove(missing)
	for _, tc := range []struct {
		name   string
		dir    string
		packed *dataset.PackedConfig
		is     error
		msg    string
	}{
		{"missing", missing, nil, dataset.ErrEmptyDataset, "dataset " + missing + ": "},
		{"empty", t.TempDir(), &cfg, dataset.ErrEmptyDataset, "dataset "},
		// The config is checked first: no I/O for a run that cannot start.
		{"bad config", missing, &dataset.PackedConfig{CacheBytes: -1}, nil, "dataset " + missing + ": packed store: CacheBytes -1 is negative"},
	} {
		s := storage.Store(gone)
		if tc.dir != missing {
			s = dirStore(t, tc.dir)
		}
		store, ds, err := dataset.Open(ctx, s, tc.dir, dataset.DefaultDiscoverOptions(), tc.packed)
		if err == nil || store != nil || ds != nil || (tc.is != nil && !errors.Is(err, tc.is)) || !strings.HasPrefix(err.Error(), tc.msg) {
			t.Errorf("%s: %v, %v, %v; want an error starting %q (errors.Is %v)", tc.name, store, ds, err, tc.msg, tc.is)
		}
	}
}

// dirStore opens a DirStore on dir, creating it.
func dirStore(t *testing.T, dir string) *storage.DirStore {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := storage.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
