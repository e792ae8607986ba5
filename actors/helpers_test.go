package actors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/longshore/longshore/actors/actorstest"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/storage"
)

// fakeDecoder fills dst with a pattern fixed by the object's bytes (so a
// test can check every sample landed in the right place), fails on objects
// that start with "BAD", panics on "PANIC", and sleeps a random while when
// delay is set.
type fakeDecoder struct {
	delay  time.Duration
	rng    *rand.Rand
	closed *atomic.Int64
}

func (d *fakeDecoder) Decode(data []byte, seed uint64, dst []byte) error {
	if d.delay > 0 {
		time.Sleep(time.Duration(d.rng.Int64N(int64(d.delay))))
	}
	switch {
	case bytes.HasPrefix(data, []byte("BAD")):
		return WithFailureClass(errors.New("fake: corrupt object"), "corrupt")
	case bytes.HasPrefix(data, []byte("PANIC")):
		panic("fake: hostile object")
	}
	fillPattern(dst, data)
	return nil
}

func (d *fakeDecoder) Close() error {
	if d.closed != nil {
		d.closed.Add(1)
	}
	return nil
}

func fillPattern(dst, data []byte) {
	h := fnv.New64a()
	h.Write(data)
	v := h.Sum64()
	for i := range dst {
		dst[i] = byte(v >> (8 * (i % 8)))
	}
}

func fakeDecoders(delay time.Duration, seed uint64) DecoderFactory {
	var n atomic.Uint64
	return func() (SampleDecoder, error) {
		i := n.Add(1)
		return &fakeDecoder{delay: delay, rng: rand.New(rand.NewPCG(seed, i))}, nil
	}
}

// faultStore wraps a Store: Get fails for keys in fail, sleeps up to delay,
// blocks until ctx is done for keys in block, and tracks reads in flight.
type faultStore struct {
	storage.Store
	fail     map[string]error
	block    map[string]bool
	delay    time.Duration
	mu       sync.Mutex
	rng      *rand.Rand
	inFlight atomic.Int64
	maxIn    atomic.Int64
	gets     atomic.Int64
}

func (s *faultStore) Get(ctx context.Context, key string, dst []byte) ([]byte, error) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxIn.Load()
		if n <= m || s.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	s.gets.Add(1)
	if s.delay > 0 {
		s.mu.Lock()
		d := time.Duration(s.rng.Int64N(int64(s.delay)))
		s.mu.Unlock()
		time.Sleep(d)
	}
	if s.block[key] {
		<-ctx.Done()
		return dst[:0], fmt.Errorf("get %s: %w", key, ctx.Err())
	}
	if err := s.fail[key]; err != nil {
		return dst[:0], fmt.Errorf("get %s: %w", key, err)
	}
	return s.Store.Get(ctx, key, dst)
}

// makeDataset puts n objects in a MemStore: keys class%d/img%05d.jpg,
// content unique per key, padded to size bytes.
func makeDataset(t testing.TB, n, classes, size int) (*storage.MemStore, *dataset.Dataset) {
	t.Helper()
	st := storage.NewMemStore("test")
	ds := &dataset.Dataset{}
	for c := 0; c < classes; c++ {
		ds.Classes = append(ds.Classes, fmt.Sprintf("class%d", c))
	}
	for i := 0; i < n; i++ {
		label := int32(i % classes)
		key := fmt.Sprintf("class%d/img%05d.jpg", label, i)
		data := []byte(fmt.Sprintf("object %d %s ", i, key))
		for len(data) < size {
			data = append(data, byte(i))
		}
		if _, err := st.Put(context.Background(), key, data, storage.Cond{}); err != nil {
			t.Fatal(err)
		}
		ds.Samples = append(ds.Samples, dataset.Sample{Key: key, Label: label})
	}
	return st, ds
}

