package ffdecode

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/actorstest"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/decode/audio"
	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/storage"
)

// TestRealAudioThroughNode: the committed clips in every format (and a
// truncated one, and one without audio) through a 2-rank, 2-epoch node in
// training mode: every sample once per epoch except the two bad ones
// (recorded as corrupt and unsupported), every window equal to a lone
// decoder's for its (seed, epoch, index), the half-second clip marked
// short, and a long clip's window different between the epochs.
func TestRealAudioThroughNode(t *testing.T) {
	st := storage.NewMemStore("audio")
	ds := &dataset.Dataset{Classes: []string{"speech", "tone", "other"}}
	ctx := context.Background()
	add := func(key string, label int32, data []byte) {
		st.Put(ctx, key, data, storage.Cond{})
		ds.Samples = append(ds.Samples, dataset.Sample{Key: key, Label: label})
	}
	for _, name := range []string{"speech.wav", "speech.flac", "speech.mp3", "speech.opus", "speech.ogg",
		"tone.wav", "tone.flac", "tone.mp3", "tone.opus", "tone.ogg", "short.flac", "short.wav", "noaudio.mkv"} {
		b, err := os.ReadFile(filepath.Join("../../testdata/media", name))
		if err != nil {
			t.Fatalf("%v (scripts/mkmedia.sh makes it)", err)
		}
		add(name, int32(min(2, len(ds.Samples)/5)), b)
		if name == "tone.flac" {
			add("cut.flac", 1, b[:40]) // the header cut short
		}
	}
	ac := audio.Config{SampleRate: 16000, Channels: 2, Seconds: 1, Train: true}
	cfg := actors.Config{BatchSize: 3, Slots: 3, FetchConcurrency: 4, Decoders: 2, Epochs: 2, Seed: 5,
		MaxFailures: actors.MaxFailureCount(4)}
	deps := actors.Deps{Store: st, Allocator: gpu.HeapAllocator{}, Order: func(seed uint64, epoch int, n int64) actors.Order {
		return actorstest.Shuffle(seed, epoch, n)
	}}
	if err := UseAudio(&cfg, &deps, ac); err != nil {
		t.Fatal(err)
	}
	if cfg.Sample.Kind != actors.KindAudio || cfg.Sample.SampleBytes() != 4*2*16000 {
		t.Fatalf("sample spec %v", cfg.Sample)
	}
	node, err := actors.NewNode(cfg, ds, 2, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	ref, err := audio.NewDecoder(ac)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[[2]int64]int{}
	windows := map[string][][]byte{} // by key, per epoch
	sb := cfg.Sample.SampleBytes()
	want := make([]byte, sb)
	err = node.Run(ctx, func(b *actors.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(b.Shape, []int{b.Len(), 2, 16000}) || b.Spec.DType() != actors.Float32 {
			t.Errorf("batch shape %v dtype %v", b.Shape, b.Spec.DType())
		}
		for i, key := range b.Keys {
			if !b.Pads[i] && !b.Filled[i] { // a filled row copies another sample
				seen[[2]int64{int64(b.Epoch), b.Indices[i]}]++
			}
			data, _ := st.Get(ctx, key, nil)
			short, err := ref.Decode(data, decode.SampleSeed(cfg.Seed, b.Epoch, b.Indices[i]), want)
			if err != nil {
				t.Errorf("reference decode of %s: %v", key, err)
				continue
			}
			got := b.Images[i*sb : (i+1)*sb]
			if !bytes.Equal(got, want) {
				t.Errorf("epoch %d %s: pipeline window differs from a lone decoder's", b.Epoch, key)
			}
			if b.Short[i] != short || short != (key == "short.flac" || key == "short.wav") {
				t.Errorf("epoch %d %s: short %v, reference %v", b.Epoch, key, b.Short[i], short)
			}
			if !b.Pads[i] && !b.Filled[i] { // a filled row copies another sample
				windows[key] = append(windows[key], append([]byte(nil), got...))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for e := int64(0); e < 2; e++ {
		for i, s := range ds.Samples {
			want := 1
			if s.Key == "cut.flac" || s.Key == "noaudio.mkv" {
				want = 0
			}
			if got := seen[[2]int64{e, int64(i)}]; got != want {
				t.Errorf("epoch %d sample %d (%s) delivered %d times, want %d", e, i, s.Key, got, want)
			}
		}
	}
	if w := windows["speech.flac"]; len(w) != 2 || bytes.Equal(w[0], w[1]) {
		t.Errorf("speech.flac: the two epochs' training windows are the same (or missing: %d)", len(w))
	}
	rep := node.Failures()
	classes := map[string]int{}
	for _, g := range rep.Groups {
		classes[g.Class] += int(g.Count)
	}
	if rep.Failed != 4 || classes["corrupt"] != 2 || classes["unsupported"] != 2 {
		t.Errorf("report: %v", rep)
	}
}
