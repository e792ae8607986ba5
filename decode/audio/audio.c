#include "audio.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <libswresample/swresample.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	const uint8_t *data;
	int64_t size, pos;
} memsrc;

static int mem_read(void *opaque, uint8_t *buf, int n) {
	memsrc *m = opaque;
	int64_t left = m->size - m->pos;
	if (left <= 0) return AVERROR_EOF;
	if (n > left) n = (int)left;
	memcpy(buf, m->data + m->pos, n);
	m->pos += n;
	return n;
}

static int64_t mem_seek(void *opaque, int64_t off, int whence) {
	memsrc *m = opaque;
	int64_t p;
	switch (whence & ~AVSEEK_FORCE) {
	case AVSEEK_SIZE: return m->size;
	case SEEK_SET: p = off; break;
	case SEEK_CUR: p = m->pos + off; break;
	case SEEK_END: p = m->size + off; break;
	default: return AVERROR(EINVAL);
	}
	if (p < 0 || p > m->size) return AVERROR(EINVAL);
	m->pos = p;
	return p;
}

typedef struct {
	float *buf;
	int64_t frames, cap; // in frames
	int channels;
	int64_t max;
} pcm;

// room makes room for n more frames.
static int room(pcm *p, int64_t n) {
	if (p->frames + n <= p->cap) return 0;
	int64_t c = p->cap ? p->cap : 16384;
	while (c < p->frames + n) c *= 2;
	float *b = realloc(p->buf, (size_t)c * p->channels * sizeof(float));
	if (!b) return LS_AUDIO_NOMEM;
	p->buf = b;
	p->cap = c;
	return 0;
}

// convert resamples one frame (NULL: drain) into p.
static int convert(SwrContext *swr, AVFrame *f, int out_rate, pcm *p) {
	int in = f ? f->nb_samples : 0;
	int64_t want = swr_get_out_samples(swr, in);
	if (want < 0) return LS_AUDIO_CORRUPT;
	want += 16;
	if (p->frames + want > p->max + 16) {
		// the cap, with a little room for the resampler's own rounding
		if (p->frames >= p->max) return LS_AUDIO_TOO_LONG;
		want = p->max + 16 - p->frames;
	}
	int rc = room(p, want);
	if (rc) return rc;
	uint8_t *dst = (uint8_t *)(p->buf + p->frames * p->channels);
	int got = swr_convert(swr, &dst, (int)want, f ? (const uint8_t **)f->extended_data : NULL, in);
	if (got < 0) return LS_AUDIO_CORRUPT;
	p->frames += got;
	if (p->frames > p->max) return LS_AUDIO_TOO_LONG;
	(void)out_rate;
	return 0;
}

