//go:build cuda && cgo

package nvdecode

import (
	"errors"
	"fmt"

	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/gpu/nvjpeg"
)

// CUDABackend is the factory of device ordinal's backends, for
// NewService (each runs on its service thread): the engine's thread gets
// nvJPEG's hardware backend where the GPU has one (its absence is
// reported, not hidden: Stats.NoHardware), a hybrid thread the hybrid
// backend.
func CUDABackend(ordinal int) func(engine bool) (Backend, error) {
	return func(engine bool) (Backend, error) {
		if engine {
			hw, err := nvjpeg.NewDecoder(ordinal, nvjpeg.BackendHardware)
			if err != nil {
				return &cudaBackend{noHW: err.Error()}, nil
			}
			return &cudaBackend{hw: hw}, nil
		}
		hy, err := nvjpeg.NewDecoder(ordinal, nvjpeg.BackendHybrid)
		if err != nil {
			return nil, fmt.Errorf("nvdecode: device %d: %w", ordinal, err)
		}
		return &cudaBackend{hy: hy}, nil
	}
}

type cudaBackend struct {
	hw, hy *nvjpeg.Decoder
	noHW   string
	src    []byte // page-locked: a batch's JPEG bytes
	dev    gpu.DevicePtr
	devCap int64
}

func (b *cudaBackend) Hardware() (bool, string) {
	if b.hw == nil && b.noHW == "" {
		return false, "not the engine's thread"
	}
	return b.hw != nil, b.noHW
}

// ensure grows the staging and device buffers to at least src and dev
// bytes (by half again, so a run settles after a few batches).
func (b *cudaBackend) ensure(src int, dev int64) error {
	if src > len(b.src) {
		if err := nvjpeg.FreePinned(b.src); err != nil {
			return err
		}
		b.src = nil
		p, err := nvjpeg.AllocPinned(src + src/2)
		if err != nil {
			return err
		}
		b.src = p
	}
	if dev > b.devCap {
		if b.dev != 0 {
			if err := nvjpeg.FreeDevice(b.dev); err != nil {
				return err
			}
			b.dev, b.devCap = 0, 0
		}
		p, err := nvjpeg.AllocDevice(dev + dev/2)
		if err != nil {
			return err
		}
		b.dev, b.devCap = p, dev+dev/2
	}
	return nil
}

func rgbBytes(j *Request) int64 { return 3 * int64(j.W) * int64(j.H) }

func (b *cudaBackend) DecodeBatch(jobs []*Request) error {
	if b.hw == nil {
		return errors.New("nvdecode: no hardware engine")
	}
	var src int
	var dev int64
	for _, j := range jobs {
		src += len(j.Data)
		dev += rgbBytes(j)
	}
	if err := b.ensure(src, dev); err != nil {
		return err
	}
	specs := make([]nvjpeg.Image, len(jobs))
	off, doff := 0, int64(0)
	for i, j := range jobs {
		copy(b.src[off:], j.Data)
		specs[i] = nvjpeg.Image{Off: off, Len: len(j.Data), DstOff: doff, Pitch: 3 * int64(j.W)}
		off += len(j.Data)
		doff += rgbBytes(j)
	}
	if err := b.hw.DecodeBatch(b.src, specs, b.dev); err != nil {
		return err
	}
	for i, j := range jobs {
		if err := nvjpeg.CopyToHost(j.RGB[:rgbBytes(j)], b.dev+gpu.DevicePtr(specs[i].DstOff)); err != nil {
			return err
		}
	}
	return nil
}

func (b *cudaBackend) DecodeOne(j *Request) error {
	if b.hy == nil {
		return errors.New("nvdecode: no hybrid decoder on this thread")
	}
	if err := b.ensure(0, rgbBytes(j)); err != nil {
		return err
	}
	if err := b.hy.DecodeRGB(j.Data, b.dev, 3*j.W); err != nil {
		return err
	}
	return nvjpeg.CopyToHost(j.RGB[:rgbBytes(j)], b.dev)
}

