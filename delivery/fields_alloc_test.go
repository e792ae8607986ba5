package delivery

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/feed"
	"github.com/longshore/longshore/storage"
)

// fieldsDataset is n samples with a field of every type (some absent),
// and ints that the index widens to floats in some pieces.
func fieldsDataset(t testing.TB, n int) *dataset.Dataset {
	t.Helper()
	ds := &dataset.Dataset{Classes: []string{"a", "b"}}
	b := dataset.NewFieldsBuilder()
	for i := range n {
		ds.Samples = append(ds.Samples, dataset.Sample{Key: fmt.Sprintf("a/%05d.jpg", i), Label: int32(i % 2)})
		if i%5 != 0 {
			b.Set("caption", dataset.StringValue(fmt.Sprintf("a caption of sample %d", i)))
		}
		b.Set("n", dataset.IntValue(int64(i)))
		if i%3 == 0 {
			b.Set("score", dataset.FloatValue(float64(i)/4))
		} else {
			b.Set("score", dataset.IntValue(int64(i)))
		}
		b.Set("blob", dataset.BytesValue([]byte{byte(i), byte(i >> 8), 7}))
		b.Set("tags", dataset.StringsValue([]string{"t", fmt.Sprint(i % 4)}))
		b.Set("box", dataset.IntsValue([]int64{int64(i), 2, 3, 4}))
		b.Set("emb", dataset.FloatsValue([]float64{0.5, float64(i)}))
		b.EndSample()
	}
	ds.Fields = b.Finish()
	return ds
}

// fieldCatalogs are ds served from memory and as an IndexedManifest
// (pieces of 64 samples, every piece loaded).
func fieldCatalogs(t testing.TB, ds *dataset.Dataset) map[string]dataset.Catalog {
	t.Helper()
	ctx := context.Background()
	var buf bytes.Buffer
	if err := dataset.WriteManifestJSONL(&buf, ds); err != nil {
		t.Fatal(err)
	}
	s := storage.NewMemStore("fields")
	if _, err := s.Put(ctx, "m.jsonl", buf.Bytes(), storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dataset.WriteManifestIndex(ctx, s, "m.jsonl", 64, nil); err != nil {
		t.Fatal(err)
	}
	m, err := dataset.OpenIndexedManifest(ctx, s, "m.jsonl", dataset.IndexedConfig{CacheBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	for i := range m.Len() { // load every piece
		if _, _, err := m.Sample(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	return map[string]dataset.Catalog{"memory": dataset.DatasetCatalog(ds), "indexed": m}
}

// rowsAt are n indices spread over the dataset, as a shuffled batch's are.
func rowsAt(n, of int) []int64 {
	idx := make([]int64, n)
	for r := range idx {
		idx[r] = int64((r*7919 + 13) % of)
	}
	return idx
}

// encodeBatchFields is what a session's writer does for each batch of
// a trainer that asked for fields: look them up and encode the frame.
func encodeBatchFields(ctx context.Context, w *batchFields, cat dataset.Catalog, schema dataset.Schema, indices []int64, buf []byte) ([]byte, error) {
	f, err := w.read(ctx, cat, schema, 1, indices)
	if err != nil {
		return buf, err
	}
	return feed.AppendFieldsFrame(buf[:0], f)
}

// A batch's fields cost the session's writer a few allocations, not a
// few per row.
func TestBatchFieldsAllocationsDoNotGrowWithRows(t *testing.T) {
	ctx := context.Background()
	ds := fieldsDataset(t, 1000)
	for name, cat := range fieldCatalogs(t, ds) {
		schema := dataset.CatalogSchema(cat)
		allocs := func(rows int) float64 {
			idx := rowsAt(rows, len(ds.Samples))
			var buf []byte
			var w batchFields
			return testing.AllocsPerRun(20, func() {
				var err error
				if buf, err = encodeBatchFields(ctx, &w, cat, schema, idx, buf); err != nil {
					t.Fatal(err)
				}
			})
		}
		if small, big := allocs(8), allocs(256); big > small {
			t.Errorf("%s: %.0f allocations for a batch of 8 rows, %.0f for 256", name, small, big)
		}
	}
}

// rowsOnly hides a catalog's column read: the fields are looked up a
// row at a time, one catalog call and one []Value a row, as every batch
// was before the column read.
type rowsOnly struct{ dataset.FieldCatalog }

// BenchmarkBatchFields is the writer's cost of a batch's fields (look
// up and encode), allocations per batch reported: by column (what a
// session does) against by row, for a catalog in memory and an
// IndexedManifest with its pieces loaded, 256 rows of 7 fields.
func BenchmarkBatchFields(b *testing.B) {
	ctx := context.Background()
	ds := fieldsDataset(b, 4096)
	cats := fieldCatalogs(b, ds)
	for _, name := range []string{"memory", "indexed"} {
		cat := cats[name]
		schema := dataset.CatalogSchema(cat)
		idx := rowsAt(256, len(ds.Samples))
		for _, read := range []string{"columns", "rows"} {
			c := cat
			if read == "rows" {
				c = rowsOnly{cat.(dataset.FieldCatalog)}
			}
			b.Run(name+"/"+read, func(b *testing.B) {
				b.ReportAllocs()
				var buf []byte
				var w batchFields
				for b.Loop() {
					var err error
					if buf, err = encodeBatchFields(ctx, &w, c, schema, idx, buf); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
