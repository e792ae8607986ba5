// Package video samples clips from video objects (MP4, MKV, WebM holding
// H.264, HEVC, VP8, VP9, AV1 or MPEG-4 part 2: what Debian 12's FFmpeg 5.1
// decodes, AV1 through libdav1d) into T frames of uint8 RGB: T timestamps
// chosen uniformly over the clip or in a window at a target fps (random
// in training, seeded; centered in evaluation), the frame displayed at
// each timestamp (the last with pts <= it, so variable frame rate is
// handled by timestamps, not frame counts), after seeking to the keyframe
// at or before the first one and decoding only up to the last. Each frame
// is scaled (bilinear) so its short side is Size and cropped to Size x
// Size, the same crop for the whole clip (training: random; evaluation:
// centered). Targets past the end repeat the last frame, and the clip is
// reported short.
//
// Bytes come from memory or from an io.ReadSeeker (RangeReader reads a
// store object by ranges with read-ahead): the AVIOContext is made and
// freed inside one C call (video.c), its callbacks reach the Go reader
// through a cgo.Handle deleted when the call returns. go-astiav v0.16.0's
// AllocIOContext keeps every read callback in a global map forever (the
// closure and what it holds: the reader, its buffers); this package does
// not use it. A Decoder is not safe for concurrent use.
package video

