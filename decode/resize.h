// The fast path's own scaler: a separable, antialiased triangle
// ("bilinear") filter from a packed RGB region to a size×size sample, in
// fixed point, with SSE2 and AVX2 kernels on x86-64 and a portable C one
// elsewhere. See resize.c.
#ifndef LS_RESIZE_H
#define LS_RESIZE_H

#include <stddef.h>
#include <stdint.h>

// Kernels. The three give bit-identical output; LS_IMPL_BEST picks the
// fastest the CPU has.
enum {
	LS_IMPL_BEST = -1,
	LS_IMPL_C = 0,
	LS_IMPL_SSE2 = 1,
	LS_IMPL_AVX2 = 2,
};

// LS_RESIZE_SLACK: the vertical pass reads whole 16-byte vectors, so up to
// this many bytes after the last pixel of the region's last row are read
// (and never used): the source buffer must extend that far.
#define LS_RESIZE_SLACK 16

// ls_resize_rgb's flip bits.
enum {
	LS_FLIP_H = 1, // mirrored left to right
	LS_FLIP_V = 2, // mirrored top to bottom
};

// ls_resize holds one Decoder's filter tables and row buffers, grown as
// needed and never shrunk, so that a warm scaler does not allocate.
typedef struct {
	int32_t *vtab;   // per output row: first source row, number of taps
	int32_t *vw;     // per output row, vp Q14 weight pairs
	int32_t *htab;   // per output column: first source column, taps
	int32_t *hoff;   // per output column: offset of its first tap in mid
	int32_t *hw;     // horizontal Q14 weight pairs, see HW in resize.c
	int16_t *mid;    // one vertically filtered row, RGB, Q7
	int32_t *acc;    // the C kernel's row accumulator
	uint8_t *row;    // one output row, RGBX
	int16_t *q;      // scratch: every output's weights
	double *f;       // scratch: one output's weights
	size_t vtcap, vwcap, htcap, hcap, hwcap, midcap, acccap, rowcap, qcap, fcap;
	int vp, hp;                  // weight pairs per output row, column
	int w, h, size, flip, valid; // the geometry the tables are for (flip: LS_FLIP_* bits)
	double x0, sx, y0, sy;
} ls_resize;

ls_resize *ls_resize_new(void);
void ls_resize_free(ls_resize *r);

// ls_resize_impl returns the kernel LS_IMPL_BEST stands for here.
int ls_resize_impl(void);

// ls_resize_rgb scales the w×h packed RGB region at src (stride bytes per
// row; LS_RESIZE_SLACK readable bytes after it) to size×size RGB in dst:
// planes R, G, B (size² bytes each) when nhwc is 0, packed RGB rows
// otherwise, mirrored left to right when flip has LS_FLIP_H and top to
// bottom when it has LS_FLIP_V. Output column i (before the mirror) is centred at x0 + (i + 0.5) * sx in region
// coordinates, row j at y0 + (j + 0.5) * sy (see resize.c); the region is
// all the filter reads. x0 = y0 = 0, sx = w / size, sy = h / size spread
// the sample over the whole region. It returns 0, or a negative errno
// (EINVAL, ENOMEM, ENOSYS for a kernel this CPU lacks).
int ls_resize_rgb(ls_resize *r, int impl, const uint8_t *src, ptrdiff_t stride, int w, int h,
	uint8_t *dst, int size, int nhwc, int flip, double x0, double sx, double y0, double sy);

#endif
