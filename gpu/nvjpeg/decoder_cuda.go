//go:build cuda && cgo

package nvjpeg

/*
#cgo LDFLAGS: -lnvjpeg
#include <nvjpeg.h>
#include <string.h>

static nvjpegStatus_t ls_create(int hardware, nvjpegHandle_t *h) {
	nvjpegStatus_t s = NVJPEG_STATUS_INVALID_PARAMETER;
	if (hardware) s = nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, NULL, NULL, 0, h);
	if (s != NVJPEG_STATUS_SUCCESS) s = nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT, NULL, NULL, 0, h);
	return s;
}

// ls_decode decodes one image to interleaved RGB at dst (device memory,
// pitch bytes a row) on the default stream.
static nvjpegStatus_t ls_decode(nvjpegHandle_t h, nvjpegJpegState_t st, const unsigned char *data, size_t n,
		unsigned long long dst, size_t pitch) {
	nvjpegImage_t img;
	memset(&img, 0, sizeof img);
	img.channel[0] = (unsigned char *)(uintptr_t)dst;
	img.pitch[0] = pitch;
	return nvjpegDecode(h, st, data, n, NVJPEG_OUTPUT_RGBI, &img, 0);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/longshore/longshore/gpu"
)

// Decoder is one nvJPEG handle and decode state (one goroutine at a time),
// on the CUDA runtime's current device: the primary context the gpu
// package's devices retain.
type Decoder struct {
	h  C.nvjpegHandle_t
	st C.nvjpegJpegState_t
}

func status(op string, s C.nvjpegStatus_t) error {
	if s == C.NVJPEG_STATUS_SUCCESS {
		return nil
	}
	return fmt.Errorf("nvjpeg: %s: status %d", op, int(s))
}

// NewDecoder makes a decoder on the hardware backend when hardware is set
// and the device has the engine, else the default backend.
func NewDecoder(hardware bool) (*Decoder, error) {
	d := &Decoder{}
	hw := C.int(0)
	if hardware {
		hw = 1
	}
	if err := status("create", C.ls_create(hw, &d.h)); err != nil {
		return nil, err
	}
	if err := status("state", C.nvjpegJpegStateCreate(d.h, &d.st)); err != nil {
		C.nvjpegDestroy(d.h)
		return nil, err
	}
	return d, nil
}

// Size reads the image's size without decoding.
func (d *Decoder) Size(data []byte) (w, h int, err error) {
	var comps C.int
	var sub C.nvjpegChromaSubsampling_t
	var ws, hs [C.NVJPEG_MAX_COMPONENT]C.int
	p := (*C.uchar)(unsafe.Pointer(unsafe.SliceData(data)))
	if err := status("image info", C.nvjpegGetImageInfo(d.h, p, C.size_t(len(data)), &comps, &sub, &ws[0], &hs[0])); err != nil {
		return 0, 0, err
	}
	return int(ws[0]), int(hs[0]), nil
}

// DecodeRGB decodes data into interleaved RGB at dst on the device, pitch
// bytes a row, and returns once done (the default stream).
func (d *Decoder) DecodeRGB(data []byte, dst gpu.DevicePtr, pitch int) error {
	p := (*C.uchar)(unsafe.Pointer(unsafe.SliceData(data)))
	return status("decode", C.ls_decode(d.h, d.st, p, C.size_t(len(data)), C.ulonglong(dst), C.size_t(pitch)))
}

// Close frees the state and the handle.
func (d *Decoder) Close() error {
	return errors.Join(status("state destroy", C.nvjpegJpegStateDestroy(d.st)), status("destroy", C.nvjpegDestroy(d.h)))
}
