package ffdecode

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/actorstest"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/storage"
)

// makeJPEGs stores n real JPEGs of varied sizes (smooth gradients with
// noise, like photographs at a glance) and one truncated file.
func makeJPEGs(t *testing.T, n int) (*storage.MemStore, *dataset.Dataset, string) {
	t.Helper()
	st := storage.NewMemStore("jpegs")
	ds := &dataset.Dataset{Classes: []string{"a", "b"}}
	rng := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	for i := 0; i < n; i++ {
		w, h := 48+rng.IntN(200), 48+rng.IntN(200)
		img := image.NewRGBA(image.Rect(0, 0, w, h))
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				img.Set(x, y, color.RGBA{uint8(x * 255 / w), uint8(y * 255 / h), uint8(i*37 + rng.IntN(32)), 255})
			}
		}
		var buf bytes.Buffer
		if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("%s/%03d.jpg", ds.Classes[i%2], i)
		data := buf.Bytes()
		if i == n-1 {
			data = data[:len(data)/3] // truncated: a corrupt object
		}
		st.Put(ctx, key, data, storage.Cond{})
		ds.Samples = append(ds.Samples, dataset.Sample{Key: key, Label: int32(i % 2)})
	}
	return st, ds, ds.Samples[n-1].Key
}

// TestRealJPEGsThroughNode: real JPEGs decoded by FFmpeg through a 2-rank,
// 2-epoch node: every sample once per epoch (the truncated one recorded as
// corrupt), and every sample's pixels equal to what a lone decoder produces
// for that sample's seed, so the crop is the same whichever decoder did it.
func TestRealJPEGsThroughNode(t *testing.T) {
	const n = 41
	st, ds, bad := makeJPEGs(t, n)
	dc := decode.DefaultConfig()
	dc.Transform.Size = 32
	cfg := actors.Config{BatchSize: 4, Slots: 3, FetchConcurrency: 4, Decoders: 2, Epochs: 2, Seed: 9,
		MaxFailures: actors.MaxFailureCount(2)}
	deps := actors.Deps{Store: st, Allocator: gpu.HeapAllocator{}, Order: func(seed uint64, epoch int, n int64) actors.Order {
		return actorstest.Shuffle(seed, epoch, n)
	}}
	if err := Use(&cfg, &deps, dc); err != nil {
		t.Fatal(err)
	}
	node, err := actors.NewNode(cfg, ds, 2, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	ref, err := decode.NewDecoder(dc)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	var mu sync.Mutex
	seen := map[[2]int64]int{}
	want := make([]byte, dc.SampleBytes())
	err = node.Run(context.Background(), func(b *actors.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		sb := dc.SampleBytes()
		for i, key := range b.Keys {
			if !b.Pads[i] && !b.Filled[i] { // a filled row copies another sample
				seen[[2]int64{int64(b.Epoch), b.Indices[i]}]++
			}
			data, _ := st.Get(context.Background(), key, nil)
			if _, err := ref.Decode(data, decode.SampleSeed(cfg.Seed, b.Epoch, b.Indices[i]), want); err != nil {
				t.Errorf("reference decode of %s: %v", key, err)
				continue
			}
			if !bytes.Equal(b.Images[i*sb:(i+1)*sb], want) {
				t.Errorf("epoch %d %s: pipeline pixels differ from a lone decoder's", b.Epoch, key)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for e := int64(0); e < 2; e++ {
		for i := int64(0); i < n; i++ {
			want := 1
			if ds.Samples[i].Key == bad {
				want = 0
			}
			if got := seen[[2]int64{e, i}]; got != want {
				t.Errorf("epoch %d sample %d (%s) delivered %d times, want %d", e, i, ds.Samples[i].Key, got, want)
			}
		}
	}
	rep := node.Failures()
	if rep.Failed != 2 || len(rep.Groups) != 1 || rep.Groups[0].Class != "corrupt" || rep.Groups[0].Stage != actors.StageDecode {
		t.Errorf("report: %v", rep)
	}
	st0 := node.Stats()
	t.Logf("stats: %.0f samples/s, bottleneck %+v", st0.SamplesPerSecond, st0.Bottleneck)
}

// The sample spec is defined once: decode's layout is the pipeline's
// (no conversion between two enums), and the spec decode produces is the
// one the pipeline sizes its slots with.
func TestOneSampleSpec(t *testing.T) {
	for _, l := range []decode.Layout{decode.NCHW, decode.NHWC} {
		dc := decode.DefaultConfig()
		dc.Transform.Size = 17
		dc.Layout = l
		var pl actors.Layout = dc.Layout
		want := actors.Shape{Height: 17, Width: 17, Layout: pl}
		if got := Shape(dc); got != want || dc.Spec() != want {
			t.Errorf("layout %v: Shape %v, Spec %v, want %v", l, got, dc.Spec(), want)
		}
		if dc.SampleBytes() != want.SampleBytes() {
			t.Errorf("layout %v: SampleBytes %d, want %d", l, dc.SampleBytes(), want.SampleBytes())
		}
	}
}
