package decode

// The few things go-astiav v0.16.0 cannot do, in C: filling a reusable,
// padded packet buffer in place, flushing a codec context, and pointing
// swscale at a region of a frame (astiav's SoftwareScaleContext only
// scales whole frames into frames) to convert it to packed RGB, which
// resize.c then scales into the slot, as on the fast path.

/*
#cgo pkg-config: libavcodec libavutil libswscale
#include <errno.h>
#include <string.h>
#include <libavcodec/avcodec.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

// ls_packet_fill copies n bytes into pkt's own reference-counted buffer,
// followed by AV_INPUT_BUFFER_PADDING_SIZE zero bytes (FFmpeg's bitstream
// readers read past the end). The buffer is kept across calls and only
// reallocated when too small or still referenced by a decoder; being
// reference-counted, avcodec_send_packet references it instead of copying.
static int ls_packet_fill(AVPacket *pkt, const uint8_t *data, int n) {
	size_t need = (size_t)n + AV_INPUT_BUFFER_PADDING_SIZE;
	if (!pkt->buf || pkt->buf->size < need || !av_buffer_is_writable(pkt->buf)) {
		size_t c = need + need / 4;
		if (c < 256 << 10) c = 256 << 10;
		AVBufferRef *b = av_buffer_alloc(c);
		if (!b) return AVERROR(ENOMEM);
		av_buffer_unref(&pkt->buf);
		pkt->buf = b;
	}
	if (n > 0) memcpy(pkt->buf->data, data, (size_t)n);
	memset(pkt->buf->data + n, 0, AV_INPUT_BUFFER_PADDING_SIZE);
	pkt->data = pkt->buf->data;
	pkt->size = n;
	// Every image is a key frame. Without the flag FFmpeg 5.1's PNG
	// decoder treats a picture of the same size and format as the
	// previous one as an MPNG inter frame and adds the previous picture
	// to it.
	pkt->flags |= AV_PKT_FLAG_KEY;
	return 0;
}

static void ls_flush(AVCodecContext *c) { avcodec_flush_buffers(c); }

// ls_full_range maps the deprecated "J" (full-range) YUV formats to their
// plain twins and reports the range, so that swscale does not warn on every
// context it creates.
static enum AVPixelFormat ls_full_range(enum AVPixelFormat f, int *full) {
	switch (f) {
	case AV_PIX_FMT_YUVJ420P: *full = 1; return AV_PIX_FMT_YUV420P;
	case AV_PIX_FMT_YUVJ422P: *full = 1; return AV_PIX_FMT_YUV422P;
	case AV_PIX_FMT_YUVJ444P: *full = 1; return AV_PIX_FMT_YUV444P;
	case AV_PIX_FMT_YUVJ440P: *full = 1; return AV_PIX_FMT_YUV440P;
	case AV_PIX_FMT_YUVJ411P: *full = 1; return AV_PIX_FMT_YUV411P;
	default: return f;
	}
}

// ls_sws is a swscale context and the parameters it was made for.
// sws_getCachedContext cannot set the source range and chroma siting, which
// matter here (JPEG: full range, chroma centred), hence this cache.
typedef struct {
	struct SwsContext *c;
	unsigned long used; // LRU clock
	int sw, sh, sfmt, dw, dh, dfmt, flags, full, hpos, vpos;
} ls_sws;

// LS_SWS_CACHE contexts are kept: building one costs about 0.1 ms (a few %
// of a sample); Train crops rarely repeat, but Eval and Resize see the
// same few source sizes over and over (ImageNet: 500x375, 375x500, ...).
#define LS_SWS_CACHE 4

typedef struct {
	ls_sws e[LS_SWS_CACHE];
	unsigned long clock;
	uint8_t *planes; // planes_cap bytes of GBRP scratch, see ls_scale
	size_t planes_cap;
	uint8_t *rgb; // rgb_cap bytes: a frame's region as packed RGB, see ls_to_rgb
	size_t rgb_cap;
} ls_sws_cache;

static void ls_sws_free(ls_sws_cache *k) {
	for (int i = 0; i < LS_SWS_CACHE; i++) {
		sws_freeContext(k->e[i].c);
		k->e[i].c = NULL;
	}
	av_freep(&k->planes);
	k->planes_cap = 0;
	av_freep(&k->rgb);
	k->rgb_cap = 0;
}

// ls_grow makes *p hold at least n bytes (contents not kept), zeroed when
// reallocated.
static int ls_grow(uint8_t **p, size_t *cap, size_t n) {
	if (n <= *cap) return 0;
	size_t c = n + n / 4;
	av_freep(p);
	*cap = 0;
	if (!(*p = av_mallocz(c))) return AVERROR(ENOMEM);
	*cap = c;
	return 0;
}

// The cache keys a context by its source size and the output size
// (dw×dh, in "size" and "dsize": a square sample, or the region itself).
static struct SwsContext *ls_sws_get(ls_sws_cache *k, int sw, int sh, int sfmt, int dw, int dh,
		int dfmt, int flags, int full, int hpos, int vpos) {
	ls_sws *victim = &k->e[0];
	k->clock++;
	for (int i = 0; i < LS_SWS_CACHE; i++) {
		ls_sws *s = &k->e[i];
		if (s->c && s->sw == sw && s->sh == sh && s->sfmt == sfmt && s->dw == dw && s->dh == dh &&
				s->dfmt == dfmt && s->flags == flags && s->full == full &&
				s->hpos == hpos && s->vpos == vpos) {
			s->used = k->clock;
			return s->c;
		}
		if (!s->c || (victim->c && s->used < victim->used))
			victim = s;
	}
	sws_freeContext(victim->c);
	victim->c = NULL;
	struct SwsContext *c = sws_alloc_context();
	if (!c) return NULL;
	if (av_opt_set_int(c, "srcw", sw, 0) < 0 ||
			av_opt_set_int(c, "srch", sh, 0) < 0 ||
			av_opt_set_int(c, "src_format", sfmt, 0) < 0 ||
			av_opt_set_int(c, "dstw", dw, 0) < 0 ||
			av_opt_set_int(c, "dsth", dh, 0) < 0 ||
			av_opt_set_int(c, "dst_format", dfmt, 0) < 0 ||
			av_opt_set_int(c, "sws_flags", flags, 0) < 0 ||
			av_opt_set_int(c, "src_range", full, 0) < 0 ||
			av_opt_set_int(c, "dst_range", 1, 0) < 0 ||
			av_opt_set_int(c, "src_h_chr_pos", hpos, 0) < 0 ||
			av_opt_set_int(c, "src_v_chr_pos", vpos, 0) < 0 ||
			sws_init_context(c, NULL, NULL) < 0) {
		sws_freeContext(c);
		return NULL;
	}
	*victim = (ls_sws){c, k->clock, sw, sh, sfmt, dw, dh, dfmt, flags, full, hpos, vpos};
	return c;
}

typedef struct {
	int err;
	int x, y, w, h; // the region actually scaled, in frame coordinates
} ls_scaled;

// ls_scale scales the w×h region of f at (x, y) to dw×dh into dst: as
// GBRP planes at dst+dw·dh, dst+2dw·dh, dst (so R, G, B planes in that
// order) when nhwc is 0, as packed RGB24 rows of 3dw bytes otherwise. It
// returns the region it read, which differs from the one asked only for
// 1-bit formats (moved to a byte boundary).
static ls_scaled ls_scale(ls_sws_cache *s, const AVFrame *f,
		int x, int y, int w, int h, uint8_t *dst, int dw, int dh, int nhwc, int flags) {
	ls_scaled r = {0, x, y, w, h};
	enum AVPixelFormat in = (enum AVPixelFormat)f->format;
	const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(in);
	if (!d || (d->flags & AV_PIX_FMT_FLAG_HWACCEL) || !sws_isSupportedInput(in)) {
		r.err = AVERROR(ENOSYS);
		return r;
	}
	int full = f->color_range == AVCOL_RANGE_JPEG;
	enum AVPixelFormat fmt = ls_full_range(in, &full);
	int yuv = !(d->flags & (AV_PIX_FMT_FLAG_RGB | AV_PIX_FMT_FLAG_PAL)) && d->nb_components >= 3;
	int bitstream = (d->flags & AV_PIX_FMT_FLAG_BITSTREAM) != 0;
	if (!yuv) full = 0; // RGB is always full range; swscale knows gray is
	// Chroma siting, in 1/256 luma pixel of chroma sample 0's centre from
	// luma sample 0's (swscale's src_h/v_chr_pos): centred (JPEG, WebP,
	// and swscale's default) unless the decoder says co-sited.
	int sx = yuv ? d->log2_chroma_w : 0, sy = yuv ? d->log2_chroma_h : 0;
	int hpos = (128 << sx) - 128, vpos = (128 << sy) - 128;
	switch (f->chroma_location) {
	case AVCHROMA_LOC_LEFT: hpos = 0; break;
	case AVCHROMA_LOC_TOPLEFT: hpos = vpos = 0; break;
	case AVCHROMA_LOC_TOP: vpos = 0; break;
	default: break;
	}
	// A region that starts between chroma samples keeps its exact luma
	// origin; its first chroma sample then starts before it, which the
	// siting expresses. (Moving the origin onto the chroma grid instead
	// would shift or stretch the crop by up to a pixel, which shows on
	// small, upscaled crops.) 1-bit formats start on a byte.
	int ox = r.x & ((1 << sx) - 1), oy = r.y & ((1 << sy) - 1);
	hpos -= 256 * ox;
	vpos -= 256 * oy;
	if (bitstream && (r.x & 7)) {
		r.w += r.x & 7;
		r.x &= ~7;
	}
	if (!sx) hpos = -513; // swscale's default where there is no
	if (!sy) vpos = -513; // subsampling: keeps the context key stable

	// Per-plane offset of the region's origin.
	const uint8_t *src[4] = {0};
	int stride[4] = {0};
	int step[4] = {0}, sub[4] = {0};
	for (int c = 0; c < d->nb_components; c++) {
		int p = d->comp[c].plane;
		step[p] = d->comp[c].step;
		sub[p] = yuv && (c == 1 || c == 2);
	}
	for (int p = 0; p < 4; p++) {
		if (!f->data[p]) continue;
		stride[p] = f->linesize[p];
		if (p == 1 && (d->flags & AV_PIX_FMT_FLAG_PAL)) { // the palette
			src[p] = f->data[p];
			continue;
		}
		int px = sub[p] ? r.x >> sx : r.x;
		int py = sub[p] ? r.y >> sy : r.y;
		long off = bitstream ? px * step[p] / 8 : (long)px * step[p];
		src[p] = f->data[p] + (long)py * f->linesize[p] + off;
	}

	// swscale's packed-RGB output interpolates vertically subsampled
	// chroma coarsely (nearest line, or a 50/50 blend) when the rows are
	// not rescaled: then scale to planes in scratch memory and interleave.
	int via_planes = nhwc && yuv && d->log2_chroma_h > 0 && r.h == dh;
	struct SwsContext *c = ls_sws_get(s, r.w, r.h, fmt, dw, dh,
		nhwc && !via_planes ? AV_PIX_FMT_RGB24 : AV_PIX_FMT_GBRP, flags, full, hpos, vpos);
	if (!c) {
		r.err = AVERROR(EINVAL);
		return r;
	}
	size_t plane = (size_t)dw * dh;
	uint8_t *planes = dst;
	if (via_planes) {
		if ((r.err = ls_grow(&s->planes, &s->planes_cap, 3 * plane))) return r;
		planes = s->planes;
	}
	uint8_t *dp[4] = {0};
	int ds[4] = {0};
	if (nhwc && !via_planes) {
		dp[0] = dst;
		ds[0] = 3 * dw;
	} else {
		dp[0] = planes + plane;     // G
		dp[1] = planes + 2 * plane; // B
		dp[2] = planes;             // R
		ds[0] = ds[1] = ds[2] = dw;
	}
	int ret = sws_scale(c, src, stride, 0, r.h, dp, ds);
	if (ret < 0) r.err = ret;
	else if (ret != dh) r.err = AVERROR(EINVAL);
	else if (via_planes) {
		const uint8_t *R = planes, *G = planes + plane, *B = planes + 2 * plane;
		for (size_t i = 0; i < plane; i++) {
			dst[3 * i] = R[i];
			dst[3 * i + 1] = G[i];
			dst[3 * i + 2] = B[i];
		}
	}
	return r;
}

// ls_scale_packed scales the w×h region at (x, y) of a packed RGB24 (gray:
// GRAY8) picture, as ls_scale does for frames. The picture is described by
// a zeroed AVFrame on the stack: ls_scale reads only its format, range,
// chroma siting, data and linesize. Gray is flagged full range like the
// mjpeg decoder's gray frames, so both paths scale it alike.
static ls_scaled ls_scale_packed(ls_sws_cache *s, uint8_t *data, int stride, int gray,
		int x, int y, int w, int h, uint8_t *dst, int size, int nhwc, int flags) {
	// (Benchmarks only: swscale against resize.c.)
	AVFrame f;
	memset(&f, 0, sizeof f);
	f.format = gray ? AV_PIX_FMT_GRAY8 : AV_PIX_FMT_RGB24;
	f.color_range = AVCOL_RANGE_JPEG;
	f.data[0] = data;
	f.linesize[0] = stride;
	f.width = x + w;
	f.height = y + h;
	return ls_scale(s, &f, x, y, w, h, dst, size, size, nhwc, flags);
}

typedef struct {
	ls_scaled r;
	uint8_t *buf; // r.w×r.h packed RGB, 3·r.w bytes a row, then the slack
} ls_rgb;

// ls_to_rgb converts the w×h region of f at (x, y) to packed RGB at full
// size (swscale interpolates subsampled chroma from its siting, converts
// YUV, CMYK-derived GBRAP, palettes and 16-bit samples to RGB24) into the
// cache's scratch buffer, followed by slack initialised bytes. For
// 1-bit formats the region read starts on a byte boundary (r.x, r.w).
//
// space is the colour space the file's markers give its components
// (LS_SPACE_*; jpegcolour.Space): FFmpeg's mjpeg decoder reads a JPEG as
// RGB whenever its Adobe transform is 0 or its ids are 'R','G','B', where
// libjpeg (and so PIL and the fast path) reads a JFIF file, or an Adobe
// transform 1, as YCbCr. Where the two disagree on a 4:4:4 picture the
// planes are relabelled (the components are the same bytes either way);
// any other disagreement is refused (ENOTSUP) rather than decoded in the
// wrong colours.
#define LS_SPACE_YCBCR 2
#define LS_SPACE_RGB 3
static ls_rgb ls_to_rgb(ls_sws_cache *s, const AVFrame *frame, int x, int y, int w, int h, int slack, int flags, int space) {
	ls_rgb o = {{0, x, y, w, h}, NULL};
	AVFrame relabelled;
	const AVFrame *f = frame;
	enum AVPixelFormat in = (enum AVPixelFormat)frame->format;
	int rgb = in == AV_PIX_FMT_GBRP, ycc = in == AV_PIX_FMT_YUVJ444P || in == AV_PIX_FMT_YUV444P;
	const AVPixFmtDescriptor *fd = av_pix_fmt_desc_get(in);
	int is_rgb = fd && (fd->flags & AV_PIX_FMT_FLAG_RGB) && fd->nb_components >= 3;
	int is_yuv = fd && !(fd->flags & (AV_PIX_FMT_FLAG_RGB | AV_PIX_FMT_FLAG_PAL)) && fd->nb_components == 3;
	if ((space == LS_SPACE_YCBCR && is_rgb) || (space == LS_SPACE_RGB && is_yuv)) {
		if (!(rgb || ycc)) {
			o.r.err = AVERROR(ENOTSUP);
			return o;
		}
		relabelled = *frame;
		if (rgb) { // G, B, R planes hold components 1, 2, 0: Y, Cb, Cr
			relabelled.format = AV_PIX_FMT_YUVJ444P;
			relabelled.color_range = AVCOL_RANGE_JPEG;
			relabelled.data[0] = frame->data[2];
			relabelled.data[1] = frame->data[0];
			relabelled.data[2] = frame->data[1];
			relabelled.linesize[0] = frame->linesize[2];
			relabelled.linesize[1] = frame->linesize[0];
			relabelled.linesize[2] = frame->linesize[1];
		} else { // Y, U, V planes hold components 0, 1, 2: R, G, B
			relabelled.format = AV_PIX_FMT_GBRP;
			relabelled.color_range = AVCOL_RANGE_JPEG;
			relabelled.data[0] = frame->data[1];
			relabelled.data[1] = frame->data[2];
			relabelled.data[2] = frame->data[0];
			relabelled.linesize[0] = frame->linesize[1];
			relabelled.linesize[1] = frame->linesize[2];
			relabelled.linesize[2] = frame->linesize[0];
		}
		f = &relabelled;
	}
	const AVPixFmtDescriptor *d = av_pix_fmt_desc_get((enum AVPixelFormat)f->format);
	if (d && (d->flags & AV_PIX_FMT_FLAG_BITSTREAM) && (x & 7)) {
		w += x & 7;
		x &= ~7;
	}
	if ((o.r.err = ls_grow(&s->rgb, &s->rgb_cap, (size_t)3 * w * h + slack))) return o;
	memset(s->rgb + (size_t)3 * w * h, 0, slack);
	o.r = ls_scale(s, f, x, y, w, h, s->rgb, w, h, 1, flags);
	o.buf = s->rgb;
	return o;
}

*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/asticode/go-astiav"

	"github.com/longshore/longshore/internal/jpegcolour"
)

// Scaler flags. The luma is not rescaled (ls_to_rgb converts at full
// size); subsampled chroma is upsampled bilinearly from its siting, as
// libjpeg's "fancy" upsampling does. FULL_CHR_H_INT interpolates chroma at
// full resolution for the RGB24 output (GBRP forces it anyway);
// ACCURATE_RND trades a little speed for rounding that does not depend on
// the SIMD path (and keeps swscale off its nearest-chroma unscaled
// YUV->RGB converters).
const swsFlags = C.SWS_BILINEAR | C.SWS_FULL_CHR_H_INT | C.SWS_FULL_CHR_H_INP | C.SWS_ACCURATE_RND

// go-astiav v0.16.0 exports the AVFrame pointer (Frame.UnsafePointer) but
// not the AVPacket or AVCodecContext ones. Both wrappers hold the C pointer
// as their first field; checkAstiavLayout verifies that once per process
// before any Decoder uses it, so an astiav upgrade that changes the layout
// fails NewDecoder instead of corrupting memory.

// FFmpeg error codes astiav v0.16.0 does not name.
var (
	errENOMEM = astiav.Error(-C.ENOMEM)
	errENOSYS = astiav.Error(-C.ENOSYS)
)

func cPacket(p *astiav.Packet) *C.AVPacket {
	return *(**C.AVPacket)(unsafe.Pointer(p))
}

func cCodecContext(cc *astiav.CodecContext) *C.AVCodecContext {
	return *(**C.AVCodecContext)(unsafe.Pointer(cc))
}

func cFrame(f *astiav.Frame) *C.AVFrame { return (*C.AVFrame)(f.UnsafePointer()) }

var layoutOnce struct {
	sync.Once
	err error
}

func checkAstiavLayout() error {
	layoutOnce.Do(func() {
		p := astiav.AllocPacket()
		defer p.Free()
		if err := p.AllocPayload(37); err != nil {
			layoutOnce.err = fmt.Errorf("decode: astiav layout check: %w", err)
			return
		}
		p.SetStreamIndex(5)
		cp := cPacket(p)
		if cp == nil || int(cp.size) != 37 || int(cp.stream_index) != 5 || p.Size() != 37 {
			layoutOnce.err = errors.New("decode: go-astiav's Packet layout changed; update cPacket")
			return
		}
		cc := astiav.AllocCodecContext(nil)
		defer cc.Free()
		cc.SetWidth(321)
		cc.SetHeight(123)
		if c := cCodecContext(cc); c == nil || int(c.width) != 321 || int(c.height) != 123 {
			layoutOnce.err = errors.New("decode: go-astiav's CodecContext layout changed; update cCodecContext")
		}
	})
	return layoutOnce.err
}

// fillPacket copies data into the packet's reusable padded buffer.
func fillPacket(p *astiav.Packet, data []byte) error {
	var ptr *C.uint8_t
	if len(data) > 0 {
		ptr = (*C.uint8_t)(unsafe.Pointer(&data[0]))
	}
	if ret := C.ls_packet_fill(cPacket(p), ptr, C.int(len(data))); ret < 0 {
		return fmt.Errorf("decode: packet buffer: %w", astiav.Error(int(ret)))
	}
	return nil
}

func flushCodec(cc *astiav.CodecContext) { C.ls_flush(cCodecContext(cc)) }

// scaler wraps the swscale contexts one Decoder reuses across samples. It
// holds only C pointers, so it may be passed to C.
type scaler struct{ s C.ls_sws_cache }

// toRGB converts region r of frame f to packed RGB at full size into the
// scaler's scratch buffer (3·got.W bytes a row, resizeSlack initialised
// bytes after the last) and returns it with the region converted: r, or
// for 1-bit formats r widened left to a byte boundary.
//
// space is the colour space the file's markers give (jpegcolour.Unknown
// for other formats): where FFmpeg decoded the components as the other
// one, they are relabelled, or refused with ErrUnsupported.
func (s *scaler) toRGB(f *astiav.Frame, r Rect, space jpegcolour.Space) (buf unsafe.Pointer, got Rect, err error) {
	res := C.ls_to_rgb(&s.s, cFrame(f), C.int(r.X), C.int(r.Y), C.int(r.W), C.int(r.H), C.int(resizeSlack), C.int(swsFlags), C.int(space))
	got = Rect{int(res.r.x), int(res.r.y), int(res.r.w), int(res.r.h)}
	switch {
	case res.r.err == 0:
		return unsafe.Pointer(res.buf), got, nil
	case res.r.err == -C.ENOSYS:
		return nil, got, fmt.Errorf("%w: decoded pixel format %s cannot be converted", ErrUnsupported, f.PixelFormat())
	case res.r.err == -C.ENOTSUP:
		return nil, got, fmt.Errorf("%w: a JPEG whose markers say %v that FFmpeg decodes as %s (subsampled or high-precision components read in the other colour space)",
			ErrUnsupported, space, f.PixelFormat())
	case res.r.err == -C.ENOMEM:
		return nil, got, fmt.Errorf("decode: converting to RGB: %w", errENOMEM)
	default:
		// swscale refuses some geometries (extreme sizes or ratios).
		return nil, got, fmt.Errorf("%w: converting a %dx%d %s region to RGB: %w",
			ErrUnsupported, got.W, got.H, f.PixelFormat(), astiav.Error(int(res.r.err)))
	}
}

// scalePacked scales region r of a packed RGB24 (gray: GRAY8) picture in
// C memory at src (stride bytes per row) to size×size with swscale (only
// BenchmarkResize: resize.c scales every sample).
func (s *scaler) scalePacked(src unsafe.Pointer, stride int, gray bool, r Rect, dst []byte, size int, layout Layout) (Rect, error) {
	nhwc, g := C.int(0), C.int(0)
	if layout == NHWC {
		nhwc = 1
	}
	if gray {
		g = 1
	}
	res := C.ls_scale_packed(&s.s, (*C.uint8_t)(src), C.int(stride), g, C.int(r.X), C.int(r.Y), C.int(r.W), C.int(r.H),
		(*C.uint8_t)(unsafe.Pointer(&dst[0])), C.int(size), nhwc, C.int(swsFlags))
	got := Rect{int(res.x), int(res.y), int(res.w), int(res.h)}
	switch {
	case res.err == 0:
		return got, nil
	case res.err == -C.ENOMEM:
		return got, fmt.Errorf("decode: scaling: %w", errENOMEM)
	default:
		return got, fmt.Errorf("%w: scaling a %dx%d region to %d: %w",
			ErrUnsupported, got.W, got.H, size, astiav.Error(int(res.err)))
	}
}

// The C side's colour spaces are jpegcolour's (a compile error if not).
var (
	_ [int(jpegcolour.YCbCr) - C.LS_SPACE_YCBCR]struct{}
	_ [C.LS_SPACE_YCBCR - int(jpegcolour.YCbCr)]struct{}
	_ [int(jpegcolour.RGB) - C.LS_SPACE_RGB]struct{}
	_ [C.LS_SPACE_RGB - int(jpegcolour.RGB)]struct{}
)

func (s *scaler) free() { C.ls_sws_free(&s.s) }