func objectBytes(t testing.TB, st storage.Store, key string) []byte {
	t.Helper()
	b, err := st.Get(context.Background(), key, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// smallConfig is a fast test configuration: tiny samples, heap slots (the
// race detector sees heap memory, not mappings).
func smallConfig() Config {
	return Config{BatchSize: 8, Slots: 3, FetchConcurrency: 4, Decoders: 2, DecodeQueue: 2,
		Sample: Shape{Height: 2, Width: 4}, Seed: 42, MaxFailures: MaxFailureCount(0)}
}

func testDeps(st storage.Store, dec DecoderFactory) Deps {
	return Deps{Store: st, NewDecoder: dec, Allocator: gpu.HeapAllocator{}, SampleSeed: actorstest.SampleSeed, Order: testOrder}
}

// testOrder is the epoch order of the pipeline's tests (the real one,
// cluster.NewOrder, lives above this package).
func testOrder(seed uint64, epoch int, n int64) Order { return actorstest.Shuffle(seed, epoch, n) }

// batchRecord is what a test remembers of a batch after releasing it.
type batchRecord struct {
	Rank, Epoch int
	Step        int64
	Keys        []string
	Indices     []int64
	Pads        []bool
	Filled      []bool
	Failed      int
}

// samples is how many of the batch's rows are samples: not filled.
func (r batchRecord) samples() int {
	n := 0
	for _, f := range r.Filled {
		if !f {
			n++
		}
	}
	return n
}

func (r batchRecord) String() string {
	return fmt.Sprintf("r%d e%d s%d %v failed=%d", r.Rank, r.Epoch, r.Step, r.Keys, r.Failed)
}

// checkBatch verifies a batch's internal consistency and that every
// sample's pixels are the fake decoder's pattern for its object.
func checkBatch(t testing.TB, st storage.Store, cfg Config, b *Batch) batchRecord {
	t.Helper()
	n := b.Len()
	sb := cfg.WithDefaults().Sample.SampleBytes()
	if len(b.Images) != n*sb || len(b.Keys) != n || len(b.Indices) != n || len(b.Pads) != n || len(b.Positions) != n {
		t.Fatalf("batch %d/%d: inconsistent lengths: images %d keys %d indices %d pads %d positions %d (n %d)",
			b.Epoch, b.Step, len(b.Images), len(b.Keys), len(b.Indices), len(b.Pads), len(b.Positions), n)
	}
	if b.Dims[0] != n {
		t.Fatalf("Dims %v for %d samples", b.Dims, n)
	}
	if len(b.Filled) != n {
		t.Fatalf("batch %d/%d: %d filled marks for %d samples", b.Epoch, b.Step, len(b.Filled), n)
	}
	want := make([]byte, sb)
	last := int64(-1)
	for j := 0; j < n; j++ {
		fillPattern(want, objectBytes(t, st, b.Keys[j]))
		if !bytes.Equal(b.Images[j*sb:(j+1)*sb], want) {
			t.Fatalf("batch e%d s%d sample %d (%s): pixels are not its object's", b.Epoch, b.Step, j, b.Keys[j])
		}
		if p := b.Positions[j]; p/int64(cfg.WithDefaults().BatchSize) != b.Step {
			t.Fatalf("batch step %d holds position %d", b.Step, p)
		}
		if b.Filled[j] { // a copy of another row
			continue
		}
		if b.Positions[j] <= last {
			t.Fatalf("batch positions out of order: %v", b.Positions)
		}
		last = b.Positions[j]
	}
	return batchRecord{Rank: b.Rank, Epoch: b.Epoch, Step: b.Step, Keys: append([]string(nil), b.Keys...),
		Indices: append([]int64(nil), b.Indices...), Pads: append([]bool(nil), b.Pads...), Filled: append([]bool(nil), b.Filled...), Failed: b.Failed}
}

// drainAll reads a pipeline to the end, checking every batch.
func drainAll(t testing.TB, st storage.Store, cfg Config, p *Pipeline) ([]batchRecord, error) {
	t.Helper()
	var out []batchRecord
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		b, err := p.Next(ctx)
		if err != nil {
			return out, err
		}
		out = append(out, checkBatch(t, st, cfg, b))
		b.Release()
	}
}

// checkNoLeaks fails the test if goroutines started during it outlive it,
// comparing goroutine stacks before and after with a retry window (like
// tailscale's tstest/resource.go).
func checkNoLeaks(t *testing.T) {
	t.Helper()
	before := goroutines()
	t.Cleanup(func() {
		var leaked []string
		deadline := time.Now().Add(30 * time.Second) // a backstop: the loop ends once they are gone
		for {
			leaked = leaked[:0]
			for id, stack := range goroutines() {
				if _, ok := before[id]; !ok {
					leaked = append(leaked, stack)
				}
			}
			if len(leaked) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(leaked) > 0 {
			sort.Strings(leaked)
			t.Errorf("%d goroutines leaked:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
	})
}

var goroutineHeader = regexp.MustCompile(`^goroutine (\d+) \[`)

func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := make(map[string]string)
	for _, g := range strings.Split(string(buf), "\n\n") {
		if m := goroutineHeader.FindStringSubmatch(g); m != nil {
			if strings.Contains(g, "testing.tRunner") || strings.Contains(g, "testing.(*T).Run") {
				continue // the test framework's own goroutines
			}
			out[m[1]] = g
		}
	}
	return out
}

func seededRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 1)) }
