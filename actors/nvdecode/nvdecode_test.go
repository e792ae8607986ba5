package nvdecode

import (
	"bytes"
	"errors"
	"image"
	"image/jpeg"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/gpu/nvjpeg"
)

// fake is a Backend on the CPU: Go's image/jpeg stands in for nvJPEG.
type fake struct {
	noHW      string
	failBatch bool
	failAll   bool
	gate      chan struct{} // when set, the first DecodeBatch closes entered and waits for it
	entered   chan struct{}
	mu        sync.Mutex
	batches   [][]int // the widths of each batch's jobs
	closed    bool
}

func (f *fake) Hardware() (bool, string) { return f.noHW == "", f.noHW }

func (f *fake) DecodeBatch(jobs []*Request) error {
	if f.gate != nil {
		close(f.entered)
		<-f.gate
		f.gate = nil
	}
	f.mu.Lock()
	var ws []int
	for _, j := range jobs {
		ws = append(ws, j.W)
	}
	f.batches = append(f.batches, ws)
	f.mu.Unlock()
	if f.failBatch || f.failAll {
		return errors.New("fake: batch failed")
	}
	for _, j := range jobs {
		if err := goDecode(j); err != nil {
			return err
		}
	}
	return nil
}

func (f *fake) DecodeOne(j *Request) error {
	if f.failAll {
		return errors.New("fake: decode failed")
	}
	return goDecode(j)
}

func (f *fake) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

func goDecode(j *Request) error {
	img, err := jpeg.Decode(bytes.NewReader(j.Data))
	if err != nil {
		return err
	}
	fillRGB(img, j.RGB, j.W)
	return nil
}

func fillRGB(img image.Image, rgb []byte, w int) {
	b := img.Bounds()
	for y := 0; y < b.Dy(); y++ {
		for x := 0; x < b.Dx(); x++ {
			r, g, bl, _ := img.At(b.Min.X+x, b.Min.Y+y).RGBA()
			copy(rgb[3*(y*w+x):], []byte{byte(r >> 8), byte(g >> 8), byte(bl >> 8)})
		}
	}
}

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "decode", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func config(t *testing.T) decode.Config {
	c := decode.DefaultConfig()
	tr, err := decode.ParseTransform("train")
	if err != nil {
		t.Fatal(err)
	}
	tr.Size = 48
	c.Transform = tr
	return c
}

func newService(t *testing.T, f *fake, batch int) *Service {
	t.Helper()
	s, err := NewService(func(bool) (Backend, error) { return f, nil }, batch, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newDecoder(t *testing.T, dc decode.Config, s *Service) *Decoder {
	t.Helper()
	sd, err := Factory(dc, []*Service{s})()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sd.Close() })
	return sd.(*Decoder)
}

