package parquetcheck

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/jpeg"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/dataset/datasettest"
	"github.com/longshore/longshore/storage"
)

// hfMeta is the "huggingface" metadata Hugging Face's datasets library
// writes: the label a ClassLabel.
const hfMeta = `{"info": {"features": {"image": {"_type": "Image"}, "label": {"names": ["cat", "dog", "fox", "owl"], "_type": "ClassLabel"}}}}`

// row is what a test writes in a row.
type row struct {
	image   []byte
	path    string
	label   int64
	caption string
	tags    []string
	width   int32
	score   float64
}

// schema is the Arrow schema of the rows: the image as Hugging Face's
// struct {bytes, path} when hf, else plain binary.
func schema(hf bool) *arrow.Schema {
	img := arrow.Field{Name: "image", Type: arrow.BinaryTypes.Binary, Nullable: true}
	if hf {
		img.Type = arrow.StructOf(
			arrow.Field{Name: "bytes", Type: arrow.BinaryTypes.Binary, Nullable: true},
			arrow.Field{Name: "path", Type: arrow.BinaryTypes.String, Nullable: true})
	}
	return arrow.NewSchema([]arrow.Field{
		img,
		{Name: "label", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "caption", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
		{Name: "width", Type: arrow.PrimitiveTypes.Int32},
		{Name: "score", Type: arrow.PrimitiveTypes.Float64},
	}, nil)
}

// writeArrow writes rows as a Parquet file with Arrow's writer, row
// groups of perGroup rows.
func writeArrow(t *testing.T, rows []row, hf bool, perGroup int64, props ...parquet.WriterProperty) []byte {
	t.Helper()
	mem := memory.NewGoAllocator()
	sc := schema(hf)
	b := array.NewRecordBuilder(mem, sc)
	defer b.Release()
	for _, r := range rows {
		if hf {
			sb := b.Field(0).(*array.StructBuilder)
			sb.Append(true)
			sb.FieldBuilder(0).(*array.BinaryBuilder).Append(r.image)
			sb.FieldBuilder(1).(*array.StringBuilder).Append(r.path)
		} else {
			b.Field(0).(*array.BinaryBuilder).Append(r.image)
		}
		b.Field(1).(*array.Int64Builder).Append(r.label)
		b.Field(2).(*array.StringBuilder).Append(r.caption)
		lb := b.Field(3).(*array.ListBuilder)
		lb.Append(true)
		for _, tag := range r.tags {
			lb.ValueBuilder().(*array.StringBuilder).Append(tag)
		}
		b.Field(4).(*array.Int32Builder).Append(r.width)
		b.Field(5).(*array.Float64Builder).Append(r.score)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	var out bytes.Buffer
	wp := parquet.NewWriterProperties(append([]parquet.WriterProperty{parquet.WithMaxRowGroupLength(perGroup)}, props...)...)
	fw, err := pqarrow.NewFileWriter(sc, &out, wp, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if hf {
		if err := fw.AppendKeyValueMetadata("huggingface", hfMeta); err != nil {
			t.Fatal(err)
		}
	}
	if err := fw.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// direct is a row as Arrow's reader reads it back from a file.
type direct struct {
	image   []byte
	label   int64
	caption string
	tags    []string
	width   int64
	score   float64
}

// readArrow reads every row of a Parquet file with Arrow's reader: the
// direct read the dataset is checked against.
func readArrow(t *testing.T, data []byte, hf bool) []direct {
	t.Helper()
	tbl, err := pqarrow.ReadTable(context.Background(), bytes.NewReader(data), nil, pqarrow.ArrowReadProperties{}, memory.NewGoAllocator())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	tr := array.NewTableReader(tbl, 0)
	defer tr.Release()
	var out []direct
	for tr.Next() {
		rec := tr.RecordBatch()
		col := func(name string) arrow.Array {
			idx := rec.Schema().FieldIndices(name)
			if len(idx) != 1 {
				t.Fatalf("no column %s", name)
			}
			return rec.Column(idx[0])
		}
		imgs := col("image")
		for i := range int(rec.NumRows()) {
			var d direct
			if hf {
				d.image = slices.Clone(imgs.(*array.Struct).Field(0).(*array.Binary).Value(i))
			} else {
				d.image = slices.Clone(imgs.(*array.Binary).Value(i))
			}
			d.label = col("label").(*array.Int64).Value(i)
			d.caption = col("caption").(*array.String).Value(i)
			l := col("tags").(*array.List)
			lo, hi := l.ValueOffsets(i)
			for k := lo; k < hi; k++ {
				d.tags = append(d.tags, l.ListValues().(*array.String).Value(int(k)))
			}
			d.width = int64(col("width").(*array.Int32).Value(i))
			d.score = col("score").(*array.Float64).Value(i)
			out = append(out, d)
		}
	}
	if err := tr.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func pixels(t *testing.T, b []byte) *image.YCbCr {
	t.Helper()
	img, err := jpeg.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return img.(*image.YCbCr)
}

// TestArrowWrittenParquet: a dataset of several Parquet files under a
// prefix, written by Arrow's writer (several row groups each, dictionary
// pages, Snappy or Zstd or none), with the image as Hugging Face's
// {bytes, path} struct or as plain bytes, an integer label (-1 for
// none), a caption, a list of tags, an int32 and a double: every
// sample's pixels, label and fields, as longshore discovers and serves
// them, equal Arrow's own read of the file.
func TestArrowWrittenParquet(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		hf    bool
		props []parquet.WriterProperty
	}{
		{"HuggingFaceStructSnappy", true, []parquet.WriterProperty{parquet.WithCompression(compress.Codecs.Snappy)}},
		{"PlainBytesZstdNoDictionary", false, []parquet.WriterProperty{parquet.WithCompression(compress.Codecs.Zstd), parquet.WithDictionaryDefault(false)}},
		{"HuggingFaceStructSmallPagesV2", true, []parquet.WriterProperty{parquet.WithDataPageSize(512), parquet.WithDataPageVersion(parquet.DataPageV2), parquet.WithCompression(compress.Codecs.Gzip)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := storage.NewMemStore(t.Name())
			sizes := []int{11, 13, 7}
			var files []string
			var want []direct
			var keys []string
			i := 0
			for f, n := range sizes {
				var rows []row
				for range n {
					label := int64(i % 4)
					if i%9 == 4 {
						label = dataset.NoLabel // a test split's unlabelled sample
					}
					rows = append(rows, row{image: datasettest.JPEG(t, i), path: fmt.Sprintf("img/%05d.jpg", i), label: label,
						caption: fmt.Sprintf("caption of picture %d, ünïcode", i), tags: []string{"a", "b", "c", "d"}[:i%5],
						width: int32(100 + i), score: float64(i) / 3})
					i++
				}
				key := fmt.Sprintf("ds/data/train-%05d-of-%05d.parquet", f, len(sizes))
				data := writeArrow(t, rows, tc.hf, 4, tc.props...)
				if _, err := s.Put(ctx, key, data, storage.Cond{}); err != nil {
					t.Fatal(err)
				}
				files = append(files, key)
				got := readArrow(t, data, tc.hf)
				if len(got) != n {
					t.Fatalf("%s: Arrow reads %d rows back, wrote %d", key, len(got), n)
				}
				want = append(want, got...)
				for r := range n {
					keys = append(keys, fmt.Sprintf("ds/data/train-%05d-of-%05d.parquet/%d", f, len(sizes), r))
				}
			}
			// Something else under the prefix: not a file of the dataset.
			if _, err := s.Put(ctx, "ds/README.md", []byte("# card"), storage.Cond{}); err != nil {
				t.Fatal(err)
			}
			ds, err := dataset.Discover(ctx, s, dataset.DiscoverOptions{Root: "ds"})
			if err != nil {
				t.Fatal(err)
			}
			if len(ds.Samples) != len(want) || len(ds.Objects) != len(sizes) {
				t.Fatalf("%d samples in %d files, want %d in %d", len(ds.Samples), len(ds.Objects), len(want), len(sizes))
			}
			wantClasses := []string{"0", "1", "2", "3"}
			if tc.hf {
				wantClasses = []string{"cat", "dog", "fox", "owl"}
			}
			if !slices.Equal(ds.Classes, wantClasses) {
				t.Errorf("classes %q, want %q", ds.Classes, wantClasses)
			}
			if got, wantSchema := ds.Fields.Schema().String(), "caption:string,score:float,tags:list<string>,width:int"; got != wantSchema {
				t.Fatalf("fields %s, want %s", got, wantSchema)
			}
			groups := map[string]bool{}
			for _, smp := range ds.Samples {
				groups[fmt.Sprintf("%d@%d", smp.Object, smp.Offset)] = true
			}
			if len(groups) != 3+4+2 {
				t.Errorf("%d row groups, want 9 (files of 11, 13 and 7 rows in groups of 4)", len(groups))
			}
			ps, err := dataset.NewPackedStore(s, ds, dataset.PackedConfig{Block: 5, CacheBytes: 8 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer ps.Close()
			for i, smp := range ds.Samples {
				w := want[i]
				if smp.Key != keys[i] {
					t.Fatalf("sample %d: key %s, want %s", i, smp.Key, keys[i])
				}
				if int64(smp.Label) != w.label {
					t.Errorf("sample %d: label %d, Arrow reads %d", i, smp.Label, w.label)
				}
				got, err := ps.GetSample(ctx, int64(i), smp.Key, nil)
				if err != nil {
					t.Fatalf("sample %d: %v", i, err)
				}
				if !bytes.Equal(got, w.image) {
					t.Fatalf("sample %d: %d bytes differ from Arrow's read (%d bytes)", i, len(got), len(w.image))
				}
				a, b := pixels(t, got), pixels(t, w.image)
				if a.Rect != b.Rect || !bytes.Equal(a.Y, b.Y) || !bytes.Equal(a.Cb, b.Cb) || !bytes.Equal(a.Cr, b.Cr) {
					t.Fatalf("sample %d: pixels differ from Arrow's read", i)
				}
				get := func(n string) dataset.Value { v, _ := ds.Fields.Get(i, n); return v }
				if v := get("caption"); v.Str != w.caption {
					t.Errorf("sample %d: caption %q, Arrow reads %q", i, v.Str, w.caption)
				}
				if v := get("tags"); !slices.Equal(v.Strings, w.tags) {
					t.Errorf("sample %d: tags %q, Arrow reads %q", i, v.Strings, w.tags)
				}
				if v := get("width"); v.Int != w.width {
					t.Errorf("sample %d: width %d, Arrow reads %d", i, v.Int, w.width)
				}
				if v := get("score"); v.Float != w.score {
					t.Errorf("sample %d: score %v, Arrow reads %v", i, v.Float, w.score)
				}
			}
		})
	}
}
