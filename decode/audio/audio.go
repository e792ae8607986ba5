// Package audio decodes audio objects (WAV, FLAC, MP3, Opus, Vorbis: any
// container and codec Debian 12's FFmpeg 5.1 reads) into fixed-length
// float32 PCM windows: FFmpeg's decoders, libswresample to the configured
// rate and channel count, then a crop of Config.Seconds (random in
// training, centered in evaluation) zero-padded and reported short when
// the audio is shorter.
//
// The object is demuxed from memory by an AVIOContext that lives inside
// one C call (audio.c): nothing is registered with go-astiav, whose
// custom-IO callbacks leak in v0.16.0, and no Go pointer outlives the
// call. A Decoder is not safe for concurrent use; make one per goroutine.
package audio

/*
#cgo pkg-config: libavformat libavcodec libavutil libswresample
#include <stdlib.h>
#include <libavutil/log.h>
#include "audio.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"unsafe"
)

// Errors, for failure reports (errors.Is).
var (
	ErrCorrupt     = errors.New("audio: corrupt or truncated media")
	ErrUnsupported = errors.New("audio: unsupported media")
	ErrTooLarge    = errors.New("audio: audio too long")
)

// Config is the decoded waveform. Zero fields mean the defaults.
type Config struct {
	// SampleRate is the output rate, Hz. 0: 16000, what speech models
	// take.
	SampleRate int
	// Channels is the output channel count (FFmpeg's default layout for
	// it: 1 mono, 2 stereo, ...; swr's default downmix or upmix). 0: 1.
	Channels int
	// Seconds is the window's length. 0: 1 s.
	Seconds float64
	// Train picks a random window (seeded per sample); false: the
	// centered one (evaluation).
	Train bool
	// MaxSeconds bounds the audio decoded per object, at the output
	// rate: the whole waveform is held while the window is chosen, so
	// an hour of silence compressed to a few KiB must not take a GiB.
	// Longer audio fails as too_large. 0: 600 s (10 minutes; 38 MB at
	// 16 kHz mono, 230 MB at 48 kHz stereo).
	MaxSeconds float64
}

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	if c.SampleRate == 0 {
		c.SampleRate = 16000
	}
	if c.Channels == 0 {
		c.Channels = 1
	}
	if c.Seconds == 0 {
		c.Seconds = 1
	}
	if c.MaxSeconds == 0 {
		c.MaxSeconds = 600
	}
	return c
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if c.SampleRate < 1000 || c.SampleRate > 384000 {
		errs = append(errs, fmt.Errorf("audio: sample rate %d Hz: want 1000 to 384000", c.SampleRate))
	}
	if c.Channels < 1 || c.Channels > 8 {
		errs = append(errs, fmt.Errorf("audio: %d channels: want 1 to 8", c.Channels))
	}
	if !(c.Seconds > 0) || c.Samples() < 1 {
		errs = append(errs, fmt.Errorf("audio: window of %v s: want a positive length of at least one sample", c.Seconds))
	}
	if !(c.MaxSeconds >= c.Seconds) {
		errs = append(errs, fmt.Errorf("audio: MaxSeconds %v is shorter than the window of %v s", c.MaxSeconds, c.Seconds))
	}
	return errors.Join(errs...)
}

// Samples is the window's length in samples per channel.
func (c Config) Samples() int {
	c = c.WithDefaults()
	return int(math.Round(c.Seconds * float64(c.SampleRate)))
}

// SampleBytes is one window's size: Channels x Samples float32.
func (c Config) SampleBytes() int {
	c = c.WithDefaults()
	return 4 * c.Channels * c.Samples()
}

// Decoder decodes objects into windows. The zero Decoder is not usable:
// call NewDecoder.
type Decoder struct{ cfg Config }

// NewDecoder checks cfg and makes a decoder.
func NewDecoder(cfg Config) (*Decoder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Decoder{cfg: cfg.WithDefaults()}, nil
}

// Config is the decoder's configuration, defaults filled.
func (d *Decoder) Config() Config { return d.cfg }

// PCM decodes the whole object: interleaved float32 frames of Channels
// samples at SampleRate, and their count.
func (d *Decoder) PCM(data []byte) ([]float32, int, error) {
	var pcm []float32
	n, err := d.decode(data, func(p []float32, frames int) { pcm = append([]float32(nil), p...) })
	return pcm, n, err
}

// decode runs the C decoder and hands its interleaved PCM (C memory,
// valid only during use) to use.
func (d *Decoder) decode(data []byte, use func(p []float32, frames int)) (int, error) {
	if len(data) == 0 {
		return 0, fmt.Errorf("%w: empty object", ErrCorrupt)
	}
	maxFrames := int64(d.cfg.MaxSeconds * float64(d.cfg.SampleRate))
	var out *C.float
	var frames C.int64_t
	var msg [256]C.char
	rc := C.ls_audio_decode((*C.uint8_t)(unsafe.Pointer(&data[0])), C.int64_t(len(data)), C.int(d.cfg.SampleRate),
		C.int(d.cfg.Channels), C.int64_t(maxFrames), &out, &frames, &msg[0], C.int(len(msg)))
	defer C.free(unsafe.Pointer(out))
	if rc != 0 {
		why := C.GoString(&msg[0])
		switch rc {
		case C.LS_AUDIO_UNSUPPORTED:
			return 0, fmt.Errorf("%w: %s", ErrUnsupported, why)
		case C.LS_AUDIO_TOO_LONG:
			return 0, fmt.Errorf("%w: %s (over %v s)", ErrTooLarge, why, d.cfg.MaxSeconds)
		case C.LS_AUDIO_NOMEM:
			return 0, fmt.Errorf("audio: %s", why)
		}
		return 0, fmt.Errorf("%w: %s", ErrCorrupt, why)
	}
	n := int(frames)
	use(unsafe.Slice((*float32)(unsafe.Pointer(out)), n*d.cfg.Channels), n)
	return n, nil
}

// Window is where a window of n samples lies in audio of total samples:
// the first sample, and whether the audio is shorter than the window. In
// training the start is drawn from seed, uniformly over every full
// window; in evaluation it is the centered one.
func Window(total, n int, train bool, seed uint64) (start int, short bool) {
	if total < n {
		return 0, true
	}
	if !train {
		return (total - n) / 2, false
	}
	r := rand.New(rand.NewPCG(seed, 0x617564696f)) // "audio"
	return r.IntN(total - n + 1), false
}

// Decode writes the sample's window into dst, Channels x Samples float32
// in channel planes ([C,S], the host's byte order), zero-padded at the end
// when the audio is shorter (short is then true).
func (d *Decoder) Decode(data []byte, seed uint64, dst []byte) (short bool, err error) {
	c, s := d.cfg.Channels, d.cfg.Samples()
	if len(dst) != 4*c*s {
		return false, fmt.Errorf("audio: destination of %d bytes, want %d (%d channels of %d samples)", len(dst), 4*c*s, c, s)
	}
	_, err = d.decode(data, func(p []float32, total int) {
		start, sh := Window(total, s, d.cfg.Train, seed)
		short = sh
		n := min(s, total-start)
		for ch := 0; ch < c; ch++ {
			plane := dst[4*ch*s : 4*(ch+1)*s]
			for i := 0; i < n; i++ {
				binary.NativeEndian.PutUint32(plane[4*i:], math.Float32bits(p[(start+i)*c+ch]))
			}
			clear(plane[4*n:])
		}
	})
	return short, err
}

// quietLogs silences FFmpeg's log (its warnings about damaged input are
// the failure reports' business): for tests.
func quietLogs() { C.av_log_set_level(C.AV_LOG_QUIET) }

// Close frees the decoder (nothing is held between calls).
func (d *Decoder) Close() error { return nil }
