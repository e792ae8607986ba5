package decode

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unsafe"

	"github.com/asticode/go-astiav"

	"github.com/longshore/longshore/decode/spec"
)

// Info describes one decoded sample.
type Info struct {
	// Width, Height: the image size its header declares.
	Width, Height int
	// Format: "jpeg", "png" or "webp".
	Format string
	// Crop and Flip: what CropFor chose, in source pixels (SamplingFor
	// has the exact geometry).
	Crop Rect
	Flip bool
	// VFlip: the vertical flip SamplingFor drew.
	VFlip bool
	// Path: the decoder that produced the sample (PathTurbo: the
	// libjpeg-turbo crop decoder, PathFFmpeg otherwise).
	Path Path
	// Fallback: why a JPEG went to FFmpeg with Config.FastJPEG on;
	// NoFallback otherwise.
	Fallback Fallback
	// Lowres: the FFmpeg lowres level used (0: full size; l: 1/2^l).
	Lowres int
	// DCTScale: on PathTurbo, the M of the M/8 IDCT scaling used (8: full
	// size); 0 on PathFFmpeg.
	DCTScale int
	// Region: the part of the decoded picture handed to the scaler, in that
	// picture's pixels (scaled by 1/2^Lowres or M/8): the pixels the
	// filter reads (readRegion): Train's crop; for Eval the center crop's
	// box and the filter's reach around it, inside the image. For tests
	// and debugging.
	Region Rect
}

// Decoder decodes images into sample slots. Use one per goroutine and reuse
// it: it keeps its FFmpeg state (one codec context per format, and per
// lowres level for JPEG; a packet buffer; a frame; swscale contexts) and
// its libjpeg-turbo decompressor, row buffer and scaler tables, so that a
// warm Decoder allocates nothing in Go per sample. Not safe for concurrent
// use.
type Decoder struct {
	cfg    Config
	size   int
	bytes  int
	ctx    [formatWebP + 1][4]*astiav.CodecContext // [format][lowres]
	pkt    *astiav.Packet
	frame  *astiav.Frame
	sws    scaler
	jpeg   turbo
	resize resizer
	pixel  []pixelOp // Transform.Pixel, compiled
	lut    [256]byte // the pixel ops' scratch
	// u8 is the uint8 sample a float Config.DType converts from (nil for
	// Uint8: the sample is written straight into dst); flut the
	// conversion (floatLUT).
	u8     []byte
	flut   *[3][256]uint32
	stats  Stats
	closed bool
	// resizeImpl picks resize.c's kernel. Only tests and benchmarks
	// change it.
	resizeImpl resizeImpl
}

// Stats returns what d has done so far, per path.
func (d *Decoder) Stats() Stats { return d.stats }

