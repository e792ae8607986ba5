//go:build cuda && cgo

package nvjpeg

/*
#cgo LDFLAGS: -lnvjpeg -lcuda
#include <cuda.h>
#include <nvjpeg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// ls_bind makes the device's primary context (the one the CUDA runtime,
// and so nvJPEG, uses) current on the calling thread.
static CUresult ls_bind(int ordinal, CUcontext *ctx) {
	CUresult r = cuInit(0);
	if (r != CUDA_SUCCESS) return r;
	CUdevice dev;
	if ((r = cuDeviceGet(&dev, ordinal)) != CUDA_SUCCESS) return r;
	if ((r = cuDevicePrimaryCtxRetain(ctx, dev)) != CUDA_SUCCESS) return r;
	return cuCtxSetCurrent(*ctx);
}

static CUresult ls_unbind(int ordinal) {
	CUdevice dev;
	CUresult r = cuDeviceGet(&dev, ordinal);
	if (r != CUDA_SUCCESS) return r;
	return cuDevicePrimaryCtxRelease(dev);
}

static nvjpegStatus_t ls_create(int backend, nvjpegHandle_t *h) {
	nvjpegBackend_t b = NVJPEG_BACKEND_DEFAULT;
	if (backend == 1) b = NVJPEG_BACKEND_HARDWARE;
	if (backend == 2) b = NVJPEG_BACKEND_GPU_HYBRID;
	return nvjpegCreateEx(b, NULL, NULL, 0, h);
}

// ls_wait waits for the work enqueued on s so far through e, an event
// made with CU_EVENT_BLOCKING_SYNC: the thread sleeps instead of spinning
// a core (which would count as CPU the decode spent), whatever scheduling
// the shared primary context was given.
static CUresult ls_wait(CUstream s, CUevent e) {
	CUresult r = cuEventRecord(e, s);
	if (r != CUDA_SUCCESS) return r;
	return cuEventSynchronize(e);
}

// ls_decode decodes one image to interleaved RGB at dst (device memory,
// pitch bytes a row) on stream s and waits for it.
static nvjpegStatus_t ls_decode(nvjpegHandle_t h, nvjpegJpegState_t st, CUstream s, CUevent e, const unsigned char *data,
		size_t n, unsigned long long dst, size_t pitch, CUresult *cr) {
	nvjpegImage_t img;
	memset(&img, 0, sizeof img);
	img.channel[0] = (unsigned char *)(uintptr_t)dst;
	img.pitch[0] = pitch;
	nvjpegStatus_t r = nvjpegDecode(h, st, data, n, NVJPEG_OUTPUT_RGBI, &img, (cudaStream_t)s);
	*cr = CUDA_SUCCESS;
	if (r == NVJPEG_STATUS_SUCCESS) *cr = ls_wait(s, e);
	return r;
}

// ls_decode_batch decodes n images, image i at base+off[i] (len[i] bytes),
// to interleaved RGB at dst+dstoff[i] (pitch[i] bytes a row) with one
// nvjpegDecodeBatched call on s (the state initialized for batches of n)
// and waits for them through e (e NULL: it returns once they are
// enqueued).
static nvjpegStatus_t ls_decode_batch(nvjpegHandle_t h, nvjpegJpegState_t st, CUstream s, CUevent e, const unsigned char *base,
		const size_t *off, const size_t *len, unsigned long long dst, const size_t *dstoff, const size_t *pitch,
		int n, CUresult *cr) {
	const unsigned char **ptrs = malloc(n * sizeof *ptrs);
	nvjpegImage_t *imgs = calloc(n, sizeof *imgs);
	nvjpegStatus_t r = NVJPEG_STATUS_ALLOCATOR_FAILURE;
	*cr = CUDA_SUCCESS;
	if (ptrs && imgs) {
		for (int i = 0; i < n; i++) {
			ptrs[i] = base + off[i];
			imgs[i].channel[0] = (unsigned char *)(uintptr_t)(dst + dstoff[i]);
			imgs[i].pitch[0] = pitch[i];
		}
		r = nvjpegDecodeBatched(h, st, ptrs, len, imgs, (cudaStream_t)s);
		if (r == NVJPEG_STATUS_SUCCESS && e) *cr = ls_wait(s, e);
	}
	free(ptrs);
	free(imgs);
	return r;
}
static CUresult ls_mem_alloc(unsigned long long *p, size_t n) {
	CUdeviceptr d = 0;
	CUresult r = cuMemAlloc(&d, n);
	*p = (unsigned long long)d;
	return r;
}
static CUresult ls_mem_free(unsigned long long p) { return cuMemFree((CUdeviceptr)p); }
static CUresult ls_host_alloc(void **p, size_t n) { return cuMemHostAlloc(p, n, 0); }
static CUresult ls_dtoh(void *dst, unsigned long long src, size_t n) { return cuMemcpyDtoH(dst, (CUdeviceptr)src, n); }
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/longshore/longshore/gpu"
)

// Backend is the nvJPEG backend a Decoder runs on.
type Backend int

// Backends.
const (
	BackendDefault  Backend = iota // nvJPEG's choice for single-image decode
	BackendHardware                // the JPEG engine, batched decode only
	BackendHybrid                  // Huffman on the CPU, IDCT on CUDA cores
)

func (b Backend) String() string { return [...]string{"default", "hardware", "hybrid"}[b] }

// Decoder is one nvJPEG handle, decode state and stream on one device's
// primary context (the context the gpu package's devices retain). Its
// methods must run on the OS thread that made it: NewDecoder's caller
// locks its goroutine to its thread (runtime.LockOSThread) first.
type Decoder struct {
	ordinal int
	h       C.nvjpegHandle_t
	st      C.nvjpegJpegState_t
	stream  C.CUstream
	done    C.CUevent // recorded after each decode, waited on (blocking)
	// batched holds a decode state per batch size: a state is initialized
	// for one size (nvjpegDecodeBatchedInitialize), and re-initializing
	// one at every change of size would cost each call an allocation.
	batched map[int]C.nvjpegJpegState_t
	// module and resize: the resize kernel (ResizePTX), loaded on
	// first use (EnqueueResize).
	module C.CUmodule
	resize C.CUfunction
}

var statusNames = map[C.nvjpegStatus_t]string{
	C.NVJPEG_STATUS_NOT_INITIALIZED:              "not initialized",
	C.NVJPEG_STATUS_INVALID_PARAMETER:            "invalid parameter",
	C.NVJPEG_STATUS_BAD_JPEG:                     "bad jpeg",
	C.NVJPEG_STATUS_JPEG_NOT_SUPPORTED:           "jpeg not supported",
	C.NVJPEG_STATUS_ALLOCATOR_FAILURE:            "allocator failure",
	C.NVJPEG_STATUS_EXECUTION_FAILED:             "execution failed",
	C.NVJPEG_STATUS_ARCH_MISMATCH:                "arch mismatch (no such backend on this GPU)",
	C.NVJPEG_STATUS_INTERNAL_ERROR:               "internal error",
	C.NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: "implementation not supported",
}

// ErrNotSupported: nvJPEG cannot decode this image on this backend (the
// caller sends it to the CPU path).
var ErrNotSupported = errors.New("nvjpeg: image not supported on this backend")

func status(op string, s C.nvjpegStatus_t) error {
	if s == C.NVJPEG_STATUS_SUCCESS {
		return nil
	}
	if s == C.NVJPEG_STATUS_JPEG_NOT_SUPPORTED || s == C.NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED {
		return fmt.Errorf("%w: %s: %s", ErrNotSupported, op, statusNames[s])
	}
	if n, ok := statusNames[s]; ok {
		return fmt.Errorf("nvjpeg: %s: %s", op, n)
	}
	return fmt.Errorf("nvjpeg: %s: status %d", op, int(s))
}

func cuStatus(op string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	var s *C.char
	C.cuGetErrorString(r, &s)
	if s == nil {
		return fmt.Errorf("nvjpeg: %s: CUDA error %d", op, int(r))
	}
	return fmt.Errorf("nvjpeg: %s: %s", op, C.GoString(s))
}

// NewDecoder makes a decoder on device ordinal's primary context with the
// given backend; BackendHardware fails (no silent fallback) on a GPU
// without a JPEG engine. The caller's goroutine must be locked to its OS
// thread.
func NewDecoder(ordinal int, b Backend) (*Decoder, error) {
	d := &Decoder{ordinal: ordinal}
	var ctx C.CUcontext
	if err := cuStatus("bind device", C.ls_bind(C.int(ordinal), &ctx)); err != nil {
		return nil, err
	}
	if err := status("create "+b.String(), C.ls_create(C.int(b), &d.h)); err != nil {
		C.ls_unbind(C.int(ordinal))
		return nil, err
	}
	if err := status("state", C.nvjpegJpegStateCreate(d.h, &d.st)); err != nil {
		C.nvjpegDestroy(d.h)
		C.ls_unbind(C.int(ordinal))
		return nil, err
	}
	if err := cuStatus("stream", C.cuStreamCreate(&d.stream, C.CU_STREAM_NON_BLOCKING)); err != nil {
		d.Close()
		return nil, err
	}
	if err := cuStatus("event", C.cuEventCreate(&d.done, C.CU_EVENT_BLOCKING_SYNC|C.CU_EVENT_DISABLE_TIMING)); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Size reads the image's size without decoding.
func (d *Decoder) Size(data []byte) (w, h int, err error) {
	if len(data) == 0 {
		return 0, 0, fmt.Errorf("nvjpeg: empty image")
	}
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
// bytes a row, and returns once done. Not on BackendHardware (batched
// decode only).
func (d *Decoder) DecodeRGB(data []byte, dst gpu.DevicePtr, pitch int) error {
	if len(data) == 0 {
		return fmt.Errorf("nvjpeg: empty image")
	}
	var cr C.CUresult
	p := (*C.uchar)(unsafe.Pointer(unsafe.SliceData(data)))
	err := status("decode", C.ls_decode(d.h, d.st, d.stream, d.done, p, C.size_t(len(data)), C.ulonglong(dst), C.size_t(pitch), &cr))
	runtime.KeepAlive(data)
	if err != nil {
		return err
	}
	return cuStatus("decode: synchronize", cr)
}

// Image is one image of a batch: its bytes at Off (Len bytes) in the
// batch's host buffer, its RGB output at DstOff in the batch's device
// buffer, Pitch bytes a row.
type Image struct {
	Off, Len      int
	DstOff, Pitch int64
}

// DecodeBatch decodes every image of imgs from src (host memory; pinned
// memory lets the engine read it directly) into dst with one batched
// call, and returns once done. Every image must be one the backend takes
// (Route): one it does not fails the whole batch.
func (d *Decoder) DecodeBatch(src []byte, imgs []Image, dst gpu.DevicePtr) error {
	return d.decodeBatch(src, imgs, dst, true)
}

// SubmitBatch is DecodeBatch without the wait: it returns once the
// batch is enqueued on the decoder's stream (nvJPEG parses the headers
// on the calling thread first). src must stay as it is, and dst is not
// written, until Wait returns.
func (d *Decoder) SubmitBatch(src []byte, imgs []Image, dst gpu.DevicePtr) error {
	return d.decodeBatch(src, imgs, dst, false)
}

// Wait waits for everything enqueued on the decoder's stream so far
// (through its blocking-sync event: the thread sleeps).
func (d *Decoder) Wait() error { return cuStatus("synchronize", C.ls_wait(d.stream, d.done)) }

func (d *Decoder) decodeBatch(src []byte, imgs []Image, dst gpu.DevicePtr, wait bool) error {
	n := len(imgs)
	if n == 0 {
		return nil
	}
	st, ok := d.batched[n]
	if !ok {
		if err := status("batch state", C.nvjpegJpegStateCreate(d.h, &st)); err != nil {
			return err
		}
		if err := status("batched initialize", C.nvjpegDecodeBatchedInitialize(d.h, st, C.int(n), 1, C.NVJPEG_OUTPUT_RGBI)); err != nil {
			C.nvjpegJpegStateDestroy(st)
			return err
		}
		if d.batched == nil {
			d.batched = map[int]C.nvjpegJpegState_t{}
		}
		d.batched[n] = st
	}
	off := make([]C.size_t, n)
	ln := make([]C.size_t, n)
	doff := make([]C.size_t, n)
	pitch := make([]C.size_t, n)
	for i, im := range imgs {
		if im.Off < 0 || im.Len <= 0 || im.Off+im.Len > len(src) {
			return fmt.Errorf("nvjpeg: batch image %d: bytes %d+%d outside the %d-byte buffer", i, im.Off, im.Len, len(src))
		}
		off[i], ln[i], doff[i], pitch[i] = C.size_t(im.Off), C.size_t(im.Len), C.size_t(im.DstOff), C.size_t(im.Pitch)
	}
	var cr C.CUresult
	base := (*C.uchar)(unsafe.Pointer(unsafe.SliceData(src)))
	done := d.done
	if !wait {
		done = nil
	}
	err := status("batched decode", C.ls_decode_batch(d.h, st, d.stream, done, base, &off[0], &ln[0], C.ulonglong(dst),
		&doff[0], &pitch[0], C.int(n), &cr))
	runtime.KeepAlive(src)
	if err != nil {
		return err
	}
	return cuStatus("batched decode: synchronize", cr)
}

// Close frees the stream, the state and the handle and releases the
// primary context.
func (d *Decoder) Close() error {
	var errs []error
	errs = append(errs, d.unloadResize())
	if d.done != nil {
		errs = append(errs, cuStatus("event destroy", C.cuEventDestroy(d.done)))
	}
	if d.stream != nil {
		errs = append(errs, cuStatus("stream destroy", C.cuStreamDestroy(d.stream)))
	}
	for _, st := range d.batched {
		errs = append(errs, status("batch state destroy", C.nvjpegJpegStateDestroy(st)))
	}
	errs = append(errs, status("state destroy", C.nvjpegJpegStateDestroy(d.st)), status("destroy", C.nvjpegDestroy(d.h)))
	errs = append(errs, cuStatus("release context", C.ls_unbind(C.int(d.ordinal))))
	return errors.Join(errs...)
}

// AllocDevice allocates n bytes of device memory in the context of the
// calling thread (one a Decoder was made on).
func AllocDevice(n int64) (gpu.DevicePtr, error) {
	var p C.ulonglong
	if err := cuStatus("cuMemAlloc", C.ls_mem_alloc(&p, C.size_t(n))); err != nil {
		return 0, err
	}
	return gpu.DevicePtr(p), nil
}

// FreeDevice frees what AllocDevice returned.
func FreeDevice(p gpu.DevicePtr) error { return cuStatus("cuMemFree", C.ls_mem_free(C.ulonglong(p))) }

// AllocPinned allocates n bytes of page-locked host memory (the engine
// reads its input from host memory; page-locked, it reads it by DMA), on
// a thread a Decoder was made on.
func AllocPinned(n int) ([]byte, error) {
	var p unsafe.Pointer
	if err := cuStatus("cuMemHostAlloc", C.ls_host_alloc(&p, C.size_t(n))); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// FreePinned frees what AllocPinned returned.
func FreePinned(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return cuStatus("cuMemFreeHost", C.cuMemFreeHost(unsafe.Pointer(unsafe.SliceData(b))))
}

// CopyToHost copies len(dst) bytes of device memory at src to dst and
// returns once done, on a thread a Decoder was made on. Decoders'
// methods have returned once their output is written, so their output
// may be copied at once.
func CopyToHost(dst []byte, src gpu.DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	err := cuStatus("cuMemcpyDtoH", C.ls_dtoh(unsafe.Pointer(unsafe.SliceData(dst)), C.ulonglong(src), C.size_t(len(dst))))
	runtime.KeepAlive(dst)
	return err
}
