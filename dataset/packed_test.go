package dataset_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/internal/offheap"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/faulty"
	"github.com/longshore/longshore/storage/miniotest"
	"github.com/longshore/longshore/storage/stores"
	"github.com/longshore/longshore/storage/storetest"
)

// countingStore counts the reads that reach the store below.
type countingStore struct {
	storage.Store
	gets, ranges atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, key string, dst []byte) ([]byte, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, key, dst)
}

func (c *countingStore) GetRange(ctx context.Context, key string, off, n int64, dst []byte) ([]byte, error) {
	c.ranges.Add(1)
	return c.Store.GetRange(ctx, key, off, n, dst)
}

// packFixture writes n samples into tar shards of perShard samples at
// shards/shard-NNNNNN.tar of s, with a manifest.jsonl, and discovers the
// packed dataset. Sample sizes are drawn from [1, maxSize]. It returns the
// dataset and each sample key's bytes.
func packFixture(t *testing.T, s storage.Store, seed uint64, n, perShard, maxSize int) (*dataset.Dataset, map[string][]byte) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 1))
	want := map[string][]byte{}
	packed := &dataset.Dataset{Classes: []string{"0", "1", "2"}}
	for first := 0; first < n; first += perShard {
		object := fmt.Sprintf("shards/shard-%06d.tar", first/perShard)
		id := packed.AddObject(object)
		var names []string
		var datas [][]byte
		for i := first; i < min(first+perShard, n); i++ {
			data := make([]byte, 1+rng.IntN(maxSize))
			for j := range data {
				data[j] = byte(rng.Uint32())
			}
			names, datas = append(names, fmt.Sprintf("c%d/img%04d.jpg", i%3, i)), append(datas, data)
		}
		var buf bytes.Buffer
		members, err := dataset.WriteTarShard(&buf, names, datas)
		if err != nil {
			t.Fatal(err)
		}
		for k, m := range members {
			smp := m.Sample(packed, id, int32((first+k)%3))
			want[smp.Key] = datas[k]
			packed.Samples = append(packed.Samples, smp)
		}
		if _, err := s.Put(ctx, object, buf.Bytes(), storage.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	var manifest bytes.Buffer
	if err := dataset.WriteManifestJSONL(&manifest, packed); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, dataset.ManifestJSONLName, manifest.Bytes(), storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	ds, err := dataset.Discover(ctx, s, dataset.DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ds, want
}

// blockOrder visits [0, n) the way cluster.Order does: blocks of b in a
// random order, each block's indices shuffled.
func blockOrder(rng *rand.Rand, n, b int) []int {
	nb := (n + b - 1) / b
	var out []int
	for _, blk := range rng.Perm(nb) {
		lo, hi := blk*b, min(blk*b+b, n)
		for _, j := range rng.Perm(hi - lo) {
			out = append(out, lo+j)
		}
	}
	return out
}

// chunkCount is how many (block, object) pairs the dataset has: the
// ranged GETs one pass in block order should cost.
func chunkCount(ds *dataset.Dataset, b int) (pairs, multi int) {
	type pair struct {
		blk int
		obj string
	}
	count := map[pair]int{}
	for i, s := range ds.Samples {
		count[pair{i / b, ds.ObjectOf(s)}]++
	}
	for _, c := range count {
		if c > 1 {
			multi++
		}
	}
	return len(count), multi
}

func packedStore(t *testing.T, inner storage.Store, ds *dataset.Dataset, block int, cacheBytes int64) *dataset.PackedStore {
	t.Helper()
	p, err := dataset.NewPackedStore(inner, ds, dataset.PackedConfig{Block: block, CacheBytes: cacheBytes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func getAll(t *testing.T, p storage.Store, ds *dataset.Dataset, order []int, want map[string][]byte) {
	t.Helper()
	var buf []byte
	for _, i := range order {
		key := ds.Samples[i].Key
		var err error
		buf, err = p.Get(context.Background(), key, buf)
		if err != nil {
			t.Fatalf("Get %s: %v", key, err)
		}
		if !bytes.Equal(buf, want[key]) {
			t.Fatalf("Get %s: %d bytes, not the sample's %d", key, len(buf), len(want[key]))
		}
	}
}

// TestPackedOneRequestPerChunk: one pass in block order costs one ranged
// GET per (block, shard) pair, whatever the block's alignment with the
// shards, and leaves nothing cached; block 1 is one GET per sample.
func TestPackedOneRequestPerChunk(t *testing.T) {
	for name, inner := range freshStores(t) {
		ds, want := packFixture(t, inner, 1, 100, 16, 3000)
		for _, b := range []int{16, 10, 32, 100, 1} {
			t.Run(fmt.Sprintf("%s/block%d", name, b), func(t *testing.T) {
				cs := &countingStore{Store: inner}
				p := packedStore(t, cs, ds, b, 1<<20)
				getAll(t, p, ds, blockOrder(rand.New(rand.NewPCG(uint64(b), 2)), len(ds.Samples), b), want)
				pairs, multi := chunkCount(ds, b)
				if got := cs.ranges.Load(); got != int64(pairs) {
					t.Errorf("%d ranged GETs, want %d (one per block and shard)", got, pairs)
				}
				st := p.Stats()
				if st.Chunks != int64(multi) || st.CachedBytes != 0 || st.Evictions != 0 || cs.gets.Load() != 0 {
					t.Errorf("stats %+v, %d whole-object GETs; want %d chunks, nothing left cached", st, cs.gets.Load(), multi)
				}
			})
		}
	}
}

func TestPackedSetBlock(t *testing.T) {
	mem := storage.NewMemStore(t.Name())
	ds, want := packFixture(t, mem, 2, 64, 16, 500)
	cs := &countingStore{Store: mem}
	p := packedStore(t, cs, ds, 0, 1<<20)
	getAll(t, p, ds, []int{0, 1, 2, 3}, want)
	if got := cs.ranges.Load(); got != 4 {
		t.Errorf("block 0: %d ranged GETs for 4 samples, want 4", got)
	}
	p.SetBlock(16)
	getAll(t, p, ds, blockOrder(rand.New(rand.NewPCG(1, 1)), 64, 16), want)
	if got := cs.ranges.Load() - 4; got != 4 {
		t.Errorf("block 16: %d ranged GETs for 4 shards, want 4", got)
	}
}

// TestPackedEvictionAndCap: a cache of two chunks, three chunks read
// half each and then the rest: the least recently used chunk is evicted
// and fetched again, the byte cap is never passed, and a chunk bigger
// than the cache is read sample by sample.
func TestPackedEvictionAndCap(t *testing.T) {
	mem := storage.NewMemStore(t.Name())
	ds, want := packFixture(t, mem, 3, 48, 16, 1000)
	span := func(lo int) int64 { // bytes of the chunk of samples [lo, lo+16)
		first, last := ds.Samples[lo], ds.Samples[lo+15]
		return last.Offset + last.Size - first.Offset
	}
	capBytes := max(span(0)+span(16), span(16)+span(32), span(0)+span(32))
	cs := &countingStore{Store: mem}
	p := packedStore(t, cs, ds, 16, capBytes)
	var order []int
	for _, lo := range []int{0, 16, 32} {
		for i := lo; i < lo+8; i++ {
			order = append(order, i)
		}
	}
	for _, lo := range []int{0, 16, 32} {
		for i := lo + 8; i < lo+16; i++ {
			order = append(order, i)
		}
	}
	getAll(t, p, ds, order, want)
	st := p.Stats()
	if st.Evictions < 1 || st.PeakBytes > capBytes || st.CachedBytes != 0 {
		t.Errorf("stats %+v: want an eviction, peak <= %d, nothing left", st, capBytes)
	}
	// chunk 0 evicted by chunk 2, fetched again, evicting chunk 1, ...
	if got := cs.ranges.Load(); got < 4 || got > 6 {
		t.Errorf("%d ranged GETs, want 4 to 6", got)
	}

	// Smaller than any chunk: one ranged GET per sample, nothing cached.
	cs = &countingStore{Store: mem}
	p = packedStore(t, cs, ds, 16, span(0)/2)
	getAll(t, p, ds, []int{0, 1, 2, 3, 4}, want)
	if st := p.Stats(); cs.ranges.Load() != 5 || st.Chunks != 0 || st.PeakBytes != 0 {
		t.Errorf("oversized chunk: %d ranged GETs, stats %+v; want 5 and no chunk", cs.ranges.Load(), st)
	}
}

// TestPackedSparseSpan: members far apart in their object are read one by
// one, not with a GET of everything between them.
func TestPackedSparseSpan(t *testing.T) {
	mem := storage.NewMemStore(t.Name())
	blob := make([]byte, 1<<20)
	copy(blob, "first")
	copy(blob[len(blob)-6:], "second")
	fillData(t, mem, "blob.bin", string(blob))
	fillData(t, mem, "manifest.csv", "key,label,object,offset,size\nblob.bin/a,0,blob.bin,0,5\nblob.bin/b,0,blob.bin,1048570,6\n")
	ds := discover(t, mem, dataset.DiscoverOptions{})
	cs := &countingStore{Store: mem}
	p := packedStore(t, cs, ds, 256, 64<<20)
	getAll(t, p, ds, []int{0, 1}, map[string][]byte{"blob.bin/a": []byte("first"), "blob.bin/b": []byte("second")})
	if st := p.Stats(); st.Chunks != 0 || st.ChunkBytes != 0 || cs.ranges.Load() != 2 {
		t.Errorf("stats %+v, %d ranged GETs: want 2 single reads", st, cs.ranges.Load())
	}
}

func TestPackedPassThrough(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storage.Store {
		return packedStore(t, storage.NewMemStore(t.Name()), &dataset.Dataset{}, 16, 1<<20)
	})
	mem := storage.NewMemStore(t.Name())
	fillData(t, mem, "plain.jpg", "plain")
	fillData(t, mem, "s.tar", "xxPACKEDyy")
	fillData(t, mem, "manifest.csv", "plain.jpg,0\ns.tar/p,0,s.tar,2,6\n")
	ds := discover(t, mem, dataset.DiscoverOptions{})
	cs := &countingStore{Store: mem}
	p := packedStore(t, cs, ds, 16, 1<<20)
	getAll(t, p, ds, []int{0, 1}, map[string][]byte{"plain.jpg": []byte("plain"), "s.tar/p": []byte("PACKED")})
	if cs.gets.Load() != 1 || cs.ranges.Load() != 1 {
		t.Errorf("%d GETs, %d ranged: want the plain sample read whole, the packed one ranged", cs.gets.Load(), cs.ranges.Load())
	}
	// An unknown key is the store's business.
	if _, err := p.Get(context.Background(), "s.tar/nope", nil); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("unknown key: %v", err)
	}
}

// TestPackedErrors: a failed chunk fetch does not fail the Gets that
// waited for it: each reads its own sample instead, so each sees its own
// outcome. A transient failure is not remembered (the next Get fetches
// the chunk again); a shard that is short or missing makes its chunk read
// sample by sample, so one bad member costs one failed sample and not a
// chunk read per sample of its block.
func TestPackedErrors(t *testing.T) {
	mem := storage.NewMemStore(t.Name())
	ds, want := packFixture(t, mem, 4, 32, 16, 500)
	for _, tc := range []struct {
		name      string
		err       error
		chunks    int64 // after the failed fetch and a second pass
		permanent bool
	}{
		{"transient", errors.New("connection refused"), 2, false},
		{"not found", storage.ErrNotFound, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The failing fetch is held on a fake clock until all four
			// Gets wait for it.
			fc := clock.NewFake(time.Time{})
			fs := faulty.Wrap(mem, faulty.Rule{Ops: faulty.OpGetRange, FirstN: 1, Err: tc.err, Delay: time.Second, Clock: fc})
			p := packedStore(t, fs, ds, 16, 1<<20)
			var wg sync.WaitGroup
			got := make([][]byte, 4)
			errs := make([]error, 4)
			for g := range errs {
				wg.Go(func() { got[g], errs[g] = p.Get(context.Background(), ds.Samples[g].Key, nil) })
			}
			holdUntil(t, fc, 1, func() bool { return dataset.PackedWaiters(p, 0) == 4 })
			fc.Advance(time.Second)
			wg.Wait()
			for g, err := range errs {
				if err != nil || !bytes.Equal(got[g], want[ds.Samples[g].Key]) {
					t.Errorf("waiter %d: %v (%d bytes), want its sample read alone", g, err, len(got[g]))
				}
			}
			if fs.Injections() != 1 {
				t.Errorf("%d injected failures, want the one shared fetch", fs.Injections())
			}
			getAll(t, p, ds, []int{4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, want)
			st := p.Stats()
			if st.ChunkFailures != 1 || st.Chunks != tc.chunks {
				t.Errorf("stats %+v: want 1 failure, %d chunk fetches", st, tc.chunks)
			}
			if alone := st.ReadAlone; tc.permanent != (alone > 4) {
				t.Errorf("%d samples read alone (permanent failure %v)", alone, tc.permanent)
			}
		})
	}

	t.Run("truncated shard", func(t *testing.T) {
		mem := storage.NewMemStore(t.Name())
		ds, want := packFixture(t, mem, 5, 32, 16, 500)
		// Cut the first shard in the middle of its last member.
		last := ds.Samples[15]
		b, err := mem.Get(context.Background(), ds.ObjectOf(last), nil)
		if err != nil {
			t.Fatal(err)
		}
		mem.Put(context.Background(), ds.ObjectOf(last), b[:last.Offset+last.Size/2], storage.Cond{})
		cs := &countingStore{Store: mem}
		p := packedStore(t, cs, ds, 16, 1<<20)
		var bad int
		for i := range 16 {
			got, err := p.Get(context.Background(), ds.Samples[i].Key, nil)
			switch {
			case i == 15:
				if !errors.Is(err, storage.ErrRange) {
					t.Errorf("the cut sample: %v, want ErrRange", err)
				}
				bad++
			case err != nil || !bytes.Equal(got, want[ds.Samples[i].Key]):
				t.Errorf("sample %d: %v", i, err)
			}
		}
		if st := p.Stats(); st.Chunks != 1 || st.ChunkFailures != 1 || cs.ranges.Load() != 17 {
			t.Errorf("stats %+v, %d ranged GETs: want one failed chunk, then the 16 samples alone", st, cs.ranges.Load())
		}
	})

	// Plain errors of a sample read alone come back too.
	gone := faulty.Wrap(mem, faulty.Rule{Ops: faulty.OpGetRange, Err: storage.ErrAccess})
	p := packedStore(t, gone, ds, 1, 1<<20)
	if _, err := p.Get(context.Background(), ds.Samples[0].Key, nil); !errors.Is(err, storage.ErrAccess) {
		t.Errorf("single read: %v, want ErrAccess", err)
	}
	// And of a chunk whose every read fails.
	p = packedStore(t, gone, ds, 16, 1<<20)
	if _, err := p.Get(context.Background(), ds.Samples[0].Key, nil); !errors.Is(err, storage.ErrAccess) {
		t.Errorf("chunk and sample reads failing: %v, want ErrAccess", err)
	}
}

// TestPackedCancel: a Get whose context ends returns at once without
// spoiling the shared fetch for the others; when every waiter has gone
// the fetch is cancelled and forgotten.
func TestPackedCancel(t *testing.T) {
	baseline := runtime.NumGoroutine()
	mem := storage.NewMemStore(t.Name())
	ds, want := packFixture(t, mem, 5, 32, 16, 500)
	// Fetches are held on a fake clock until the test lets them end, so
	// "at once" means: before the shared fetch ends, on any machine.
	fc := clock.NewFake(time.Time{})
	slow := faulty.Wrap(mem, faulty.Rule{Ops: faulty.OpGetRange, NoError: true, Delay: time.Second, Clock: fc})
	cs := &countingStore{Store: slow}
	p, err := dataset.NewPackedStore(cs, ds, dataset.PackedConfig{Block: 16, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	var patient []byte
	var patientErr error
	wg.Go(func() { patient, patientErr = p.Get(context.Background(), ds.Samples[1].Key, nil) })
	holdUntil(t, fc, 1, func() bool { return dataset.PackedWaiters(p, 0) == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	impatient := make(chan error, 1)
	go func() {
		_, err := p.Get(ctx, ds.Samples[0].Key, nil)
		impatient <- err
	}()
	holdUntil(t, fc, 1, func() bool { return dataset.PackedWaiters(p, 0) == 2 })
	cancel()
	select {
	case err := <-impatient:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("impatient Get: %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute): // a failure backstop only
		t.Fatal("the impatient Get waited for the shared fetch")
	}
	fc.Advance(time.Second)
	wg.Wait()
	if patientErr != nil || !bytes.Equal(patient, want[ds.Samples[1].Key]) {
		t.Errorf("patient Get: %v", patientErr)
	}
	if got := cs.ranges.Load(); got != 1 {
		t.Errorf("%d ranged GETs, want the one shared fetch", got)
	}

	// Everyone leaves: the fetch is cancelled and its bytes released.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() {
		_, err := p.Get(ctx2, ds.Samples[16].Key, nil)
		impatient <- err
	}()
	holdUntil(t, fc, 1, func() bool { return dataset.PackedWaiters(p, 16) == 1 })
	cancel2()
	if err := <-impatient; !errors.Is(err, context.Canceled) {
		t.Errorf("abandoned Get: %v", err)
	}
	// Only chunk 0 (sample 1 served, the rest not) holds bytes now.
	first, last := ds.Samples[0], ds.Samples[15]
	if st := p.Stats(); st.CachedBytes != last.Offset+last.Size-first.Offset || st.Chunks != 2 {
		t.Errorf("stats %+v: want chunk 0's %d bytes cached, 2 fetches", st, last.Offset+last.Size-first.Offset)
	}
	slow.SetEnabled(false)
	getAll(t, p, ds, []int{16, 17}, want) // a fresh fetch, not the cancelled one
	if got := cs.ranges.Load(); got != 3 {
		t.Errorf("%d ranged GETs, want 3 (the abandoned fetch is not reused)", got)
	}
	// Chunk 0 is still cached (sample 1 served, others not); chunk 1 too.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second) // a backstop: the loop ends as soon as they are gone
	for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseline {
		t.Errorf("%d goroutines left after Close (baseline %d)", n-baseline, baseline)
	}
}

// TestPackedConcurrent: fetchers sharing a block order, as a rank's do,
// over several epochs: every byte right, one ranged GET per chunk per
// epoch with room to spare, the cap kept when tight, no goroutine left.
func TestPackedConcurrent(t *testing.T) {
	baseline := runtime.NumGoroutine()
	for name, inner := range freshStores(t) {
		ds, want := packFixture(t, inner, 6, 300, 24, 2000)
		for _, tc := range []struct {
			name  string
			block int
			cap   int64
			exact bool
		}{
			{"roomy", 24, 64 << 20, true},
			{"tight", 16, 40 << 10, false},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				cs := &countingStore{Store: inner}
				p := packedStore(t, cs, ds, tc.block, tc.cap)
				const epochs, fetchers = 3, 16
				for e := range epochs {
					order := blockOrder(rand.New(rand.NewPCG(uint64(e), 7)), len(ds.Samples), tc.block)
					bad := readConcurrently(ds, order, want, fetchers, func(i int, buf []byte) ([]byte, error) {
						return p.Get(context.Background(), ds.Samples[i].Key, buf)
					})
					if bad > 0 {
						t.Fatalf("epoch %d: %d wrong reads", e, bad)
					}
				}
				st := p.Stats()
				pairs, _ := chunkCount(ds, tc.block)
				if tc.exact && cs.ranges.Load() != int64(epochs*pairs) {
					t.Errorf("%d ranged GETs, want %d (one per chunk per epoch)", cs.ranges.Load(), epochs*pairs)
				}
				if st.PeakBytes > tc.cap {
					t.Errorf("peak %d bytes over the %d cap", st.PeakBytes, tc.cap)
				}
				t.Logf("%d ranged GETs for %d reads; %+v", cs.ranges.Load(), epochs*len(ds.Samples), st)
			})
		}
	}
	deadline := time.Now().Add(30 * time.Second) // a backstop: the loop ends as soon as they are gone
	for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseline {
		t.Errorf("%d goroutines left (baseline %d)", n-baseline, baseline)
	}
}

// readConcurrently reads the samples of order with that many fetchers at
// once, each through get, and returns how many reads failed or returned
// other bytes than want's.
func readConcurrently(ds *dataset.Dataset, order []int, want map[string][]byte, fetchers int, get func(i int, buf []byte) ([]byte, error)) int64 {
	var next, bad atomic.Int64
	var wg sync.WaitGroup
	for range fetchers {
		wg.Go(func() {
			var buf []byte
			for {
				k := int(next.Add(1) - 1)
				if k >= len(order) {
					return
				}
				var err error
				buf, err = get(order[k], buf)
				if err != nil || !bytes.Equal(buf, want[ds.Samples[order[k]].Key]) {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return bad.Load()
}

// TestPackedMatchesNaive: random packings (shards of random sizes, plain
// samples among them), random blocks, caches and access orders; every
// Get must equal a plain ranged read, and the cap must hold.
func TestPackedMatchesNaive(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 9))
		mem := storage.NewMemStore(t.Name())
		n := 1 + rng.IntN(120)
		ds := &dataset.Dataset{Classes: []string{"0"}}
		var objects [][]byte
		for len(ds.Samples) < n {
			if rng.IntN(5) == 0 { // a plain sample
				key := fmt.Sprintf("plain/%d", len(ds.Samples))
				fillData(t, mem, key, key)
				ds.Samples = append(ds.Samples, dataset.Sample{Key: key})
				continue
			}
			var blob []byte
			object := fmt.Sprintf("o/%d.bin", len(objects))
			id := ds.AddObject(object)
			for range 1 + rng.IntN(30) {
				blob = append(blob, make([]byte, rng.IntN(300))...) // a gap
				size := 1 + rng.IntN(400)
				off := len(blob)
				for range size {
					blob = append(blob, byte(rng.Uint32()))
				}
				ds.Samples = append(ds.Samples, dataset.Sample{Key: fmt.Sprintf("%s/%d", object, off), Object: id, Offset: int64(off), Size: int64(size)})
			}
			objects = append(objects, blob)
			fillData(t, mem, object, string(blob))
		}
		block, capBytes := rng.IntN(40), int64(rng.IntN(20000))
		p, err := dataset.NewPackedStore(mem, ds, dataset.PackedConfig{Block: block, CacheBytes: capBytes})
		if err != nil {
			t.Fatal(err)
		}
		var buf []byte
		for range 3 * len(ds.Samples) {
			i := rng.IntN(len(ds.Samples))
			if rng.IntN(2) == 0 && block > 0 { // mostly stay near the last block
				i = min(len(ds.Samples)-1, i/max(block, 1)*max(block, 1)+rng.IntN(max(block, 1)))
			}
			s := ds.Samples[i]
			buf, err = p.Get(context.Background(), s.Key, buf)
			var want []byte
			if s.Packed() {
				want, _ = mem.GetRange(context.Background(), ds.ObjectOf(s), s.Offset, s.Size, nil)
			} else {
				want, _ = mem.Get(context.Background(), s.Key, nil)
			}
			if err != nil || !bytes.Equal(buf, want) {
				t.Fatalf("seed %d block %d cap %d: Get %s: %v, %d bytes, want %d", seed, block, capBytes, s.Key, err, len(buf), len(want))
			}
		}
		if st := p.Stats(); st.PeakBytes > capBytes {
			t.Fatalf("seed %d: peak %d over cap %d", seed, st.PeakBytes, capBytes)
		}
		p.Close()
	}
}

func TestPackedConfigValidate(t *testing.T) {
	if err := dataset.DefaultPackedConfig().Validate(); err != nil {
		t.Error(err)
	}
	err := dataset.PackedConfig{Block: -1, Window: -1, CacheBytes: -1}.Validate()
	for _, f := range []string{"Block", "Window", "CacheBytes"} {
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(f)) {
			t.Errorf("Validate = %v, want %s named", err, f)
		}
	}
	if _, err := dataset.NewPackedStore(storage.NewMemStore("x"), &dataset.Dataset{}, dataset.PackedConfig{Block: -2}); err == nil {
		t.Error("NewPackedStore accepted a negative block")
	}
	bad := &dataset.Dataset{Objects: []string{"s.tar"}, Samples: []dataset.Sample{{Key: "s.tar/a", Object: 1}, {Key: "s.tar/b", Object: 2}}}
	if _, err := dataset.NewPackedStore(storage.NewMemStore("x"), bad, dataset.PackedConfig{}); err == nil || !bytes.Contains([]byte(err.Error()), []byte("object ID 2 outside")) {
		t.Errorf("NewPackedStore of a sample with an object ID past the objects: %v", err)
	}
}

// TestPackedS3: the same over S3 on a real MinIO, where a chunk is one
// ranged GET request.
func TestPackedS3(t *testing.T) {
	srv := miniotest.Start(t)
	s, err := stores.Open(context.Background(), srv.URL(srv.NewBucket(t), "packed"), srv.Options())
	if err != nil {
		t.Fatal(err)
	}
	ds, want := packFixture(t, s, 7, 100, 16, 3000)
	cs := &countingStore{Store: s}
	p := packedStore(t, cs, ds, 16, 1<<20)
	getAll(t, p, ds, blockOrder(rand.New(rand.NewPCG(3, 3)), len(ds.Samples), 16), want)
	if pairs, _ := chunkCount(ds, 16); cs.ranges.Load() != int64(pairs) {
		t.Errorf("%d ranged GETs, want %d", cs.ranges.Load(), pairs)
	}
}

// TestPackedPrefetch: Prefetch starts a sample's chunk before any Get,
// once; the Gets that follow are served from it. It never evicts to make
// room, and ignores keys it does not serve.
func TestPackedPrefetch(t *testing.T) {
	mem := storage.NewMemStore(t.Name())
	ds, want := packFixture(t, mem, 4, 64, 16, 1000)
	cs := &countingStore{Store: mem}
	p := packedStore(t, cs, ds, 16, 1<<20)
	p.PrefetchSample(int64(3))
	p.PrefetchSample(int64(5)) // same chunk: no second fetch
	p.PrefetchSample(-1)
	waitFor(t, func() bool { return cs.ranges.Load() == 1 })
	getAll(t, p, ds, []int{5, 0, 15, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14}, want)
	if got := cs.ranges.Load(); got != 1 {
		t.Errorf("%d ranged GETs for a prefetched chunk and its 16 samples, want 1", got)
	}
	if st := p.Stats(); st.Prefetches != 1 || st.Chunks != 1 || st.Hits != 16 || st.CachedBytes != 0 {
		t.Errorf("stats %+v: want 1 prefetch, 1 chunk, 16 hits, nothing left", st)
	}

	// A cache with room for one chunk, holding one half served: a
	// prefetch does not evict it.
	cs2 := &countingStore{Store: mem}
	first, last := ds.Samples[16], ds.Samples[31]
	p2 := packedStore(t, cs2, ds, 16, last.Offset+last.Size-first.Offset+1)
	getAll(t, p2, ds, []int{16, 17}, want)
	p2.PrefetchSample(int64(40))
	getAll(t, p2, ds, []int{18, 19}, want)
	if got, st := cs2.ranges.Load(), p2.Stats(); got != 1 || st.Prefetches != 0 || st.Evictions != 0 {
		t.Errorf("prefetch into a full cache: %d ranged GETs, stats %+v; want 1 GET, no prefetch, no eviction", got, st)
	}
}

// TestPackedRecyclesBuffers: reading chunk after chunk reuses the
// buffers of the chunks used up, and what each Get returns is still the
// sample (a recycled buffer is never written while a Get copies from it:
// TestPackedConcurrent checks that under -race).
func TestPackedRecyclesBuffers(t *testing.T) {
	mem := storage.NewMemStore(t.Name())
	ds, want := packFixture(t, mem, 5, 160, 16, 1000)
	// Chunks of equal spans, so that any freed buffer fits the next.
	for i := range ds.Samples {
		ds.Samples[i].Size = min(ds.Samples[i].Size, 200)
		want[ds.Samples[i].Key] = want[ds.Samples[i].Key][:ds.Samples[i].Size]
	}
	p := packedStore(t, mem, ds, 16, 1<<20)
	var order []int
	for i := range ds.Samples {
		order = append(order, i)
	}
	getAll(t, p, ds, order, want)
	st := p.Stats()
	if st.Chunks != 10 || st.Reused < 8 {
		t.Errorf("stats %+v: want 10 chunks, at least 8 into recycled buffers", st)
	}
	if st.PeakBytes > 1<<20 {
		t.Errorf("peak %d bytes held, over the cap", st.PeakBytes)
	}
}

// TestPackedFreesBuffers: chunk buffers live off the Go heap, and every
// one goes back to the kernel: those dropped past the cache's bound on
// the way, the free list's and the chunks still cached (half served, or
// prefetched and never asked for) at Close; a Get after Close reads its
// sample alone.
func TestPackedFreesBuffers(t *testing.T) {
	mem := storage.NewMemStore(t.Name())
	ds, want := packFixture(t, mem, 6, 160, 16, 2000)
	mapped := offheap.Mapped()
	cs := &countingStore{Store: mem}
	p, err := dataset.NewPackedStore(cs, ds, dataset.PackedConfig{Block: 16, Window: 2, CacheBytes: 100 << 10})
	if err != nil {
		t.Fatal(err)
	}
	getAll(t, p, ds, blockOrder(rand.New(rand.NewPCG(6, 1)), 96, 16), want)
	getAll(t, p, ds, []int{100, 101}, want) // a chunk half served
	p.PrefetchSample(150)                   // and one never asked for
	waitFor(t, func() bool { st := p.Stats(); return st.Chunks == 8 && st.Prefetches == 1 })
	if !offheap.OnHeap && offheap.Mapped() == mapped {
		t.Errorf("no chunk buffer is off the heap")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if got := offheap.Mapped(); got != mapped {
		t.Errorf("after Close %d bytes are still mapped, %d before", got, mapped)
	}
	before := cs.ranges.Load()
	getAll(t, p, ds, []int{102}, want)
	if got := cs.ranges.Load() - before; got != 1 || offheap.Mapped() != mapped {
		t.Errorf("a Get after Close: %d ranged GETs, %d bytes mapped; want its own GET and no buffer", got, offheap.Mapped()-mapped)
	}
}

// waitFor polls cond until it holds; the minute is a failure backstop
// only.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within a minute")
		}
	}
}

// holdUntil waits until n fetches are held on fc and cond holds.
func holdUntil(t *testing.T, fc *clock.Fake, n int, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a failure backstop only
	defer cancel()
	if err := fc.BlockUntil(ctx, n); err != nil {
		t.Fatalf("%d fetches not held on the clock: %v", n, err)
	}
	waitFor(t, cond)
}

// TestPackedNoUselessEviction: when chunks still being fetched leave no
// room for a new chunk even with every loaded chunk evicted, nothing is
// evicted: the sample is read alone and the loaded chunk stays to serve
// the rest of its samples.
func TestPackedNoUselessEviction(t *testing.T) {
	mem := storage.NewMemStore(t.Name())
	ds, want := packFixture(t, mem, 6, 64, 16, 1000)
	span := func(lo int) int64 {
		first, last := ds.Samples[lo], ds.Samples[lo+15]
		return last.Offset + last.Size - first.Offset
	}
	los := []int{0, 16, 32, 48}
	slices.SortFunc(los, func(a, b int) int { return cmp.Compare(span(a), span(b)) })
	small, b, c, large := los[0], los[1], los[2], los[3]
	if span(large) <= span(small) {
		t.Fatalf("fixture: spans %d and %d, want different", span(small), span(large))
	}
	slowObj := map[string]bool{ds.ObjectOf(ds.Samples[b]): true, ds.ObjectOf(ds.Samples[c]): true}
	// The two slow fetches are held on a fake clock until the test lets
	// them end.
	fc := clock.NewFake(time.Time{})
	slow := faulty.Wrap(mem, faulty.Rule{Ops: faulty.OpGetRange, NoError: true, Delay: time.Second, Clock: fc,
		Key: func(k string) bool { return slowObj[k] }})
	cs := &countingStore{Store: slow}
	p := packedStore(t, cs, ds, 16, span(small)+span(b)+span(c))
	getAll(t, p, ds, []int{small, small + 1}, want) // loaded, half served
	var wg sync.WaitGroup
	for _, i := range []int{b, c} { // two slow fetches in flight
		wg.Go(func() {
			if got, err := p.Get(context.Background(), ds.Samples[i].Key, nil); err != nil || !bytes.Equal(got, want[ds.Samples[i].Key]) {
				t.Errorf("Get %d: %v", i, err)
			}
		})
	}
	holdUntil(t, fc, 2, func() bool { return p.Stats().Chunks == 3 })
	getAll(t, p, ds, []int{large}, want) // no room, even evicting the small chunk
	var rest []int
	for i := small + 2; i < small+16; i++ {
		rest = append(rest, i)
	}
	getAll(t, p, ds, rest, want)
	fc.Advance(time.Second)
	wg.Wait()
	if st := p.Stats(); st.Evictions != 0 || st.Overflows != 1 || st.Chunks != 3 {
		t.Errorf("stats %+v: want no eviction, one overflow, 3 chunk fetches", st)
	}
	// The rest of every chunk: the large one is fetched now, and dropped
	// once its other 15 samples are served (the one read alone counts).
	rest = nil
	for _, lo := range []int{b, c, large} {
		for i := lo + 1; i < lo+16; i++ {
			rest = append(rest, i)
		}
	}
	getAll(t, p, ds, rest, want)
	if st := p.Stats(); st.Chunks != 4 || st.CachedBytes != 0 {
		t.Errorf("stats %+v: want 4 chunk fetches and nothing left cached", st)
	}
}

// TestPackedPrefetchTightCache: eight ranks that each read their own
// blocks, announcing the next block as each one starts. With a cache of
// about one chunk per rank, prefetches must not crowd out the chunks
// being read (which would then be read sample by sample, or evicted and
// fetched again): the prefetch budget backs off. With two chunks per
// rank, prefetching goes on and wastes nothing.
func TestPackedPrefetchTightCache(t *testing.T) {
	const ranks, blocksPerRank, block = 8, 6, 16
	mem := storage.NewMemStore(t.Name())
	ds, want := packFixture(t, mem, 8, ranks*blocksPerRank*block, block, 1000)
	var maxSpan int64
	for lo := 0; lo < len(ds.Samples); lo += block {
		first, last := ds.Samples[lo], ds.Samples[lo+block-1]
		maxSpan = max(maxSpan, last.Offset+last.Size-first.Offset)
	}
	ideal := int64(ranks * blocksPerRank)
	for _, tc := range []struct {
		name          string
		chunks        int64 // cache size, in chunks
		maxFetches    int64
		minPrefetches int64
	}{
		{"one per rank", ranks + 1, ideal + ideal/3, 0},
		{"two per rank", 2*ranks + 1, ideal, ranks},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slow := faulty.Wrap(mem, faulty.Rule{Ops: faulty.OpGetRange, NoError: true, Delay: 5 * time.Millisecond})
			p := packedStore(t, slow, ds, block, tc.chunks*maxSpan)
			var wg sync.WaitGroup
			for r := range ranks {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(r), 7))
					var buf []byte
					for b := range blocksPerRank {
						lo := (r*blocksPerRank + b) * block
						for j, k := range rng.Perm(block) {
							if j == 0 && b+1 < blocksPerRank {
								p.PrefetchSample(int64(lo + block))
							}
							key := ds.Samples[lo+k].Key
							var err error
							if buf, err = p.Get(context.Background(), key, buf); err != nil || !bytes.Equal(buf, want[key]) {
								t.Errorf("Get %s: %v", key, err)
								return
							}
							time.Sleep(500 * time.Microsecond) // decoding it
						}
					}
				})
			}
			wg.Wait()
			st := p.Stats()
			t.Logf("stats %+v", st)
			if st.Chunks > tc.maxFetches || st.ReadAlone > int64(block) || st.Prefetches < tc.minPrefetches {
				t.Errorf("%d chunk fetches (at most %d), %d samples read alone, %d prefetches (at least %d) for %d chunks",
					st.Chunks, tc.maxFetches, st.ReadAlone, st.Prefetches, tc.minPrefetches, ideal)
			}
		})
	}
}

