package main

import (
	"context"
	"fmt"
	"hash/crc32"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// synthManifest is a Store holding one manifest of n samples whose bytes
// it makes on demand (nothing of that size is in memory or on disk), and
// its index: line i is "train/%09d.jpg,%03d\n", label i%1000, 24 bytes.
type synthManifest struct {
	storage.Store // unused methods: nil, they panic
	n             int64
	index         []byte
}

const (
	synthKey  = "manifest.csv"
	synthLine = 24
)

func synthAppend(b []byte, i int64) []byte {
	b = append(b, "train/"...)
	var d [9]byte
	v := i
	for k := 8; k >= 0; k-- {
		d[k] = byte('0' + v%10)
		v /= 10
	}
	b = append(b, d[:]...)
	b = append(b, ".jpg,"...)
	l := i % 1000
	return append(b, byte('0'+l/100), byte('0'+l/10%10), byte('0'+l%10), '\n')
}

// newSynthManifest makes the manifest's index as ScanManifest would
// (TestSynthIndex checks it does), computing the digest and every
// piece's checksum from bytes made on the fly.
func newSynthManifest(tb testing.TB, n int64, every int) *synthManifest {
	x := &dataset.ManifestIndex{Manifest: synthKey, Format: dataset.ManifestCSV, Samples: n, IntegerLabels: true, Every: every}
	x.Classes = make([]string, min(n, 1000))
	for i := range x.Classes {
		x.Classes[i] = strconv.Itoa(i)
	}
	tab := crc32.MakeTable(crc32.Castagnoli)
	var d dataset.Digester
	buf := make([]byte, 0, every*synthLine)
	for lo := int64(0); lo < n; lo += int64(every) {
		buf = buf[:0]
		for i := lo; i < min(lo+int64(every), n); i++ {
			start := len(buf)
			buf = synthAppend(buf, i)
			d.Add(dataset.Sample{Key: string(buf[start : start+19]), Label: int32(i % 1000)}, "")
		}
		x.Offsets = append(x.Offsets, lo*synthLine)
		x.Sums = append(x.Sums, crc32.Checksum(buf, tab))
	}
	x.Offsets = append(x.Offsets, n*synthLine)
	x.Digest = d.String()
	b, err := x.MarshalBinary()
	if err != nil {
		tb.Fatal(err)
	}
	return &synthManifest{n: n, index: b}
}

func (s *synthManifest) String() string { return fmt.Sprintf("synth://%d", s.n) }

func (s *synthManifest) Stat(_ context.Context, key string) (storage.ObjectInfo, error) {
	switch key {
	case synthKey:
		return storage.ObjectInfo{Key: key, Size: s.n * synthLine}, nil
	case dataset.IndexKey(synthKey):
		return storage.ObjectInfo{Key: key, Size: int64(len(s.index))}, nil
	}
	return storage.ObjectInfo{}, fmt.Errorf("stat %s: %w", key, storage.ErrNotFound)
}

func (s *synthManifest) Get(ctx context.Context, key string, dst []byte) ([]byte, error) {
	if key == dataset.IndexKey(synthKey) {
		return append(dst[:0], s.index...), nil
	}
	return s.GetRange(ctx, key, 0, -1, dst)
}

func (s *synthManifest) GetRange(_ context.Context, key string, off, length int64, dst []byte) ([]byte, error) {
	size := s.n * synthLine
	if key != synthKey {
		return dst[:0], fmt.Errorf("get %s: %w", key, storage.ErrNotFound)
	}
	if length < 0 {
		length = size - off
	}
	if off < 0 || off+length > size {
		return dst[:0], fmt.Errorf("get range %s [%d,+%d) of %d: %w", key, off, length, size, storage.ErrRange)
	}
	dst = dst[:0]
	var line []byte
	for i := off / synthLine; i*synthLine < off+length; i++ {
		line = synthAppend(line[:0], i)
		lo, hi := max(off-i*synthLine, 0), min(off+length-i*synthLine, synthLine)
		dst = append(dst, line[lo:hi]...)
	}
	return dst, nil
}

// TestSynthIndex: the synthetic manifest's index is what ScanManifest
// makes of its bytes, so the benchmark measures the real thing.
func TestSynthIndex(t *testing.T) {
	s := newSynthManifest(t, 5000, 64)
	x, err := dataset.ScanManifest(context.Background(), s, synthKey, dataset.ScanOptions{Every: 64, CheckDuplicates: true})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := x.MarshalBinary()
	if string(b) != string(s.index) {
		got, _ := dataset.ParseManifestIndex(s.index)
		t.Fatalf("synthetic index %+v\nScanManifest's %+v", got.Digest, x.Digest)
	}
}

func currentRSS(tb testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		tb.Skip("no /proc/self/statm: RSS is measured on Linux")
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// BenchmarkNodeMemory is a node's manifest side joining a job of 10M and
// 100M samples whose manifest has an index: open the index, then map
// the positions of its leases (2 ranks, leases of a window of 128 blocks
// of 16, as the coordinator grants them for packed data) to samples,
// prefetching each lease's blocks as the node's actor does, for 16
// leases a rank spread over the epoch. It reports the time to the first
// sample of the first lease (what the node needs before its first
// fetch) and the RSS above what the process held before (an empty
// node's), with the default --manifest-cache.
func BenchmarkNodeMemory(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("samples=%dM", n/1_000_000), func(b *testing.B) {
			s := newSynthManifest(b, n, dataset.DefaultIndexEvery)
			ctx := context.Background()
			const block, window, ranks, leasesPerRank = 16, 128, 2, 16
			shard := int64(block * window)
			var firstFetch, open time.Duration
			var rssAbove int64
			var reads, evictions int64
			for b.Loop() {
				runtime.GC()
				before := currentRSS(b)
				start := time.Now()
				m, err := dataset.OpenIndexedManifest(ctx, s, synthKey, dataset.IndexedConfig{CacheBytes: benchCache})
				if err != nil {
					b.Fatal(err)
				}
				open = time.Since(start)
				o := cluster.NewOrder(1, 0, n, block, cluster.EffectiveWindow(block, window))
				for k := range int64(ranks * leasesPerRank) {
					// Leases spread over the epoch: the coordinator hands
					// positions out in order, but a long job's leases
					// touch the whole manifest.
					lo := (k * (n / (ranks * leasesPerRank))) / shard * shard
					seen := map[int64]bool{}
					for pos := lo; pos < lo+shard; pos++ {
						idx, _ := o.Sample(pos)
						if b := idx / block * block; !seen[b] {
							seen[b] = true
							m.Prefetch(b, b+block)
						}
					}
					for pos := lo; pos < lo+shard; pos++ {
						idx, _ := o.Sample(pos)
						smp, _, err := m.Sample(ctx, idx)
						if err != nil {
							b.Fatal(err)
						}
						if k == 0 && pos == lo {
							firstFetch = time.Since(start)
						}
						if want := fmt.Sprintf("train/%09d.jpg", idx); smp.Key != want {
							b.Fatalf("sample %d: %s", idx, smp.Key)
						}
					}
				}
				runtime.GC()
				rssAbove = currentRSS(b) - before
				reads, evictions = m.Stats().Reads, m.Stats().Evictions
				m.Close()
			}
			b.ReportMetric(float64(rssAbove)/(1<<20), "MiB-above-empty")
			b.ReportMetric(float64(open.Microseconds())/1000, "ms-open-index")
			b.ReportMetric(float64(firstFetch.Microseconds())/1000, "ms-to-first-sample")
			b.ReportMetric(float64(reads), "pieces-read")
			b.ReportMetric(float64(evictions), "evictions")
		})
	}
}

