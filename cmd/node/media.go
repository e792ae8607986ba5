package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"runtime"
	"strings"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/ffdecode"
	"github.com/longshore/longshore/actors/nvdecode"
	"github.com/longshore/longshore/cluster/node"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/decode/audio"
	"github.com/longshore/longshore/decode/video"
	"github.com/longshore/longshore/storage"
)

// mediaFlags choose what a sample is (--media) and, for audio, its
// waveform. Images keep every image flag (--size, --layout, --transform,
// ...); audio reads --transform for its crop (train: random, seeded;
// eval: centered).
type mediaFlags struct {
	media        string
	sampleRate   int
	channels     int
	audioSeconds float64
	clipFrames   int
	clipFPS      float64
	clipSampling string
	videoThreads int
	readAhead    byteSize
	rawMax       byteSize
}

func (m *mediaFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.media, "media", "image", "what samples are: image (uint8 [3,H,W]), video (uint8 [T,3,H,W] clips from MP4, MKV, WebM: H.264, HEVC, VP8, VP9, AV1), audio (float32 [C,S] waveforms: WAV, FLAC, MP3, Opus, Vorbis), raw (each object's bytes undecoded, up to --raw-max-bytes: batch[\"data\"] in Python; raw:EXT[,EXT] takes only files, or a WebDataset sample's member, of those extensions; docs/raw.md); docs/media.md")
	m.rawMax = 1 << 20
	fs.Var(&m.rawMax, "raw-max-bytes", "--media raw: the most bytes a sample may have (a longer one fails as too_large); each slot holds --batch-size rows of this many bytes, in shared memory touched only as far as samples fill it")
	fs.IntVar(&m.clipFrames, "clip-frames", 16, "--media video: frames per clip (T)")
	fs.Float64Var(&m.clipFPS, "clip-fps", 8, "--media video, --clip-sampling random: frame rate of the clip's window")
	fs.StringVar(&m.clipSampling, "clip-sampling", "uniform", "--media video: uniform (T frames spread over the whole clip) or random (a window of T frames at --clip-fps: --transform train draws its start, seeded by (seed, epoch, sample); eval takes the centered one). Frames are chosen by timestamp; clips shorter than the window repeat their last frame and are marked short")
	m.readAhead = 256 << 10
	fs.Var(&m.readAhead, "video-read-ahead", "--media video: demux each clip over ranged reads of the store of at least this many bytes (like 256KiB), so long files are not fetched whole; 0: fetch whole objects (packed datasets always are)")
	fs.IntVar(&m.videoThreads, "video-threads", 0, "--media video: decoder threads per stream; 0: the cores per decoder (--decoders), 1 to 2 (SPDL found 2 the sweet spot for H.264 with cores to spare; with a decoder per core, the default, more threads only add their overhead)")
	fs.IntVar(&m.sampleRate, "sample-rate", 16000, "--media audio: output sample rate in Hz (FFmpeg's resampler)")
	fs.IntVar(&m.channels, "channels", 1, "--media audio: output channels (1 mono, 2 stereo; FFmpeg's default down/upmix)")
	fs.Float64Var(&m.audioSeconds, "audio-seconds", 1, "--media audio: the window cut from each waveform, seconds (--transform train: a random window, seeded by (seed, epoch, sample); eval: the centered one); shorter audio is zero-padded and marked short")
}

func (m mediaFlags) kind() (actors.Kind, error) {
	var k actors.Kind
	if err := k.UnmarshalText([]byte(dataset.MediaKind(m.media))); err != nil {
		return k, fmt.Errorf("--media %q: want image, video, audio or raw (raw:EXT: docs/raw.md)", m.media)
	}
	if _, err := dataset.MediaExtensions(m.media); err != nil {
		return k, err
	}
	return k, nil
}

