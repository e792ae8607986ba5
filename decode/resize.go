package decode

// The fast path's scaler: resize.c, a fixed-point antialiased bilinear
// (triangle) filter from libjpeg-turbo's RGB rows straight into the slot
// (NCHW planes or NHWC rows, mirrored when the sample is flipped),
// replacing swscale there. swscale needs a new context for every source
// size, and Train crops rarely repeat one: rebuilding it cost 0.1-0.2 ms a
// sample, and swscale's scaling itself was 3-4x slower than resize.c's
// AVX2 kernel (BenchmarkResize). The portable C kernel (arm64) is not
// measured against swscale, so there the Decoder keeps swscale.

/*
#cgo CFLAGS: -O3
#include <errno.h>
#include "resize.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// resizeImpl selects a kernel of resize.c; they agree bit for bit.
type resizeImpl int

const (
	resizeBest resizeImpl = C.LS_IMPL_BEST
	resizeC    resizeImpl = C.LS_IMPL_C
	resizeSSE2 resizeImpl = C.LS_IMPL_SSE2
	resizeAVX2 resizeImpl = C.LS_IMPL_AVX2
)

func (i resizeImpl) String() string {
	switch i {
	case resizeBest:
		return "best"
	case resizeC:
		return "c"
	case resizeSSE2:
		return "sse2"
	case resizeAVX2:
		return "avx2"
	}
	return fmt.Sprintf("resizeImpl(%d)", int(i))
}

// bestResizeImpl is the kernel resizeBest stands for on this CPU.
func bestResizeImpl() resizeImpl { return resizeImpl(C.ls_resize_impl()) }

// resizeSlack is how many bytes after a region's last pixel the scaler may
// read (and ignore).
const resizeSlack = C.LS_RESIZE_SLACK

// resizer is one Decoder's scaler state. It holds only a C pointer.
type resizer struct{ r *C.ls_resize }

func (z *resizer) init() error {
	if z.r == nil {
		z.r = C.ls_resize_new()
		if z.r == nil {
			return errors.New("decode: allocating the scaler failed")
		}
	}
	return nil
}

func (z *resizer) free() {
	C.ls_resize_free(z.r)
	z.r = nil
}

// sampleMap places a size×size sample on a w×h region: output column i
// (before any flip) is centred at X0 + (i+0.5)·SX in region pixels, row j
// at Y0 + (j+0.5)·SY; the filter reads the region only (see resize.c).
type sampleMap struct{ X0, SX, Y0, SY float64 }

// fillMap spreads the sample over the whole w×h region: crop, then
// resize.
func fillMap(w, h, size int) sampleMap {
	return sampleMap{0, float64(w) / float64(size), 0, float64(h) / float64(size)}
}

// mapOnto places box (in the coordinates region is in) on region.
func mapOnto(box Box, region Rect, size int) sampleMap {
	return sampleMap{box.X - float64(region.X), box.W / float64(size), box.Y - float64(region.Y), box.H / float64(size)}
}

// scaleRGB scales the w×h RGB region at src (stride bytes per row, and
// resizeSlack readable bytes after its last pixel) into dst, a size×size
// sample in layout placed by m, mirrored left to right if flip and top to
// bottom if vflip (each by mirroring its axis's filter tables: free).
func (z *resizer) scaleRGB(impl resizeImpl, src unsafe.Pointer, stride, w, h int, dst []byte, size int, layout Layout, flip, vflip bool, m sampleMap) error {
	if err := z.init(); err != nil {
		return err
	}
	nhwc, fl := C.int(0), C.int(0)
	if layout == NHWC {
		nhwc = 1
	}
	if flip {
		fl |= C.LS_FLIP_H
	}
	if vflip {
		fl |= C.LS_FLIP_V
	}
	ret := C.ls_resize_rgb(z.r, C.int(impl), (*C.uint8_t)(src), C.ptrdiff_t(stride), C.int(w), C.int(h),
		(*C.uint8_t)(unsafe.Pointer(&dst[0])), C.int(size), nhwc, fl,
		C.double(m.X0), C.double(m.SX), C.double(m.Y0), C.double(m.SY))
	switch ret {
	case 0:
		return nil
	case -C.ENOMEM:
		return fmt.Errorf("decode: scaler tables for a %dx%d region: %w", w, h, errENOMEM)
	case -C.ENOSYS:
		return fmt.Errorf("decode: scaler kernel %v: not supported by this CPU", impl)
	default:
		return fmt.Errorf("decode: scaling a %dx%d region (stride %d) to %d by %+v: invalid arguments", w, h, stride, size, m)
	}
}

// scaleRGBBytes is scaleRGB for a region in Go memory (tests): src
// holds the region from its first pixel and must extend resizeSlack bytes
// past its last.
func (z *resizer) scaleRGBBytes(impl resizeImpl, src []byte, stride, w, h int, dst []byte, size int, layout Layout, flip, vflip bool, m sampleMap) error {
	if w < 1 || h < 1 || stride < 3*w || len(src) < (h-1)*stride+3*w+resizeSlack || len(dst) != 3*size*size {
		return fmt.Errorf("decode: scaleRGBBytes: %d-byte source for %dx%d (stride %d), %d-byte destination for %d", len(src), w, h, stride, len(dst), size)
	}
	return z.scaleRGB(impl, unsafe.Pointer(&src[0]), stride, w, h, dst, size, layout, flip, vflip, m)
}
