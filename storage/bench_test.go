package storage_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
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

// BenchmarkManifestMemory parses a 1,000,000-sample JSON-lines manifest
// — packed as longshore-pack writes it (4,000 tars of 250 samples,
// integer labels) and plain — and reports the heap the Dataset holds per
// sample after a GC: what every coordinator and node pays per sample of
// an ImageNet-21k-sized dataset. Run with -benchtime=1x.
func BenchmarkManifestMemory(b *testing.B) {
	const n, perTar, classes = 1_000_000, 250, 1000
	for _, packed := range []bool{true, false} {
		name := map[bool]string{true: "packed", false: "plain"}[packed]
		b.Run(name, func(b *testing.B) {
			var manifest bytes.Buffer
			for i := range n {
				label := i % classes
				key := fmt.Sprintf("train/n%08d/n%08d_%d.JPEG", label, label, i)
				if !packed {
					fmt.Fprintf(&manifest, "{\"key\":%q,\"label\":%d}\n", key, label)
					continue
				}
				object := fmt.Sprintf("shards/shard-%06d.tar", i/perTar)
				fmt.Fprintf(&manifest, "{\"key\":%q,\"label\":%d,\"object\":%q,\"offset\":%d,\"size\":%d}\n",
					object+"/"+key, label, object, 512+(i%perTar)*(110<<10), 100<<10+i%1000)
			}
			data := manifest.Bytes()
			b.ResetTimer()
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				ds, err := storage.ParseManifest(bytes.NewReader(data), storage.ManifestJSONL)
				if err != nil || len(ds.Samples) != n {
					b.Fatal(err)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				runtime.KeepAlive(ds)
				b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "heapB/sample")
			}
		})
	}
}
