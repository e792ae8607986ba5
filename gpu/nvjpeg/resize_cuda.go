//go:build cuda && cgo

package nvjpeg

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>
#include <stdint.h>
#include <stdlib.h>

static CUresult ls_load_resize(const char *ptx, CUmodule *mod, CUfunction *fn) {
	CUresult r = cuModuleLoadData(mod, ptx);
	if (r != CUDA_SUCCESS) return r;
	return cuModuleGetFunction(fn, *mod, "ls_resize");
}

static CUresult ls_launch_resize(CUfunction fn, CUstream s, unsigned int blocks, unsigned int threads,
		unsigned long long src, unsigned int pitch, unsigned int rx, unsigned int ry, unsigned int size,
		unsigned int flip, unsigned int nhwc, unsigned long long tab, unsigned int kx, unsigned int ky,
		unsigned long long dst) {
	CUdeviceptr psrc = (CUdeviceptr)src, ptab = (CUdeviceptr)tab, pdst = (CUdeviceptr)dst;
	void *args[] = {&psrc, &pitch, &rx, &ry, &size, &flip, &nhwc, &ptab, &kx, &ky, &pdst};
	return cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, s, args, NULL);
}

static CUresult ls_htod_async(unsigned long long dst, const void *src, size_t n, CUstream s) {
	return cuMemcpyHtoDAsync((CUdeviceptr)dst, src, n, s);
}

static CUresult ls_dtoh_async(void *dst, unsigned long long src, size_t n, CUstream s) {
	return cuMemcpyDtoHAsync(dst, (CUdeviceptr)src, n, s);
}
*/
import "C"

import (
	"runtime"
	"unsafe"

	"github.com/longshore/longshore/gpu"
)

// Resize is one launch of the resize kernel (ResizePTX): the picture at
// Src (Pitch bytes a row), the region's origin, the sample's side, flip
// and layout, the tables at Tab (device memory, ResizePTX's layout) with
// their widths, and the sample's bytes at Dst.
type Resize struct {
	Src          gpu.DevicePtr
	Pitch        int
	RX, RY, Size int
	Flip, NHWC   bool
	Tab          gpu.DevicePtr
	KX, KY       int
	Dst          gpu.DevicePtr
}

// EnqueueResize enqueues r on the decoder's stream (after what is
// already there), loading the kernel into the context on first use.
func (d *Decoder) EnqueueResize(r Resize) error {
	if d.resize == nil {
		src := C.CString(ResizePTX)
		defer C.free(unsafe.Pointer(src))
		if err := cuStatus("load the resize kernel", C.ls_load_resize(src, &d.module, &d.resize)); err != nil {
			return err
		}
	}
	n := r.Size * r.Size
	b2u := func(b bool) C.uint {
		if b {
			return 1
		}
		return 0
	}
	return cuStatus("launch resize", C.ls_launch_resize(d.resize, d.stream, C.uint((n+ResizeThreads-1)/ResizeThreads), ResizeThreads,
		C.ulonglong(r.Src), C.uint(r.Pitch), C.uint(r.RX), C.uint(r.RY), C.uint(r.Size), b2u(r.Flip), b2u(r.NHWC),
		C.ulonglong(r.Tab), C.uint(r.KX), C.uint(r.KY), C.ulonglong(r.Dst)))
}

// CopyToDeviceAsync enqueues the copy of src (page-locked: AllocPinned)
// to dst on the decoder's stream; src must stay as it is until Wait.
func (d *Decoder) CopyToDeviceAsync(dst gpu.DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	err := cuStatus("cuMemcpyHtoDAsync", C.ls_htod_async(C.ulonglong(dst), unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src)), d.stream))
	runtime.KeepAlive(src)
	return err
}

// CopyToHostAsync enqueues the copy of len(dst) bytes at src into dst
// (page-locked: AllocPinned) on the decoder's stream; dst holds them
// once Wait returns.
func (d *Decoder) CopyToHostAsync(dst []byte, src gpu.DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	err := cuStatus("cuMemcpyDtoHAsync", C.ls_dtoh_async(unsafe.Pointer(unsafe.SliceData(dst)), C.ulonglong(src), C.size_t(len(dst)), d.stream))
	runtime.KeepAlive(dst)
	return err
}

func (d *Decoder) unloadResize() error {
	if d.module == nil {
		return nil
	}
	err := cuStatus("unload the resize kernel", C.cuModuleUnload(d.module))
	d.module, d.resize = nil, nil
	return err
}