// NewDecoder validates c and opens the JPEG, PNG and WebP decoders (the
// JPEG lowres variants open on first use).
func NewDecoder(c Config) (*Decoder, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := checkAstiavLayout(); err != nil {
		return nil, err
	}
	d := &Decoder{
		cfg:        c,
		size:       c.Transform.Size,
		bytes:      c.SampleBytes(),
		pkt:        astiav.AllocPacket(),
		frame:      astiav.AllocFrame(),
		resizeImpl: resizeBest,
		pixel:      compilePixel(c.Transform.Pixel),
	}
	if c.DType != Uint8 {
		d.u8 = make([]byte, spec.Image(c.Transform.Size, c.Layout).SampleBytes())
		d.flut = new([3][256]uint32)
		floatLUT(d.flut, c.DType, c.Transform)
	}
	if d.pkt == nil || d.frame == nil {
		d.Close()
		return nil, errors.New("decode: allocating FFmpeg packet/frame failed")
	}
	for _, f := range []format{formatJPEG, formatPNG, formatWebP} {
		if _, err := d.codec(f, 0); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// maxFileBytes: FFmpeg packet sizes are C ints, padding included.
const maxFileBytes = math.MaxInt32 - 1024

var codecIDs = [...]astiav.CodecID{
	formatJPEG: astiav.CodecIDMjpeg,
	formatPNG:  astiav.CodecIDPng,
	formatWebP: astiav.CodecIDWebp,
}

// codec returns the open codec context for format f at lowres level l,
// opening it on first use. lowres is an open-time option in FFmpeg, hence a
// context per level.
func (d *Decoder) codec(f format, l int) (*astiav.CodecContext, error) {
	if cc := d.ctx[f][l]; cc != nil {
		return cc, nil
	}
	codec := astiav.FindDecoder(codecIDs[f])
	if codec == nil {
		return nil, fmt.Errorf("%w: this FFmpeg has no %s decoder", ErrUnsupported, f)
	}
	cc := astiav.AllocCodecContext(codec)
	if cc == nil {
		return nil, fmt.Errorf("decode: allocating %s codec context failed", f)
	}
	// One thread: parallelism comes from one Decoder per goroutine. (mjpeg
	// has no threads; PNG frame threading would only add latency.)
	cc.SetThreadCount(1)
	opts := astiav.NewDictionary()
	defer opts.Free()
	// FFmpeg's own size check backs up parseHeader's: should the two ever
	// read a file differently, FFmpeg still refuses to allocate a frame
	// above the limit.
	if err := opts.Set("max_pixels", strconv.FormatInt(d.cfg.MaxPixels, 10), 0); err != nil {
		cc.Free()
		return nil, fmt.Errorf("decode: setting max_pixels: %w", err)
	}
	// PNG: verify chunk CRCs, as PIL does; without it FFmpeg decodes a
	// damaged IDAT into a damaged picture and reports success.
	if f == formatPNG {
		if err := opts.Set("err_detect", "crccheck+explode", 0); err != nil {
			cc.Free()
			return nil, fmt.Errorf("decode: setting err_detect: %w", err)
		}
	}
	if l > 0 {
		if err := opts.Set("lowres", strconv.Itoa(l), 0); err != nil {
			cc.Free()
			return nil, fmt.Errorf("decode: setting lowres: %w", err)
		}
	}
	if err := cc.Open(codec, opts); err != nil {
		cc.Free()
		return nil, fmt.Errorf("decode: opening %s decoder (lowres %d): %w", f, l, err)
	}
	d.ctx[f][l] = cc
	return cc, nil
}

// Decode decodes the image in data, applies the configured transform with
// the randomness of sampleSeed (see SampleSeed) and writes the result, of
// Config.DType (uint8 RGB by default), into dst, which must be exactly
// SampleBytes() long. data is only read during the call and dst only
// written during it; neither is kept.
//
// On error dst may hold partial output and must not be used; the error
// wraps ErrTooLarge, ErrUnsupported or ErrCorrupt for bad data, and the
// Info returned holds what was learned before the failure.
func (d *Decoder) Decode(data []byte, sampleSeed uint64, dst []byte) (Info, error) {
	if d.closed {
		return Info{}, errors.New("decode: Decoder is closed")
	}
	if len(dst) != d.bytes {
		return Info{}, fmt.Errorf("decode: dst has %d bytes, want %d (Config.SampleBytes)", len(dst), d.bytes)
	}
	out := dst
	if d.u8 != nil {
		out = d.u8
	}
	info, err := d.decode(data, sampleSeed, out)
	if err == nil {
		d.finish(sampleSeed, out, dst)
	}
	return info, err
}

// finish applies the pixel ops to the uint8 sample u8 and, for a float
// DType, converts it into dst.
func (d *Decoder) finish(sampleSeed uint64, u8, dst []byte) {
	if len(d.pixel) > 0 {
		pixels(d.pixel, sampleSeed, u8, d.size, d.cfg.Layout, &d.lut)
	}
	if d.flut != nil {
		toFloat(d.flut, d.cfg.DType.Size() == 4, u8, dst, d.size, d.cfg.Layout)
	}
}

// decode is Decode up to the pixel ops: the fused geometry, into the
// uint8 sample dst.
func (d *Decoder) decode(data []byte, sampleSeed uint64, dst []byte) (Info, error) {
	if len(data) > maxFileBytes {
		return Info{}, fmt.Errorf("%w: %d-byte file (FFmpeg takes packets under 2 GiB)", ErrTooLarge, len(data))
	}
	h, err := parseHeader(data)
	if err != nil {
		return Info{}, err
	}
	info := Info{Width: h.width, Height: h.height, Format: h.format.String()}
	if err := h.checkBomb(d.cfg.MaxPixels); err != nil {
		return info, err
	}
	s := SamplingFor(d.cfg.Transform, h.width, h.height, sampleSeed)
	info.Crop, info.Flip, info.VFlip = s.Crop, s.Flip, s.VFlip
	if h.format == formatJPEG && d.cfg.FastJPEG {
		ok, err := d.decodeTurbo(data, h, s, &info, dst)
		if ok || err != nil {
			d.stats.Turbo++
			return info, err
		}
		d.stats.Fallbacks[info.Fallback]++
	}
	d.stats.FFmpeg++
	if h.format == formatJPEG && h.lowresOK && d.cfg.Lowres {
		info.Lowres = lowresLevel(s.Box, d.size)
	}
	cc, err := d.codec(h.format, info.Lowres)
	if err != nil {
		return info, err
	}

	// Image decoders keep no state between pictures that we want, and a
	// previous failure may have left some: start clean every time. The
	// deferred flush drops the decoder's reference to the packet (mjpeg
	// keeps one), so that the next sample refills the buffer in place
	// whichever context it uses.
	flushCodec(cc)
	defer flushCodec(cc)
	if err := fillPacket(d.pkt, data); err != nil {
		return info, err
	}
	if err := cc.SendPacket(d.pkt); err != nil {
		return info, codecError(h.format, err)
	}
	if err := cc.ReceiveFrame(d.frame); err != nil {
		return info, codecError(h.format, err)
	}
	defer d.frame.Unref() // give the picture back to the decoder's pool

	fw, fh := d.frame.Width(), d.frame.Height()
	if fw < 1 || fh < 1 {
		return info, fmt.Errorf("%w: %s decoder returned a %dx%d frame", ErrCorrupt, h.format, fw, fh)
	}
	// A lowres picture's pixel i covers source [i·2^l, (i+1)·2^l).
	box, clip := s.Box, s.Clip
	if info.Lowres > 0 {
		box, clip = scaleBox(box, 1/float64(int(1)<<info.Lowres)), scaleRect(clip, h.width, h.height, fw, fh)
	}
	clip = clampRect(clip, fw, fh) // a frame smaller than its header said
	info.Region = readRegion(box, clip, d.size)
	buf, got, err := d.sws.toRGB(d.frame, info.Region, h.colour)
	if err != nil {
		return info, err
	}
	src := unsafe.Add(buf, 3*(info.Region.X-got.X))
	return info, d.resize.scaleRGB(d.resizeImpl, src, 3*got.W, info.Region.W, info.Region.H, dst, d.size, d.cfg.Layout, info.Flip, info.VFlip,
		mapOnto(box, info.Region, d.size))
}

// codecError classifies an FFmpeg decoding error.
func codecError(f format, err error) error {
	switch {
	case errors.Is(err, errENOMEM):
		return fmt.Errorf("decode: %s decoder out of memory: %w", f, err)
	case errors.Is(err, astiav.ErrPatchwelcome), errors.Is(err, errENOSYS):
		return fmt.Errorf("%w: %s decoder: %w", ErrUnsupported, f, err)
	case errors.Is(err, astiav.ErrEagain):
		return fmt.Errorf("%w: %s decoder produced no picture", ErrCorrupt, f)
	}
	return fmt.Errorf("%w: %s decoder: %w", ErrCorrupt, f, err)
}

// Close frees the FFmpeg state. It is idempotent; Decode fails afterwards.
func (d *Decoder) Close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	for f := range d.ctx {
		for l, cc := range d.ctx[f] {
			if cc != nil {
				cc.Free()
				d.ctx[f][l] = nil
			}
		}
	}
	if d.pkt != nil {
		d.pkt.Free()
		d.pkt = nil
	}
	if d.frame != nil {
		d.frame.Free()
		d.frame = nil
	}
	d.sws.free()
	d.jpeg.free()
	d.resize.free()
	return nil
}