func (m mediaFlags) audioConfig(transform string) (audio.Config, error) {
	c := audio.Config{SampleRate: m.sampleRate, Channels: m.channels, Seconds: m.audioSeconds}
	var errs []error
	switch strings.ToLower(transform) {
	case "train":
		c.Train = true
	case "eval":
	default:
		errs = append(errs, fmt.Errorf("--media audio --transform %q: want train (random window) or eval (centered)", transform))
	}
	if c.SampleRate <= 0 || c.Channels <= 0 || c.Seconds <= 0 {
		// zero would mean "the default" to audio.Config; on the command
		// line it is a mistake
		errs = append(errs, fmt.Errorf("--sample-rate %d, --channels %d, --audio-seconds %v: need positive values", c.SampleRate, c.Channels, c.Seconds))
	}
	errs = append(errs, c.Validate())
	return c, errors.Join(errs...)
}

func (m mediaFlags) videoConfig(transform string, size int, layout string, decoders int) (video.Config, error) {
	c := video.Config{Frames: m.clipFrames, FPS: m.clipFPS, Size: size, Threads: m.videoThreads, NHWC: strings.EqualFold(layout, "nhwc")}
	if c.Threads == 0 {
		c.Threads = autoVideoThreads(runtime.NumCPU(), decoders)
	}
	var errs []error
	switch strings.ToLower(transform) {
	case "train":
		c.Train = true
	case "eval":
	default:
		errs = append(errs, fmt.Errorf("--media video --transform %q: want train (random window and crop) or eval (centered)", transform))
	}
	s, err := video.ParseSampling(m.clipSampling)
	if err != nil {
		errs = append(errs, fmt.Errorf("--clip-sampling: %w", err))
	}
	c.Sampling = s
	if c.Frames <= 0 || c.FPS <= 0 || c.Threads <= 0 || c.Size <= 0 {
		errs = append(errs, fmt.Errorf("--clip-frames %d, --clip-fps %v, --video-threads %d, --size %d: need positive values", c.Frames, c.FPS, c.Threads, c.Size))
	}
	errs = append(errs, c.Validate())
	return c, errors.Join(errs...)
}

// autoVideoThreads is --video-threads 0: the cores per decoder (decoders
// 0: one per core), at least 1 and at most 2. Measured on 2 cores, 2
// decoders, 16-frame clips of 320x240 H.264: 1 thread a stream costs 8 ms
// of CPU a clip against 12 ms with 2, and is faster (docs/media.md).
func autoVideoThreads(cores, decoders int) int {
	if decoders <= 0 {
		decoders = cores
	}
	return min(max(cores/decoders, 1), 2)
}

// check reports the media flags' problems.
func (m mediaFlags) check(transform string, size int, layout string) []error {
	k, err := m.kind()
	if err != nil {
		return []error{err}
	}
	switch k {
	case actors.KindAudio:
		if _, err := m.audioConfig(transform); err != nil {
			return []error{err}
		}
	case actors.KindVideo:
		if _, err := m.videoConfig(transform, size, layout, 0); err != nil {
			return []error{err}
		}
	case actors.KindRaw:
		if m.rawMax < 1 || m.rawMax > 1<<30 {
			return []error{fmt.Errorf("--raw-max-bytes %d: want 1 byte to 1GiB", int64(m.rawMax))}
		}
	}
	return nil
}

