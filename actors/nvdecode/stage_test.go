package nvdecode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/jpeg"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/actorstest"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/gpu/nvjpeg"
	"github.com/longshore/longshore/storage"
)

func stageConfig(t *testing.T) decode.Config {
	dc := decode.DefaultConfig()
	dc.Transform = transformOf(t, "train", 32)
	return dc
}

type stageRig struct {
	twin  *TwinDevice
	dev   *Device
	node  *Node
	dec   actors.SampleDecoder
	stage actors.BatchStage
	dc    decode.Config
}

func newRig(t *testing.T, twin *TwinDevice, batch int) *stageRig {
	t.Helper()
	dc := stageConfig(t)
	dev, err := NewDevice(twin.Engine, batch, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	node, err := NewNode(dc, []*Device{dev}, 4096)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := node.Decoders()()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dec.Close() })
	st, err := node.Stages()(0, dc.Spec())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &stageRig{twin: twin, dev: dev, node: node, dec: dec, stage: st, dc: dc}
}

// viaTwin is what the device makes of a GPU-routed sample: the whole
// picture (Go's decoder standing in for nvJPEG) through the device
// resize.
func viaTwin(t *testing.T, dc decode.Config, data []byte, seed uint64) []byte {
	t.Helper()
	img, err := jpeg.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	w, h := img.Bounds().Dx(), img.Bounds().Dy()
	p := PlanResize(dc.Transform, dc.Layout, w, h, seed)
	out := make([]byte, dc.SampleBytes())
	p.Resize(TwinRGB(img), 3*w, out)
	return out
}

// batchOf decodes files[i % len] with seed i into the rows of a batch of
// n, as the decoder actors would, and returns it with each row's bytes
// and seed.
func (r *stageRig) batchOf(t *testing.T, files []string, n int) (*actors.Batch, [][]byte, []uint64) {
	t.Helper()
	sb := r.dc.SampleBytes()
	b := &actors.Batch{Images: make([]byte, n*sb), Spec: r.dc.Spec(), Labels: make([]int32, n), Keys: make([]string, n)}
	var datas [][]byte
	var seeds []uint64
	for i := range n {
		data := read(t, files[i%len(files)])
		seed := uint64(1000 + i)
		if err := r.dec.Decode(data, seed, b.Images[i*sb:(i+1)*sb]); err != nil {
			t.Fatal(err)
		}
		b.Keys[i] = files[i%len(files)]
		datas, seeds = append(datas, data), append(seeds, seed)
	}
	return b, datas, seeds
}

func (r *stageRig) checkRows(t *testing.T, b *actors.Batch, datas [][]byte, seeds []uint64, via func(*testing.T, decode.Config, []byte, uint64) []byte) {
	t.Helper()
	sb := r.dc.SampleBytes()
	for i := range datas {
		if want := via(t, r.dc, datas[i], seeds[i]); !bytes.Equal(b.Images[i*sb:(i+1)*sb], want) {
			t.Fatalf("row %d (%s): not the expected pixels", i, b.Keys[i])
		}
	}
}

func noViolations(t *testing.T, rep TwinReport) {
	t.Helper()
	if len(rep.Violations) > 0 {
		t.Errorf("device rules broken: %v", rep.Violations)
	}
}