/*
#cgo pkg-config: libavformat libavcodec libavutil libswscale
#cgo LDFLAGS: -lm
#include <stdlib.h>
#include <libavutil/log.h>
#include "video.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"runtime/cgo"
	"strings"
	"unsafe"
)

// Errors, for failure reports (errors.Is).
var (
	ErrCorrupt     = errors.New("video: corrupt or truncated media")
	ErrUnsupported = errors.New("video: unsupported media")
	ErrTooLarge    = errors.New("video: frames too large")
	ErrRead        = errors.New("video: reading the object failed")
)

// Sampling is how a clip's timestamps are chosen.
type Sampling uint8

const (
	// Uniform: T timestamps at the centers of T equal parts of the clip.
	Uniform Sampling = iota
	// Random: T timestamps 1/FPS apart from a start drawn uniformly
	// over the clip (training) or the centered window (evaluation).
	Random
)

// ParseSampling reads "uniform" or "random".
func ParseSampling(s string) (Sampling, error) {
	switch strings.ToLower(s) {
	case "uniform":
		return Uniform, nil
	case "random":
		return Random, nil
	}
	return 0, fmt.Errorf("video: clip sampling %q: want uniform or random", s)
}

func (s Sampling) String() string {
	if s == Random {
		return "random"
	}
	return "uniform"
}

// Config is the clip. Zero fields mean the defaults.
type Config struct {
	// Frames is T, frames per clip. 0: 16, most video recognition
	// recipes' clip.
	Frames int
	// FPS is the frame rate of a Random window. 0: 8 (16 frames = 2 s).
	FPS float64
	// Sampling: Uniform (the zero value) or Random.
	Sampling Sampling
	// Size is the output side in pixels. 0: 112, the usual clip crop.
	Size int
	// NHWC writes [T,H,W,3]; false: [T,3,H,W].
	NHWC bool
	// Train: a random window start (Random sampling) and a random crop,
	// one per clip, seeded per sample; false: centered.
	Train bool
	// Threads are the decoder's threads per stream. 0: 2, SPDL's sweet
	// spot for H.264.
	Threads int
	// MaxPixels refuses larger frames. 0: 8192x8192.
	MaxPixels int64
}

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	if c.Frames == 0 {
		c.Frames = 16
	}
	if c.FPS == 0 {
		c.FPS = 8
	}
	if c.Size == 0 {
		c.Size = 112
	}
	if c.Threads == 0 {
		c.Threads = 2
	}
	if c.MaxPixels == 0 {
		c.MaxPixels = 8192 * 8192
	}
	return c
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if c.Frames < 1 || c.Frames > 1024 {
		errs = append(errs, fmt.Errorf("video: %d frames per clip: want 1 to 1024", c.Frames))
	}
	if !(c.FPS > 0) || c.FPS > 1000 {
		errs = append(errs, fmt.Errorf("video: clip fps %v: want more than 0, at most 1000", c.FPS))
	}
	if c.Size < 1 || c.Size > 4096 {
		errs = append(errs, fmt.Errorf("video: size %d: want 1 to 4096", c.Size))
	}
	if c.Threads < 1 || c.Threads > 64 {
		errs = append(errs, fmt.Errorf("video: %d decoder threads: want 1 to 64", c.Threads))
	}
	if c.Sampling > Random {
		errs = append(errs, fmt.Errorf("video: sampling %d", c.Sampling))
	}
	return errors.Join(errs...)
}

// SampleBytes is one clip's size: T x Size x Size x 3.
func (c Config) SampleBytes() int {
	c = c.WithDefaults()
	return c.Frames * c.Size * c.Size * 3
}

// Clip is what a decode found, for tests and reports.
type Clip struct {
	// Short: some timestamps lay past the end (the last frame repeated).
	Short bool
	// PTS are the chosen frames' timestamps, in TimeBase units.
	PTS []int64
	// TimeBase is the stream's (seconds = PTS * Num / Den).
	TimeBaseNum, TimeBaseDen int
	StartPTS, Duration       int64 // TimeBase units
	Width, Height            int
	Codec                    string
	Decoded                  int // frames decoded
	// Planar: the frames were scaled to planar YUV and converted to RGB
	// with swscale's own lookup, which gives swscale's RGB24 pixels at a
	// quarter of its cost; false: swscale's RGB24 output. Which one a
	// clip takes depends on its geometry (an even scaled width, 8-bit
	// 4:2:0, the height shrunk), and the first frame of every planar clip
	// is checked against the RGB24 output.
	Planar bool
	// Device: the GPU's video decoder (NVDEC) decoded the clip; only the
	// frames the targets show were copied to memory, then scaled and
	// cropped as on the CPU.
	Device bool
	// Fallback says why a decoder given a device decoded the clip on the
	// CPU ("" when it did not): FallbackCodec, FallbackRefused or
	// FallbackDeviceError.
	Fallback string
}

// Why a clip given a device went to the CPU (Clip.Fallback).
const (
	// FallbackCodec: no decoder of the codec has a CUDA path in this
	// FFmpeg (Debian 12's has one for H.264, HEVC, VP8, VP9, AV1, MPEG-1,
	// 2 and 4, VC-1 and MJPEG: Theora, say, has none; DeviceDecoder).
	FallbackCodec = "codec"
	// FallbackRefused: NVDEC does not take the stream: a profile, bit
	// depth or frame size the GPU's engine lacks (HEVC under 144x144, AV1
	// where the GPU has no AV1 decoder).
	FallbackRefused = "refused"
	// FallbackDeviceError: the device failed during the decode or the
	// copy out, or decoded nothing (the CPU then judges the data: a clip
	// the CPU cannot decode either is reported as the CPU's error).
	FallbackDeviceError = "device_error"
)

// Device is a GPU's video decoders (NVDEC), reached through FFmpeg's CUDA
// hwaccel: the CUDA driver (libcuda.so.1) is loaded at run time by
// FFmpeg, so this needs no -tags cuda build, only a driver. A Device is
// safe to share between Decoders on any goroutines; close it after they
// are done.
type Device struct {
	Ordinal int
	hw      unsafe.Pointer // AVBufferRef of the AVHWDeviceContext
	twin    bool           // TwinDevice
}

// ErrNoDevice: FFmpeg could not open a CUDA device (no driver, no GPU of
// that ordinal).
var ErrNoDevice = errors.New("video: no CUDA device for NVDEC")

// OpenDevice opens CUDA device ordinal for decoding.
func OpenDevice(ordinal int) (*Device, error) {
	var msg [256]C.char
	var hw unsafe.Pointer
	if rc := C.ls_video_device(C.int(ordinal), &hw, &msg[0], C.int(len(msg))); rc != 0 {
		return nil, fmt.Errorf("%w: GPU %d through FFmpeg's CUDA hwaccel (%s): it needs the NVIDIA driver (libcuda.so.1) and a GPU of that ordinal", ErrNoDevice, ordinal, C.GoString(&msg[0]))
	}
	return &Device{Ordinal: ordinal, hw: hw}, nil
}

// TwinDevice is a device that refuses every stream after reading its
// header and seeking, as NVDEC refuses a stream it lacks: tests of the
// CPU fallback (rewinding the source, counting the reason) on machines
// without a GPU. Closing it does nothing.
func TwinDevice() *Device { return &Device{Ordinal: -1, hw: C.ls_video_twin(), twin: true} }

// DeviceDecoder names the FFmpeg decoder a clip takes on a Device when
// the CPU would decode it with decoder (Clip.Codec): decoder itself
// ("h264", "hevc", "vp9"), another of its codec ("av1" for libdav1d), or
// "" when none has a CUDA path (the clip is decoded on the CPU,
// FallbackCodec). It needs no device: it reads this FFmpeg's build.
func DeviceDecoder(decoder string) string {
	cs := C.CString(decoder)
	defer C.free(unsafe.Pointer(cs))
	if n := C.ls_video_device_decoder(cs); n != nil {
		return C.GoString(n)
	}
	return ""
}

// Close releases the device (decoders still holding it keep it alive
// until they finish their call).
func (d *Device) Close() error {
	if d != nil && d.hw != nil && !d.twin {
		C.ls_video_device_free(&d.hw)
	}
	return nil
}

// Decoder samples clips. Make one per goroutine.
type Decoder struct {
	cfg Config
	// c is an allocation of its own: cgo's check of a pointer passed to C
	// reads the whole object it points into, and the Decoder holds Go
	// pointers (dev).
	c       *C.ls_clip
	rgbOnly bool    // tests: never the planar path
	dev     *Device // nil: the CPU
}

// UseDevice decodes on dev's NVDEC from now on (nil: the CPU). A clip
// the device cannot take is decoded on the CPU, and Clip.Fallback says
// why.
func (d *Decoder) UseDevice(dev *Device) { d.dev = dev }

// NewDecoder checks cfg and makes a decoder.
func NewDecoder(cfg Config) (*Decoder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Decoder{cfg: cfg.WithDefaults(), c: new(C.ls_clip)}, nil
}

// Config is the decoder's configuration, defaults filled.
func (d *Decoder) Config() Config { return d.cfg }

// Decode samples the clip of data (whole in memory) with seed into dst.
func (d *Decoder) Decode(data []byte, seed uint64, dst []byte) (Clip, error) {
	if len(data) == 0 {
		return Clip{}, fmt.Errorf("%w: empty object", ErrCorrupt)
	}
	// src lives in C memory and points at data, pinned for the call (cgo
	// forbids C memory holding unpinned Go pointers).
	var pin runtime.Pinner
	pin.Pin(&data[0])
	defer pin.Unpin()
	src := (*C.ls_src)(C.calloc(1, C.size_t(unsafe.Sizeof(C.ls_src{}))))
	defer C.free(unsafe.Pointer(src))
	src.data = (*C.uint8_t)(unsafe.Pointer(&data[0]))
	src.size = C.int64_t(len(data))
	return d.decode(src, seed, dst, func() error { src.pos = 0; return nil })
}

// DecodeReader samples the clip of an object of size bytes read through r
// (seeks and reads as the demuxer asks: a RangeReader fetches only what
// it needs).
func (d *Decoder) DecodeReader(r io.ReadSeeker, size int64, seed uint64, dst []byte) (Clip, error) {
	h := cgo.NewHandle(&reader{r: r})
	defer h.Delete()
	// src lives in C memory: it holds the handle, and C keeps a pointer
	// to it for the whole call.
	src := (*C.ls_src)(C.calloc(1, C.size_t(unsafe.Sizeof(C.ls_src{}))))
	defer C.free(unsafe.Pointer(src))
	src.size = C.int64_t(size)
	src.handle = C.uintptr_t(h)
	clip, err := d.decode(src, seed, dst, func() error {
		src.pos = 0
		_, err := r.Seek(0, io.SeekStart)
		return err
	})
	if rd := h.Value().(*reader); rd.err != nil && err != nil {
		return clip, fmt.Errorf("%w: %v (%v)", ErrRead, rd.err, err)
	}
	return clip, err
}

// Draws are a clip's random choices: the window start and the crop, as
// fractions of the room for them. Evaluation uses the centers.
func Draws(seed uint64, train bool) (start, x, y float64) {
	if !train {
		return 0.5, 0.5, 0.5
	}
	r := rand.New(rand.NewPCG(seed, 0x766964656f)) // "video"
	return r.Float64(), r.Float64(), r.Float64()
}

// decode runs the clip on the device, if any, and on the CPU when the
// device cannot (rewind puts src back at its start for that).
func (d *Decoder) decode(src *C.ls_src, seed uint64, dst []byte, rewind func() error) (Clip, error) {
	if d.dev == nil {
		return d.run(src, seed, dst, nil)
	}
	clip, err := d.run(src, seed, dst, d.dev.hw)
	if !errors.Is(err, errDevice) {
		return clip, err
	}
	why := clip.Fallback
	if err := rewind(); err != nil {
		return clip, fmt.Errorf("%w: rewinding for the CPU after the device's %s: %v", ErrRead, why, err)
	}
	clip, err = d.run(src, seed, dst, nil)
	clip.Fallback = why
	return clip, err
}

// errDevice: the device could not decode the clip (LS_VIDEO_HW).
var errDevice = errors.New("video: the device could not decode the clip")

var fallbacks = map[C.int]string{C.LS_HW_CODEC: FallbackCodec, C.LS_HW_REFUSED: FallbackRefused, C.LS_HW_ERROR: FallbackDeviceError}

func (d *Decoder) run(src *C.ls_src, seed uint64, dst []byte, hw unsafe.Pointer) (Clip, error) {
	cfg := d.cfg
	if len(dst) != cfg.SampleBytes() {
		return Clip{}, fmt.Errorf("video: destination of %d bytes, want %d", len(dst), cfg.SampleBytes())
	}
	c := d.c
	*c = C.ls_clip{}
	c.frames = C.int(cfg.Frames)
	c.sampling = C.int(cfg.Sampling)
	c.fps = C.double(cfg.FPS)
	us, ux, uy := Draws(seed, cfg.Train)
	c.u_start, c.u_x, c.u_y = C.double(us), C.double(ux), C.double(uy)
	c.size = C.int(cfg.Size)
	if cfg.NHWC {
		c.nhwc = 1
	}
	c.threads = C.int(cfg.Threads)
	c.max_pixels = C.int64_t(cfg.MaxPixels)
	if d.rgbOnly {
		c.rgb_only = 1
	}
	c.hw = hw
	var msg [256]C.char
	// dst is Go memory holding no Go pointers, used only during the call.
	rc := C.ls_video_clip(src, c, (*C.uint8_t)(unsafe.Pointer(&dst[0])), &msg[0], C.int(len(msg)))
	clip := Clip{Short: c.short_clip != 0, TimeBaseNum: int(c.tb_num), TimeBaseDen: int(c.tb_den),
		StartPTS: int64(c.start_pts), Duration: int64(c.duration_ts), Width: int(c.width), Height: int(c.height),
		Codec: C.GoString(&c.codec[0]), Decoded: int(c.n_decoded), Planar: c.planar != 0,
		Device: c.hw_used != 0 && rc == 0, Fallback: fallbacks[c.hw_reason]}
	if rc != 0 {
		why := C.GoString(&msg[0])
		switch rc {
		case C.LS_VIDEO_HW:
			return clip, fmt.Errorf("%w (%s): %s", errDevice, clip.Fallback, why)
		case C.LS_VIDEO_UNSUPPORTED:
			return clip, fmt.Errorf("%w: %s", ErrUnsupported, why)
		case C.LS_VIDEO_TOO_LARGE:
			return clip, fmt.Errorf("%w: %s", ErrTooLarge, why)
		case C.LS_VIDEO_IO:
			return clip, fmt.Errorf("%w: %s", ErrRead, why)
		case C.LS_VIDEO_NOMEM:
			return clip, fmt.Errorf("video: %s", why)
		}
		return clip, fmt.Errorf("%w: %s", ErrCorrupt, why)
	}
	clip.PTS = make([]int64, cfg.Frames)
	for i := range clip.PTS {
		clip.PTS[i] = int64(c.pts[i])
	}
	return clip, nil
}

// Close frees the decoder (nothing is held between calls).
func (d *Decoder) Close() error { return nil }

// quietLogs silences FFmpeg's log: for tests.
func quietLogs() { C.av_log_set_level(C.AV_LOG_QUIET) }

type reader struct {
	r   io.ReadSeeker
	err error // the first error other than io.EOF
}

//export lsVideoRead
func lsVideoRead(h C.uintptr_t, buf *C.uint8_t, n C.int) C.int {
	rd := cgo.Handle(h).Value().(*reader)
	b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	got, err := io.ReadFull(rd.r, b)
	if got > 0 {
		return C.int(got)
	}
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return 0
	}
	if err != nil && rd.err == nil {
		rd.err = err
	}
	return -1
}

//export lsVideoSeek
func lsVideoSeek(h C.uintptr_t, off C.int64_t) C.int {
	rd := cgo.Handle(h).Value().(*reader)
	if _, err := rd.r.Seek(int64(off), io.SeekStart); err != nil {
		if rd.err == nil {
			rd.err = err
		}
		return -1
	}
	return 0
}
