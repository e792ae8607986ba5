package decode

import (
	"errors"
	"fmt"
	"math"

	"github.com/longshore/longshore/decode/spec"
)

// Sentinel errors. Decode wraps them with detail (fmt.Errorf("%w: ...")), so
// check with errors.Is. Every one of them is a per-sample data error: the
// caller records and counts it and moves on to the next sample.
var (
	// ErrTooLarge: the header declares more than Config.MaxPixels pixels.
	// Nothing was decoded. Raise MaxPixels only if such images are expected.
	ErrTooLarge = errors.New("decode: image too large")
	// ErrUnsupported: not a JPEG, PNG or WebP file, or a variant FFmpeg's
	// decoders here cannot read (arithmetic-coded or hierarchical JPEG,
	// animated WebP).
	ErrUnsupported = errors.New("decode: unsupported image format")
	// ErrCorrupt: the bytes look like a supported format but the header or
	// the bitstream is damaged or truncated.
	ErrCorrupt = errors.New("decode: corrupt image")
)

// Geometry selects the geometric transform applied to every sample.
type Geometry int

const (
	// Train is torchvision's RandomResizedCrop(Size, scale, ratio).
	// Every geometry is followed by RandomHorizontalFlip(FlipProb) and
	// RandomVerticalFlip(VFlipProb) when those are above 0.
	Train Geometry = iota
	// Eval is torchvision's Resize(ResizeShort) followed by CenterCrop(Size).
	Eval
	// Resize stretches the whole image to Size×Size (Resize((Size, Size))).
	Resize
)

