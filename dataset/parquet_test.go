package dataset_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/dataset/datasettest"
	"github.com/longshore/longshore/storage"
)

type (
	hfImage = datasettest.HFImage
	hfRow   = datasettest.HFRow
)

// binRow keeps its media in a plain binary column.
type binRow struct {
	ID   int32  `parquet:"id"`
	Data []byte `parquet:"data"`
	Tag  string `parquet:"tag"`
}

var testJPEG = datasettest.JPEG

const hfMeta = datasettest.HFMeta

// writeParquet writes rows to key of s (nil: nowhere) as a Parquet file
// of row groups of perGroup rows, and returns the file.
func writeParquet[T any](t testing.TB, s storage.Store, key string, rows []T, perGroup int64, opts ...parquet.WriterOption) []byte {
	t.Helper()
	b := datasettest.WriteParquet(t, rows, perGroup, opts...)
	if s != nil {
		if _, err := s.Put(context.Background(), key, b, storage.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// hfDataset writes files Parquet files of rows each, row groups of
// perGroup, in Hugging Face's layout under data/, and returns every
// row's image in dataset order.
func hfDataset(t testing.TB, s storage.Store, files, rows int, perGroup int64, opts ...parquet.WriterOption) (images [][]byte, all []hfRow) {
	t.Helper()
	for i := range files * rows {
		images = append(images, testJPEG(t, i))
	}
	written, all := datasettest.HFDataset(t, images, nil, rows, perGroup, opts...)
	for _, f := range written {
		if _, err := s.Put(context.Background(), f.Key, f.Data, storage.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	return images, all
}

// rangeLog records every ranged GET of a store.
type rangeLog struct {
	storage.Store
	mu     sync.Mutex
	ranges []string
}

func (r *rangeLog) GetRange(ctx context.Context, key string, off, n int64, dst []byte) ([]byte, error) {
	r.mu.Lock()
	r.ranges = append(r.ranges, fmt.Sprintf("%s@%d+%d", key, off, n))
	r.mu.Unlock()
	return r.Store.GetRange(ctx, key, off, n, dst)
}

func (r *rangeLog) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.ranges
	r.ranges = nil
	return out
}

func TestParquetDiscoverHuggingFaceLayout(t *testing.T) {
	for name, s := range freshStores(t) {
		t.Run(name, func(t *testing.T) {
			images, rows := hfDataset(t, s, 2, 23, 5, parquet.Compression(&parquet.Zstd))
			fillData(t, s, "README.md", "# a dataset card")
			log := &rangeLog{Store: s}
			ds := discover(t, log, dataset.DiscoverOptions{})
			if len(ds.Samples) != len(images) {
				t.Fatalf("%d samples, want %d", len(ds.Samples), len(images))
			}
			if want := []string{"cat", "dog", "fox"}; !slices.Equal(ds.Classes, want) {
				t.Errorf("Classes = %q, want %q (the ClassLabel's names)", ds.Classes, want)
			}
			if want := []string{"data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"}; !slices.Equal(ds.Objects, want) {
				t.Errorf("Objects = %q, want %q", ds.Objects, want)
			}
			for i, smp := range ds.Samples {
				wantKey := fmt.Sprintf("data/train-%05d-of-00002.parquet/%d", i/23, i%23)
				if smp.Key != wantKey || smp.Label != int32(rows[i].Label) || !smp.Packed() {
					t.Fatalf("sample %d = %+v, want key %s label %d, packed", i, smp, wantKey, rows[i].Label)
				}
			}
			// Discovery reads footers and labels: a GET for each file's
			// footer and one per row group for its labels (5 groups
			// of 5 rows per file), never the media.
			if got, want := len(log.take()), 2*(1+5); got != want {
				t.Errorf("discovery made %d ranged GETs, want %d (a footer and a label chunk per row group)", got, want)
			}
		})
	}
}

// TestParquetServe reads every sample of a Parquet dataset through a
// PackedStore: bytes equal to what was written, and one ranged GET per
// row group per block of the order.
func TestParquetServe(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		perGroup int64
		block    int
		opts     []parquet.WriterOption
	}{
		{"GroupsOfBlocks", 8, 4, nil},
		{"BlocksStraddleGroups", 5, 4, []parquet.WriterOption{parquet.Compression(&parquet.Snappy)}},
		{"SmallPages", 7, 7, []parquet.WriterOption{parquet.PageBufferSize(256), parquet.Compression(&parquet.Gzip)}},
		{"Uncompressed", 6, 16, []parquet.WriterOption{parquet.Compression(&parquet.Uncompressed)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := storage.NewMemStore(t.Name())
			images, _ := hfDataset(t, s, 2, 30, tc.perGroup, tc.opts...)
			ds := discover(t, s, dataset.DiscoverOptions{})
			log := &rangeLog{Store: s}
			ps, err := dataset.NewPackedStore(log, ds, dataset.PackedConfig{Block: tc.block, CacheBytes: 64 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer ps.Close()
			// Visit blocks in a shuffled order, rows backwards within
			// each: the order's blocks, not the file's order.
			nb := (len(ds.Samples) + tc.block - 1) / tc.block
			var want int
			for k := range nb {
				b := (k * 7) % nb
				lo, hi := b*tc.block, min((b+1)*tc.block, len(ds.Samples))
				groups := map[string]bool{}
				for i := hi - 1; i >= lo; i-- {
					smp := ds.Samples[i]
					got, err := ps.GetSample(ctx, int64(i), smp.Key, nil)
					if err != nil {
						t.Fatalf("sample %d: %v", i, err)
					}
					if !bytes.Equal(got, images[i]) {
						t.Fatalf("sample %d (%s): %d bytes differ from the image written (%d bytes)", i, smp.Key, len(got), len(images[i]))
					}
					groups[fmt.Sprintf("%d@%d", smp.Object, smp.Offset)] = true
				}
				want += len(groups)
			}
			got := log.take()
			if len(got) != want {
				t.Errorf("%d ranged GETs, want %d (one per row group per block): %q", len(got), want, got)
			}
			if _, err := ps.GetSample(ctx, 3, ds.Samples[4].Key, nil); !errors.Is(err, storage.ErrInvalidKey) {
				t.Errorf("GetSample of a key that is not the index's: %v, want ErrInvalidKey", err)
			}
			// By key, and alone (no cache): the same bytes.
			alone, err := dataset.NewPackedStore(s, ds, dataset.PackedConfig{})
			if err != nil {
				t.Fatal(err)
			}
			for _, i := range []int{0, 17, len(ds.Samples) - 1} {
				for _, st := range []storage.Store{ps, alone} {
					got, err := st.Get(ctx, ds.Samples[i].Key, nil)
					if err != nil || !bytes.Equal(got, images[i]) {
						t.Errorf("Get(%s) from %T: %d bytes, %v; want the image written", ds.Samples[i].Key, st, len(got), err)
					}
				}
			}
			if _, err := ps.GetSampleLimit(ctx, 1, ds.Samples[1].Key, 10, nil); !errors.Is(err, storage.ErrTooLarge) {
				t.Errorf("GetSampleLimit of 10 bytes: %v, want ErrTooLarge", err)
			}
		})
	}
}

func TestParquetBinaryColumnAndNames(t *testing.T) {
	ctx := context.Background()
	s := storage.NewMemStore(t.Name())
	var rows []binRow
	for i := range 12 {
		rows = append(rows, binRow{ID: int32(i), Data: testJPEG(t, i), Tag: "t"})
	}
	writeParquet(t, s, "part-0.parquet", rows, 4)
	ds := discover(t, s, dataset.DiscoverOptions{})
	if len(ds.Samples) != 12 || !slices.Equal(ds.Classes, []string{"0"}) {
		t.Fatalf("%d samples, classes %q; want 12 and [0] (no label column)", len(ds.Samples), ds.Classes)
	}
	ds2 := discover(t, s, dataset.DiscoverOptions{Format: "parquet", LabelColumn: "id", MediaColumn: "data"})
	if ds2.Samples[11].Label != 11 || len(ds2.Classes) != 12 {
		t.Errorf("--label-column id: sample 11 label %d, %d classes; want 11, 12", ds2.Samples[11].Label, len(ds2.Classes))
	}
	if dataset.ManifestDigest(ds) == dataset.ManifestDigest(ds2) {
		t.Error("another label column digests the same")
	}
	ps, err := dataset.NewPackedStore(s, ds2, dataset.PackedConfig{Block: 4, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for i, smp := range ds2.Samples {
		got, err := ps.GetSample(ctx, int64(i), smp.Key, nil)
		if err != nil || !bytes.Equal(got, rows[i].Data) {
			t.Fatalf("sample %d: %d bytes, %v", i, len(got), err)
		}
	}
}

func TestParquetErrors(t *testing.T) {
	type twoBlobs struct {
		A []byte `parquet:"a"`
		B []byte `parquet:"b"`
	}
	type noMedia struct {
		Text  string `parquet:"text"`
		Label string `parquet:"label"`
	}
	type strLabel struct {
		Data  []byte `parquet:"data"`
		Label string `parquet:"label"`
	}
	type floatLabel struct {
		Data  []byte  `parquet:"data"`
		Label float64 `parquet:"label"`
	}
	type negLabel struct {
		Data  []byte `parquet:"data"`
		Label int64  `parquet:"label"`
	}
	for _, tc := range []struct {
		name  string
		write func(s storage.Store)
		opts  dataset.DiscoverOptions
		want  error
		msg   string
	}{
		{"TwoMediaColumns", func(s storage.Store) {
			writeParquet(t, s, "x.parquet", []twoBlobs{{[]byte("a"), []byte("b")}}, 1)
		}, dataset.DiscoverOptions{}, dataset.ErrBadParquet, "name one"},
		{"NoMediaColumn", func(s storage.Store) {
			writeParquet(t, s, "x.parquet", []noMedia{{"a", "b"}}, 1)
		}, dataset.DiscoverOptions{}, dataset.ErrBadParquet, "no column holds binary media"},
		{"MediaColumnMissing", func(s storage.Store) {
			writeParquet(t, s, "x.parquet", []twoBlobs{{[]byte("a"), []byte("b")}}, 1)
		}, dataset.DiscoverOptions{MediaColumn: "c"}, dataset.ErrBadParquet, `no column "c"`},
		{"MediaColumnText", func(s storage.Store) {
			writeParquet(t, s, "x.parquet", []noMedia{{"a", "b"}}, 1)
		}, dataset.DiscoverOptions{MediaColumn: "text"}, dataset.ErrBadParquet, "cannot hold the media"},
		{"LabelFloat", func(s storage.Store) {
			writeParquet(t, s, "x.parquet", []floatLabel{{[]byte("a"), 1.5}}, 1)
		}, dataset.DiscoverOptions{LabelColumn: "label"}, dataset.ErrBadParquet, "neither integers nor text"},
		{"FieldNamedSize", func(s storage.Store) {
			type sized struct {
				Data []byte `parquet:"data"`
				Size int64  `parquet:"size"`
			}
			writeParquet(t, s, "x.parquet", []sized{{[]byte("a"), 1}}, 1)
		}, dataset.DiscoverOptions{}, dataset.ErrBadParquet, "reserved"},
		{"NegativeLabel", func(s storage.Store) {
			writeParquet(t, s, "x.parquet", []negLabel{{[]byte("a"), 0}, {[]byte("b"), -2}}, 1)
		}, dataset.DiscoverOptions{}, dataset.ErrBadParquet, "label -2"},
		{"SchemasDiffer", func(s storage.Store) {
			writeParquet(t, s, "a.parquet", []negLabel{{[]byte("a"), 0}}, 1)
			writeParquet(t, s, "b.parquet", []strLabel{{[]byte("a"), "x"}}, 1)
		}, dataset.DiscoverOptions{}, dataset.ErrBadParquet, "schema differs"},
		{"NotParquet", func(s storage.Store) {
			fillData(t, s, "x.parquet", strings.Repeat("not a parquet file", 10))
		}, dataset.DiscoverOptions{}, dataset.ErrBadParquet, "x.parquet"},
		{"Empty", func(s storage.Store) {
			writeParquet(t, s, "x.parquet", []negLabel{}, 1)
		}, dataset.DiscoverOptions{}, dataset.ErrEmptyDataset, "no rows"},
		{"NoFilesAsked", func(s storage.Store) { fill(t, s, "c/a.jpg") }, dataset.DiscoverOptions{Format: "parquet"}, dataset.ErrEmptyDataset, "no *.parquet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := storage.NewMemStore(t.Name())
			tc.write(s)
			_, err := dataset.Discover(context.Background(), s, tc.opts)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Discover: %v, want %v with %q", err, tc.want, tc.msg)
			}
		})
	}
	bad := dataset.DiscoverOptions{Format: "orc", Layout: dataset.LayoutImageFolder}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), `unknown Format "orc"`) {
		t.Errorf("Validate = %v", err)
	}
	bad = dataset.DiscoverOptions{Format: "imagefolder", MediaColumn: "image"}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "MediaColumn") {
		t.Errorf("Validate = %v", err)
	}
}

// TestParquetDigest: the digest covers the files' names, their rows and
// the column schema.
func TestParquetDigest(t *testing.T) {
	type extra struct {
		Data  []byte `parquet:"data"`
		Label int64  `parquet:"label"`
		More  int32  `parquet:"more"`
	}
	type plain struct {
		Data  []byte `parquet:"data"`
		Label int64  `parquet:"label"`
	}
	digest := func(write func(s storage.Store)) string {
		s := storage.NewMemStore("digest")
		write(s)
		return dataset.ManifestDigest(discover(t, s, dataset.DiscoverOptions{}))
	}
	rows := []plain{{[]byte("aa"), 0}, {[]byte("bb"), 1}, {[]byte("cc"), 0}}
	base := digest(func(s storage.Store) { writeParquet(t, s, "a.parquet", rows, 2) })
	if again := digest(func(s storage.Store) { writeParquet(t, s, "a.parquet", rows, 2) }); again != base {
		t.Errorf("the same file digests %s then %s", base, again)
	}
	for name, write := range map[string]func(s storage.Store){
		"Renamed":     func(s storage.Store) { writeParquet(t, s, "b.parquet", rows, 2) },
		"FewerRows":   func(s storage.Store) { writeParquet(t, s, "a.parquet", rows[:2], 2) },
		"OtherGroups": func(s storage.Store) { writeParquet(t, s, "a.parquet", rows, 1) },
		"ExtraColumn": func(s storage.Store) {
			writeParquet(t, s, "a.parquet", []extra{{[]byte("aa"), 0, 1}, {[]byte("bb"), 1, 1}, {[]byte("cc"), 0, 1}}, 2)
		},
		"Compression": func(s storage.Store) { writeParquet(t, s, "a.parquet", rows, 2, parquet.Compression(&parquet.Zstd)) },
		"SplitInFiles": func(s storage.Store) {
			writeParquet(t, s, "a.parquet", rows[:2], 2)
			writeParquet(t, s, "a2.parquet", rows[2:], 2)
		},
	} {
		if d := digest(write); d == base {
			t.Errorf("%s: digest %s unchanged", name, d)
		}
	}
}

// TestParquetFields: every other column is a field named as the column,
// equal to what was written; a text label column names the classes.
func TestParquetFields(t *testing.T) {
	s := storage.NewMemStore(t.Name())
	_, rows := hfDataset(t, s, 3, 7, 3)
	ds := discover(t, s, dataset.DiscoverOptions{})
	if got, want := ds.Fields.Schema().String(), "caption:string,score:float"; got != want {
		t.Fatalf("schema %s, want %s", got, want)
	}
	for i, r := range rows {
		c, _ := ds.Fields.Get(i, "caption")
		sc, _ := ds.Fields.Get(i, "score")
		if c.Str != r.Caption || sc.Float != r.Score {
			t.Fatalf("sample %d: caption %q score %v, want %q %v", i, c.Str, sc.Float, r.Caption, r.Score)
		}
	}

	type tagged struct {
		Data   []byte   `parquet:"data"`
		Label  string   `parquet:"label"`
		Tags   []string `parquet:"tags,list"`
		Nums   []int64  `parquet:"nums"`
		Flag   bool     `parquet:"flag"`
		Weight *float32 `parquet:"weight,optional"`
		Meta   struct {
			Source string `parquet:"source"`
			Width  int32  `parquet:"width"`
		} `parquet:"meta"`
	}
	w := float32(0.5)
	var ts []tagged
	for i := range 9 {
		r := tagged{Data: []byte{byte(i)}, Label: []string{"zebra", "ant", "cat"}[i%3], Flag: i%2 == 0}
		r.Tags = []string{"a", "b", "c"}[:i%4]
		r.Nums = []int64{int64(i), int64(-i)}[:i%3]
		if i%2 == 1 {
			r.Weight = &w
		}
		r.Meta.Source, r.Meta.Width = fmt.Sprintf("src%d", i), int32(10*i)
		ts = append(ts, r)
	}
	s = storage.NewMemStore(t.Name() + "2")
	writeParquet(t, s, "a.parquet", ts[:4], 2)
	writeParquet(t, s, "b.parquet", ts[4:], 3)
	ds = discover(t, s, dataset.DiscoverOptions{})
	if got, want := ds.Fields.Schema().String(), "flag:int,meta.source:string,meta.width:int,nums:list<int>,tags:list<string>,weight:float"; got != want {
		t.Fatalf("schema %s, want %s", got, want)
	}
	if want := []string{"ant", "cat", "zebra"}; !slices.Equal(ds.Classes, want) {
		t.Errorf("classes %q, want %q (the text labels, sorted)", ds.Classes, want)
	}
	for i, r := range ts {
		if ds.Classes[ds.Samples[i].Label] != r.Label {
			t.Errorf("sample %d: label %d, want %s", i, ds.Samples[i].Label, r.Label)
		}
		get := func(n string) dataset.Value { v, _ := ds.Fields.Get(i, n); return v }
		if v := get("tags"); strings.Join(v.Strings, ",") != strings.Join(r.Tags, ",") {
			t.Errorf("sample %d: tags %q, want %q", i, v.Strings, r.Tags)
		}
		if v := get("nums"); !slices.Equal(v.Ints, r.Nums) && !(len(v.Ints) == 0 && len(r.Nums) == 0) {
			t.Errorf("sample %d: nums %v, want %v", i, v.Ints, r.Nums)
		}
		if v := get("flag"); (v.Int == 1) != r.Flag {
			t.Errorf("sample %d: flag %v, want %v", i, v, r.Flag)
		}
		if v := get("weight"); v.Present() != (r.Weight != nil) || (r.Weight != nil && v.Float != 0.5) {
			t.Errorf("sample %d: weight %v, want %v", i, v, r.Weight)
		}
		if v := get("meta.source"); v.Str != r.Meta.Source {
			t.Errorf("sample %d: meta.source %v, want %s", i, v, r.Meta.Source)
		}
		if v := get("meta.width"); v.Int != int64(r.Meta.Width) {
			t.Errorf("sample %d: meta.width %v, want %d", i, v, r.Meta.Width)
		}
	}
}

// TestParquetNoLabel: Hugging Face's test splits mark a sample without
// a label -1 (and a null label is none either): such a sample is
// delivered with label -1, the classes are still the ClassLabel's names
// and the digest tells -1 from 0.
func TestParquetNoLabel(t *testing.T) {
	type optLabel struct {
		Image *hfImage `parquet:"image,optional"`
		Label *int64   `parquet:"label,optional"`
	}
	s := storage.NewMemStore(t.Name())
	labels := []int64{-1, 2, -1, 0, 99, 1}
	var rows []optLabel
	for i, l := range labels {
		r := optLabel{Image: &hfImage{Bytes: testJPEG(t, i)}}
		if l != 99 {
			r.Label = &labels[i]
		}
		rows = append(rows, r)
	}
	writeParquet(t, s, "data/test-00000-of-00001.parquet", rows, 4, parquet.KeyValueMetadata("huggingface", hfMeta))
	ds := discover(t, s, dataset.DiscoverOptions{})
	want := []int32{-1, 2, -1, 0, -1, 1} // 99: null
	for i, smp := range ds.Samples {
		if smp.Label != want[i] {
			t.Errorf("sample %d: label %d, want %d", i, smp.Label, want[i])
		}
	}
	if want := []string{"cat", "dog", "fox"}; !slices.Equal(ds.Classes, want) {
		t.Errorf("Classes = %q, want %q", ds.Classes, want)
	}
	zero := storage.NewMemStore(t.Name() + "0")
	for i := range rows {
		if rows[i].Label == nil || *rows[i].Label < 0 {
			var z int64
			rows[i].Label = &z
		}
	}
	writeParquet(t, zero, "data/test-00000-of-00001.parquet", rows, 4, parquet.KeyValueMetadata("huggingface", hfMeta))
	if dataset.ManifestDigest(ds) == dataset.ManifestDigest(discover(t, zero, dataset.DiscoverOptions{})) {
		t.Error("labels -1 digest as 0 does")
	}
	// Without class names, -1 adds no class.
	plain := storage.NewMemStore(t.Name() + "plain")
	writeParquet(t, plain, "a.parquet", []optLabel{{&hfImage{Bytes: []byte("x")}, &labels[0]}, {&hfImage{Bytes: []byte("y")}, &labels[3]}}, 4)
	if ds := discover(t, plain, dataset.DiscoverOptions{}); !slices.Equal(ds.Classes, []string{"0"}) || ds.Samples[0].Label != -1 {
		t.Errorf("classes %q, label %d; want [0] and -1", ds.Classes, ds.Samples[0].Label)
	}
}

var _ compress.Codec = &parquet.Snappy

// TestParquetServeHeapBytes pins what serving a Parquet dataset's
// samples costs in copies: a row group's media is decompressed into the
// library's pages and each row served from there (one copy, into the
// Get's buffer), the pages given back once the chunk is used up, so a
// second epoch allocates next to nothing on the Go heap. Copying every
// row into a slab of its own (grown as rows were appended) and dropping
// the pages to the collector allocated about four times the media's
// bytes an epoch, which the node's CPU profile of bench-formats showed
// as a fifth of its time. Null media, dictionary-encoded media and data
// pages v2 are served too, with the bytes written.
func TestParquetServeHeapBytes(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 5))
	const n, size = 96, 20 << 10
	images := make([][]byte, n)
	var total int64
	for i := range images {
		images[i] = make([]byte, size+i)
		for j := range images[i] {
			images[i][j] = byte(rng.Uint32())
		}
		total += int64(len(images[i]))
	}
	for _, tc := range []struct {
		name   string
		opts   []parquet.WriterOption
		bound  float64 // heap bytes allocated an epoch, per media byte
		images [][]byte
	}{
		{"Snappy", []parquet.WriterOption{parquet.Compression(&parquet.Snappy)}, 0.5, images},
		{"PagesV1Zstd", []parquet.WriterOption{parquet.Compression(&parquet.Zstd), parquet.DataPageVersion(1)}, 0.5, images},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := storage.NewMemStore(t.Name())
			files, _ := datasettest.HFDataset(t, tc.images, nil, 48, 16, tc.opts...)
			for _, f := range files {
				if _, err := s.Put(ctx, f.Key, f.Data, storage.Cond{}); err != nil {
					t.Fatal(err)
				}
			}
			ds := discover(t, s, dataset.DiscoverOptions{})
			dst := make([]byte, 0, 2*size)
			epoch := func() {
				ps, err := dataset.NewPackedStore(s, ds, dataset.PackedConfig{Block: 16, CacheBytes: 64 << 20})
				if err != nil {
					t.Fatal(err)
				}
				defer ps.Close()
				for i := range ds.Samples {
					got, err := ps.GetSample(ctx, int64(i), ds.Samples[i].Key, dst)
					if err != nil {
						t.Fatalf("sample %d: %v", i, err)
					}
					if !bytes.Equal(got, tc.images[i]) {
						t.Fatalf("sample %d: %d bytes differ from the %d written", i, len(got), len(tc.images[i]))
					}
				}
				if st := ps.Stats(); st.Chunks != int64(len(ds.Samples)/16) || st.ReadAlone != 0 {
					t.Fatalf("stats %+v, want a chunk per row group and nothing read alone", st)
				}
			}
			// No collection during the epochs: the library's page pools
			// keep what is given back, as they do between collections.
			defer debug.SetGCPercent(debug.SetGCPercent(-1))
			epoch() // the pools fill
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			epoch()
			runtime.ReadMemStats(&after)
			per := float64(after.TotalAlloc-before.TotalAlloc) / float64(total)
			t.Logf("an epoch of %d samples (%d media bytes) allocated %d heap bytes: %.3f a media byte", n, total, after.TotalAlloc-before.TotalAlloc, per)
			bound := tc.bound
			if raceEnabled {
				bound = 3 // pools drop a quarter of what is put back (1.0 to 1.4 seen)
			}
			if per > bound {
				t.Errorf("serving an epoch allocated %.2f heap bytes per media byte, want at most %.2f: rows are copied out of the library's pages, or the pages are not given back", per, bound)
			}
		})
	}
}