// viaRGB is what a GPU-routed sample must come out as: the CPU decoder's
// transform of the RGB the (fake) device decoded.
func viaRGB(t *testing.T, dc decode.Config, data []byte, seed uint64) []byte {
	t.Helper()
	img, err := jpeg.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	w, h := img.Bounds().Dx(), img.Bounds().Dy()
	rgb := make([]byte, 3*w*h+decode.RGBSlack)
	fillRGB(img, rgb, w)
	d, err := decode.NewDecoder(dc)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	out := make([]byte, dc.SampleBytes())
	if _, err := d.TransformRGB(rgb, w, h, 3*w, seed, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func viaCPU(t *testing.T, dc decode.Config, data []byte, seed uint64) []byte {
	t.Helper()
	d, err := decode.NewDecoder(dc)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	out := make([]byte, dc.SampleBytes())
	if _, err := d.Decode(data, seed, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRoutesAndPixels(t *testing.T) {
	dc := config(t)
	f := &fake{}
	s := newService(t, f, 0)
	d := newDecoder(t, dc, s)
	dst := make([]byte, dc.SampleBytes())
	for _, tc := range []struct {
		file string
		via  string // rgb: the device's RGB through TransformRGB; cpu: the CPU path
	}{
		{"jpeg_444.jpg", "rgb"},
		{"jpeg_420.jpg", "rgb"},
		{"jpeg_progressive.jpg", "rgb"},
		{"jpeg_cmyk.jpg", "cpu"},
		{"png_rgb.png", "cpu"},
	} {
		data := read(t, tc.file)
		for seed := uint64(1); seed <= 3; seed++ {
			if err := d.Decode(data, seed, dst); err != nil {
				t.Fatalf("%s: %v", tc.file, err)
			}
			want := viaCPU(t, dc, data, seed)
			if tc.via == "rgb" {
				want = viaRGB(t, dc, data, seed)
			}
			if !bytes.Equal(dst, want) {
				t.Errorf("%s seed %d: not the bytes of the %s path", tc.file, seed, tc.via)
			}
		}
	}
	st := s.Stats()
	want := Stats{Hardware: 6, Hybrid: 3, CPU: 6, Batches: 6, MaxBatch: 1, // batches: the engine's only
		Reasons: map[string]int64{nvjpeg.ReasonCMYK: 3, nvjpeg.ReasonNotJPEG: 3}}
	if st.Hardware != want.Hardware || st.Hybrid != want.Hybrid || st.CPU != want.CPU || st.Batches != want.Batches ||
		st.Reasons[nvjpeg.ReasonCMYK] != 3 || st.Reasons[nvjpeg.ReasonNotJPEG] != 3 || st.Retried != 0 {
		t.Errorf("stats %+v, want %+v", st, want)
	}
}

func TestFailedBatchRetriedAlone(t *testing.T) {
	dc := config(t)
	s := newService(t, &fake{failBatch: true}, 0)
	d := newDecoder(t, dc, s)
	data := read(t, "jpeg_444.jpg")
	dst := make([]byte, dc.SampleBytes())
	if err := d.Decode(data, 7, dst); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, viaRGB(t, dc, data, 7)) {
		t.Error("a retried sample is not the device's RGB transformed")
	}
	if st := s.Stats(); st.Retried != 1 || st.Hybrid != 1 || st.Hardware != 0 || st.CPU != 0 {
		t.Errorf("stats %+v: want one retried alone on the hybrid backend", st)
	}
}

func TestDeviceErrorFallsBackToCPU(t *testing.T) {
	dc := config(t)
	s := newService(t, &fake{failAll: true}, 0)
	d := newDecoder(t, dc, s)
	data := read(t, "jpeg_progressive.jpg")
	dst := make([]byte, dc.SampleBytes())
	if err := d.Decode(data, 3, dst); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, viaCPU(t, dc, data, 3)) {
		t.Error("a sample the device failed on is not the CPU path's")
	}
	if st := s.Stats(); st.CPU != 1 || st.Reasons[ReasonGPUError] != 1 || st.Hybrid != 0 {
		t.Errorf("stats %+v: want one gpu_error on the CPU path", st)
	}
	// A corrupt JPEG the device refuses is reported by the CPU path, as
	// without a GPU.
	bad := append([]byte(nil), read(t, "jpeg_444.jpg")[:400]...)
	if err := d.Decode(bad, 1, dst); err == nil {
		t.Error("a truncated JPEG decoded without an error")
	}
}

func TestNoHardwareEngine(t *testing.T) {
	dc := config(t)
	s := newService(t, &fake{noHW: "arch mismatch"}, 0)
	d := newDecoder(t, dc, s)
	if err := d.Decode(read(t, "jpeg_444.jpg"), 1, make([]byte, dc.SampleBytes())); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Hybrid != 1 || st.Hardware != 0 || st.NoHardware != "arch mismatch" || st.Batches != 0 {
		t.Errorf("stats %+v: want the hybrid backend and the reason", st)
	}
}

// TestConcurrentCallsShareBatches: while the device is busy, the
// decoders' calls queue, and the next batch takes all of them (bounded
// by the batch size).
func TestConcurrentCallsShareBatches(t *testing.T) {
	dc := config(t)
	const n, batch = 9, 5
	f := &fake{gate: make(chan struct{}), entered: make(chan struct{})}
	s := newService(t, f, batch)
	data := read(t, "jpeg_444.jpg")
	var wg sync.WaitGroup
	errs := make([]error, n)
	decs := make([]*Decoder, n)
	for i := range decs {
		decs[i] = newDecoder(t, dc, s)
	}
	wg.Add(1)
	go func() { defer wg.Done(); errs[0] = decs[0].Decode(data, 0, make([]byte, dc.SampleBytes())) }()
	<-f.entered // the first call is in the (gated) device
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = decs[i].Decode(data, uint64(i), make([]byte, dc.SampleBytes())) }()
	}
	for len(s.reqs) < batch { // the queue is full: the rest wait to enter it
		runtime.Gosched()
	}
	close(f.gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	total := 0
	for _, b := range f.batches {
		total += len(b)
	}
	if total != n || len(f.batches[0]) != 1 || len(f.batches[1]) != batch {
		t.Errorf("batches %v: want 1, then %d queued ones, %d in all", f.batches, batch, n)
	}
	if st := s.Stats(); st.MaxBatch != batch || st.Hardware != n {
		t.Errorf("stats %+v", st)
	}
}

func TestClose(t *testing.T) {
	dc := config(t)
	f := &fake{}
	s := newService(t, f, 0)
	d := newDecoder(t, dc, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	if !closed {
		t.Error("Close did not close the backends")
	}
	if err := d.Decode(read(t, "jpeg_444.jpg"), 1, make([]byte, dc.SampleBytes())); !errors.Is(err, ErrClosed) {
		t.Errorf("Decode after Close: %v, want ErrClosed", err)
	}
}

func TestBackendErrorAtStart(t *testing.T) {
	_, err := NewService(func(bool) (Backend, error) { return nil, errors.New("no driver") }, 0, 0)
	if err == nil || err.Error() != "no driver" {
		t.Errorf("NewService: %v, want the backend's error", err)
	}
	// A hybrid thread's backend failing stops the service too.
	_, err = NewService(func(engine bool) (Backend, error) {
		if engine {
			return &fake{}, nil
		}
		return nil, errors.New("no hybrid")
	}, 0, 2)
	if err == nil || !strings.Contains(err.Error(), "no hybrid") {
		t.Errorf("NewService: %v, want the hybrid backend's error", err)
	}
}

// TestHybridDoesNotWaitForTheEngine: a progressive JPEG decodes on a
// hybrid thread while the engine's thread is busy (here: held inside a
// batch until the hybrid decode is back).
func TestHybridDoesNotWaitForTheEngine(t *testing.T) {
	dc := config(t)
	f := &fake{gate: make(chan struct{}), entered: make(chan struct{})}
	s := newService(t, f, 0)
	hwDec, hyDec := newDecoder(t, dc, s), newDecoder(t, dc, s)
	hwErr := make(chan error, 1)
	baseline := read(t, "jpeg_444.jpg")
	go func() { hwErr <- hwDec.Decode(baseline, 1, make([]byte, dc.SampleBytes())) }()
	<-f.entered
	if err := hyDec.Decode(read(t, "jpeg_progressive.jpg"), 1, make([]byte, dc.SampleBytes())); err != nil {
		t.Fatal(err)
	}
	close(f.gate)
	if err := <-hwErr; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Hardware != 1 || st.Hybrid != 1 {
		t.Errorf("stats %+v", st)
	}
}

// The GPU path applies a transform's pixel ops too (in TransformRGB, on
// the device's RGB): a GPU-routed sample with grayscale is its plain
// sample turned to PIL's luma.
func TestPixelOpsOnTheGPUPath(t *testing.T) {
	plain := config(t)
	gray := config(t)
	tr, err := decode.ParseTransform(decode.Presets["train"] + "|grayscale")
	if err != nil {
		t.Fatal(err)
	}
	tr.Size = plain.Transform.Size
	gray.Transform = tr
	f := &fake{}
	s := newService(t, f, 0)
	dp, dg := newDecoder(t, plain, s), newDecoder(t, gray, s)
	a, b := make([]byte, plain.SampleBytes()), make([]byte, gray.SampleBytes())
	n := plain.Transform.Size * plain.Transform.Size
	for _, file := range []string{"jpeg_444.jpg", "jpeg_progressive.jpg"} {
		data := read(t, file)
		for seed := uint64(1); seed <= 3; seed++ {
			if err := dp.Decode(data, seed, a); err != nil {
				t.Fatal(err)
			}
			if err := dg.Decode(data, seed, b); err != nil {
				t.Fatal(err)
			}
			for j := 0; j < n; j++ { // NCHW planes
				y := byte((uint32(a[j])*19595 + uint32(a[n+j])*38470 + uint32(a[2*n+j])*7471 + 1<<15) >> 16)
				if b[j] != y || b[n+j] != y || b[2*n+j] != y {
					t.Fatalf("%s seed %d pixel %d: %d %d %d, want luma %d of %d %d %d", file, seed, j, b[j], b[n+j], b[2*n+j], y, a[j], a[n+j], a[2*n+j])
				}
			}
		}
	}
	if st := s.Stats(); st.Hardware+st.Hybrid != 12 {
		t.Errorf("stats %+v: want every sample on the device", st)
	}
}
