package actors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// TestFetchBuffersStayWithinFetchBytes: a dataset of small objects with
// a large one every 16th. Fetch buffers are reused, and before
// Config.FetchBytes each kept the capacity of the largest object it had
// ever read: the rank's 20 buffers ratcheted to 20 large objects and
// stayed there for the rest of the run (with 8 ranks of 66 buffers, the
// node's anonymous memory grew for minutes). Now the buffers in use follow
// FetchBytes at the mean object size, a buffer grown past twice the mean
// is freed when its sample is done, and what the rank holds after the
// run is within FetchBytes. Counted in bytes of buffer capacity, the
// pipeline's own account (not the heap, not the clock).
func TestFetchBuffersStayWithinFetchBytes(t *testing.T) {
	checkNoLeaks(t)
	const (
		n     = 2000
		small = 2 << 10
		large = 64 << 10
	)
	st := storage.NewMemStore("test")
	ds := &dataset.Dataset{Classes: []string{"c"}}
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("c/img%05d.jpg", i)
		size := small
		if i%16 == 0 {
			size = large
		}
		data := make([]byte, size)
		copy(data, key)
		if _, err := st.Put(context.Background(), key, data, storage.Cond{}); err != nil {
			t.Fatal(err)
		}
		ds.Samples = append(ds.Samples, dataset.Sample{Key: key})
	}
	const budget = 96 << 10
	cfg := Config{BatchSize: 16, Slots: 3, FetchConcurrency: 16, Decoders: 2, DecodeQueue: 2,
		Sample: Shape{Height: 4, Width: 4}, MaxFailures: MaxFailureCount(0), FetchBytes: budget}
	feeder, err := NewFeeder(ds, cfg, 0, 1, testOrder)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPipeline(cfg, 0, feeder, testDeps(st, fakeDecoders(0, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	got := 0
	for {
		b, err := p.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got += b.Len()
		b.Release()
	}
	if got != n {
		t.Fatalf("delivered %d samples, want %d", got, n)
	}
	now, peak := p.FetchBufferBytes()
	unbounded := int64(cfg.FetchConcurrency+cfg.Decoders*cfg.DecodeQueue) * large
	t.Logf("fetch buffers after the run: %d bytes (peak %d); FetchBytes %d; every buffer at the largest object: %d",
		now, peak, int64(budget), unbounded)
	if now > budget {
		t.Errorf("the rank's fetch buffers hold %d bytes after the run, FetchBytes is %d", now, budget)
	}
	// In the run: the buffers in use are what FetchBytes holds at the
	// mean (~5.9 KiB), so a few large objects may be in flight at once,
	// never every buffer's worth.
	if limit := int64(budget + 6*large); peak > limit {
		t.Errorf("the rank's fetch buffers held up to %d bytes, want at most %d (FetchBytes + 6 large objects)", peak, limit)
	}
}