int ls_audio_decode(const uint8_t *data, int64_t size, int out_rate, int out_channels, int64_t max_frames,
                    float **out, int64_t *out_frames, char *err, int errlen) {
	int rc = 0, ret;
	memsrc src = {data, size, 0};
	AVIOContext *avio = NULL;
	AVFormatContext *fmt = NULL;
	AVCodecContext *dec = NULL;
	SwrContext *swr = NULL;
	AVPacket *pkt = NULL;
	AVFrame *frame = NULL;
	AVChannelLayout in_layout = {0}, out_layout = {0};
	pcm p = {NULL, 0, 0, out_channels, max_frames};
	const int bufsize = 64 << 10;
	int stream = -1;
	*out = NULL;
	*out_frames = 0;
	err[0] = 0;
#define FAIL(code, ...)                                                                                        \
	do {                                                                                                   \
		snprintf(err, errlen, __VA_ARGS__);                                                            \
		rc = code;                                                                                     \
		goto done;                                                                                     \
	} while (0)

	uint8_t *iobuf = av_malloc(bufsize);
	if (!iobuf) FAIL(LS_AUDIO_NOMEM, "out of memory");
	avio = avio_alloc_context(iobuf, bufsize, 0, &src, mem_read, NULL, mem_seek);
	if (!avio) {
		av_free(iobuf);
		FAIL(LS_AUDIO_NOMEM, "out of memory");
	}
	fmt = avformat_alloc_context();
	if (!fmt) FAIL(LS_AUDIO_NOMEM, "out of memory");
	fmt->pb = avio;
	fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
	if ((ret = avformat_open_input(&fmt, NULL, NULL, NULL)) < 0) {
		fmt = NULL; // freed by avformat_open_input
		FAIL(LS_AUDIO_CORRUPT, "open: %s", av_err2str(ret));
	}
	if ((ret = avformat_find_stream_info(fmt, NULL)) < 0) FAIL(LS_AUDIO_CORRUPT, "stream info: %s", av_err2str(ret));
	const AVCodec *codec = NULL;
	stream = av_find_best_stream(fmt, AVMEDIA_TYPE_AUDIO, -1, -1, &codec, 0);
	if (stream == AVERROR_STREAM_NOT_FOUND) FAIL(LS_AUDIO_UNSUPPORTED, "no audio stream");
	if (stream < 0 || !codec) FAIL(LS_AUDIO_UNSUPPORTED, "no decoder for the audio stream");
	AVCodecParameters *par = fmt->streams[stream]->codecpar;
	for (unsigned i = 0; i < fmt->nb_streams; i++)
		if ((int)i != stream) fmt->streams[i]->discard = AVDISCARD_ALL;
	dec = avcodec_alloc_context3(codec);
	if (!dec) FAIL(LS_AUDIO_NOMEM, "out of memory");
	if ((ret = avcodec_parameters_to_context(dec, par)) < 0) FAIL(LS_AUDIO_CORRUPT, "codec parameters: %s", av_err2str(ret));
	dec->thread_count = 1;
	if ((ret = avcodec_open2(dec, codec, NULL)) < 0) FAIL(LS_AUDIO_UNSUPPORTED, "open %s decoder: %s", codec->name, av_err2str(ret));
	if (dec->sample_rate <= 0 || dec->ch_layout.nb_channels <= 0) FAIL(LS_AUDIO_CORRUPT, "stream has no sample rate or channels");

	pkt = av_packet_alloc();
	frame = av_frame_alloc();
	if (!pkt || !frame) FAIL(LS_AUDIO_NOMEM, "out of memory");
	av_channel_layout_default(&out_layout, out_channels);
	int in_rate = 0, in_fmt = -1;
	int eof = 0;
	while (!eof) {
		ret = av_read_frame(fmt, pkt);
		if (ret == AVERROR_EOF) {
			eof = 1;
			ret = avcodec_send_packet(dec, NULL);
		} else if (ret < 0) {
			FAIL(LS_AUDIO_CORRUPT, "read: %s", av_err2str(ret));
		} else if (pkt->stream_index != stream) {
			av_packet_unref(pkt);
			continue;
		} else {
			ret = avcodec_send_packet(dec, pkt);
			av_packet_unref(pkt);
			// A damaged packet: skip it as ffmpeg does; a file made only of
			// them yields no samples and fails below.
			if (ret < 0 && ret != AVERROR(EAGAIN)) continue;
		}
		for (;;) {
			ret = avcodec_receive_frame(dec, frame);
			if (ret == AVERROR(EAGAIN) || ret == AVERROR_EOF) break;
			if (ret < 0) break; // a damaged frame: skipped
			if (!swr) {
				in_rate = frame->sample_rate;
				in_fmt = frame->format;
				if (frame->ch_layout.order == AV_CHANNEL_ORDER_UNSPEC)
					av_channel_layout_default(&in_layout, frame->ch_layout.nb_channels);
				else if (av_channel_layout_copy(&in_layout, &frame->ch_layout) < 0)
					FAIL(LS_AUDIO_NOMEM, "out of memory");
				if (in_rate <= 0 || in_layout.nb_channels <= 0) FAIL(LS_AUDIO_CORRUPT, "frame without rate or channels");
				if (swr_alloc_set_opts2(&swr, &out_layout, AV_SAMPLE_FMT_FLT, out_rate, &in_layout, in_fmt, in_rate, 0, NULL) < 0 ||
				    swr_init(swr) < 0)
					FAIL(LS_AUDIO_UNSUPPORTED, "resampler for %d Hz %d channels %s", in_rate, in_layout.nb_channels,
					     av_get_sample_fmt_name(in_fmt) ? av_get_sample_fmt_name(in_fmt) : "?");
			} else if (frame->sample_rate != in_rate || frame->format != in_fmt ||
			           frame->ch_layout.nb_channels != in_layout.nb_channels) {
				FAIL(LS_AUDIO_UNSUPPORTED, "audio parameters change mid-stream");
			}
			rc = convert(swr, frame, out_rate, &p);
			av_frame_unref(frame);
			if (rc == LS_AUDIO_TOO_LONG) FAIL(rc, "longer than %lld frames at %d Hz", (long long)max_frames, out_rate);
			if (rc) FAIL(rc, "resample failed");
		}
	}
	if (!swr) FAIL(LS_AUDIO_CORRUPT, "no decodable audio");
	rc = convert(swr, NULL, out_rate, &p);
	if (rc == LS_AUDIO_TOO_LONG) FAIL(rc, "longer than %lld frames at %d Hz", (long long)max_frames, out_rate);
	if (rc) FAIL(rc, "resample failed");
	if (p.frames == 0) FAIL(LS_AUDIO_CORRUPT, "no decodable audio");
	*out = p.buf;
	*out_frames = p.frames;
	p.buf = NULL;
done:
	free(p.buf);
	swr_free(&swr);
	av_channel_layout_uninit(&in_layout);
	av_channel_layout_uninit(&out_layout);
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
