package dataset_test

import (
	"context"
	"errors"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// FuzzParquet discovers arbitrary bytes as a Parquet dataset's file and
// reads every sample found: nothing may panic, discovery fails with
// ErrBadParquet or ErrEmptyDataset (the footer, the index, the label and
// field chunks are the store's bytes), every sample found lies inside
// the file, and a sample that cannot be decoded fails with ErrBadParquet.
func FuzzParquet(f *testing.F) {
	type row struct {
		Image   *hfImage `parquet:"image,optional"`
		Label   int64    `parquet:"label"`
		Caption string   `parquet:"caption"`
		Tags    []string `parquet:"tags,list"`
	}
	var rows []row
	for i := range 6 {
		p := "x.jpg"
		rows = append(rows, row{Image: &hfImage{Bytes: []byte{byte(i), 1, 2, 3}, Path: &p}, Label: int64(i % 2), Caption: "c", Tags: []string{"a", "b"}[:i%3]})
	}
	for _, opts := range [][]parquet.WriterOption{
		nil,
		{parquet.Compression(&parquet.Snappy), parquet.PageBufferSize(16)},
		{parquet.Compression(&parquet.Zstd), parquet.KeyValueMetadata("huggingface", hfMeta)},
	} {
		file := writeParquet(f, nil, "", rows, 4, opts...)
		f.Add(file)
		f.Add(file[:len(file)-20])
		f.Add(file[len(file)/2:])
	}
	f.Add([]byte("PAR1\x00\x00\x00\x00PAR1"))
	f.Fuzz(fuzzOne)
}

func fuzzOne(t *testing.T, data []byte) {
	{
		ctx := context.Background()
		s := storage.NewMemStore("fuzz")
		if _, err := s.Put(ctx, "f.parquet", data, storage.Cond{}); err != nil {
			t.Fatal(err)
		}
		ds, err := dataset.Discover(ctx, s, dataset.DiscoverOptions{})
		if err != nil {
			if !errors.Is(err, dataset.ErrBadParquet) && !errors.Is(err, dataset.ErrEmptyDataset) {
				t.Fatalf("Discover: %v wraps neither ErrBadParquet nor ErrEmptyDataset", err)
			}
			return
		}
		for _, smp := range ds.Samples {
			if smp.Offset < 0 || smp.Size <= 0 || smp.Offset+smp.Size > int64(len(data)) {
				t.Fatalf("sample %s: range [%d,+%d) outside the file's %d bytes", smp.Key, smp.Offset, smp.Size, len(data))
			}
		}
		ps, err := dataset.NewPackedStore(s, ds, dataset.PackedConfig{Block: 4, CacheBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer ps.Close()
		for i, smp := range ds.Samples {
			if _, err := ps.GetSample(ctx, int64(i), smp.Key, nil); err != nil && !errors.Is(err, dataset.ErrBadParquet) {
				t.Fatalf("sample %d: %v does not wrap ErrBadParquet", i, err)
			}
		}
	}
}
