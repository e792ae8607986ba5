package dataset_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/dataset/datasettest"
	"github.com/longshore/longshore/storage"
)

// formatPair is the same images as Parquet files (Hugging Face's layout,
// Snappy) and as WebDataset tars indexed (the packed path), each
// discovered once, in memory stores.
type formatPair struct {
	images           [][]byte
	parquet, packed  *dataset.Dataset
	pqStore, tStore  storage.Store
	perShard, groups int
}

func makeFormatPair(tb testing.TB, n, perShard int, perGroup int64) *formatPair {
	tb.Helper()
	ctx := context.Background()
	fp := &formatPair{perShard: perShard, groups: int(perGroup)}
	for i := range n {
		fp.images = append(fp.images, datasettest.PhotoJPEG(tb, i))
	}
	pq := storage.NewMemStore("parquet")
	files, _ := datasettest.HFDataset(tb, fp.images, nil, perShard, perGroup, parquet.Compression(&parquet.Snappy))
	for _, f := range files {
		if _, err := pq.Put(ctx, f.Key, f.Data, storage.Cond{}); err != nil {
			tb.Fatal(err)
		}
	}
	tars := storage.NewMemStore("tars")
	for sh := 0; sh*perShard < n; sh++ {
		var names []string
		var datas [][]byte
		for i := sh * perShard; i < min((sh+1)*perShard, n); i++ {
			names = append(names, fmt.Sprintf("%06d.jpg", i), fmt.Sprintf("%06d.cls", i), fmt.Sprintf("%06d.txt", i))
			datas = append(datas, fp.images[i], []byte(strconv.Itoa(i%3)), []byte(fmt.Sprintf("a picture number %d", i)))
		}
		var t bytes.Buffer
		if _, err := dataset.WriteTarShard(&t, names, datas); err != nil {
			tb.Fatal(err)
		}
		if _, err := tars.Put(ctx, fmt.Sprintf("shard-%06d.tar", sh), t.Bytes(), storage.Cond{}); err != nil {
			tb.Fatal(err)
		}
	}
	var err error
	if fp.parquet, err = dataset.Discover(ctx, pq, dataset.DiscoverOptions{}); err != nil {
		tb.Fatal(err)
	}
	if fp.packed, _, err = dataset.IndexWebDataset(ctx, tars, "", dataset.DiscoverOptions{}); err != nil {
		tb.Fatal(err)
	}
	if len(fp.parquet.Samples) != n || len(fp.packed.Samples) != n {
		tb.Fatalf("%d Parquet and %d packed samples, want %d each", len(fp.parquet.Samples), len(fp.packed.Samples), n)
	}
	fp.pqStore, fp.tStore = pq, tars
	return fp
}

// readAll reads every sample of ds through a new PackedStore over s
// (blocks of block, a cache big enough for all), workers at once taking
// indices in order, each prefetching the chunk a block ahead as the
// pipeline does; it checks every sample's bytes against want.
func readAll(tb testing.TB, s storage.Store, ds *dataset.Dataset, block, workers int, want [][]byte) {
	ps, err := dataset.NewPackedStore(s, ds, dataset.PackedConfig{Block: block, Window: 4, CacheBytes: 256 << 20})
	if err != nil {
		tb.Fatal(err)
	}
	defer ps.Close()
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dst []byte
			for {
				i := next.Add(1) - 1
				if i >= int64(len(ds.Samples)) {
					return
				}
				ps.PrefetchSample(i + int64(block))
				dst, err = ps.GetSample(ctx, i, ds.Samples[i].Key, dst)
				if err != nil {
					errs <- fmt.Errorf("sample %d: %w", i, err)
					return
				}
				if len(dst) != len(want[i]) || dst[len(dst)/2] != want[i][len(dst)/2] {
					errs <- fmt.Errorf("sample %d: %d bytes, not the image written", i, len(dst))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}

// BenchmarkParquetVsPacked reads the same 1,024 photo-sized JPEGs
// (320x240, ~23 KB) from memory as Parquet (files of 256 rows, row
// groups of 16, Snappy: bench-formats' layout) and as indexed WebDataset
// tars (the packed path), through a PackedStore with blocks of 16, the
// two interleaved, and reports each one's wall and CPU time a sample and
// Parquet's samples/s as a fraction of the packed path's: the dataset
// layer's share of what make bench-formats measures, without the
// store's requests or the decoding of the images. On a loaded machine
// the CPU time (the process's, getrusage) is the steadier figure.
//
//	go test ./dataset -run '^$' -bench ParquetVsPacked
func BenchmarkParquetVsPacked(b *testing.B) {
	fp := makeFormatPair(b, 1024, 256, 16)
	workers := runtime.GOMAXPROCS(0)
	var wall, cpu [2]time.Duration // packed, Parquet
	b.ResetTimer()
	for range b.N {
		for k, read := range []func(){
			func() { readAll(b, fp.tStore, fp.packed, 16, workers, fp.images) },
			func() { readAll(b, fp.pqStore, fp.parquet, 16, workers, fp.images) },
		} {
			t0, c0 := time.Now(), processCPU()
			read()
			wall[k] += time.Since(t0)
			cpu[k] += processCPU() - c0
		}
	}
	n := float64(b.N * len(fp.images))
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / n }
	b.ReportMetric(per(wall[0]), "packed-ns/sample")
	b.ReportMetric(per(wall[1]), "parquet-ns/sample")
	b.ReportMetric(per(cpu[0]), "packed-cpu-ns/sample")
	b.ReportMetric(per(cpu[1]), "parquet-cpu-ns/sample")
	b.ReportMetric(per(wall[0])/per(wall[1]), "parquet/packed")
	b.Logf("%d samples x %d, %d workers: packed %.0f ns a sample (CPU %.0f), Parquet %.0f (CPU %.0f): Parquet at %.2f× the packed path's samples/s (%.2f× by CPU time)",
		len(fp.images), b.N, workers, per(wall[0]), per(cpu[0]), per(wall[1]), per(cpu[1]), per(wall[0])/per(wall[1]), per(cpu[0])/per(cpu[1]))
}

// processCPU is the CPU time the process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