func (k Geometry) String() string {
	switch k {
	case Train:
		return "train"
	case Eval:
		return "eval"
	case Resize:
		return "resize"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Layout is the memory order of one sample in the destination slot: the
// sample spec's (spec.Layout, defined once for the decoders and the
// pipeline). NCHW (the zero value) is three planes R, G, B, each Size rows
// of Size bytes; NHWC is Size rows of Size interleaved R, G, B pixels.
type Layout = spec.Layout

const (
	NCHW = spec.NCHW
	NHWC = spec.NHWC
)

// DType is the element type of the output sample: the sample spec's
// (spec.DType). Uint8 (the zero value) is the decoded pixels; the float
// types are ToTensor's x/255, then Normalize's (x - mean)/std when the
// transform normalises, written straight into the slot.
type DType = spec.DType

const (
	Uint8    = spec.Uint8
	Float16  = spec.Float16
	BFloat16 = spec.BFloat16
	Float32  = spec.Float32
)

// ParseDType reads a dtype's name as the node's --dtype takes it
// (uint8, float16, bfloat16 or float32).
func ParseDType(name string) (DType, error) { return spec.ParseDType(name) }

// ParseLayout reads a layout's name as the node's --layout takes it
// (nchw or nhwc, in any case).
func ParseLayout(name string) (Layout, error) { return spec.ParseLayout(name) }

// Transform is a compiled op list (Ops): the geometry from source image
// to the Size×Size output, fused into the decode, and the pixel ops after
// it. ParseTransform fills the defaults; fields that a Kind does not use
// are ignored by it. Ops gives it back as an op list.
type Transform struct {
	Geometry Geometry
	// Size is the side of the square output in pixels (all kinds).
	// Default 224, the ImageNet convention.
	Size int
	// ResizeShort (Eval) is the side the short side is resized to before the
	// center crop of Size. Default 256 (the 0.875 crop ratio of ResNet
	// evaluation). Must be >= Size.
	ResizeShort int
	// CropSize (Eval) is the side center_crop(size=N) named, 0 when it
	// named none: the output side is Size either way, and Validate
	// refuses a CropSize that differs from it.
	CropSize int
	// ScaleMin, ScaleMax (Train) bound the crop area as a fraction of the
	// image area. Defaults 0.08 and 1.0, torchvision's.
	ScaleMin, ScaleMax float64
	// RatioMin, RatioMax (Train) bound the crop aspect ratio (width/height),
	// drawn log-uniformly. Defaults 3/4 and 4/3, torchvision's.
	RatioMin, RatioMax float64
	// FlipProb (every geometry) is the probability of a horizontal flip
	// of the output (RandomHorizontalFlip): the hflip op sets it (0.5
	// when it names no p; the train preset has it). Default 0: no flip.
	FlipProb float64
	// VFlipProb (every geometry) is the probability of a vertical flip
	// (RandomVerticalFlip). Default 0: the vflip op sets it.
	VFlipProb float64
	// Pixel are the ops applied, in order, to the decoded Size×Size
	// sample after the geometry (see PixelOps): colour operations and
	// the like, each with its parameters and its own seeded draws. None
	// by default.
	Pixel Ops
	// Normalize, Mean, Std: torchvision's Normalize(Mean, Std) after
	// ToTensor, per channel R, G, B, as the sample is converted to a
	// float Config.DType (the normalize op, always last). Off: a float
	// sample is ToTensor's x/255 alone. A uint8 output refuses it.
	Normalize bool
	Mean, Std [3]float64
}

// ParseTransform reads the node's --transform: a preset's name ("train",
// "eval" or "resize", which expand to the op lists of Presets) or an op
// list (see Ops), compiled onto the defaults (Size 224, torchvision's
// scale, ratio and Resize(256)). The presets give, field for field, the
// Transforms they always gave.
func ParseTransform(name string) (Transform, error) {
	s, preset := Presets[name]
	if !preset {
		s = name
	}
	ops, err := ParseOps(s)
	if err == nil {
		var t Transform
		if t, err = ops.Compile(); err == nil {
			return t, nil
		}
	}
	return Transform{}, fmt.Errorf("%w (the presets: train, eval, resize; an op list: %s)", err, Presets["train"])
}

// defaultTransform is every field's default, Kind Train.
func defaultTransform() Transform {
	return Transform{
		Size:        224,
		ResizeShort: 256,
		ScaleMin:    0.08,
		ScaleMax:    1.0,
		RatioMin:    3.0 / 4.0,
		RatioMax:    4.0 / 3.0,
	}
}

// DefaultMaxPixels is PIL's Image.MAX_IMAGE_PIXELS (1024*1024*1024/4/3): the
// decompression-bomb limit the Python ecosystem already lives with.
const DefaultMaxPixels = 89478485

// Config configures a Decoder. Build one with DefaultConfig and change what
// you need; the zero Config is not valid (Size 0).
type Config struct {
	// Transform is the geometry (default: train, 224).
	Transform Transform
	// Layout of the output sample (default NCHW, the zero value).
	Layout Layout
	// DType of the output sample (default Uint8, the zero value): Float16,
	// BFloat16 or Float32 write ToTensor's x/255 (then the transform's
	// Normalize) into the slot, 2 or 4 bytes a value, converted from the
	// uint8 sample after its pixel ops, as torch casts (see floatLUT).
	DType DType
	// MaxPixels refuses images whose header declares width*height above it,
	// before any decoding (default DefaultMaxPixels). Decoder memory grows
	// with it: FFmpeg holds the whole decoded frame (up to 3 bytes/pixel
	// for 4:4:4, more for progressive JPEG coefficients).
	MaxPixels int64
	// Lowres lets the JPEG decoder decode at 1/2, 1/4 or 1/8 scale (FFmpeg
	// "lowres", a scaled IDCT) when the crop at that scale still has both
	// sides >= Size. Default true: it saves about a quarter of Eval and
	// Resize time on large photos and never applies to ImageNet-sized
	// Train crops. Its output is a little sharper than the full-size path
	// on textured content (see the package doc for figures).
	Lowres bool
	// FastJPEG decodes 8-bit Huffman-coded YCbCr, grayscale, CMYK and
	// YCCK JPEGs (baseline or progressive) with libjpeg-turbo, which
	// decodes only the rows and (iMCU-aligned) columns the sample reads
	// and stops after them; with Lowres it also scales by M/8 (M = 4, 2,
	// 1) in the IDCT when the crop keeps both sides >= Size. Other JPEGs
	// (Adobe RGB, 12-bit, arithmetic) and files libjpeg rejects fall back
	// to FFmpeg
	// (Info.Path, Info.Fallback, Decoder.Stats). Default true: it is
	// faster on every crop (see the package doc for figures) and its
	// pixels match FFmpeg's within the IDCT's rounding. Off, every JPEG
	// goes to FFmpeg (for comparisons).
	FastJPEG bool
}

// DefaultConfig returns the ImageNet training defaults.
func DefaultConfig() Config {
	t, _ := ParseTransform("train")
	return Config{
		Transform: t,
		Layout:    NCHW,
		MaxPixels: DefaultMaxPixels,
		Lowres:    true,
		FastJPEG:  true,
	}
}

// maxSize bounds Transform.Size so that 3*Size*Size fits comfortably in an
// int32 (swscale works in int) and a slot stays a sane size.
const maxSize = 8192

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("decode: config: "+format, args...))
	}
	t := c.Transform
	switch t.Geometry {
	case Train, Eval, Resize:
	default:
		bad("unknown transform kind %d", int(t.Geometry))
	}
	if t.Size < 1 || t.Size > maxSize {
		bad("Transform.Size %d out of range [1, %d]", t.Size, maxSize)
	}
	switch c.Layout {
	case NCHW, NHWC:
	default:
		bad("unknown layout %d", int(c.Layout))
	}
	if !c.DType.Valid() {
		bad("unknown dtype %d", int(c.DType))
	}
	if t.Normalize && !c.DType.Float() {
		bad("normalize writes floats: the output dtype is %v; want float16, bfloat16 or float32 (the node's --dtype)", c.DType)
	}
	if t.Normalize {
		for ch := range 3 {
			if !(t.Std[ch] > 0) || math.IsInf(t.Std[ch], 0) || math.IsNaN(t.Mean[ch]) || math.IsInf(t.Mean[ch], 0) {
				bad("normalize: channel %d mean %v std %v: want a finite mean and std > 0", ch, t.Mean[ch], t.Std[ch])
			}
		}
	}
	if c.MaxPixels < 1 {
		bad("MaxPixels %d must be positive", c.MaxPixels)
	}
	switch t.Geometry {
	case Eval:
		if t.ResizeShort < t.Size {
			bad("Transform.ResizeShort %d must be >= Size %d: eval is resize(short=%d)|center_crop; a center crop of %d needs resize(short=N) with N >= %d, such as resize(short=%d)|center_crop (eval's 0.875 crop ratio)",
				t.ResizeShort, t.Size, t.ResizeShort, t.Size, t.Size, int(math.Round(float64(t.Size)/0.875)))
		}
		if t.CropSize != 0 && t.CropSize != t.Size {
			bad("center_crop(size=%d) and the output side %d (Transform.Size, the node's --size) disagree", t.CropSize, t.Size)
		}
	case Train:
		// The negated comparisons also catch NaN.
		if !(t.ScaleMin > 0 && t.ScaleMin <= t.ScaleMax) {
			bad("Transform.ScaleMin %v, ScaleMax %v: want 0 < min <= max", t.ScaleMin, t.ScaleMax)
		}
		if !(t.RatioMin > 0 && t.RatioMin <= t.RatioMax) {
			bad("Transform.RatioMin %v, RatioMax %v: want 0 < min <= max", t.RatioMin, t.RatioMax)
		}
	}
	if !(t.FlipProb >= 0 && t.FlipProb <= 1) {
		bad("Transform.FlipProb %v out of [0, 1]", t.FlipProb)
	}
	if !(t.VFlipProb >= 0 && t.VFlipProb <= 1) {
		bad("Transform.VFlipProb %v out of [0, 1]", t.VFlipProb)
	}
	for _, op := range t.Pixel {
		if _, err := compilePixelOp(op); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SampleBytes is the size of one output sample: 3*Size*Size elements of
// c.DType.
func (c Config) SampleBytes() int { return c.Spec().SampleBytes() }

// Spec is the sample spec c produces: a Size×Size RGB image in c.Layout
// of c.DType.
func (c Config) Spec() spec.Shape {
	s := spec.Image(c.Transform.Size, c.Layout)
	s.Elem = c.DType
	return s
}