// windowOrder visits [0, n) the way cluster.Order does with windows:
// blocks of b in a random order, taken w at a time, each window's indices
// shuffled together. It returns the windows.
func windowOrder(rng *rand.Rand, n, b, w int) [][]int {
	nb := (n + b - 1) / b
	perm := rng.Perm(nb)
	var out [][]int
	for k := 0; k < nb; k += w {
		var win []int
		for _, blk := range perm[k:min(k+w, nb)] {
			for i := blk * b; i < min(blk*b+b, n); i++ {
				win = append(win, i)
			}
		}
		rng.Shuffle(len(win), func(i, j int) { win[i], win[j] = win[j], win[i] })
		out = append(out, win)
	}
	return out
}

// TestPackedPrefetchFollowsWindows: a rank that announces each window's
// samples as its work arrives, then reads them interleaved, gets every
// chunk of the window prefetched (the budget starts at a window's chunks)
// and each fetched once; with Window 1 the budget starts at one chunk and
// most of the first windows' chunks wait for their first Get.
func TestPackedPrefetchFollowsWindows(t *testing.T) {
	const n, block, window = 96, 4, 4
	mem := storage.NewMemStore(t.Name())
	ds, want := packFixture(t, mem, 3, n, 16, 1000)
	chunks := int64(n / block)
	for _, tc := range []struct {
		window     int
		setWindow  bool // learn it with SetWindow, as a cluster node does
		prefetches func(int64) bool
	}{
		{window, false, func(p int64) bool { return p == chunks }},
		{window, true, func(p int64) bool { return p == chunks }},
		{1, false, func(p int64) bool { return p < chunks-4 }},
	} {
		t.Run(fmt.Sprintf("window=%d/set=%v", tc.window, tc.setWindow), func(t *testing.T) {
			cfg := dataset.PackedConfig{Block: block, Window: tc.window, CacheBytes: 1 << 20}
			if tc.setWindow {
				cfg.Window = 0
			}
			p, err := dataset.NewPackedStore(mem, ds, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if tc.setWindow {
				p.SetWindow(tc.window)
			}
			var buf []byte
			for _, win := range windowOrder(rand.New(rand.NewPCG(1, 2)), n, block, window) {
				for _, i := range win {
					p.PrefetchSample(int64(i))
				}
				for _, i := range win {
					key := ds.Samples[i].Key
					if buf, err = p.Get(context.Background(), key, buf); err != nil || !bytes.Equal(buf, want[key]) {
						t.Fatalf("Get %s: %v", key, err)
					}
				}
			}
			st := p.Stats()
			t.Logf("stats %+v", st)
			if st.Chunks != chunks || !tc.prefetches(st.Prefetches) || st.ReadAlone != 0 || st.Evictions != 0 || st.CachedBytes != 0 {
				t.Errorf("%d chunks: stats %+v", chunks, st)
			}
		})
	}
}

// TestCatalogPackedStore: a packed dataset read through its manifest
// index costs the chunks the in-memory path costs, one ranged GET per
// (block, shard) pair, for blocks aligned with the index's pieces and
// blocks that straddle two, with a manifest cache of one piece (pieces
// are read again and again) and with room for all; prefetching through
// the catalog fetches chunks before their Gets; a key that is not the
// sample is refused; and a plain sample in the manifest is the inner
// store's object.
func TestCatalogPackedStore(t *testing.T) {
	ctx := context.Background()
	mem := storage.NewMemStore(t.Name())
	ds, want := packFixture(t, mem, 7, 200, 24, 2000)
	if _, err := dataset.WriteManifestIndex(ctx, mem, dataset.ManifestJSONLName, 32, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		block      int
		cacheBytes int64
	}{{16, 0}, {16, 1}, {12, 1}, {40, 0}} {
		t.Run(fmt.Sprintf("block%d/cache%d", tc.block, tc.cacheBytes), func(t *testing.T) {
			m, err := dataset.OpenIndexedManifest(ctx, mem, dataset.ManifestJSONLName, dataset.IndexedConfig{CacheBytes: tc.cacheBytes})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			cs := &countingStore{Store: mem}
			p, err := dataset.NewCatalogPackedStore(cs, m, dataset.PackedConfig{Block: tc.block, CacheBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			var buf []byte
			for _, i := range blockOrder(rand.New(rand.NewPCG(uint64(tc.block), 3)), len(ds.Samples), tc.block) {
				key := ds.Samples[i].Key
				if buf, err = p.GetSample(ctx, int64(i), key, buf); err != nil || !bytes.Equal(buf, want[key]) {
					t.Fatalf("GetSample %d %s: %d bytes, %v; want its %d bytes", i, key, len(buf), err, len(want[key]))
				}
			}
			pairs, multi := chunkCount(ds, tc.block)
			st := p.Stats()
			if got := cs.ranges.Load(); got != int64(pairs) || st.Chunks != int64(multi) || st.CachedBytes != 0 {
				t.Errorf("%d ranged GETs of shards, stats %+v; want %d GETs (one per block and shard), %d chunks, nothing left", got, st, pairs, multi)
			}
			if _, err := p.GetSample(ctx, 0, ds.Samples[1].Key, nil); !errors.Is(err, storage.ErrInvalidKey) {
				t.Errorf("sample 0 under sample 1's key: %v, want ErrInvalidKey", err)
			}
			if _, err := p.GetSample(ctx, int64(len(ds.Samples)), "x", nil); !errors.Is(err, storage.ErrInvalidKey) {
				t.Errorf("sample past the end: %v, want ErrInvalidKey", err)
			}
		})
	}

	// Prefetch: the first call finds the piece not read and reads it;
	// once it is loaded, the chunk is fetched ahead of its Gets.
	m, err := dataset.OpenIndexedManifest(ctx, mem, dataset.ManifestJSONLName, dataset.IndexedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cs := &countingStore{Store: mem}
	p, err := dataset.NewCatalogPackedStore(cs, m, dataset.PackedConfig{Block: 16, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Block [48, 64) lies in one shard (24 samples each) and one piece.
	waitFor(t, func() bool {
		p.PrefetchSample(50)
		return p.Stats().Prefetches == 1
	})
	waitFor(t, func() bool { return cs.ranges.Load() == 1 })
	for i := 48; i < 64; i++ {
		key := ds.Samples[i].Key
		if got, err := p.GetSample(ctx, int64(i), key, nil); err != nil || !bytes.Equal(got, want[key]) {
			t.Fatalf("GetSample %d: %v", i, err)
		}
	}
	if got, st := cs.ranges.Load(), p.Stats(); got != 1 || st.Hits != 16 {
		t.Errorf("a prefetched chunk: %d ranged GETs, stats %+v; want 1 GET and 16 hits", got, st)
	}
}

// TestPackedReleasesServedMembers: a served member's pages go back to the
// kernel once copied out, the chunk's other members keep their bytes, a
// member asked for again is read alone with its right bytes, and members
// whose bytes overlap are never released (a page of one would be
// another's).
func TestPackedReleasesServedMembers(t *testing.T) {
	mem := storage.NewMemStore(t.Name())
	ds, want := packFixture(t, mem, 8, 32, 16, 40000)
	cs := &countingStore{Store: mem}
	p := packedStore(t, cs, ds, 16, 4<<20)
	getAll(t, p, ds, []int{3, 0, 7, 5}, want)
	st := p.Stats()
	if st.Chunks != 1 || (!offheap.OnHeap && st.ReleasedBytes == 0) {
		t.Errorf("stats %+v: want one chunk and the pages of its served members released", st)
	}
	before := cs.ranges.Load()
	getAll(t, p, ds, []int{3, 1, 2, 4, 6, 8, 9, 10, 11, 12, 13, 14, 15}, want)
	if got := cs.ranges.Load() - before; got != 1 {
		t.Errorf("%d ranged GETs for a member asked for again and the rest of its chunk, want 1 (its own)", got)
	}

	// Samples 16 and 17 name the same bytes.
	dup := *ds
	dup.Samples = slices.Clone(ds.Samples)
	dup.Samples[17].Offset, dup.Samples[17].Size = dup.Samples[16].Offset, dup.Samples[16].Size
	wantDup := map[string][]byte{}
	for k, v := range want {
		wantDup[k] = v
	}
	wantDup[dup.Samples[17].Key] = want[dup.Samples[16].Key]
	p2 := packedStore(t, mem, &dup, 16, 4<<20)
	getAll(t, p2, &dup, []int{16, 17, 18, 17}, wantDup)
	if st := p2.Stats(); st.ReleasedBytes != 0 {
		t.Errorf("a chunk with overlapping members released %d bytes", st.ReleasedBytes)
	}
}
