#ifndef LONGSHORE_VIDEO_H
#define LONGSHORE_VIDEO_H
#include <stdint.h>

enum {
	LS_VIDEO_CORRUPT = 1,
	LS_VIDEO_UNSUPPORTED = 2,
	LS_VIDEO_TOO_LARGE = 3,
	LS_VIDEO_NOMEM = 4,
	LS_VIDEO_IO = 5, // the reader failed (the store, not the data)
};

// Where the container's bytes come from: a Go reader behind a handle
// (lsVideoRead/lsVideoSeek, exported by video.go), or memory when data is
// set.
typedef struct {
	const uint8_t *data;
	int64_t size, pos;
	uintptr_t handle; // cgo.Handle of the Go reader when data is NULL
} ls_src;

typedef struct {
	// in
	int frames;          // T
	int sampling;        // 0 uniform over the clip, 1 a window at fps
	double fps;          // sampling 1: frames per second of the window
	double u_start;      // sampling 1: where the window starts, as a fraction of the room [0, 1)
	double u_x, u_y;     // crop position, fractions of the room [0, 1]
	int size;            // output side: short side scaled to size, then a size x size crop
	int nhwc;            // 1: [T,H,W,3]; 0: [T,3,H,W]
	int threads;         // decoder threads
	int64_t max_pixels;  // per frame
	int rgb_only;        // 1: always swscale's RGB24 output (tests compare the planar path with it)
	// out
	int short_clip;      // 1: some targets lay past the end: padded with the last frame
	int planar;          // 1: frames took the planar path (video.c, fast_geometry)
	int64_t pts[1024];   // each target's chosen frame pts (stream time base), for tests
	int n_decoded;       // frames decoded
	int tb_num, tb_den;
	int64_t start_pts, duration_ts;
	int width, height;
	char codec[32];
} ls_clip;

int ls_video_clip(ls_src *src, ls_clip *c, uint8_t *dst, char *err, int errlen);

#endif
