package storage_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/longshore/longshore/storage"
)

// BenchmarkGet reads a 100 KiB object (an ImageNet-sized JPEG) into a
// reused buffer; allocs/op shows what the hot path costs beyond the bytes.
func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	data := bytes.Repeat([]byte{1}, 100<<10)
	d, err := storage.NewDirStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for name, s := range map[string]storage.Store{"mem": storage.NewMemStore("b"), "dir": d} {
		b.Run(name, func(b *testing.B) {
			if _, err := s.Put(ctx, "img.jpg", data, storage.Cond{}); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 0, len(data))
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if buf, err = s.Get(ctx, "img.jpg", buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDiscoverImageFolder lists 100 classes of 100 files.
func BenchmarkDiscoverImageFolder(b *testing.B) {
	ctx := context.Background()
	d, err := storage.NewDirStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for name, s := range map[string]storage.Store{"mem": storage.NewMemStore("b"), "dir": d} {
		b.Run(name, func(b *testing.B) {
			for c := range 100 {
				for i := range 100 {
					if _, err := s.Put(ctx, fmt.Sprintf("train/n%04d/%05d.JPEG", c, i), nil, storage.Cond{}); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ResetTimer()
			for b.Loop() {
				ds, err := storage.Discover(ctx, s, storage.DiscoverOptions{Root: "train"})
				if err != nil || len(ds.Samples) != 10000 {
					b.Fatal(len(ds.Samples), err)
				}
			}
		})
	}
}