// useDecoder configures the pipeline's sample spec and decoders for the
// media: ffdecode.Use for images, ffdecode.UseAudio for audio.
func (o options) useDecoder(ac *actors.Config, deps *actors.Deps, dc decode.Config) error {
	k, err := o.mediaFlags.kind()
	if err != nil {
		return err
	}
	onGPU := o.gpu != nil && len(o.gpu.stages) > 0 // --decode-device cuda, images (video: o.gpu.videoDevices)
	switch k {
	case actors.KindRaw:
		ac.Sample = actors.Shape{Kind: actors.KindRaw, RawBytes: int(o.mediaFlags.rawMax)}
		deps.NewDecoder = func() (actors.SampleDecoder, error) { return decode.Raw{}, nil }
		deps.SampleSeed = decode.SampleSeed
		return ac.Validate()
	case actors.KindAudio:
		c, err := o.mediaFlags.audioConfig(o.transform)
		if err != nil {
			return err
		}
		if err := ffdecode.UseAudio(ac, deps, c); err != nil {
			return err
		}
		return ac.Validate()
	case actors.KindVideo:
		c, err := o.mediaFlags.videoConfig(o.transform, o.size, o.layout, o.decoders)
		if err != nil {
			return err
		}
		if err := ffdecode.UseVideo(ac, deps, c, int64(o.mediaFlags.readAhead), o.gpu.videoDevices()); err != nil {
			return err
		}
		return ac.Validate()
	}
	if onGPU {
		if o.decoder == "none" {
			return errors.New("--decode-device cuda decodes: --decoder none is for runs that decode nothing")
		}
		if err := ffdecode.Use(ac, deps, dc); err != nil {
			return err
		}
		if len(dc.Transform.Pixel) > 0 { // the stage applies no pixel ops: one image a call, transformed on the CPU
			if err := o.gpu.startServices(); err != nil {
				return err
			}
			deps.NewDecoder = nvdecode.Factory(dc, o.gpu.decoders) // the CPU decoders stay for fallbacks
			return nil
		}
		// The batch decode stage: the decoders leave GPU-routed JPEGs
		// compressed in their rows; the stage decodes each whole batch
		// on the device. The table of waiting samples holds every slot's
		// rows and every decoder's queue, twice over.
		c := ac.WithDefaults()
		pending := 2*o.ranks*(c.Slots*c.BatchSize+c.Decoders*(c.DecodeQueue+1)) + 1024
		n, err := nvdecode.NewNode(dc, o.gpu.stages, pending)
		if err != nil {
			return err
		}
		deps.NewDecoder, deps.NewBatchStage = n.Decoders(), n.Stages()
		return nil
	}
	if o.decoder == "none" {
		ac.Sample = ffdecode.Shape(dc)
		deps.NewDecoder = func() (actors.SampleDecoder, error) { return noDecoder{}, nil }
		deps.SampleSeed = decode.SampleSeed
		return ac.Validate()
	}
	return ffdecode.Use(ac, deps, dc)
}

// noDecoder is --decoder none: each sample's pixels are its object's
// bytes repeated, nothing decoded, so a run measures fetching, the
// pipeline and delivery alone (the feed's own cost against Go in
// process, say). Images only.
type noDecoder struct{}

func (noDecoder) Decode(data []byte, _ uint64, dst []byte) error {
	if len(data) == 0 {
		return actors.WithFailureClass(fmt.Errorf("decoder none: an empty object"), "corrupt")
	}
	for n := 0; n < len(dst); {
		n += copy(dst[n:], data)
	}
	return nil
}

func (noDecoder) Close() error { return nil }

// describe is the summary line's sample part.
func (o options) describeSample() string {
	switch k, _ := o.mediaFlags.kind(); k {
	case actors.KindRaw:
		return fmt.Sprintf("raw, up to %d bytes a sample", int64(o.rawMax))
	case actors.KindAudio:
		return fmt.Sprintf("audio %s, %d Hz x %d, %v s windows", o.transform, o.sampleRate, o.channels, o.audioSeconds)
	case actors.KindVideo:
		return fmt.Sprintf("video %s, %d frames %s at %v fps, %d, %s", o.transform, o.clipFrames, o.clipSampling, o.clipFPS, o.size, strings.ToUpper(o.layout))
	}
	size := o.size
	if dc, err := o.decodeConfig(); err == nil {
		size = dc.Transform.Size // center_crop(size=N) without --size
	}
	if o.dtype != "" && !strings.EqualFold(o.dtype, "uint8") {
		return fmt.Sprintf("%s %d, %s %s", o.transform, size, strings.ToUpper(o.layout), strings.ToLower(o.dtype))
	}
	return fmt.Sprintf("%s %d, %s", o.transform, size, strings.ToUpper(o.layout))
}

// assemble is the node's assembly (node.Assemble) for every mode: the
// pipelines of --ranks ranks configured by ac, over store, with the
// media's decoders (useDecoder), the GPUs' uploaders and --quarantine.
func (o options) assemble(ac actors.Config, dc decode.Config, store storage.Store, logger *slog.Logger) (*node.Assembly, error) {
	return node.Assemble(node.AssemblyConfig{Ranks: o.ranks, Pipeline: ac, Deps: actors.Deps{Store: store, NewUploader: o.gpu.newUploader()},
		Quarantine: o.faults.quarantine, Logger: logger,
		UseDecoder: func(c *actors.Config, d *actors.Deps) error { return o.useDecoder(c, d, dc) }})
}