// benchSizes are BenchmarkNodeMemory's dataset sizes
// (LONGSHORE_BENCH_SAMPLES, a comma-separated list of counts, overrides
// them), benchCache its --manifest-cache (LONGSHORE_BENCH_MANIFEST_CACHE
// bytes overrides it).
var (
	benchSizes = func() []int64 {
		var out []int64
		for _, f := range strings.Split(os.Getenv("LONGSHORE_BENCH_SAMPLES"), ",") {
			if v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64); err == nil && v > 0 {
				out = append(out, v)
			}
		}
		if len(out) == 0 {
			return []int64{10_000_000, 100_000_000}
		}
		return out
	}()
	benchCache = func() int64 {
		if v, err := strconv.ParseInt(os.Getenv("LONGSHORE_BENCH_MANIFEST_CACHE"), 10, 64); err == nil {
			return v
		}
		return dataset.DefaultManifestCache
	}()
)

// BenchmarkCoordinatorScan is the coordinator's start on a 10M-sample
// manifest without an index (manifestFacts streaming it with
// ScanManifest): the peak heap it needs, and the throughput.
func BenchmarkCoordinatorScan(b *testing.B) {
	const n = 10_000_000
	s := &synthManifest{n: n}
	var peak uint64
	for b.Loop() {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapInuse
		stop := make(chan struct{})
		done := make(chan uint64)
		go func() {
			var top uint64
			for {
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				top = max(top, ms.HeapInuse-min(base, ms.HeapInuse))
				select {
				case <-stop:
					done <- top
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
		x, err := dataset.ScanManifest(context.Background(), s, synthKey, dataset.ScanOptions{})
		close(stop)
		peak = <-done
		if err != nil || x.Samples != n {
			b.Fatal(x, err)
		}
	}
	b.ReportMetric(float64(peak)/(1<<20), "MiB-peak-heap")
	b.ReportMetric(float64(n*synthLine)/(1<<20)/(b.Elapsed().Seconds()/float64(b.N)), "MiB/s")
}