// TestParquetServeNullsAndDictionary: rows whose media is null (the
// struct, or its bytes) fail alone, an empty image is served empty, and
// a dictionary-encoded media column (values that repeat) is served with
// the bytes written, in data pages v1 and v2.
func TestParquetServeNullsAndDictionary(t *testing.T) {
	type dictRow struct {
		Data []byte `parquet:"data,dict"`
	}
	ctx := context.Background()
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			hfStore, dictStore := storage.NewMemStore(t.Name()+"hf"), storage.NewMemStore(t.Name()+"dict")
			var hf []hfRow
			var want [][]byte
			for i := range 20 {
				r := hfRow{Label: int64(i % 3)}
				switch i % 5 {
				case 1:
					// no image
				case 2:
					r.Image = &hfImage{} // an image without bytes
				case 3:
					r.Image = &hfImage{Bytes: []byte{}}
				default:
					r.Image = &hfImage{Bytes: testJPEG(t, i)}
				}
				hf = append(hf, r)
				if r.Image != nil && r.Image.Bytes != nil {
					want = append(want, r.Image.Bytes)
				} else {
					want = append(want, nil)
				}
			}
			opts := []parquet.WriterOption{parquet.DataPageVersion(version), parquet.Compression(&parquet.Snappy), parquet.PageBufferSize(512)}
			writeParquet(t, hfStore, "a.parquet", hf, 8, opts...)
			var dict []dictRow
			for i := range 20 {
				dict = append(dict, dictRow{Data: testJPEG(t, i%3)})
			}
			writeParquet(t, dictStore, "a.parquet", dict, 8, opts...)
			for prefix, s := range map[string]storage.Store{"hf/": hfStore, "dict/": dictStore} {
				want := want
				if prefix == "dict/" {
					want = [][]byte{testJPEG(t, 0), testJPEG(t, 1), testJPEG(t, 2)}
				}
				ds := discover(t, s, dataset.DiscoverOptions{})
				ps, err := dataset.NewPackedStore(s, ds, dataset.PackedConfig{Block: 4, CacheBytes: 1 << 20})
				if err != nil {
					t.Fatal(err)
				}
				for i := range ds.Samples {
					w := want[i%len(want)]
					got, err := ps.GetSample(ctx, int64(i), ds.Samples[i].Key, nil)
					switch {
					case w == nil && !errors.Is(err, dataset.ErrBadParquet):
						t.Errorf("%s sample %d (null media): %d bytes, %v; want ErrBadParquet", prefix, i, len(got), err)
					case w != nil && (err != nil || !bytes.Equal(got, w)):
						t.Errorf("%s sample %d: %d bytes, %v; want the %d bytes written", prefix, i, len(got), err, len(w))
					}
				}
				ps.Close()
			}
		})
	}
}

