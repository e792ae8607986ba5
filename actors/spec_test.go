package actors

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestShapeSpecs(t *testing.T) {
	for _, tc := range []struct {
		s      Shape
		dims   []int
		dtype  DType
		layout string
		bytes  int
	}{
		{Shape{Height: 2, Width: 3}, []int{5, 3, 2, 3}, Uint8, "NCHW", 18},
		{Shape{Height: 2, Width: 3, Layout: NHWC}, []int{5, 2, 3, 3}, Uint8, "NHWC", 18},
		{Shape{Kind: KindVideo, Frames: 4, Height: 2, Width: 3}, []int{5, 4, 3, 2, 3}, Uint8, "NTCHW", 72},
		{Shape{Kind: KindVideo, Frames: 4, Height: 2, Width: 3, Layout: NHWC}, []int{5, 4, 2, 3, 3}, Uint8, "NTHWC", 72},
		{Shape{Kind: KindAudio, AudioChannels: 2, AudioSamples: 100}, []int{5, 2, 100}, Float32, "NCS", 800},
	} {
		if got := tc.s.BatchDims(5); !slices.Equal(got, tc.dims) {
			t.Errorf("%v: BatchDims %v, want %v", tc.s, got, tc.dims)
		}
		if tc.s.DType() != tc.dtype || tc.s.LayoutName() != tc.layout || tc.s.SampleBytes() != tc.bytes {
			t.Errorf("%v: dtype %v layout %s bytes %d, want %v %s %d", tc.s, tc.s.DType(), tc.s.LayoutName(), tc.s.SampleBytes(), tc.dtype, tc.layout, tc.bytes)
		}
		if d := tc.s.Dims(5); (tc.s.Kind == KindImage) != (d != [4]int{}) {
			t.Errorf("%v: Dims %v: want 4 dims only for images", tc.s, d)
		}
	}
	// Defaults by kind: an image keeps 224x224; audio gets 1x16000 and no
	// pixel geometry; video gets 16 frames of 224x224.
	a := Config{Sample: Shape{Kind: KindAudio}}.WithDefaults().Sample
	if a.AudioChannels != 1 || a.AudioSamples != 16000 || a.Height != 0 {
		t.Errorf("audio defaults: %+v", a)
	}
	v := Config{Sample: Shape{Kind: KindVideo}}.WithDefaults().Sample
	if v.Frames != 16 || v.Height != 224 || v.Width != 224 {
		t.Errorf("video defaults: %+v", v)
	}
	err := Config{Sample: Shape{Kind: KindAudio, AudioChannels: -1}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "audio channels") {
		t.Errorf("negative channels: %v", err)
	}
	err = Config{Sample: Shape{Kind: KindVideo, Frames: -2}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "Frames") {
		t.Errorf("negative frames: %v", err)
	}
	if err := (Config{Sample: Shape{Kind: 9}}).Validate(); err == nil {
		t.Error("unknown kind accepted")
	}
	var k Kind
	if err := k.UnmarshalText([]byte("Audio")); err != nil || k != KindAudio {
		t.Errorf("UnmarshalText audio: %v %v", k, err)
	}
	if err := k.UnmarshalText([]byte("sound")); err == nil {
		t.Error("kind sound accepted")
	}
}

// waveDecoder writes float32 samples fixed by the object's bytes, and
// says the sample was short for objects whose first byte's low bit is set
// (a stand-in for a waveform shorter than its window); objects whose key
// ends in "7.jpg" fail.
type waveDecoder struct{}

func (waveDecoder) Decode(data []byte, seed uint64, dst []byte) error {
	_, err := waveDecoder{}.DecodeWindow(data, seed, dst)
	return err
}

func (waveDecoder) DecodeWindow(data []byte, seed uint64, dst []byte) (bool, error) {
	if strings.Contains(string(data), "7.jpg") {
		return false, errors.New("bad wave")
	}
	v := waveValue(data)
	for i := 0; i+4 <= len(dst); i += 4 {
		binary.LittleEndian.PutUint32(dst[i:], math.Float32bits(v+float32(i/4)))
	}
	return waveShort(data), nil
}

func (waveDecoder) Close() error { return nil }

func waveValue(data []byte) float32 {
	h := fnv.New32a()
	h.Write(data)
	return float32(h.Sum32()%1000) / 8
}

func waveShort(data []byte) bool {
	h := fnv.New32a()
	h.Write(data)
	return h.Sum32()%3 == 0
}

// TestAudioSpecThroughPipeline: float32 [N,C,S] samples travel the
// pipeline with their spec and shape, Short marks follow their samples
// through the compaction of failed ones, with and without a decode
// deadline (the worker path).
func TestAudioSpecThroughPipeline(t *testing.T) {
	for _, deadline := range []time.Duration{-1, time.Minute} {
		checkNoLeaks(t)
		st, ds := makeDataset(t, 40, 2, 64)
		cfg := smallConfig()
		cfg.Sample = Shape{Kind: KindAudio, AudioChannels: 2, AudioSamples: 5}
		cfg.MaxFailures = MaxFailureCount(10)
		cfg.DecodeDeadline = deadline
		p, err := NewLoader(cfg, ds, testDeps(st, func() (SampleDecoder, error) { return waveDecoder{}, nil }))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		seen, shorts, failed := 0, 0, 0
		for {
			b, err := p.Next(ctx)
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatal(err)
				}
				break
			}
			n := b.Len()
			if !slices.Equal(b.Shape, []int{n, 2, 5}) || b.Spec.DType() != Float32 || len(b.Short) != n || len(b.Images) != n*40 {
				t.Fatalf("batch shape %v dtype %v short %d bytes %d for %d samples", b.Shape, b.Spec.DType(), len(b.Short), len(b.Images), n)
			}
			for j := 0; j < n; j++ {
				obj := objectBytes(t, st, b.Keys[j])
				if got, want := math.Float32frombits(binary.LittleEndian.Uint32(b.Images[j*40:])), waveValue(obj); got != want {
					t.Fatalf("%s: first sample %v, want %v", b.Keys[j], got, want)
				}
				if b.Short[j] != waveShort(obj) {
					t.Fatalf("%s: short %v, want %v", b.Keys[j], b.Short[j], waveShort(obj))
				}
				if b.Filled[j] { // a copy of another row
					continue
				}
				if b.Short[j] {
					shorts++
				}
				seen++
			}
			failed += b.Failed
			b.Release()
		}
		cancel()
		p.Close()
		if seen+failed != 40 || failed != 4 || shorts == 0 || shorts == seen {
			t.Fatalf("deadline %v: %d delivered, %d failed, %d short", deadline, seen, failed, shorts)
		}
	}
}