func (b *cudaBackend) Close() error {
	var errs []error
	errs = append(errs, nvjpeg.FreePinned(b.src))
	if b.dev != 0 {
		errs = append(errs, nvjpeg.FreeDevice(b.dev))
	}
	for _, d := range []*nvjpeg.Decoder{b.hw, b.hy} {
		if d != nil {
			errs = append(errs, d.Close())
		}
	}
	return errors.Join(errs...)
}

// CUDAEngine is the factory of device ordinal's Engines, for NewDevice
// (each runs on its device thread): the engine's thread gets two
// hardware-backend decoders, one per stream (each its own nvJPEG state,
// stream and buffers, so two batches are in flight), where the GPU has
// the engine (its absence is reported: Stats.NoHardware); a hybrid
// thread a hybrid-backend decoder. Every decoder resizes on its stream
// with the resize kernel (gpu/nvjpeg.ResizePTX) and copies its samples
// out in one transfer a call.
func CUDAEngine(ordinal int) func(engine bool) (Engine, error) {
	return func(engine bool) (Engine, error) {
		if engine {
			e := &cudaEngine{}
			for s := range Streams {
				hw, err := nvjpeg.NewDecoder(ordinal, nvjpeg.BackendHardware)
				if err != nil {
					e.Close()
					return &cudaEngine{noHW: err.Error()}, nil
				}
				e.streams[s].dec = hw
			}
			return e, nil
		}
		hy, err := nvjpeg.NewDecoder(ordinal, nvjpeg.BackendHybrid)
		if err != nil {
			return nil, fmt.Errorf("nvdecode: device %d: %w", ordinal, err)
		}
		e := &cudaEngine{hybrid: true}
		e.streams[0].dec = hy
		return e, nil
	}
}

// cudaStream is one stream's decoder and buffers: src (page-locked, the
// JPEGs), rgb (device, the decoded pictures), tab (page-locked) and dtab
// (device): the resize tables, dout (device) and out (page-locked): the
// samples; jobs, what was submitted and not yet waited on.
type cudaStream struct {
	dec      *nvjpeg.Decoder
	src, tab []byte
	out      []byte
	rgb      devBuf
	dtab     devBuf
	dout     devBuf
	jobs     []*Job
}

type devBuf struct {
	p   gpu.DevicePtr
	cap int64
}

// grow makes b hold at least n bytes (by half again).
func (b *devBuf) grow(n int64) error {
	if n <= b.cap {
		return nil
	}
	if b.p != 0 {
		if err := nvjpeg.FreeDevice(b.p); err != nil {
			return err
		}
		b.p, b.cap = 0, 0
	}
	p, err := nvjpeg.AllocDevice(n + n/2)
	if err != nil {
		return err
	}
	b.p, b.cap = p, n+n/2
	return nil
}

func (b *devBuf) free() error {
	if b.p == 0 {
		return nil
	}
	err := nvjpeg.FreeDevice(b.p)
	b.p, b.cap = 0, 0
	return err
}

func growPinned(b *[]byte, n int) error {
	if n <= len(*b) {
		return nil
	}
	if err := nvjpeg.FreePinned(*b); err != nil {
		return err
	}
	*b = nil
	p, err := nvjpeg.AllocPinned(n + n/2)
	if err != nil {
		return err
	}
	*b = p
	return nil
}

type cudaEngine struct {
	streams [Streams]cudaStream
	hybrid  bool
	noHW    string
}

func (e *cudaEngine) Hardware() (bool, string) {
	if e.hybrid {
		return false, "not the engine's thread"
	}
	return e.noHW == "", e.noHW
}

