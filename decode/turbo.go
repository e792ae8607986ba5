package decode

// The JPEG fast path: libjpeg-turbo decodes only the rows and the
// (iMCU-aligned) columns the sample reads, stops after its last row, and
// scales by M/8 in the IDCT where the crop stays >= Size; resize.c then
// scales that packed RGB region into the slot. See Config.FastJPEG.

/*
#cgo pkg-config: libjpeg
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>
#include <jerror.h>
#include "resize.h"

// libjpeg's default error_exit calls exit(): longjmp back to ls_turbo_decode
// instead. Warnings (corrupt entropy data that libjpeg conceals) are
// counted, never printed.
typedef struct {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	int warnings;
} ls_jerr;

static void ls_jerr_exit(j_common_ptr c) {
	ls_jerr *e = (ls_jerr *)c->err;
	longjmp(e->jb, 1);
}

static void ls_jerr_emit(j_common_ptr c, int level) {
	if (level < 0) ((ls_jerr *)c->err)->warnings++;
}

static void ls_jerr_output(j_common_ptr c) { (void)c; }

// ls_turbo is one Decoder's libjpeg state: the decompressor (created once,
// reset with jpeg_abort_decompress after every image) and the scratch
// buffer the crop's rows are decoded into (grown, never shrunk).
typedef struct {
	struct jpeg_decompress_struct d;
	ls_jerr err;
	uint8_t *buf;
	size_t cap;
} ls_turbo;

static ls_turbo *ls_turbo_new(void) {
	ls_turbo *t = calloc(1, sizeof *t);
	if (!t) return NULL;
	t->d.err = jpeg_std_error(&t->err.pub);
	t->err.pub.error_exit = ls_jerr_exit;
	t->err.pub.emit_message = ls_jerr_emit;
	t->err.pub.output_message = ls_jerr_output;
	if (setjmp(t->err.jb)) { // jpeg_create_decompress out of memory
		free(t);
		return NULL;
	}
	jpeg_create_decompress(&t->d);
	return t;
}

static void ls_turbo_free(ls_turbo *t) {
	if (!t) return;
	jpeg_destroy_decompress(&t->d);
	free(t->buf);
	free(t);
}

// Outcomes of ls_turbo_decode.
enum {
	LS_TURBO_OK = 0,
	LS_TURBO_REFUSED = 1, // a JPEG the fast path does not take: use FFmpeg
	LS_TURBO_FAILED = 2,  // libjpeg raised an error
	LS_TURBO_NOMEM = 3,   // the scratch buffer could not grow
};

// Why a JPEG was refused (LS_TURBO_REFUSED).
enum {
	LS_REFUSE_TABLES = 1,     // an abbreviated (tables-only) stream
	LS_REFUSE_SIZE = 2,       // libjpeg reads another size than parseHeader
	LS_REFUSE_PRECISION = 3,  // not 8-bit samples
	LS_REFUSE_ARITH = 4,      // arithmetic coding
	LS_REFUSE_COLOR = 5,      // RGB or unknown components
	LS_REFUSE_GEOMETRY = 6,   // scaled size or region not as planned
};

typedef struct {
	int status, reason, warnings;
	int x;      // first decoded column, in the scaled image (iMCU-aligned)
	int stride; // bytes per row of buf
	uint8_t *buf;
} ls_turbo_res;

// ls_cmyk_to_rgb converts a row of n CMYK pixels, as stored (Adobe's
// inverted convention, which PIL assumes for every CMYK JPEG), to packed
// RGB in place: PIL's convert("RGB") of the image it reads (cmyk2rgb in
// Pillow's Convert.c: with C, K the inverted values, R = (255 - K) -
// round(C · (255 - K) / 255)). FFmpeg's mjpeg decoder computes the same
// product truncated, a level darker nearly everywhere.
static void ls_cmyk_to_rgb(uint8_t *p, int n) {
	for (int i = 0; i < n; i++) {
		int c = p[4 * i], m = p[4 * i + 1], y = p[4 * i + 2], k = p[4 * i + 3];
		int tc = (255 - c) * k + 128, tm = (255 - m) * k + 128, ty = (255 - y) * k + 128;
		p[3 * i] = (uint8_t)(k - (((tc >> 8) + tc) >> 8));
		p[3 * i + 1] = (uint8_t)(k - (((tm >> 8) + tm) >> 8));
		p[3 * i + 2] = (uint8_t)(k - (((ty >> 8) + ty) >> 8));
	}
}

// ls_turbo_decode decodes rows [ry, ry+rh) and at least columns
// [rx, rx+rw) of data scaled by m/8 (whose size Go computed as ow×oh) into
// t->buf, packed RGB (grayscale replicated and CMYK converted as PIL's
// convert("RGB") does; CMYK rows keep their 4-byte stride). w, h: the image
// size parseHeader read. The buffer extends LS_RESIZE_SLACK initialised
// bytes past the region.
//
// ls_turbo_done resets d for the next image and drops its pointer to the
// caller's (Go) bytes, which must not outlive the call.
static void ls_turbo_done(struct jpeg_decompress_struct *d) {
	jpeg_abort_decompress(d);
	if (d->src) {
		d->src->next_input_byte = NULL;
		d->src->bytes_in_buffer = 0;
	}
}

static ls_turbo_res ls_turbo_decode(ls_turbo *t, const uint8_t *data, unsigned long n,
		int w, int h, int m, int ow, int oh, int rx, int ry, int rw, int rh) {
	ls_turbo_res r = {0};
	struct jpeg_decompress_struct *d = &t->d;
	// Everything that changes after setjmp and is read after a longjmp
	// lives in t or r is re-read from d.
	t->err.warnings = 0;
	if (setjmp(t->err.jb)) {
		r.status = LS_TURBO_FAILED;
		r.warnings = t->err.warnings;
		ls_turbo_done(d);
		return r;
	}
	jpeg_mem_src(d, data, n);
	if (jpeg_read_header(d, FALSE) != JPEG_HEADER_OK) {
		r.reason = LS_REFUSE_TABLES;
		goto refuse;
	}
	if ((int)d->image_width != w || (int)d->image_height != h) {
		r.reason = LS_REFUSE_SIZE;
		goto refuse;
	}
	if (d->data_precision != 8) {
		r.reason = LS_REFUSE_PRECISION;
		goto refuse;
	}
	if (d->arith_code) {
		r.reason = LS_REFUSE_ARITH;
		goto refuse;
	}
	int cmyk = 0;
	if (((d->jpeg_color_space == JCS_YCbCr || d->jpeg_color_space == JCS_RGB) && d->num_components == 3) ||
			(d->jpeg_color_space == JCS_GRAYSCALE && d->num_components == 1)) {
		d->out_color_space = JCS_EXT_RGB;
	} else if ((d->jpeg_color_space == JCS_CMYK || d->jpeg_color_space == JCS_YCCK) && d->num_components == 4) {
		d->out_color_space = JCS_CMYK; // libjpeg converts YCCK
		cmyk = 1;
	} else {
		r.reason = LS_REFUSE_COLOR;
		goto refuse;
	}
	d->scale_num = (unsigned)m;
	d->scale_denom = 8;
	d->dct_method = JDCT_ISLOW;
	d->do_fancy_upsampling = TRUE;
	d->do_block_smoothing = TRUE;
	jpeg_calc_output_dimensions(d);
	if ((int)d->output_width != ow || (int)d->output_height != oh ||
			rx < 0 || ry < 0 || rw < 1 || rh < 1 || rx + rw > ow || ry + rh > oh) {
		r.reason = LS_REFUSE_GEOMETRY;
		goto refuse;
	}
	jpeg_start_decompress(d);
	// Decode a little past the region on both sides: libjpeg upsamples
	// the chroma of the columns it decodes as if the first and the last
	// were the image's edges (replicating the edge chroma sample), so
	// without a margin the region's edge columns would differ from a full
	// decode's (up to 12 levels on 4:2:0 and 4:2:2). One chroma sample
	// either side is enough.
	int margin = d->max_h_samp_factor;
	int x0 = rx - margin < 0 ? 0 : rx - margin;
	int x1 = rx + rw + margin > ow ? ow : rx + rw + margin;
	JDIMENSION cx = (JDIMENSION)x0, cw = (JDIMENSION)(x1 - x0);
	if ((int)cw < ow) jpeg_crop_scanline(d, &cx, &cw);
	if ((int)cx > rx || (int)(cx + cw) < rx + rw) {
		r.reason = LS_REFUSE_GEOMETRY;
		goto refuse;
	}
	r.x = (int)cx;
	r.stride = (int)cw * (cmyk ? 4 : 3);
	size_t need = (size_t)r.stride * (size_t)rh + LS_RESIZE_SLACK;
	if (need > t->cap) {
		size_t c = need + need / 4;
		uint8_t *b = calloc(c, 1); // the slack is read, so initialised
		if (!b) {
			r.status = LS_TURBO_NOMEM;
			ls_turbo_done(d);
			return r;
		}
		free(t->buf);
		t->buf = b;
		t->cap = c;
	}
	if (ry > 0 && jpeg_skip_scanlines(d, (JDIMENSION)ry) != (JDIMENSION)ry) {
		r.reason = LS_REFUSE_GEOMETRY;
		goto refuse;
	}
	JSAMPROW rows[16];
	int got = 0;
	while (got < rh) {
		int k = rh - got < 16 ? rh - got : 16;
		for (int i = 0; i < k; i++) rows[i] = t->buf + (size_t)(got + i) * r.stride;
		JDIMENSION n = jpeg_read_scanlines(d, rows, (JDIMENSION)k);
		if (n == 0) { // suspension: cannot happen with a memory source
			r.reason = LS_REFUSE_GEOMETRY;
			goto refuse;
		}
		if (cmyk)
			for (int i = 0; i < (int)n; i++) ls_cmyk_to_rgb(rows[i], (int)cw);
		got += (int)n;
	}
	// The rows below the crop are not needed: stop here.
	ls_turbo_done(d);
	r.buf = t->buf;
	r.warnings = t->err.warnings;
	return r;
refuse:
	r.status = LS_TURBO_REFUSED;
	ls_turbo_done(d);
	return r;
}

*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// Path is the decoder that produced a sample.
type Path uint8

const (
	// PathFFmpeg: FFmpeg (go-astiav) decoded the whole image: every
	// format, and the JPEGs the fast path refused (Info.Fallback says why).
	PathFFmpeg Path = iota
	// PathTurbo: libjpeg-turbo decoded only the crop (Config.FastJPEG).
	PathTurbo
)

func (p Path) String() string {
	switch p {
	case PathFFmpeg:
		return "ffmpeg"
	case PathTurbo:
		return "turbo"
	}
	return fmt.Sprintf("Path(%d)", int(p))
}

// Fallback is why a JPEG went to FFmpeg although Config.FastJPEG is on.
type Fallback uint8

const (
	// NoFallback: the fast path was not tried (FastJPEG off, not a JPEG)
	// or it decoded the sample.
	NoFallback Fallback = iota
	// FallbackCoding: not an 8-bit Huffman-coded DCT JPEG (12-bit,
	// lossless, arithmetic coding, JPEG-LS).
	FallbackCoding
	// FallbackColor: not YCbCr, RGB, grayscale, CMYK or YCCK (an
	// unusual number of components).
	FallbackColor
	// FallbackOther: an abbreviated stream, or a header libjpeg reads
	// differently from parseHeader; rare, and FFmpeg decides.
	FallbackOther
	// FallbackError: libjpeg raised an error on this file (bad Huffman
	// tables, sampling factors it refuses, damaged data). FFmpeg then
	// decides whether the sample decodes or fails with ErrCorrupt, so the
	// set of samples that decode does not depend on FastJPEG.
	FallbackError
	numFallbacks
)

func (f Fallback) String() string {
	switch f {
	case NoFallback:
		return "none"
	case FallbackCoding:
		return "coding"
	case FallbackColor:
		return "color"
	case FallbackOther:
		return "other"
	case FallbackError:
		return "error"
	}
	return fmt.Sprintf("Fallback(%d)", int(f))
}

// Stats counts what a Decoder did, per path. Read it with Decoder.Stats.
type Stats struct {
	// Turbo, FFmpeg: samples each path decoded or failed on (inputs
	// refused from the header, before decoding, count in neither).
	Turbo, FFmpeg uint64
	// Fallbacks[f]: JPEGs that went to FFmpeg for reason f (Fallbacks[0]
	// is unused).
	Fallbacks [numFallbacks]uint64
	// Warnings: libjpeg warnings on turbo-decoded samples (corrupt
	// entropy-coded data that libjpeg concealed; FFmpeg conceals the same
	// without telling).
	Warnings uint64
}

// turbo is one Decoder's libjpeg-turbo state. It holds only a C pointer.
type turbo struct{ t *C.ls_turbo }

func (t *turbo) init() error {
	if t.t == nil {
		t.t = C.ls_turbo_new()
		if t.t == nil {
			return errors.New("decode: creating libjpeg-turbo decompressor failed")
		}
	}
	return nil
}

func (t *turbo) free() {
	C.ls_turbo_free(t.t)
	t.t = nil
}

// turboScales are the DCT scales M (of M/8) the fast path may use, largest
// first. libjpeg-turbo has SIMD IDCTs for 8/8, 4/8 and 2/8 only, hence
// these; the odd sizes (7/8, 5/8...) use plain-C IDCTs.
var turboScales = [...]int{8, 4, 2, 1}

// turboPlan is what the fast path decodes for one sample: the image at
// M/8 scale (ow×oh pixels), the region of it the scaler reads, and where
// the sample lies on that region.
type turboPlan struct {
	m, ow, oh int
	region    Rect
	at        sampleMap
}

// planTurbo picks the smallest M/8 at which s's box still has both sides
// >= size (the scaler still downscales), M = 8 when allow is false, and
// maps the sampling into the scaled image.
func planTurbo(s Sampling, width, height, size int, allow bool) turboPlan {
	m := 8
	if allow {
		for _, k := range turboScales[1:] {
			f := float64(k) / 8
			if s.Box.W*f < float64(size) || s.Box.H*f < float64(size) {
				break
			}
			m = k
		}
	}
	ow, oh := (width*m+7)/8, (height*m+7)/8 // libjpeg's jdiv_round_up
	box, clip := s.Box, s.Clip
	if m < 8 {
		box, clip = scaleBox(box, float64(m)/8), scaleRect(clip, width, height, ow, oh)
	}
	region := readRegion(box, clip, size)
	return turboPlan{m, ow, oh, region, mapOnto(box, region, size)}
}

// decodeTurbo tries the fast path. ok false with a nil error: refused, and
// info.Fallback says why. An error: the scratch buffer could not grow.
func (d *Decoder) decodeTurbo(data []byte, h header, s Sampling, info *Info, dst []byte) (ok bool, err error) {
	if !h.lowresOK {
		info.Fallback = FallbackCoding
		return false, nil
	}
	if err := d.jpeg.init(); err != nil {
		return false, err
	}
	p := planTurbo(s, h.width, h.height, d.size, d.cfg.Lowres)
	region := p.region
	r := C.ls_turbo_decode(d.jpeg.t, (*C.uint8_t)(unsafe.Pointer(&data[0])), C.ulong(len(data)),
		C.int(h.width), C.int(h.height), C.int(p.m), C.int(p.ow), C.int(p.oh),
		C.int(region.X), C.int(region.Y), C.int(region.W), C.int(region.H))
	switch r.status {
	case C.LS_TURBO_OK:
	case C.LS_TURBO_REFUSED:
		switch r.reason {
		case C.LS_REFUSE_PRECISION, C.LS_REFUSE_ARITH:
			info.Fallback = FallbackCoding
		case C.LS_REFUSE_COLOR:
			info.Fallback = FallbackColor
		default:
			info.Fallback = FallbackOther
		}
		return false, nil
	case C.LS_TURBO_FAILED:
		info.Fallback = FallbackError
		return false, nil
	default:
		return false, fmt.Errorf("decode: libjpeg-turbo scratch buffer for a %dx%d region: %w", region.W, region.H, errENOMEM)
	}
	d.stats.Warnings += uint64(r.warnings)
	info.Path = PathTurbo
	info.DCTScale = p.m
	info.Region = region
	// Flipping is free here: it mirrors the filter tables.
	src := unsafe.Add(unsafe.Pointer(r.buf), 3*(region.X-int(r.x)))
	return true, d.resize.scaleRGB(d.resizeImpl, src, int(r.stride), region.W, region.H, dst, d.size, d.cfg.Layout, info.Flip, info.VFlip, p.at)
}
