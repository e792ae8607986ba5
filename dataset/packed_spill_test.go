package dataset_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/internal/offheap"
	"github.com/longshore/longshore/storage"
)

func spillStore(t *testing.T, inner storage.Store, ds *dataset.Dataset, block int, cacheBytes int64, staging int) *dataset.PackedStore {
	t.Helper()
	p, err := dataset.NewPackedStore(inner, ds, dataset.PackedConfig{Block: block, CacheBytes: cacheBytes, SpillDir: t.TempDir(), SpillStaging: staging})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestPackedSpill: with chunks on disk, concurrent fetchers over three
// epochs read every sample's exact bytes with one ranged GET per chunk
// (from the staging buffer while the chunk is written, from its file
// after), and a member asked for again, once the file is written, comes
// from it, not the store. Closing frees the staging buffers.
func TestPackedSpill(t *testing.T) {
	for name, inner := range freshStores(t) {
		ds, want := packFixture(t, inner, 11, 300, 24, 9000)
		t.Run(name, func(t *testing.T) {
			mapped := offheap.Mapped()
			cs := &countingStore{Store: inner}
			p := spillStore(t, cs, ds, 24, 64<<20, 3)
			if p.Stats().SpillStaging == 0 {
				t.Fatal("no staging buffers with a SpillDir: not spilling")
			}
			const epochs, fetchers = 3, 16
			for e := range epochs {
				order := blockOrder(rand.New(rand.NewPCG(uint64(e), 3)), len(ds.Samples), 24)
				bad := readConcurrently(ds, order, want, fetchers, func(i int, buf []byte) ([]byte, error) {
					return p.GetSample(context.Background(), int64(i), ds.Samples[i].Key, buf)
				})
				if bad > 0 {
					t.Fatalf("epoch %d: %d wrong reads", e, bad)
				}
			}
			pairs, multi := chunkCount(ds, 24)
			// The last chunks' files may still be being written after
			// their members were served.
			dataset.WaitFetches(p)
			st := p.Stats()
			// A chunk whose members were all served from its staging
			// buffer before its file was written is not written.
			if cs.ranges.Load() != int64(epochs*pairs) || st.Spilled > st.Chunks || st.Chunks != int64(epochs*multi) || st.SpillErrors != 0 || st.CachedBytes != 0 {
				t.Errorf("%d ranged GETs (want %d), stats %+v: want one chunk read an epoch, at most that many spilled, nothing left", cs.ranges.Load(), epochs*pairs, st)
			}

			// Once the chunk's file is written, its members come from it,
			// a member asked for twice too.
			before, spilled := cs.ranges.Load(), st.Spilled
			getAll(t, p, ds, []int{3}, want)
			waitFor(t, func() bool { return p.Stats().Spilled == spilled+1 })
			getAll(t, p, ds, []int{0, 7, 3, 5, 7}, want)
			if got := cs.ranges.Load() - before; got != 1 {
				t.Errorf("%d ranged GETs for members of one chunk, some twice; want 1", got)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			if got := offheap.Mapped(); got != mapped {
				t.Errorf("%d bytes mapped off the heap after Close, %d before", got, mapped)
			}
		})
	}
}

// gateStore holds every ranged GET until gate closes, counting those in
// flight.
type gateStore struct {
	storage.Store
	gate     chan struct{}
	inFlight atomic.Int64
}

func (g *gateStore) GetRange(ctx context.Context, key string, off, n int64, dst []byte) ([]byte, error) {
	g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	<-g.gate
	return g.Store.GetRange(ctx, key, off, n, dst)
}

// TestPackedSpillStaging: chunk fetches beyond SpillStaging wait for a
// staging buffer instead of reading into memory of their own, so
// spilling holds at most that many chunks in memory.
func TestPackedSpillStaging(t *testing.T) {
	mem := storage.NewMemStore(t.Name())
	ds, want := packFixture(t, mem, 12, 160, 16, 9000)
	g := &gateStore{Store: mem, gate: make(chan struct{})}
	p := spillStore(t, g, ds, 16, 64<<20, 2)
	const chunks = 10
	var wg sync.WaitGroup
	errs := make(chan error, chunks)
	for c := range chunks {
		wg.Go(func() {
			i := c * 16 // the first sample of chunk c
			key := ds.Samples[i].Key
			got, err := p.GetSample(context.Background(), int64(i), key, nil)
			if err == nil && string(got) != string(want[key]) {
				err = fmt.Errorf("sample %d: wrong bytes", i)
			}
			errs <- err
		})
	}
	waitFor(t, func() bool { return g.inFlight.Load() == 2 && dataset.SpillWaiting(p) == chunks-2 })
	if n := g.inFlight.Load(); n != 2 {
		t.Errorf("%d fetches read from the store at once, want 2 (SpillStaging)", n)
	}
	close(g.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	// Each Get was served from its staging buffer; the files are
	// written after.
	waitFor(t, func() bool { return p.Stats().Spilled == chunks })
}

// TestPackedSpillFailedLoad: a chunk whose span cannot be read is not
// spilled; its samples are read alone, as without spilling.
func TestPackedSpillFailedLoad(t *testing.T) {
	mem := storage.NewMemStore(t.Name())
	ds, want := packFixture(t, mem, 13, 48, 48, 5000)
	short := *ds
	short.Samples = append([]dataset.Sample(nil), ds.Samples...)
	last := &short.Samples[15]
	last.Size += 1 << 20 // past the shard's end: the chunk's span is short
	p := spillStore(t, mem, &short, 16, 64<<20, 2)
	getAll(t, p, ds, []int{0, 1, 2}, want)
	st := p.Stats()
	if st.Spilled != 0 || st.ChunkFailures != 1 || st.ReadAlone != 3 {
		t.Errorf("stats %+v: want the chunk failed, not spilled, its samples read alone", st)
	}
}

// TestCheckSpillDir: a missing directory, a file, and a directory in
// memory are refused with ErrSpillDir; a disk directory is taken.
func TestCheckSpillDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", filepath.Join(dir, "missing"), file} {
		if err := dataset.CheckSpillDir(bad); !errors.Is(err, dataset.ErrSpillDir) {
			t.Errorf("CheckSpillDir(%q) = %v, want ErrSpillDir", bad, err)
		}
	}
	if err := dataset.CheckSpillDir(dir); err != nil {
		t.Errorf("CheckSpillDir(%s), a disk directory: %v", dir, err)
	}
	if _, err := dataset.NewPackedStore(storage.NewMemStore(t.Name()), &dataset.Dataset{}, dataset.PackedConfig{SpillDir: file}); !errors.Is(err, dataset.ErrSpillDir) {
		t.Errorf("NewPackedStore with a file as SpillDir: %v, want ErrSpillDir", err)
	}
	shm := tmpfsDir(t)
	err := dataset.CheckSpillDir(shm)
	if !errors.Is(err, dataset.ErrSpillDir) || !strings.Contains(err.Error(), "tmpfs") {
		t.Errorf("CheckSpillDir(%s), in memory: %v, want ErrSpillDir naming tmpfs", shm, err)
	}
}

// tmpfsDir returns a writable directory on a tmpfs mount (/dev/shm on
// every Linux this project runs on, else the first tmpfs in
// /proc/mounts).
func tmpfsDir(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/mounts")
	if err != nil {
		t.Fatalf("no /proc/mounts to find a tmpfs in: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[2] != "tmpfs" {
			continue
		}
		if d, err := os.MkdirTemp(fields[1], "spill-test-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	t.Fatal("no writable tmpfs mount in /proc/mounts (Linux mounts one at /dev/shm)")
	return ""
}
