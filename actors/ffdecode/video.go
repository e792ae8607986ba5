package ffdecode

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/decode/spec"
	"github.com/longshore/longshore/decode/video"
)

// UseVideo configures cfg and deps for video (--media video): cfg.Sample
// becomes uint8 [T,3,S,S] (or [T,S,S,3]), deps.NewDecoder makes
// video.Decoders (WindowDecoders: short clips are marked), and
// deps.SampleSeed is decode.SampleSeed, so a clip's window and crop
// depend on (seed, epoch, index) alone. readAhead > 0 makes the decoders
// ObjectDecoders that demux each object over ranged reads of at least
// readAhead bytes (video.RangeReader) instead of the fetch stage reading
// it whole; 0: whole objects. It fails if vc is invalid.
// With on (--decode-device cuda), the decoders decode on the GPUs' NVDEC,
// spread over on's devices, and on counts where each clip was decoded.
func UseVideo(cfg *actors.Config, deps *actors.Deps, vc video.Config, readAhead int64, on *VideoDevices) error {
	if err := vc.Validate(); err != nil {
		return err
	}
	vc = vc.WithDefaults()
	cfg.Sample = VideoShape(vc)
	deps.NewDecoder = VideoFactory(vc, readAhead, on)
	deps.SampleSeed = decode.SampleSeed
	return nil
}

// VideoShape is the sample spec vc produces.
func VideoShape(vc video.Config) actors.Shape {
	vc = vc.WithDefaults()
	l := spec.NCHW
	if vc.NHWC {
		l = spec.NHWC
	}
	return spec.Shape{Kind: spec.KindVideo, Frames: vc.Frames, Height: vc.Size, Width: vc.Size, Layout: l}
}

// VideoFactory makes a video.Decoder per decoder actor; readAhead > 0:
// ranged; on: on the GPUs' NVDEC (see UseVideo).
func VideoFactory(vc video.Config, readAhead int64, on *VideoDevices) actors.DecoderFactory {
	return func() (actors.SampleDecoder, error) {
		d, err := video.NewDecoder(vc)
		if err != nil {
			return nil, err
		}
		if on != nil {
			if len(on.devs) == 0 {
				return nil, errors.New("ffdecode: video on devices with no device")
			}
			d.UseDevice(on.devs[int(on.next.Add(1)-1)%len(on.devs)])
		}
		if readAhead > 0 {
			return rangedVideoDecoder{videoDecoder{d, on}, readAhead}, nil
		}
		return videoDecoder{d, on}, nil
	}
}

// VideoDevices are the GPUs video is decoded on (--decode-device cuda
// with --media video): the decoder actors take them in turn, one each,
// and the counts say where each clip was decoded.
type VideoDevices struct {
	devs    []*video.Device
	next    atomic.Int64
	nvdec   atomic.Int64
	cpu     atomic.Int64
	mu      sync.Mutex
	reasons map[string]int64
}

// NewVideoDevices spreads decoders over devs (at least one).
func NewVideoDevices(devs []*video.Device) *VideoDevices {
	return &VideoDevices{devs: devs, reasons: map[string]int64{}}
}

// VideoDeviceStats are where clips were decoded with --decode-device cuda.
type VideoDeviceStats struct {
	NVDEC int64 `json:"nvdec"` // clips the GPUs' video decoders decoded
	CPU   int64 `json:"cpu"`   // clips the CPU decoded, Reasons says why
	// Reasons counts the CPU's clips by video.Fallback* (codec,
	// refused, device_error).
	Reasons map[string]int64 `json:"cpu_reasons,omitempty"`
}

// String is the summary's line.
func (s VideoDeviceStats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "nvdec %d, cpu %d", s.NVDEC, s.CPU)
	if len(s.Reasons) > 0 {
		keys := make([]string, 0, len(s.Reasons))
		for k := range s.Reasons {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			sep := ", "
			if i == 0 {
				sep = " ("
			}
			fmt.Fprintf(&b, "%s%s %d", sep, k, s.Reasons[k])
		}
		b.WriteString(")")
	}
	return b.String()
}

// Stats are the counts so far.
func (v *VideoDevices) Stats() VideoDeviceStats {
	s := VideoDeviceStats{NVDEC: v.nvdec.Load(), CPU: v.cpu.Load()}
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.reasons) > 0 {
		s.Reasons = make(map[string]int64, len(v.reasons))
		for k, n := range v.reasons {
			s.Reasons[k] = n
		}
	}
	return s
}

// Close closes the devices (after every decoder is done).
func (v *VideoDevices) Close() error {
	var errs []error
	for _, d := range v.devs {
		errs = append(errs, d.Close())
	}
	return errors.Join(errs...)
}

// count records a decoded clip's path (nil v: not on devices).
func (v *VideoDevices) count(c video.Clip, err error) {
	if v == nil || err != nil {
		return
	}
	if c.Device {
		v.nvdec.Add(1)
		return
	}
	v.cpu.Add(1)
	if c.Fallback != "" {
		v.mu.Lock()
		v.reasons[c.Fallback]++
		v.mu.Unlock()
	}
}

// rangedVideoDecoder demuxes over ranged reads of the store.
type rangedVideoDecoder struct {
	videoDecoder
	readAhead int64
}

var _ actors.ObjectDecoder = rangedVideoDecoder{}

// DecodeObject demuxes obj over its ranged reads (the fetch stage's,
// with its store-outage retries), readAhead bytes at a time.
func (v rangedVideoDecoder) DecodeObject(ctx context.Context, obj actors.Object, seed uint64, dst []byte) (bool, error) {
	r := video.NewRangeReader(ctx, obj.Ranges, obj.Key, obj.Size, v.readAhead)
	c, err := v.d.DecodeReader(r, obj.Size, seed, dst)
	v.on.count(c, err)
	return c.Short, videoClass(err)
}

type videoDecoder struct {
	d  *video.Decoder
	on *VideoDevices // nil: the CPU
}

var _ actors.WindowDecoder = videoDecoder{}

func (v videoDecoder) Decode(data []byte, seed uint64, dst []byte) error {
	_, err := v.DecodeWindow(data, seed, dst)
	return err
}

// DecodeWindow samples the clip and classes video's sentinel errors.
func (v videoDecoder) DecodeWindow(data []byte, seed uint64, dst []byte) (bool, error) {
	c, err := v.d.Decode(data, seed, dst)
	v.on.count(c, err)
	return c.Short, videoClass(err)
}

func videoClass(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, video.ErrCorrupt):
		return actors.WithFailureClass(err, "corrupt")
	case errors.Is(err, video.ErrUnsupported):
		return actors.WithFailureClass(err, "unsupported")
	case errors.Is(err, video.ErrTooLarge):
		return actors.WithFailureClass(err, "too_large")
	case errors.Is(err, video.ErrRead):
		return actors.WithFailureClass(err, "read")
	}
	return fmt.Errorf("decode: %w", err)
}

func (v videoDecoder) Close() error { return v.d.Close() }
