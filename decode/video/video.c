#include "video.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/hwcontext.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "_cgo_export.h"

static int src_read(void *opaque, uint8_t *buf, int n) {
	ls_src *s = opaque;
	if (s->data) {
		int64_t left = s->size - s->pos;
		if (left <= 0) return AVERROR_EOF;
		if (n > left) n = (int)left;
		memcpy(buf, s->data + s->pos, n);
		s->pos += n;
		return n;
	}
	int got = lsVideoRead(s->handle, buf, n);
	if (got == 0) return AVERROR_EOF;
	if (got < 0) return AVERROR(EIO);
	return got;
}

static int64_t src_seek(void *opaque, int64_t off, int whence) {
	ls_src *s = opaque;
	int64_t p;
	whence &= ~AVSEEK_FORCE;
	if (whence == AVSEEK_SIZE) return s->size;
	switch (whence) {
	case SEEK_SET: p = off; break;
	case SEEK_CUR: p = s->pos + off; break;
	case SEEK_END: p = s->size + off; break;
	default: return AVERROR(EINVAL);
	}
	if (p < 0 || p > s->size) return AVERROR(EINVAL);
	if (!s->data && lsVideoSeek(s->handle, p) < 0) return AVERROR(EIO);
	s->pos = p;
	return p;
}

// rgbtab holds swscale's own YUV to RGB lookup, as its packed RGB24
// writer uses it (libswscale/yuv2rgb.c, ff_yuv2rgb_c_init_tables, for 24
// bits a pixel): one table of clipped values, indexed by the scaled luma
// plus an offset per chroma value.
typedef struct {
	uint8_t y[2048];
	int yoffs;
	int r[256], gu[256], gv[256], b[256];
} rgbtab;

typedef struct {
	struct SwsContext *sws;
	uint8_t *rgb; // scaled frame, sw x sh x 3
	int sw, sh, ox, oy;
	// planar: sws scales to YUV 4:2:2 at sw x sh and emit converts the
	// crop with tab, the same pixels as sws to RGB24, at a quarter of its
	// cost (see fast_geometry). yuv holds the planes.
	int planar;
	uint8_t *yuv;
	rgbtab tab;
	AVFrame *mem; // a device frame copied to memory (NV12, P010), for swscale
} conv;

static int clip_u8(int64_t v) { return v < 0 ? 0 : v > 255 ? 255 : (int)v; }

// rgbtab_init computes the lookup swscale's RGB writer uses for sws's
// colorspace, from the same integer formula.
static void rgbtab_init(rgbtab *t, struct SwsContext *sws) {
	int *inv, *table, src_range, dst_range, brightness, contrast, saturation;
	sws_getColorspaceDetails(sws, &inv, &src_range, &table, &dst_range, &brightness, &contrast, &saturation);
	int64_t crv = inv[0], cbu = inv[1], cgu = -inv[2], cgv = -inv[3], cy = 1 << 16, oy = 0;
	if (!src_range) {
		cy = cy * 255 / 219;
		oy = 16 << 16;
	} else {
		crv = crv * 224 / 255;
		cbu = cbu * 224 / 255;
		cgu = cgu * 224 / 255;
		cgv = cgv * 224 / 255;
	}
	cy = (cy * contrast) >> 16;
	crv = (crv * contrast * saturation) >> 32;
	cbu = (cbu * contrast * saturation) >> 32;
	cgu = (cgu * contrast * saturation) >> 32;
	cgv = (cgv * contrast * saturation) >> 32;
	oy -= 256LL * brightness;
	int64_t d = cy > 1 ? cy : 1; // chroma coefficients in units of cy
	crv = (crv * 65536 + 0x8000) / d;
	cbu = (cbu * 65536 + 0x8000) / d;
	cgu = (cgu * 65536 + 0x8000) / d;
	cgv = (cgv * 65536 + 0x8000) / d;
	int64_t yb = -(384LL << 16) - 512 * cy - oy;
	for (int i = 0; i < 2048; i++, yb += cy) t->y[i] = (uint8_t)clip_u8((yb + 0x8000) >> 16);
	t->yoffs = (src_range ? 384 : 326) + 512;
	for (int i = 0; i < 256; i++) {
		t->r[i] = (int)(-(crv >> 9) + ((i * crv) >> 16));
		t->gu[i] = (int)(-(cgu >> 9) + ((i * cgu) >> 16));
		t->gv[i] = (int)(-(cgv >> 9) + ((i * cgv) >> 16));
		t->b[i] = (int)(-(cbu >> 9) + ((i * cbu) >> 16));
	}
}

