package storage_test

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/longshore/longshore/dataset"
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
				ds, err := dataset.Discover(ctx, s, dataset.DiscoverOptions{Root: "train"})
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
				ds, err := dataset.ParseManifest(bytes.NewReader(data), dataset.ManifestJSONL)
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

// BenchmarkManifestPeak discovers a 2,000,000-sample manifest in a
// DirStore — CSV and JSON lines, integer labels and class names, at the
// store's root and below a directory (keys prefixed) — and reports, per
// sample: the heap allocated during Discover (allocB), the peak of the
// heap's objects (peakB, sampled every 100µs: what the process's memory
// high-water mark follows) and what the Dataset keeps after a GC
// (retainedB), with the peak over the retained (peak/retained). Run with
// -benchtime=1x.
func BenchmarkManifestPeak(b *testing.B) {
	const n, classes = 2_000_000, 1000
	for _, tc := range []struct {
		name, dir, file string
		names           bool
	}{
		{"csv/int", "", "manifest.csv", false},
		{"csv/names", "", "manifest.csv", true},
		{"jsonl/int", "", "manifest.jsonl", false},
		{"jsonl/names", "", "manifest.jsonl", true},
		{"csv/int/dir", "train", "manifest.csv", false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			d, err := storage.NewDirStore(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			data := bigManifest(n, classes, strings.HasSuffix(tc.file, ".jsonl"), tc.names)
			if _, err := d.Put(ctx, path.Join(tc.dir, tc.file), data, storage.Cond{}); err != nil {
				b.Fatal(err)
			}
			data = nil
			opts := dataset.DiscoverOptions{Root: tc.dir}
			for b.Loop() {
				m := measureHeap(func() any {
					ds, err := dataset.Discover(ctx, d, opts)
					if err != nil || len(ds.Samples) != n {
						b.Fatal(err)
					}
					return ds
				})
				b.ReportMetric(float64(m.allocated)/n, "allocB/sample")
				b.ReportMetric(float64(m.peak)/n, "peakB/sample")
				b.ReportMetric(float64(m.retained)/n, "retainedB/sample")
				b.ReportMetric(float64(m.peak)/float64(m.retained), "peak/retained")
			}
		})
	}
}

// bigManifest returns a manifest of n ImageNet-like samples: keys
// "train/n%08d/n%08d_%07d.JPEG", class i%classes, labelled by number or
// by class name.
func bigManifest(n, classes int, jsonl, names bool) []byte {
	var buf bytes.Buffer
	if !jsonl {
		buf.WriteString("key,label\n")
	}
	for i := range n {
		c := i % classes
		key := fmt.Sprintf("train/n%08d/n%08d_%07d.JPEG", c, c, i)
		label := strconv.Itoa(c)
		if names {
			label = fmt.Sprintf("n%08d", c)
			if jsonl {
				label = strconv.Quote(label)
			}
		}
		if jsonl {
			fmt.Fprintf(&buf, "{\"key\":%q,\"label\":%s}\n", key, label)
		} else {
			fmt.Fprintf(&buf, "%s,%s\n", key, label)
		}
	}
	return buf.Bytes()
}

type heapUse struct {
	allocated, peak, retained int64 // bytes, beyond the heap before
}

// measureHeap runs f and reports the heap it allocated, the peak of the
// heap's objects above the heap before (sampled every 100µs), and what
// f's result holds after a GC.
func measureHeap(f func() any) heapUse {
	samples := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	read := func() (allocs, objects int64) {
		metrics.Read(samples)
		return int64(samples[0].Value.Uint64()), int64(samples[1].Value.Uint64())
	}
	runtime.GC()
	allocs0, base := read()
	var peak atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		objects := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		tick := time.NewTicker(100 * time.Microsecond)
		defer tick.Stop()
		for {
			metrics.Read(objects)
			peak.Store(max(peak.Load(), int64(objects[0].Value.Uint64())))
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	result := f()
	close(stop)
	<-done
	allocs1, objects := read()
	use := heapUse{allocated: allocs1 - allocs0, peak: max(peak.Load(), objects) - base}
	runtime.GC()
	_, live := read()
	use.retained = live - base
	runtime.KeepAlive(result)
	return use
}

// BenchmarkPackedStoreMemory reports the heap a PackedStore adds per
// sample over a 1,000,000-sample packed dataset (its key lookup), and the
// time of a Get that misses the packed samples (the lookup alone). Run
// with -benchtime=1x for the memory figure.
func BenchmarkPackedStoreMemory(b *testing.B) {
	const n, perTar = 1_000_000, 250
	ds := &dataset.Dataset{Classes: []string{"0"}}
	var obj dataset.ObjectID
	for i := range n {
		if i%perTar == 0 {
			obj = ds.AddObject(fmt.Sprintf("shards/shard-%06d.tar", i/perTar))
		}
		ds.Samples = append(ds.Samples, dataset.Sample{
			Key:    fmt.Sprintf("shards/shard-%06d.tar/train/n%08d_%d.JPEG", i/perTar, i%1000, i),
			Object: obj, Offset: int64(512 + (i%perTar)*(110<<10)), Size: 100 << 10,
		})
	}
	inner := storage.NewMemStore("bench")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ps, err := dataset.NewPackedStore(inner, ds, dataset.DefaultPackedConfig())
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := ps.Get(ctx, "not/a/packed/key.jpg", nil); err == nil {
			b.Fatal("got a missing key")
		}
	}
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "storeB/sample")
	runtime.KeepAlive(ps)
}
