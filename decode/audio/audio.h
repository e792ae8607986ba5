#ifndef LONGSHORE_AUDIO_H
#define LONGSHORE_AUDIO_H
#include <stdint.h>

// Results of ls_audio_decode (besides 0).
enum {
	LS_AUDIO_CORRUPT = 1,     // FFmpeg could not read the container or stream
	LS_AUDIO_UNSUPPORTED = 2, // no audio stream, or no decoder for its codec
	LS_AUDIO_TOO_LONG = 3,    // more than max_frames output frames
	LS_AUDIO_NOMEM = 4,
};

// ls_audio_decode decodes the first audio stream of the object data[0:size)
// (read through a memory AVIOContext freed before it returns) and resamples
// it with libswresample to interleaved float32 at out_rate Hz, out_channels
// channels (FFmpeg's default layout for that count, downmixing or upmixing
// with swr's default matrix). *out (malloc'd, the caller frees it) holds
// *out_frames frames. At most max_frames frames are produced. err gets a
// message on failure.
int ls_audio_decode(const uint8_t *data, int64_t size, int out_rate, int out_channels, int64_t max_frames,
                    float **out, int64_t *out_frames, char *err, int errlen);

#endif
