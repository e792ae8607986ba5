package ffdecode

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/actorstest"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/decode/video"
	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/faulty"
)

// Ranged reads are a fetch mode: the fetch stage states each object and
// the decoder's ranged reads go through the fetch stage's store-outage
// retries, so a video sample survives a store that fails for a while
// (here its first stat and ranged gets), as an image does; the retries
// wait on the pipeline's clock (a fake, advanced whenever they wait).
func TestRangedVideoSurvivesStoreOutage(t *testing.T) {
	mem := storage.NewMemStore("video")
	ds := &dataset.Dataset{Classes: []string{"a"}}
	ctx := context.Background()
	for _, name := range []string{"cfr_h264.mp4", "vp9.webm", "vfr_h264.mkv"} {
		b, err := os.ReadFile(filepath.Join("../../testdata/media", name))
		if err != nil {
			t.Fatalf("%v (scripts/mkmedia.sh makes it)", err)
		}
		mem.Put(ctx, name, b, storage.Cond{})
		ds.Samples = append(ds.Samples, dataset.Sample{Key: name})
	}
	refused := errors.New("dial tcp 10.0.0.9:9000: connect: connection refused")
	st := faulty.Wrap(mem,
		faulty.Rule{Ops: faulty.OpStat, Key: faulty.Equals("cfr_h264.mp4"), FirstN: 2, Err: refused},
		faulty.Rule{Ops: faulty.OpGetRange, Key: faulty.Equals("vp9.webm"), FirstN: 3, Err: refused},
	)
	fc := clock.NewFake(time.Time{})
	stop := make(chan struct{})
	driven := make(chan struct{})
	go func() { // advance the fake clock whenever a retry waits on it
		defer close(driven)
		bctx, cancel := context.WithCancel(ctx)
		go func() { <-stop; cancel() }()
		for fc.BlockUntil(bctx, 1) == nil {
			fc.Advance(time.Second)
		}
	}()
	defer func() { close(stop); <-driven }()

	vc := video.Config{Frames: 4, Size: 32}
	cfg := actors.Config{BatchSize: 3, Slots: 2, FetchConcurrency: 2, Decoders: 2, Epochs: 1, Seed: 5,
		StoreOutage: time.Minute, MaxFailures: actors.MaxFailureCount(0)}
	deps := actors.Deps{Store: st, Allocator: gpu.HeapAllocator{}, Clock: fc, Order: func(seed uint64, epoch int, n int64) actors.Order {
		return actorstest.Shuffle(seed, epoch, n)
	}}
	if err := UseVideo(&cfg, &deps, vc, 8<<10, nil); err != nil {
		t.Fatal(err)
	}
	p, err := actors.NewLoader(cfg, ds, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	b, err := p.Next(ctx)
	if err != nil {
		t.Fatalf("a transient store failure failed the run: %v", err)
	}
	defer b.Release()
	if b.Len() != 3 || b.Failed != 0 {
		t.Fatalf("batch of %d with %d failed (%v), want the 3 clips", b.Len(), b.Failed, p.Failures())
	}
	ref, err := video.NewDecoder(vc)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	sb := cfg.Sample.SampleBytes()
	want := make([]byte, sb)
	for i, key := range b.Keys {
		data, _ := mem.Get(ctx, key, nil)
		if _, err := ref.Decode(data, decode.SampleSeed(cfg.Seed, 0, b.Indices[i]), want); err != nil || !bytes.Equal(b.Images[i*sb:(i+1)*sb], want) {
			t.Errorf("%s: clip differs from a lone decoder's (%v)", key, err)
		}
	}
	if n := st.Injections(); n != 5 {
		t.Errorf("%d failures injected, want 5 (2 stats, 3 ranged gets)", n)
	}
	if r := p.Stats().StoreRetries; r < 5 {
		t.Errorf("%d store retries, want at least the 5 injected failures", r)
	}
}
