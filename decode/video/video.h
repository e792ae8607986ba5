#ifndef LONGSHORE_VIDEO_H
#define LONGSHORE_VIDEO_H
#include <stdint.h>

enum {
	LS_VIDEO_CORRUPT = 1,
	LS_VIDEO_UNSUPPORTED = 2,
	LS_VIDEO_TOO_LARGE = 3,
	LS_VIDEO_NOMEM = 4,
	LS_VIDEO_IO = 5, // the reader failed (the store, not the data)
	LS_VIDEO_HW = 6, // the GPU's decoder could not: hw_reason says why; decode on the CPU
};

// hw_reason: why a clip given a device (hw) was not decoded on it.
enum {
	LS_HW_CODEC = 1,   // no decoder of the codec has a CUDA path in this FFmpeg: decoded on the CPU in the same call
	LS_HW_REFUSED = 2, // NVDEC refused the stream (profile, bit depth, frame size): LS_VIDEO_HW
	LS_HW_ERROR = 3,   // the device failed during the decode or the copy out: LS_VIDEO_HW
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
	void *hw;            // an AVBufferRef of a CUDA device (ls_video_device), or NULL: decode on the CPU
	// out
	int short_clip;      // 1: some targets lay past the end: padded with the last frame
	int planar;          // 1: frames took the planar path (video.c, fast_geometry)
	int hw_used;         // 1: NVDEC decoded the clip
	int hw_reason;       // LS_HW_*: why not, when hw was given
	int64_t pts[1024];   // each target's chosen frame pts (stream time base), for tests
	int n_decoded;       // frames decoded
	int tb_num, tb_den;
	int64_t start_pts, duration_ts;
	int width, height;
	char codec[32];
} ls_clip;

int ls_video_clip(ls_src *src, ls_clip *c, uint8_t *dst, char *err, int errlen);

// ls_video_device opens CUDA device ordinal through FFmpeg's hwcontext
// (libcuda, loaded at run time) into *hw, an AVBufferRef; 0 or an AVERROR.
int ls_video_device(int ordinal, void **hw, char *err, int errlen);
void ls_video_device_free(void **hw);
// ls_video_device_decoder names the decoder a clip whose CPU decoder is
// name takes on the device: name itself, another of its codec, or NULL
// (the CPU, LS_HW_CODEC).
const char *ls_video_device_decoder(const char *name);
// ls_video_twin is a hw that refuses every stream after reading it, as
// NVDEC refuses one it lacks: tests of the CPU fallback without a GPU.
void *ls_video_twin(void);

#endif
