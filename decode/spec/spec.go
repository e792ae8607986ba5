// Package spec is the sample spec, defined once: what one decoded sample
// is (Kind), its element type (DType), its dimensions (Shape) and its
// memory order (Layout). The decoders (package decode and its video and
// audio packages) write samples of a spec; the pipeline (package actors)
// sizes slots and describes batches with it; the trainer protocol names
// it. It imports only the standard library, so the cgo-free pipeline and
// the FFmpeg decoders share it without either importing the other.
package spec

import (
	"fmt"
	"strings"
)

// Layout is the memory order of a sample's pixels.
type Layout int

const (
	// NCHW: [3, H, W] per sample, three planes R, G, B, each H rows of W
	// bytes; what PyTorch models take. The zero value.
	NCHW Layout = iota
	// NHWC: [H, W, 3] per sample, H rows of W interleaved R, G, B pixels
	// (what PIL and PILToTensor-before-permute give).
	NHWC
)

func (l Layout) String() string {
	switch l {
	case NCHW:
		return "NCHW"
	case NHWC:
		return "NHWC"
	}
	return fmt.Sprintf("Layout(%d)", int(l))
}

// MarshalText writes "NCHW" or "NHWC".
func (l Layout) MarshalText() ([]byte, error) {
	if l != NCHW && l != NHWC {
		return nil, fmt.Errorf("actors: unknown layout %d", int(l))
	}
	return []byte(l.String()), nil
}

// UnmarshalText reads "NCHW" or "NHWC" (any case).
func (l *Layout) UnmarshalText(b []byte) error {
	v, ok := parseLayout(string(b))
	if !ok {
		return fmt.Errorf("actors: layout %q: want NCHW or NHWC", b)
	}
	*l = v
	return nil
}

// ParseLayout reads a layout's name as the node's --layout takes it
// (nchw or nhwc, in any case).
func ParseLayout(name string) (Layout, error) {
	v, ok := parseLayout(name)
	if !ok {
		return 0, fmt.Errorf("--layout %q: want nchw or nhwc", name)
	}
	return v, nil
}

func parseLayout(name string) (Layout, bool) {
	switch strings.ToUpper(name) {
	case "NCHW":
		return NCHW, true
	case "NHWC":
		return NHWC, true
	}
	return 0, false
}

// Kind is what a sample is: an image (the zero value), a video clip, an
// audio waveform or a raw sample (bytes undecoded).
type Kind uint8

const (
	// KindImage: [3,H,W] (NCHW) or [H,W,3] (NHWC) RGB, uint8 or the
	// float type of Shape.Elem.
	KindImage Kind = iota
	// KindVideo: Frames frames, [T,3,H,W] (NCHW) or [T,H,W,3] (NHWC)
	// uint8 RGB.
	KindVideo
	// KindAudio: [C,S] float32 PCM, C channels of S samples, channel
	// planes.
	KindAudio
	// KindRaw: the sample's object bytes, undecoded, up to RawBytes of
	// them: a row of RawRowBytes() uint8, its length then its bytes
	// (raw.go).
	KindRaw
)