// fast_geometry reports whether the planar path gives swscale's RGB24
// pixels exactly for a frame of format fmt, w x h, scaled bilinearly to
// sw x sh. It does when swscale's RGB writer is the one rgbtab copies:
// the output width even (an odd one makes swscale interpolate chroma to
// full width, another writer), 8-bit 4:2:0 input, and the height shrunk
// by more than a few percent (nearer 1:1 the vertical filter has two taps
// and swscale takes a two-tap writer that rounds differently).
// TestPlanarMatchesRGB24 holds it to that over many geometries, and emit
// checks the first frame of every clip.
static int fast_geometry(int fmt, int w, int h, int sw, int sh) {
	(void)w;
	return (fmt == AV_PIX_FMT_YUV420P || fmt == AV_PIX_FMT_YUVJ420P) && sw % 2 == 0 && (int64_t)h * 16 >= (int64_t)sh * 17;
}

// put_planar writes the crop of the planar frame in cv as target k.
static void put_planar(conv *cv, ls_clip *c, int k, uint8_t *dst) {
	const rgbtab *t = &cv->tab;
	const uint8_t *yt = t->y + t->yoffs;
	int S = c->size, sw = cv->sw, cw = sw / 2;
	const uint8_t *Y = cv->yuv, *U = Y + (size_t)sw * cv->sh, *V = U + (size_t)cw * cv->sh;
	uint8_t *out = dst + (size_t)k * S * S * 3;
	for (int y = 0; y < S; y++) {
		size_t row = (size_t)(y + cv->oy);
		const uint8_t *py = Y + row * sw, *pu = U + row * cw, *pv = V + row * cw;
		for (int i = 0; i < S; i++) {
			int x = i + cv->ox, l = py[x], u = pu[x >> 1], v = pv[x >> 1];
			uint8_t r = yt[l + t->r[v]], g = yt[l + t->gu[u] + t->gv[v]], b = yt[l + t->b[u]];
			if (c->nhwc) {
				uint8_t *o = out + ((size_t)y * S + i) * 3;
				o[0] = r, o[1] = g, o[2] = b;
			} else {
				size_t o = (size_t)y * S + i, plane = (size_t)S * S;
				out[o] = r, out[plane + o] = g, out[2 * plane + o] = b;
			}
		}
	}
}

static int scale_planar(conv *cv, AVFrame *f) {
	int cw = cv->sw / 2;
	uint8_t *planes[4] = {cv->yuv, cv->yuv + (size_t)cv->sw * cv->sh, cv->yuv + (size_t)cv->sw * cv->sh + (size_t)cw * cv->sh, NULL};
	int strides[4] = {cv->sw, cw, cw, 0};
	return sws_scale(cv->sws, (const uint8_t *const *)f->data, f->linesize, 0, f->height, planes, strides);
}

static void put_rgb(conv *cv, ls_clip *c, int k, uint8_t *dst);

