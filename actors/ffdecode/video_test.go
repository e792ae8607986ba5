package ffdecode

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/actorstest"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/decode/video"
	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/storage"
)

// videoRun runs the committed clips (and a truncated one) through a
// 2-rank, 2-epoch node and returns every delivered clip's bytes and short
// mark by (epoch, key), and the store's request counts.
func videoRun(t *testing.T, vc video.Config, readAhead int64, on *VideoDevices) (map[[2]string][]byte, map[string]bool, storage.RequestStats) {
	t.Helper()
	mem := storage.NewMemStore("video")
	ds := &dataset.Dataset{Classes: []string{"a"}}
	ctx := context.Background()
	for _, name := range []string{"cfr_h264.mp4", "vfr_h264.mkv", "hevc.mp4", "vp9.webm", "av1.mkv", "short_h264.mp4", "cut.mp4"} {
		src := name
		if name == "cut.mp4" {
			src = "cfr_h264.mp4"
		}
		b, err := os.ReadFile(filepath.Join("../../testdata/media", src))
		if err != nil {
			t.Fatalf("%v (scripts/mkmedia.sh makes it)", err)
		}
		if name == "cut.mp4" {
			b = b[:len(b)/2]
		}
		mem.Put(ctx, name, b, storage.Cond{})
		ds.Samples = append(ds.Samples, dataset.Sample{Key: name})
	}
	st := storage.NewCountingStore(mem)
	cfg := actors.Config{BatchSize: 2, Slots: 3, FetchConcurrency: 3, Decoders: 2, Epochs: 2, Seed: 8,
		MaxFailures: actors.MaxFailureCount(4)}
	deps := actors.Deps{Store: st, Allocator: gpu.HeapAllocator{}, Order: func(seed uint64, epoch int, n int64) actors.Order {
		return actorstest.Shuffle(seed, epoch, n)
	}}
	if err := UseVideo(&cfg, &deps, vc, readAhead, on); err != nil {
		t.Fatal(err)
	}
	node, err := actors.NewNode(cfg, ds, 2, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	var mu sync.Mutex
	clips := map[[2]string][]byte{}
	short := map[string]bool{}
	ref, _ := video.NewDecoder(vc)
	sb := cfg.Sample.SampleBytes()
	want := make([]byte, sb)
	err = node.Run(ctx, func(b *actors.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(b.Shape, append([]int{b.Len()}, cfg.Sample.SampleDims()...)) {
			t.Errorf("batch shape %v", b.Shape)
		}
		for i, key := range b.Keys {
			got := b.Images[i*sb : (i+1)*sb]
			data, _ := mem.Get(ctx, key, nil)
			c, err := ref.Decode(data, decode.SampleSeed(cfg.Seed, b.Epoch, b.Indices[i]), want)
			if err != nil || !bytes.Equal(got, want) || c.Short != b.Short[i] {
				t.Errorf("epoch %d %s: pipeline clip differs from a lone decoder's (short %v/%v, err %v)", b.Epoch, key, b.Short[i], c.Short, err)
			}
			if !b.Pads[i] && !b.Filled[i] { // a filled row copies another sample
				clips[[2]string{string(rune('0' + b.Epoch)), key}] = append([]byte(nil), got...)
				short[key] = b.Short[i]
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep := node.Failures(); rep.Failed < 2 || rep.Groups[0].Class != "corrupt" {
		t.Errorf("report: %v", rep)
	}
	return clips, short, st.Stats()
}

// TestVideoThroughNode: clips through the pipeline equal a lone decoder's
// for their (seed, epoch, index), whole-object and ranged alike; the
// ranged pipeline reads by GetRange only (no whole-object Get); the short
// clip is marked; a truncated one fails as corrupt; training clips differ
// between epochs.
func TestVideoThroughNode(t *testing.T) {
	vc := video.Config{Frames: 4, FPS: 6, Sampling: video.Random, Size: 32, Train: true, Threads: 1}
	whole, short, wst := videoRun(t, vc, 0, nil)
	ranged, rshort, rst := videoRun(t, vc, 8<<10, nil)
	// On a device that refuses every stream (video.TwinDevice), ranged:
	// each clip goes back to the CPU, from the object's start, counted.
	on := NewVideoDevices([]*video.Device{video.TwinDevice()})
	twin, _, _ := videoRun(t, vc, 8<<10, on)
	if len(whole) != 12 || len(ranged) != 12 || len(twin) != 12 {
		t.Fatalf("%d, %d and %d clips delivered, want 12 (2 epochs of 6)", len(whole), len(ranged), len(twin))
	}
	for k, v := range whole {
		if !bytes.Equal(v, ranged[k]) || !bytes.Equal(v, twin[k]) {
			t.Errorf("%v: ranged, whole-object and fallback clips differ", k)
		}
	}
	// (a last batch's pads are decodes too: 12 and up)
	if s := on.Stats(); s.NVDEC != 0 || s.CPU < 12 || s.Reasons[video.FallbackRefused] != s.CPU {
		t.Errorf("twin device: %v, want every clip on the CPU, refused", s)
	}
	if !short["short_h264.mp4"] || !rshort["short_h264.mp4"] || short["cfr_h264.mp4"] {
		t.Errorf("short marks %v %v", short, rshort)
	}
	if bytes.Equal(whole[[2]string{"0", "vfr_h264.mkv"}], whole[[2]string{"1", "vfr_h264.mkv"}]) {
		t.Error("the same training clip in both epochs")
	}
	okGets := func(s storage.RequestStats, op storage.StoreOp) int64 { return s.Count(op, storage.OutcomeOK) }
	if okGets(rst, storage.OpGet) != 0 || okGets(rst, storage.OpGetRange) == 0 || okGets(wst, storage.OpGetRange) != 0 {
		t.Errorf("whole: %d gets, %d ranged; ranged: %d gets, %d ranged", okGets(wst, storage.OpGet), okGets(wst, storage.OpGetRange),
			okGets(rst, storage.OpGet), okGets(rst, storage.OpGetRange))
	}
	t.Logf("whole-object: %d bytes read; ranged (8 KiB read-ahead): %d bytes in %d ranged gets", wst.BytesRead, rst.BytesRead, okGets(rst, storage.OpGetRange))
}

// TestVideoDeviceCounts: clips are counted by where they were decoded,
// the CPU's by reason; failed clips are not counted (the failure report
// has them).
func TestVideoDeviceCounts(t *testing.T) {
	v := NewVideoDevices(nil)
	v.count(video.Clip{Device: true}, nil)
	v.count(video.Clip{Device: true}, nil)
	v.count(video.Clip{Fallback: video.FallbackRefused}, nil)
	v.count(video.Clip{Fallback: video.FallbackDeviceError}, nil)
	v.count(video.Clip{Fallback: video.FallbackRefused}, nil)
	v.count(video.Clip{Fallback: video.FallbackCodec}, errors.New("corrupt"))
	var none *VideoDevices
	none.count(video.Clip{Device: true}, nil) // the CPU path: no counts, no panic
	s := v.Stats()
	if s.NVDEC != 2 || s.CPU != 3 || s.Reasons[video.FallbackRefused] != 2 || s.Reasons[video.FallbackDeviceError] != 1 || len(s.Reasons) != 2 {
		t.Errorf("stats %+v", s)
	}
	if got, want := s.String(), "nvdec 2, cpu 3 (device_error 1, refused 2)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if _, err := VideoFactory(video.Config{}, 0, v)(); err == nil {
		t.Error("a factory over no devices made a decoder")
	}
}