// A batch of 64 GPU-routed samples reaches the engine as one call; 128
// as two calls on the two streams, both in flight before either is
// waited on; with calls of 16, 50 as 16, 16, 16, 2, each stream waited
// on before its next call, and all waited on before Process returns (the
// rows hold the device's pixels when it does).
func TestStageWholeBatchesTwoStreams(t *testing.T) {
	for _, tc := range []struct {
		n, batch int
		sizes    string
		log      string
	}{
		{64, 0, "[64]", "submit 0 64,wait 0"},
		{128, 0, "[64 64]", "submit 0 64,submit 1 64,wait 0,wait 1"},
		{50, 16, "[16 16 16 2]", "submit 0 16,submit 1 16,wait 0,submit 0 16,wait 1,submit 1 2,wait 0,wait 1"},
	} {
		twin := &TwinDevice{Batch: tc.batch}
		r := newRig(t, twin, tc.batch)
		b, datas, seeds := r.batchOf(t, []string{"jpeg_444.jpg", "jpeg_420.jpg", "jpeg_gray.jpg"}, tc.n)
		if err := r.stage.Process(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		r.checkRows(t, b, datas, seeds, viaTwin)
		rep := twin.Report()
		noViolations(t, rep)
		if got := fmt.Sprint(rep.CallSizes); got != tc.sizes {
			t.Errorf("%d samples: engine calls %s, want %s", tc.n, got, tc.sizes)
		}
		if got := strings.Join(rep.Log, ","); got != tc.log {
			t.Errorf("%d samples: device calls %s\nwant %s", tc.n, got, tc.log)
		}
		st := r.dev.Stats()
		if st.Hardware != int64(tc.n) || st.CPU != 0 || st.Hybrid != 0 || st.MaxBatch != min(tc.n, max(tc.batch, 64)) && tc.batch == 0 {
			t.Errorf("%d samples: stats %+v", tc.n, st)
		}
		if len(rep.CallSizes) > 1 && (rep.MaxInFlight != 2 || st.MaxInFlight != 2) {
			t.Errorf("%d samples: %d calls in flight at most (stats %d), want 2", tc.n, rep.MaxInFlight, st.MaxInFlight)
		}
		if n := r.node.Pending().Len(); n != 0 {
			t.Errorf("%d compressed samples left after the batch", n)
		}
	}
}

// Progressive JPEGs go to the hybrid threads, what the engine refuses is
// decoded by the CPU path in the decoder actor (counted by reason), and
// each row is its path's pixels.
func TestStageRoutes(t *testing.T) {
	twin := &TwinDevice{}
	r := newRig(t, twin, 0)
	files := []string{"jpeg_444.jpg", "jpeg_progressive.jpg", "jpeg_cmyk.jpg", "png_rgb.png"}
	b, datas, seeds := r.batchOf(t, files, 8)
	if err := r.stage.Process(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	r.checkRows(t, b, datas, seeds, func(t *testing.T, dc decode.Config, data []byte, seed uint64) []byte {
		in, err := nvjpeg.Probe(data)
		if p, _ := nvjpeg.Route(in, err, nvjpeg.DefaultCaps()); p == nvjpeg.PathCPU {
			return viaCPU(t, dc, data, seed)
		}
		return viaTwin(t, dc, data, seed)
	})
	noViolations(t, twin.Report())
	st := r.dev.Stats()
	if st.Hardware != 2 || st.Hybrid != 2 || st.CPU != 4 || st.Reasons[nvjpeg.ReasonCMYK] != 2 || st.Reasons[nvjpeg.ReasonNotJPEG] != 2 {
		t.Errorf("stats %+v", st)
	}
	if fmt.Sprint(twin.Report().CallSizes) != "[2]" {
		t.Errorf("engine calls %v, want one of the two baseline JPEGs", twin.Report().CallSizes)
	}
}

// A failed engine call (refused at submit, or failed on the device) is
// retried image by image on the hybrid backend; an image the hybrid
// backend fails on too is decoded by the CPU path (gpu_error); the
// other stream's call is unaffected.
func TestStageFallbacks(t *testing.T) {
	bad := len(read(t, "jpeg_420.jpg"))
	twin := &TwinDevice{FailSubmit: map[int]bool{0: true}, FailWait: map[int]bool{1: true}, FailOne: map[int]bool{bad: true}}
	r := newRig(t, twin, 4)
	files := []string{"jpeg_444.jpg", "jpeg_420.jpg", "jpeg_gray.jpg", "jpeg_422.jpg"}
	b, datas, seeds := r.batchOf(t, files, 12) // calls of 4: refused, failed, fine
	if err := r.stage.Process(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	sb := r.dc.SampleBytes()
	for i := range datas { // rows 1 and 5: the failed calls' jpeg_420, which the hybrid backend fails on too
		want := viaTwin(t, r.dc, datas[i], seeds[i])
		if i == 1 || i == 5 {
			want = viaCPU(t, r.dc, datas[i], seeds[i])
		}
		if !bytes.Equal(b.Images[i*sb:(i+1)*sb], want) {
			t.Fatalf("row %d (%s): not the expected pixels", i, b.Keys[i])
		}
	}
	noViolations(t, twin.Report())
	st := r.dev.Stats()
	if st.Retried != 8 || st.Hybrid != 6 || st.Hardware != 4 || st.CPU != 2 || st.Reasons[ReasonGPUError] != 2 {
		t.Errorf("stats %+v: want 8 retried alone, 6 on the hybrid backend, 2 on the CPU (gpu_error)", st)
	}
}

// Without the JPEG engine every GPU-routed sample goes to the hybrid
// threads, and the reason is reported.
func TestStageNoHardware(t *testing.T) {
	twin := &TwinDevice{NoHardware: "arch mismatch"}
	r := newRig(t, twin, 0)
	b, datas, seeds := r.batchOf(t, []string{"jpeg_444.jpg"}, 5)
	if err := r.stage.Process(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	r.checkRows(t, b, datas, seeds, viaTwin)
	st := r.dev.Stats()
	if st.Hybrid != 5 || st.Hardware != 0 || st.Batches != 0 || st.NoHardware != "arch mismatch" {
		t.Errorf("stats %+v", st)
	}
	if len(twin.Report().CallSizes) != 0 {
		t.Error("an engine call without the engine")
	}
}

// A truncated JPEG is the CPU path's in the decoder actor (no_eoi), which
// reports it corrupt per sample, as without a GPU.
func TestStageTruncatedJPEG(t *testing.T) {
	r := newRig(t, &TwinDevice{}, 0)
	data := read(t, "jpeg_444.jpg")
	dst := make([]byte, r.dc.SampleBytes())
	if err := r.dec.Decode(data[:len(data)/2], 1, dst); err == nil {
		t.Error("a truncated JPEG decoded without an error")
	}
	if st := r.dev.Stats(); st.Reasons[ReasonNoEOI] != 1 {
		t.Errorf("stats %+v: want one no_eoi", st)
	}
	if r.node.Pending().Len() != 0 {
		t.Error("a truncated JPEG was left for the stage")
	}
}

// A sample evicted from the Pending table is an error of the run, not
// pixels of another sample.
func TestStageEvicted(t *testing.T) {
	dc := stageConfig(t)
	dev, err := NewDevice((&TwinDevice{}).Engine, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	node, err := NewNode(dc, []*Device{dev}, 2)
	if err != nil {
		t.Fatal(err)
	}
	dec, _ := node.Decoders()()
	defer dec.Close()
	st, _ := node.Stages()(0, dc.Spec())
	defer st.Close()
	sb := dc.SampleBytes()
	b := &actors.Batch{Images: make([]byte, 3*sb), Spec: dc.Spec(), Keys: []string{"a", "b", "c"}, Labels: make([]int32, 3)}
	for i := range 3 {
		if err := dec.Decode(read(t, "jpeg_444.jpg"), 1, b.Images[i*sb:(i+1)*sb]); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Process(context.Background(), b); !errors.Is(err, ErrEvicted) {
		t.Errorf("Process: %v, want ErrEvicted", err)
	}
}

// The stage in a real pipeline: decoders behind a decode deadline (their
// rows go through a scratch buffer), batches assembled and handed to the
// stage, every delivered row the expected pixels for its sample and
// epoch, nothing left pending, the engine's calls whole batches.
func TestStageInThePipeline(t *testing.T) {
	dc := stageConfig(t)
	twin := &TwinDevice{}
	dev, err := NewDevice(twin.Engine, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	node, err := NewNode(dc, []*Device{dev}, 4096)
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"jpeg_444.jpg", "jpeg_420.jpg", "jpeg_progressive.jpg", "jpeg_cmyk.jpg", "jpeg_gray.jpg"}
	st := storage.NewMemStore("test")
	ds := &dataset.Dataset{Classes: []string{"a"}}
	objs := map[string][]byte{}
	for i := range 40 {
		key := fmt.Sprintf("a/%02d-%s", i, files[i%len(files)])
		objs[key] = read(t, files[i%len(files)])
		if _, err := st.Put(context.Background(), key, objs[key], storage.Cond{}); err != nil {
			t.Fatal(err)
		}
		ds.Samples = append(ds.Samples, dataset.Sample{Key: key})
	}
	cfg := actors.Config{BatchSize: 16, Slots: 3, FetchConcurrency: 4, Decoders: 3, DecodeQueue: 2, Sample: dc.Spec(),
		Seed: 7, Epochs: 2, DecodeDeadline: time.Minute, MaxFailures: actors.MaxFailureCount(0)}
	deps := actors.Deps{Store: st, NewDecoder: node.Decoders(), NewBatchStage: node.Stages(), Allocator: gpu.HeapAllocator{},
		SampleSeed: decode.SampleSeed, Order: func(seed uint64, epoch int, n int64) actors.Order { return actorstest.Shuffle(seed, epoch, n) }}
	p, err := actors.NewLoader(cfg, ds, deps)
	if err != nil {
		t.Fatal(err)
	}
	sb := dc.SampleBytes()
	rows := 0
	for {
		b, err := p.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for j, key := range b.Keys {
			data := objs[key]
			seed := decode.SampleSeed(cfg.Seed, b.Epoch, b.Indices[j])
			want := viaTwin
			if strings.Contains(key, "cmyk") {
				want = viaCPU
			}
			if !bytes.Equal(b.Images[j*sb:(j+1)*sb], want(t, dc, data, seed)) {
				t.Fatalf("epoch %d batch %d row %d (%s): not its sample's pixels", b.Epoch, b.Step, j, key)
			}
			rows++
		}
		b.Release()
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if rows != 80 {
		t.Errorf("%d rows delivered, want 80", rows)
	}
	if n := node.Pending().Len(); n != 0 {
		t.Errorf("%d compressed samples left pending", n)
	}
	rep := twin.Report()
	noViolations(t, rep)
	s := dev.Stats()
	if s.Hardware != 48 || s.Hybrid != 16 || s.CPU != 16 || s.MaxBatch < 8 {
		t.Errorf("stats %+v", s)
	}
	t.Logf("engine calls %v; %s", rep.CallSizes, s)
}
