//go:build cuda && cgo

package nvdecode

import (
	"errors"
	"fmt"

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