// TestParquetBigFooter: a footer bigger than discovery's first read of
// a file's end (thousands of row groups) costs one more ranged GET, and
// every row is served.
func TestParquetBigFooter(t *testing.T) {
	type onlyData struct {
		Data []byte `parquet:"data"`
	}
	ctx := context.Background()
	s := storage.NewMemStore(t.Name())
	var rows []onlyData
	for i := range 2000 {
		rows = append(rows, onlyData{Data: bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 100)})
	}
	b := writeParquet(t, s, "a.parquet", rows, 1)
	footer := int(b[len(b)-8]) | int(b[len(b)-7])<<8 | int(b[len(b)-6])<<16 | int(b[len(b)-5])<<24
	if footer <= 256<<10 {
		t.Fatalf("footer of %d bytes: the test wants one bigger than 256 KiB", footer)
	}
	log := &rangeLog{Store: s}
	ds := discover(t, log, dataset.DiscoverOptions{})
	if got := log.take(); len(got) != 2 {
		t.Errorf("discovery made %d ranged GETs (%q), want 2: the file's end, then its %d-byte footer", len(got), got, footer)
	}
	ps, err := dataset.NewPackedStore(s, ds, dataset.PackedConfig{Block: 16, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	for _, i := range []int{0, 1, 999, 1999} {
		got, err := ps.GetSample(ctx, int64(i), ds.Samples[i].Key, nil)
		if err != nil || !bytes.Equal(got, rows[i].Data) {
			t.Errorf("sample %d: %d bytes, %v; want the %d written", i, len(got), err, len(rows[i].Data))
		}
	}
}