// planar_init tries the planar path for the first frame f: it makes the
// YUV 4:2:2 scaler and checks its pixels for f against the RGB24
// scaler's (rgb, already made). If they differ anywhere, the clip keeps
// the RGB24 scaler.
static int planar_init(conv *cv, ls_clip *c, AVFrame *f, struct SwsContext *rgb) {
	// The planes keep the input's range: swscale would convert full range
	// to limited on the way to YUV, where its RGB writer reads full range.
	int out = f->format == AV_PIX_FMT_YUVJ420P ? AV_PIX_FMT_YUVJ422P : AV_PIX_FMT_YUV422P;
	struct SwsContext *p = sws_getContext(f->width, f->height, f->format, cv->sw, cv->sh, out, SWS_BILINEAR | SWS_ACCURATE_RND, NULL, NULL, NULL);
	if (!p) return 0;
	size_t ysize = (size_t)cv->sw * cv->sh;
	cv->yuv = av_malloc(2 * ysize + 64);
	if (!cv->yuv) {
		sws_freeContext(p);
		return 0;
	}
	rgbtab_init(&cv->tab, rgb);
	int S = c->size;
	size_t n = (size_t)S * S * 3;
	uint8_t *a = av_malloc(2 * n);
	if (!a) {
		sws_freeContext(p);
		av_freep(&cv->yuv);
		return 0;
	}
	cv->sws = rgb;
	uint8_t *rplanes[4] = {cv->rgb, NULL, NULL, NULL};
	int rstrides[4] = {cv->sw * 3, 0, 0, 0};
	sws_scale(rgb, (const uint8_t *const *)f->data, f->linesize, 0, f->height, rplanes, rstrides);
	put_rgb(cv, c, 0, a);
	cv->sws = p;
	scale_planar(cv, f);
	put_planar(cv, c, 0, a + n);
	int same = memcmp(a, a + n, n) == 0;
	av_free(a);
	if (!same) {
		cv->sws = rgb;
		sws_freeContext(p);
		av_freep(&cv->yuv);
		return 0;
	}
	sws_freeContext(rgb);
	cv->planar = 1;
	c->planar = 1;
	return 1;
}

// emit writes frame f, scaled and cropped, as target k of dst. A frame
// in device memory (NVDEC's) is copied out first: only the frames a target
// shows cross the bus.
static int emit(conv *cv, ls_clip *c, AVFrame *f, int k, uint8_t *dst) {
	if (f->hw_frames_ctx) {
		if (!cv->mem && !(cv->mem = av_frame_alloc())) return LS_VIDEO_NOMEM;
		av_frame_unref(cv->mem);
		if (av_hwframe_transfer_data(cv->mem, f, 0) < 0) {
			c->hw_reason = LS_HW_ERROR;
			return LS_VIDEO_HW;
		}
		f = cv->mem;
	}
	if (!cv->sws) {
		// The short side becomes size; the long side keeps the aspect,
		// rounded to the nearest even number as ffmpeg's scale=-2:size
		// does, so a landscape frame's width is even: the planar path
		// needs that (fast_geometry), and a nearest-integer width is odd
		// about half the time (320x240 at 112: 149).
		double s = (double)c->size / (f->width < f->height ? f->width : f->height);
		if (f->width >= f->height) {
			cv->sw = 2 * (int)lround(f->width * s / 2);
			cv->sh = c->size;
		} else {
			cv->sw = c->size;
			cv->sh = 2 * (int)lround(f->height * s / 2);
		}
		if (cv->sw < c->size) cv->sw = c->size;
		if (cv->sh < c->size) cv->sh = c->size;
		cv->ox = (int)floor(c->u_x * (cv->sw - c->size) + 0.5);
		cv->oy = (int)floor(c->u_y * (cv->sh - c->size) + 0.5);
		struct SwsContext *rgb = sws_getContext(f->width, f->height, f->format, cv->sw, cv->sh, AV_PIX_FMT_RGB24, SWS_BILINEAR, NULL, NULL, NULL);
		if (!rgb) return LS_VIDEO_UNSUPPORTED;
		cv->sws = rgb;
		cv->rgb = av_malloc((size_t)cv->sw * cv->sh * 3 + 64);
		if (!cv->rgb) return LS_VIDEO_NOMEM;
		if (!c->rgb_only && fast_geometry(f->format, f->width, f->height, cv->sw, cv->sh)) planar_init(cv, c, f, rgb);
	}
	if (cv->planar) {
		scale_planar(cv, f);
		put_planar(cv, c, k, dst);
		return 0;
	}
	uint8_t *planes[4] = {cv->rgb, NULL, NULL, NULL};
	int strides[4] = {cv->sw * 3, 0, 0, 0};
	sws_scale(cv->sws, (const uint8_t *const *)f->data, f->linesize, 0, f->height, planes, strides);
	put_rgb(cv, c, k, dst);
	return 0;
}