// enqueue puts, on st's stream after the decode, the tables' copy, a
// resize a job and the samples' copy out.
func (st *cudaStream) enqueue(jobs []*Job, rgbOff []int64) error {
	tb, sb := 0, 0
	for _, j := range jobs {
		tb += j.Plan.TableBytes()
		sb += len(j.Row)
	}
	if err := growPinned(&st.tab, tb); err != nil {
		return err
	}
	if err := growPinned(&st.out, sb); err != nil {
		return err
	}
	if err := st.dtab.grow(int64(tb)); err != nil {
		return err
	}
	if err := st.dout.grow(int64(sb)); err != nil {
		return err
	}
	to := 0
	for _, j := range jobs {
		j.Plan.PutTables(st.tab[to:])
		to += j.Plan.TableBytes()
	}
	if err := st.dec.CopyToDeviceAsync(st.dtab.p, st.tab[:tb]); err != nil {
		return err
	}
	to, so := 0, 0
	for i, j := range jobs {
		p := &j.Plan
		err := st.dec.EnqueueResize(nvjpeg.Resize{Src: st.rgb.p + gpu.DevicePtr(rgbOff[i]), Pitch: 3 * j.W,
			RX: p.Region.X, RY: p.Region.Y, Size: p.Size, Flip: p.Flip, NHWC: p.Layout == decode.NHWC,
			Tab: st.dtab.p + gpu.DevicePtr(to), KX: p.X.K, KY: p.Y.K, Dst: st.dout.p + gpu.DevicePtr(so)})
		if err != nil {
			return err
		}
		to += p.TableBytes()
		so += len(j.Row)
	}
	if err := st.dec.CopyToHostAsync(st.out[:sb], st.dout.p); err != nil {
		return err
	}
	st.jobs = jobs
	return nil
}

func (e *cudaEngine) Submit(s int, jobs []*Job) error {
	if e.noHW != "" || e.hybrid {
		return errors.New("nvdecode: no hardware engine")
	}
	st := &e.streams[s]
	src := 0
	var dev int64
	rgbOff := make([]int64, len(jobs))
	for i, j := range jobs {
		src += len(j.Data)
		rgbOff[i] = dev
		dev += 3 * int64(j.W) * int64(j.H)
	}
	if err := growPinned(&st.src, src); err != nil {
		return err
	}
	if err := st.rgb.grow(dev); err != nil {
		return err
	}
	specs := make([]nvjpeg.Image, len(jobs))
	off := 0
	for i, j := range jobs {
		copy(st.src[off:], j.Data)
		specs[i] = nvjpeg.Image{Off: off, Len: len(j.Data), DstOff: rgbOff[i], Pitch: 3 * int64(j.W)}
		off += len(j.Data)
	}
	if err := st.dec.SubmitBatch(st.src[:src], specs, st.rgb.p); err != nil {
		return err
	}
	if err := st.enqueue(jobs, rgbOff); err != nil {
		st.dec.Wait() // nothing of this call is used; the stream is idle after
		st.jobs = nil
		return err
	}
	return nil
}

func (e *cudaEngine) Wait(s int) error {
	st := &e.streams[s]
	jobs := st.jobs
	st.jobs = nil
	if err := st.dec.Wait(); err != nil {
		return err
	}
	o := 0
	for _, j := range jobs {
		o += copy(j.Row, st.out[o:o+len(j.Row)])
	}
	return nil
}

func (e *cudaEngine) DecodeOne(j *Job) error {
	if !e.hybrid {
		return errors.New("nvdecode: no hybrid decoder on this thread")
	}
	st := &e.streams[0]
	if err := st.rgb.grow(3 * int64(j.W) * int64(j.H)); err != nil {
		return err
	}
	if err := st.dec.DecodeRGB(j.Data, st.rgb.p, 3*j.W); err != nil {
		return err
	}
	if err := st.enqueue([]*Job{j}, []int64{0}); err != nil {
		st.dec.Wait()
		st.jobs = nil
		return err
	}
	return e.Wait(0)
}

func (e *cudaEngine) Close() error {
	var errs []error
	for s := range e.streams {
		st := &e.streams[s]
		if st.dec == nil {
			continue
		}
		errs = append(errs, st.dec.Wait(), nvjpeg.FreePinned(st.src), nvjpeg.FreePinned(st.tab), nvjpeg.FreePinned(st.out),
			st.rgb.free(), st.dtab.free(), st.dout.free(), st.dec.Close())
	}
	return errors.Join(errs...)
}