func (k Kind) String() string {
	switch k {
	case KindImage:
		return "image"
	case KindVideo:
		return "video"
	case KindAudio:
		return "audio"
	case KindRaw:
		return "raw"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// MarshalText writes "image", "video", "audio" or "raw".
func (k Kind) MarshalText() ([]byte, error) {
	if k > KindRaw {
		return nil, fmt.Errorf("actors: unknown sample kind %d", int(k))
	}
	return []byte(k.String()), nil
}

// UnmarshalText reads "image", "video", "audio" or "raw" (any case).
func (k *Kind) UnmarshalText(b []byte) error {
	switch strings.ToLower(string(b)) {
	case "image":
		*k = KindImage
	case "video":
		*k = KindVideo
	case "audio":
		*k = KindAudio
	case "raw":
		*k = KindRaw
	default:
		return fmt.Errorf("actors: media %q: want image, video, audio or raw", b)
	}
	return nil
}

// DType is the element type of a sample's array.
type DType uint8

const (
	// Uint8: images and video frames as decoded (the default).
	Uint8 DType = iota
	// Float32: audio PCM, and images converted to floats (ToTensor's /255,
	// then Normalize when asked), IEEE 754 in the host's byte order
	// (little-endian here).
	Float32
	// Float16: images as IEEE 754 half precision (binary16), host order.
	Float16
	// BFloat16: images as bfloat16 (float32's upper 16 bits, rounded to
	// nearest even as torch casts), host order.
	BFloat16
)

// dtypeNames are the names the node's --dtype, the feed protocol and
// torch give the dtypes.
var dtypeNames = [...]string{Uint8: "uint8", Float32: "float32", Float16: "float16", BFloat16: "bfloat16"}

func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// Size is the bytes of one element.
func (d DType) Size() int {
	switch d {
	case Float32:
		return 4
	case Float16, BFloat16:
		return 2
	}
	return 1
}

// Valid reports whether d is one of the dtypes above.
func (d DType) Valid() bool { return int(d) < len(dtypeNames) }

// Float reports whether d is a floating-point type.
func (d DType) Float() bool { return d == Float32 || d == Float16 || d == BFloat16 }

// ParseDType reads a dtype's name as the node's --dtype takes it: uint8,
// float16, bfloat16 or float32 (any case).
func ParseDType(name string) (DType, error) {
	for d, n := range dtypeNames {
		if strings.EqualFold(name, n) {
			return DType(d), nil
		}
	}
	return 0, fmt.Errorf("--dtype %q: want uint8, float16, bfloat16 or float32", name)
}

// Shape is the sample spec: what one decoded sample is (Kind), its element
// type (DType: Elem for images, fixed for the other kinds), its
// dimensions and memory order. The zero Kind is an image, so an image
// spec is Height, Width and Layout (and Elem, uint8 when zero).
type Shape struct {
	Height, Width int // pixels (images and video frames)
	// Layout is the order of a frame's pixels: channel planes (NCHW) or
	// interleaved RGB (NHWC). Audio is always channel planes.
	Layout Layout
	Kind   Kind
	// Frames is the frames of a video clip (T). Ignored for other kinds.
	Frames int
	// AudioChannels and AudioSamples are an audio sample's [C,S]
	// (channels, samples per channel). Ignored for other kinds.
	AudioChannels, AudioSamples int
	// RawBytes is the most bytes a raw sample may have. Ignored for
	// other kinds.
	RawBytes int
	// Elem is an image's element type: Uint8 (the zero value), or
	// Float16, BFloat16 or Float32 for samples converted to floats in the
	// decoder (decode.Config.DType). Video and raw samples are uint8 and
	// audio float32, whatever Elem says.
	Elem DType
}

// Image is the spec of a size×size RGB image in layout l.
func Image(size int, l Layout) Shape { return Shape{Height: size, Width: size, Layout: l} }

// Channels is the channels of a pixel (RGB).
const Channels = 3

// DType is the element type of the sample's array: Elem for images,
// uint8 for video and raw samples, float32 for audio.
func (s Shape) DType() DType {
	switch s.Kind {
	case KindAudio:
		return Float32
	case KindImage:
		return s.Elem
	}
	return Uint8
}

// SampleDims is the shape of one sample, outermost first.
func (s Shape) SampleDims() []int {
	switch s.Kind {
	case KindRaw:
		return []int{s.RawRowBytes()}
	case KindAudio:
		return []int{s.AudioChannels, s.AudioSamples}
	case KindVideo:
		if s.Layout == NHWC {
			return []int{s.Frames, s.Height, s.Width, Channels}
		}
		return []int{s.Frames, Channels, s.Height, s.Width}
	}
	if s.Layout == NHWC {
		return []int{s.Height, s.Width, Channels}
	}
	return []int{Channels, s.Height, s.Width}
}

// SampleBytes is the size of one decoded sample.
func (s Shape) SampleBytes() int {
	n := s.DType().Size()
	for _, d := range s.SampleDims() {
		n *= d
	}
	return n
}

// BatchDims is the shape of a batch of n samples: [n] + SampleDims.
func (s Shape) BatchDims(n int) []int { return append([]int{n}, s.SampleDims()...) }

// Dims returns the shape of a batch of n images in s.Layout; for the other
// kinds, which have no 4-dimensional shape, it is zero (use BatchDims).
func (s Shape) Dims(n int) [4]int {
	if s.Kind != KindImage {
		return [4]int{}
	}
	if s.Layout == NHWC {
		return [4]int{n, s.Height, s.Width, Channels}
	}
	return [4]int{n, Channels, s.Height, s.Width}
}

// LayoutName names the batch's memory order, batch dimension included:
// "NCHW"/"NHWC" (images), "NTCHW"/"NTHWC" (video), "NCS" (audio).
func (s Shape) LayoutName() string {
	switch s.Kind {
	case KindRaw:
		return "NB"
	case KindAudio:
		return "NCS"
	case KindVideo:
		if s.Layout == NHWC {
			return "NTHWC"
		}
		return "NTCHW"
	}
	return s.Layout.String()
}

func (s Shape) String() string {
	return fmt.Sprintf("%s %s %v %s", s.Kind, s.DType(), s.SampleDims(), s.LayoutName())
}