// put_rgb writes the crop of the RGB24 frame in cv as target k.
static void put_rgb(conv *cv, ls_clip *c, int k, uint8_t *dst) {
	int S = c->size;
	uint8_t *out = dst + (size_t)k * S * S * 3;
	for (int y = 0; y < S; y++) {
		const uint8_t *row = cv->rgb + ((size_t)(y + cv->oy) * cv->sw + cv->ox) * 3;
		if (c->nhwc) {
			memcpy(out + (size_t)y * S * 3, row, (size_t)S * 3);
		} else {
			for (int x = 0; x < S; x++) {
				out[(size_t)y * S + x] = row[3 * x];
				out[(size_t)S * S + (size_t)y * S + x] = row[3 * x + 1];
				out[(size_t)2 * S * S + (size_t)y * S + x] = row[3 * x + 2];
			}
		}
	}

}

// header_suffices reports whether the demuxer's header gave the best
// video stream a codec, a frame size, a time base and a duration (its own
// or the container's).
static int header_suffices(const AVFormatContext *fmt) {
	int si = av_find_best_stream((AVFormatContext *)fmt, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
	if (si < 0) return 0;
	const AVStream *st = fmt->streams[si];
	const AVCodecParameters *p = st->codecpar;
	return p->codec_id != AV_CODEC_ID_NONE && p->width > 0 && p->height > 0 && st->time_base.num > 0 && st->time_base.den > 0 &&
	       ((st->duration != AV_NOPTS_VALUE && st->duration > 0) || (fmt->duration != AV_NOPTS_VALUE && fmt->duration > 0));
}

// needed reports whether the frame of pkt may be one a target shows:
// some target lies in [pts, pts+duration). Unknown timing: needed.
static int needed(const AVPacket *pkt, const int64_t *targets, int T) {
	if (pkt->pts == AV_NOPTS_VALUE || pkt->duration <= 0) return 1;
	for (int k = 0; k < T; k++)
		if (targets[k] >= pkt->pts && targets[k] < pkt->pts + pkt->duration) return 1;
	return 0;
}

int ls_video_device(int ordinal, void **hw, char *err, int errlen) {
	char dev[16];
	snprintf(dev, sizeof dev, "%d", ordinal);
	AVBufferRef *ref = NULL;
	int ret = av_hwdevice_ctx_create(&ref, AV_HWDEVICE_TYPE_CUDA, dev, NULL, 0);
	if (ret < 0) {
		snprintf(err, errlen, "%s", av_err2str(ret));
		*hw = NULL;
		return ret;
	}
	*hw = ref;
	return 0;
}

void ls_video_device_free(void **hw) {
	AVBufferRef *ref = *hw;
	av_buffer_unref(&ref);
	*hw = NULL;
}

// has_cuda reports whether decoder d decodes into CUDA frames given a
// device (FFmpeg's NVDEC hwaccel). The *_cuvid decoders (hardware only,
// with their own surface handling) are not used.
static int has_cuda(const AVCodec *d) {
	if (d->capabilities & AV_CODEC_CAP_HARDWARE) return 0;
	for (int i = 0;; i++) {
		const AVCodecHWConfig *h = avcodec_get_hw_config(d, i);
		if (!h) return 0;
		if (h->device_type == AV_HWDEVICE_TYPE_CUDA && h->pix_fmt == AV_PIX_FMT_CUDA && (h->methods & AV_CODEC_HW_CONFIG_METHOD_HW_DEVICE_CTX)) return 1;
	}
}

// cuda_decoder is a decoder of codec's codec with a CUDA path: codec
// itself, or another (AV1: the native decoder, where the CPU's is
// libdav1d, which has none); NULL when there is none.
static const AVCodec *cuda_decoder(const AVCodec *codec) {
	if (has_cuda(codec)) return codec;
	void *it = NULL;
	const AVCodec *d;
	while ((d = av_codec_iterate(&it)))
		if (d->id == codec->id && av_codec_is_decoder(d) && has_cuda(d)) return d;
	return NULL;
}

// twin is in C's heap: cgo's checks take an address in the binary's data
// for a Go pointer.
static void *twin;
static pthread_once_t twin_once = PTHREAD_ONCE_INIT;
static void twin_init(void) { twin = malloc(1); }
void *ls_video_twin(void) {
	pthread_once(&twin_once, twin_init);
	return twin;
}

const char *ls_video_device_decoder(const char *name) {
	const AVCodec *d = avcodec_find_decoder_by_name(name);
	if (!d || d->type != AVMEDIA_TYPE_VIDEO) return NULL;
	d = cuda_decoder(d);
	return d ? d->name : NULL;
}

// pick_cuda is the get_format of a decoder on the device: CUDA frames or
// nothing. FFmpeg offers AV_PIX_FMT_CUDA only when NVDEC takes the stream
// (it drops the format when the hwaccel's init fails: a profile, a bit
// depth or a frame size the engine lacks); without it the decode fails
// and the clip goes to the CPU, counted, rather than to a software
// decode with the device path's single thread.
static enum AVPixelFormat pick_cuda(AVCodecContext *dec, const enum AVPixelFormat *fmts) {
	for (; *fmts != AV_PIX_FMT_NONE; fmts++)
		if (*fmts == AV_PIX_FMT_CUDA) return AV_PIX_FMT_CUDA;
	((ls_clip *)dec->opaque)->hw_reason = LS_HW_REFUSED;
	return AV_PIX_FMT_NONE;
}

// device_error reports whether a decode call's error is the device's (a
// CUDA call failed, no surface left) rather than the data's.
static int device_error(int ret) {
	return ret < 0 && ret != AVERROR(EAGAIN) && ret != AVERROR_EOF && ret != AVERROR_INVALIDDATA;
}

int ls_video_clip(ls_src *src, ls_clip *c, uint8_t *dst, char *err, int errlen) {
	int rc = 0, ret;
	AVIOContext *avio = NULL;
	AVFormatContext *fmt = NULL;
	AVCodecContext *dec = NULL;
	AVPacket *pkt = NULL;
	AVFrame *frame = NULL, *held = NULL;
	conv cv = {0};
	int64_t targets[1024];
	int T = c->frames, next = 0, have_held = 0;
	// AVIO's buffer: each refill is one read of this many bytes (a
	// RangeReader serves several from one ranged GET).
	const int bufsize = 16 << 10;
	int hw_errors = 0;
	err[0] = 0;
	c->short_clip = 0;
	c->n_decoded = 0;
	c->hw_used = 0;
	c->hw_reason = 0;
#define FAIL(code, ...)                                                                                        \
	do {                                                                                                   \
		snprintf(err, errlen, __VA_ARGS__);                                                            \
		rc = code;                                                                                     \
		goto done;                                                                                     \
	} while (0)
	if (T < 1 || T > 1024) FAIL(LS_VIDEO_UNSUPPORTED, "%d frames per clip: want 1 to 1024", T);
	uint8_t *iobuf = av_malloc(bufsize);
	if (!iobuf) FAIL(LS_VIDEO_NOMEM, "out of memory");
	avio = avio_alloc_context(iobuf, bufsize, 0, src, src_read, NULL, src_seek);
	if (!avio) {
		av_free(iobuf);
		FAIL(LS_VIDEO_NOMEM, "out of memory");
	}
	fmt = avformat_alloc_context();
	if (!fmt) FAIL(LS_VIDEO_NOMEM, "out of memory");
	fmt->pb = avio;
	fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
	if ((ret = avformat_open_input(&fmt, NULL, NULL, NULL)) < 0) {
		fmt = NULL;
		FAIL(ret == AVERROR(EIO) ? LS_VIDEO_IO : LS_VIDEO_CORRUPT, "open: %s", av_err2str(ret));
	}
	// The container's header usually says all the decode needs: the
	// codec, the frame size and the duration. avformat_find_stream_info
	// would then only decode frames from the start of the file (for the
	// pixel format and, for H.264, the reorder delay), which the seek
	// throws away: it runs only when the header leaves a gap.
	if (!header_suffices(fmt) && (ret = avformat_find_stream_info(fmt, NULL)) < 0)
		FAIL(LS_VIDEO_CORRUPT, "stream info: %s", av_err2str(ret));
	const AVCodec *codec = NULL;
	int si = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
	if (si == AVERROR_STREAM_NOT_FOUND) FAIL(LS_VIDEO_UNSUPPORTED, "no video stream");
	if (si < 0 || !codec) FAIL(LS_VIDEO_UNSUPPORTED, "no decoder for the video stream");
	AVStream *st = fmt->streams[si];
	for (unsigned i = 0; i < fmt->nb_streams; i++)
		if ((int)i != si) fmt->streams[i]->discard = AVDISCARD_ALL;
	AVRational tb = st->time_base;
	c->tb_num = tb.num;
	c->tb_den = tb.den;
	snprintf(c->codec, sizeof c->codec, "%s", codec->name);
	c->width = st->codecpar->width;
	c->height = st->codecpar->height;
	if (c->width <= 0 || c->height <= 0) FAIL(LS_VIDEO_CORRUPT, "no frame size");
	if ((int64_t)c->width * c->height > c->max_pixels) FAIL(LS_VIDEO_TOO_LARGE, "%dx%d frames, over %lld pixels", c->width, c->height, (long long)c->max_pixels);
	int64_t start = st->start_time != AV_NOPTS_VALUE ? st->start_time : 0;
	int64_t dur = st->duration;
	if (dur == AV_NOPTS_VALUE || dur <= 0) {
		if (fmt->duration == AV_NOPTS_VALUE || fmt->duration <= 0) FAIL(LS_VIDEO_CORRUPT, "no duration");
		dur = av_rescale_q(fmt->duration, AV_TIME_BASE_Q, tb);
	}
	c->start_pts = start;
	c->duration_ts = dur;
	double tbs = av_q2d(tb);
	if (c->sampling == 0) {
		for (int k = 0; k < T; k++) targets[k] = start + (int64_t)((2 * (int64_t)k + 1) * (__int128)dur / (2 * T));
	} else {
		double win = T / c->fps; // seconds
		double room = dur * tbs - win;
		double s = room > 0 ? c->u_start * room : 0;
		for (int k = 0; k < T; k++) targets[k] = start + (int64_t)floor((s + k / c->fps) / tbs + 1e-6);
	}
	int is_twin = twin && c->hw == twin;
	if (c->hw && !is_twin) {
		const AVCodec *hwc = cuda_decoder(codec);
		if (hwc) {
			codec = hwc;
			c->hw_used = 1;
		} else {
			c->hw_reason = LS_HW_CODEC; // the CPU's decoder, here and now
		}
	}
	dec = avcodec_alloc_context3(codec);
	if (!dec) FAIL(LS_VIDEO_NOMEM, "out of memory");
	if ((ret = avcodec_parameters_to_context(dec, st->codecpar)) < 0) FAIL(LS_VIDEO_CORRUPT, "codec parameters: %s", av_err2str(ret));
	dec->thread_count = c->threads;
	dec->thread_type = FF_THREAD_FRAME | FF_THREAD_SLICE;
	dec->pkt_timebase = tb;
	if (c->hw_used) {
		// NVDEC does the work: one thread feeds it. The decoder holds
		// its references; this call holds two frames more (frame, held)
		// and the one being copied out.
		dec->hw_device_ctx = av_buffer_ref(c->hw);
		if (!dec->hw_device_ctx) FAIL(LS_VIDEO_NOMEM, "out of memory");
		dec->opaque = c;
		dec->get_format = pick_cuda;
		dec->thread_count = 1;
		dec->extra_hw_frames = 3;
	}
	if ((ret = avcodec_open2(dec, codec, NULL)) < 0) FAIL(LS_VIDEO_UNSUPPORTED, "open %s decoder: %s", codec->name, av_err2str(ret));
	pkt = av_packet_alloc();
	frame = av_frame_alloc();
	held = av_frame_alloc();
	if (!pkt || !frame || !held) FAIL(LS_VIDEO_NOMEM, "out of memory");
	// The keyframe at or before the first target: decode only from there.
	// Demuxers seek by their index, some (MP4) by decode timestamps, so a
	// keyframe whose dts is before the target may show after it (B-frame
	// reordering): probe the first frame a seek yields and seek further
	// back until it is not after the target.
	// The probe's decoder state and first frame are kept (pending) when
	// that keyframe will do: the decode goes on from there instead of
	// seeking back and decoding the keyframe again.
	int pending = 0;
	if (targets[0] > start) {
		int64_t ts = targets[0], back = 1;
		for (int attempt = 0; attempt < 12; attempt++) {
			if (av_seek_frame(fmt, si, ts, AVSEEK_FLAG_BACKWARD) < 0) {
				av_seek_frame(fmt, si, start, AVSEEK_FLAG_BACKWARD);
				ts = start;
			}
			avcodec_flush_buffers(dec);
			if (ts <= start) break;
			int64_t first = AV_NOPTS_VALUE;
			while (first == AV_NOPTS_VALUE) {
				ret = av_read_frame(fmt, pkt);
				if (ret < 0) break;
				if (pkt->stream_index == si) avcodec_send_packet(dec, pkt);
				av_packet_unref(pkt);
				if (c->hw_reason == LS_HW_REFUSED) break; // not to the end of the object: the CPU decodes it
				if (avcodec_receive_frame(dec, frame) >= 0) {
					first = frame->best_effort_timestamp;
					if (first == AV_NOPTS_VALUE) first = frame->pts;
					if (first == AV_NOPTS_VALUE) first = ts; // untimed: a frame all the same
					if (first <= targets[0]) {
						pending = 1;
						break;
					}
					av_frame_unref(frame);
				}
			}
			if (pending || c->hw_reason == LS_HW_REFUSED) break;
			if (first == AV_NOPTS_VALUE) {
				// seek there again for the decode proper
				if (av_seek_frame(fmt, si, ts, AVSEEK_FLAG_BACKWARD) < 0) av_seek_frame(fmt, si, start, AVSEEK_FLAG_BACKWARD);
				avcodec_flush_buffers(dec);
				break;
			}
			back = back * 2 + (first - targets[0]);
			ts = targets[0] - back;
			if (ts < start) ts = start;
		}
	}
	if (is_twin) {
		// The twin refuses here, after the header and the seek have read
		// the source, as NVDEC does at the first frame.
		c->hw_used = 1;
		c->hw_reason = LS_HW_REFUSED;
		FAIL(LS_VIDEO_HW, "the twin device refuses every stream");
	}
	int exact_durations = fmt->iformat && fmt->iformat->name && strstr(fmt->iformat->name, "mp4") != NULL;
	int eof = 0;
	while (next < T && !eof) {
		// NVDEC refused the stream, or keeps failing: stop reading, the
		// CPU decodes the clip (done: LS_VIDEO_HW).
		if (c->hw_reason == LS_HW_REFUSED || hw_errors > 4) FAIL(LS_VIDEO_CORRUPT, "NVDEC: refused the stream, or %d errors", hw_errors);
		if (pending) {
			ret = 0; // the probe's frame first, then packets
		} else if ((ret = av_read_frame(fmt, pkt)) == AVERROR_EOF) {
			eof = 1;
			avcodec_send_packet(dec, NULL);
		} else if (ret == AVERROR(EIO)) {
			FAIL(LS_VIDEO_IO, "read: %s", av_err2str(ret));
		} else if (ret < 0) {
			eof = 1; // a damaged tail: what was decoded stands
			avcodec_send_packet(dec, NULL);
		} else if (pkt->stream_index != si) {
			av_packet_unref(pkt);
			continue;
		} else {
			// A frame no target falls on (its display interval [pts,
			// pts+duration) holds none) is not needed: if it is not a
			// reference either, the decoder may skip it
			// (AVDISCARD_NONREF; frame threads copy skip_frame per
			// packet). Only where durations are the samples' own (MP4's
			// table gives each; Matroska may repeat a track's default
			// duration over variable-rate frames) and known: else decode.
			dec->skip_frame = !exact_durations || needed(pkt, targets, T) ? AVDISCARD_DEFAULT : AVDISCARD_NONREF;
			ret = avcodec_send_packet(dec, pkt); // a damaged packet is skipped
			hw_errors += c->hw_used && device_error(ret);
			av_packet_unref(pkt);
		}
		while (next < T) {
			if (pending) {
				pending = 0; // frame holds the probe's
			} else if ((ret = avcodec_receive_frame(dec, frame)) < 0) {
				hw_errors += c->hw_used && device_error(ret);
				break;
			}
			c->n_decoded++;
			int64_t pts = frame->best_effort_timestamp;
			if (pts == AV_NOPTS_VALUE) pts = frame->pts;
			if (frame->width != c->width || frame->height != c->height) {
				av_frame_unref(frame);
				FAIL(LS_VIDEO_UNSUPPORTED, "frame size changes mid-stream");
			}
			// Targets before this frame are the held frame's (the one
			// displayed then); before the first frame, this one's.
			while (next < T && pts != AV_NOPTS_VALUE && pts > targets[next]) {
				AVFrame *use = have_held ? held : frame;
				if ((rc = emit(&cv, c, use, next, dst))) FAIL(rc, "convert frame");
				c->pts[next] = use->best_effort_timestamp;
				next++;
			}
			av_frame_unref(held);
			av_frame_move_ref(held, frame);
			have_held = 1;
		}
	}
	if (next < T) {
		if (!have_held) FAIL(LS_VIDEO_CORRUPT, "no decodable frame");
		// The rest lie at or after the last frame: it is displayed until
		// the end; targets past the end are padding.
		for (; next < T; next++) {
			if ((rc = emit(&cv, c, held, next, dst))) FAIL(rc, "convert frame");
			c->pts[next] = held->best_effort_timestamp;
			if (targets[next] >= start + dur) c->short_clip = 1;
		}
	}
done:
	// On the device, a failure that is not the store's goes to the CPU,
	// which decides whether the data is at fault: NVDEC refused the
	// stream, or failed on it, or decoded nothing of it.
	if (c->hw_used && (c->hw_reason == LS_HW_REFUSED || (rc != 0 && rc != LS_VIDEO_IO && rc != LS_VIDEO_NOMEM) || (rc == 0 && hw_errors > 0))) {
		if (c->hw_reason != LS_HW_REFUSED) c->hw_reason = LS_HW_ERROR;
		if (!err[0]) snprintf(err, errlen, "%d device errors", hw_errors);
		rc = LS_VIDEO_HW;
	}
	if (cv.sws) sws_freeContext(cv.sws);
	av_frame_free(&cv.mem);
	av_free(cv.rgb);
	av_free(cv.yuv);
	av_frame_free(&held);
	av_frame_free(&frame);
	av_packet_free(&pkt);
	avcodec_free_context(&dec);
	avformat_close_input(&fmt);
	if (avio) {
		av_freep(&avio->buffer);
		avio_context_free(&avio);
	}
	return rc;
}
