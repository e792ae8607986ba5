package nvjpeg

import "github.com/longshore/longshore/internal/jpegcolour"

// Path is where a sample is decoded.
type Path uint8

// Paths.
const (
	PathCPU      Path = iota // the node's CPU decoders (libjpeg-turbo, FFmpeg)
	PathHardware             // the GPU's JPEG engine (NVJPEG_BACKEND_HARDWARE)
	PathHybrid               // nvJPEG on CUDA cores (NVJPEG_BACKEND_GPU_HYBRID)
)

func (p Path) String() string { return [...]string{"cpu", "hardware", "hybrid"}[p] }

// Caps is what the device's decoders take. DefaultCaps' values follow
// nvJPEG's documentation for the A100/H100 hardware backend; the device
// check confirms them per GPU.
type Caps struct {
	// Hardware: the device has a JPEG engine.
	Hardware bool
	// HardwareSubsampling lists the chroma subsamplings the engine takes.
	HardwareSubsampling []string
	// MinPixels: smaller images stay on the CPU (a launch and a copy cost
	// more than decoding a thumbnail there). 0: none.
	MinPixels int
	// MaxSide: images wider or taller stay on the CPU. 0: no limit.
	MaxSide int
}

// DefaultCaps is a device with a JPEG engine (A100, H100, H200).
func DefaultCaps() Caps {
	return Caps{
		Hardware: true,
		// Baseline 4:4:4, 4:2:2, 4:2:0, 4:4:0 and grayscale on the engine.
		HardwareSubsampling: []string{"444", "422", "420", "440", "gray"},
		// Below 64x64 the CPU decodes faster than a round trip costs.
		MinPixels: 64 * 64,
		// The engine's limit is 16384 per side (nvJPEG docs); larger goes
		// to the CPU, which handles any size the failure budget allows.
		MaxSide: 16384,
	}
}

// Reasons a sample is not decoded on the device (counted per reason).
const (
	ReasonNotJPEG     = "not_jpeg"
	ReasonBadHeader   = "bad_header"
	ReasonCMYK        = "cmyk"
	ReasonRGB         = "rgb" // three components stored as RGB, not YCbCr
	ReasonPrecision   = "precision"
	ReasonProcess     = "process"
	ReasonSubsampling = "subsampling"
	ReasonTooSmall    = "too_small"
	ReasonTooLarge    = "too_large"
)

// Route decides where a sample is decoded from its probe (err: Probe's
// error). reason is "" on a device path.
func Route(in Info, err error, c Caps) (Path, string) {
	switch {
	case err == ErrNotJPEG:
		return PathCPU, ReasonNotJPEG
	case err != nil:
		return PathCPU, ReasonBadHeader // the CPU path reports the failure itself
	case in.Components == 4 || in.Components == 2:
		return PathCPU, ReasonCMYK
	case in.Colour == jpegcolour.RGB:
		return PathCPU, ReasonRGB
	case in.Precision != 8:
		return PathCPU, ReasonPrecision
	case in.Process == Lossless || in.Process == Arithmetic || in.Process == Hierarchical:
		return PathCPU, ReasonProcess
	case in.Width*in.Height < c.MinPixels:
		return PathCPU, ReasonTooSmall
	case c.MaxSide > 0 && (in.Width > c.MaxSide || in.Height > c.MaxSide):
		return PathCPU, ReasonTooLarge
	}
	sub := in.Subsampling()
	if sub == "" {
		return PathCPU, ReasonSubsampling
	}
	if c.Hardware && in.Process == Baseline {
		for _, s := range c.HardwareSubsampling {
			if s == sub {
				return PathHardware, ""
			}
		}
	}
	return PathHybrid, "" // progressive, extended, or a subsampling the engine lacks
}
