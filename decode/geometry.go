package decode

import (
	"math"
	"math/bits"
)

// This file is the pure part of the package: no FFmpeg, no I/O, randomness
// only from the seed argument.

// Rect is a rectangle in pixels: origin (X, Y) at the top left, size W×H.
type Rect struct{ X, Y, W, H int }

const golden = 0x9e3779b97f4a7c15 // 2^64 / phi, splitmix64's increment

// mix64 is splitmix64's finalizer: a bijection on uint64 with full
// avalanche.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// SampleSeed derives the seed of one sample's random transform from the job
// seed, the epoch and the sample's manifest index. It depends on nothing
// else (not on the node, the rank or the order of decoding), so a sample is
// augmented identically wherever and whenever it is decoded in that epoch,
// and differently in the next epoch.
func SampleSeed(seed uint64, epoch int, index int64) uint64 {
	// Distinct odd salts per field, so (epoch, index) = (a, b) and (b, a)
	// differ.
	h := mix64(seed + golden)
	h = mix64(h ^ (uint64(epoch) + 0xd1b54a32d192ed03))
	return mix64(h ^ (uint64(index) + 0xabc98388fb8fac03))
}

// rng is a splitmix64 stream: tiny, fast, seedable, good enough for
// augmentation.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += golden
	return mix64(r.s)
}

// float64 returns a uniform value in [0, 1).
func (r *rng) float64() float64 { return float64(r.next()>>11) * 0x1p-53 }

// uniform returns a uniform value in [lo, hi).
func (r *rng) uniform(lo, hi float64) float64 { return lo + (hi-lo)*r.float64() }

// intn returns a uniform integer in [0, n), n > 0 (Lemire's multiply-shift;
// bias below 2^-32 for the n of image sides).
func (r *rng) intn(n int) int {
	hi, _ := bits.Mul64(r.next(), uint64(n))
	return int(hi)
}

// flipSalt separates the flip draw from the crop draws, so the flip does
// not depend on how many crop attempts were made.
const flipSalt = 0x6a09e667f3bcc909

// roundHalfEven is Python's round(), which torchvision's integer maths uses.
func roundHalfEven(x float64) int { return int(math.RoundToEven(x)) }

// CropFor computes, for a width×height source image, the region of the
// source that becomes the Size×Size output, and whether the output is then
// flipped horizontally. It is pure: the same arguments always give the same
// answer.
//
//   - Train: torchvision's RandomResizedCrop.get_params: up to 10 attempts
//     with area fraction uniform in [ScaleMin, ScaleMax] and aspect ratio
//     log-uniform in [RatioMin, RatioMax], sides rounded half to even; the
//     first that fits wins, at a uniform position. Otherwise the fallback:
//     a center crop of the whole image with its ratio clamped to the range.
//     flip is true with probability FlipProb.
//   - Eval: Resize(ResizeShort) then CenterCrop(Size), expressed as the
//     source region that the center crop covers (rounded to whole pixels).
//   - Resize: the whole image.
//
// The crop always lies inside the image with W, H >= 1 when width and
// height are >= 1.
func CropFor(t Transform, width, height int, sampleSeed uint64) (crop Rect, flip bool) {
	if width < 1 || height < 1 {
		return Rect{}, false
	}
	switch t.Kind {
	case Train:
		crop, _ = randomResizedCrop(t, width, height, &rng{s: sampleSeed})
		if t.FlipProb > 0 {
			fr := rng{s: sampleSeed ^ flipSalt}
			flip = fr.float64() < t.FlipProb
		}
		return crop, flip
	case Eval:
		return centerCrop(t, width, height), false
	default:
		return Rect{0, 0, width, height}, false
	}
}

// randomResizedCrop also reports whether it fell back to the center crop.
func randomResizedCrop(t Transform, width, height int, r *rng) (crop Rect, fallback bool) {
	area := float64(width) * float64(height)
	logLo, logHi := math.Log(t.RatioMin), math.Log(t.RatioMax)
	for range 10 {
		target := area * r.uniform(t.ScaleMin, t.ScaleMax)
		ratio := math.Exp(r.uniform(logLo, logHi))
		w := roundHalfEven(math.Sqrt(target * ratio))
		h := roundHalfEven(math.Sqrt(target / ratio))
		if 0 < w && w <= width && 0 < h && h <= height {
			y := r.intn(height - h + 1)
			x := r.intn(width - w + 1)
			return Rect{x, y, w, h}, false
		}
	}
	// Fallback to a central crop.
	inRatio := float64(width) / float64(height)
	w, h := width, height
	switch {
	case inRatio < t.RatioMin:
		h = roundHalfEven(float64(w) / t.RatioMin)
	case inRatio > t.RatioMax:
		w = roundHalfEven(float64(h) * t.RatioMax)
	}
	// torchvision can round to 0 on degenerate images (a 1×100 strip);
	// keep at least a pixel so there is something to scale.
	w = min(max(w, 1), width)
	h = min(max(h, 1), height)
	return Rect{(width - w) / 2, (height - h) / 2, w, h}, true
}

// evalResized is torchvision's Resize(short) output size: the short side
// becomes short, the long side int(short*long/short_side) (truncated).
func evalResized(short, width, height int) (rw, rh int) {
	if width <= height {
		return short, int(float64(short) * float64(height) / float64(width))
	}
	return int(float64(short) * float64(width) / float64(height)), short
}

func centerCrop(t Transform, width, height int) Rect {
	rw, rh := evalResized(t.ResizeShort, width, height)
	// CenterCrop's origin in the resized image (Python round).
	left := roundHalfEven(float64(rw-t.Size) / 2)
	top := roundHalfEven(float64(rh-t.Size) / 2)
	sx := float64(width) / float64(rw)
	sy := float64(height) / float64(rh)
	return clampRect(Rect{
		X: roundHalfEven(float64(left) * sx),
		Y: roundHalfEven(float64(top) * sy),
		W: roundHalfEven(float64(t.Size) * sx),
		H: roundHalfEven(float64(t.Size) * sy),
	}, width, height)
}

// clampRect makes r lie inside a width×height image with W, H >= 1,
// keeping its size where it can by moving it.
func clampRect(r Rect, width, height int) Rect {
	r.W = min(max(r.W, 1), width)
	r.H = min(max(r.H, 1), height)
	r.X = min(max(r.X, 0), width-r.W)
	r.Y = min(max(r.Y, 0), height-r.H)
	return r
}

// scaleRect maps r from a width×height image to the same region of a
// fw×fh image (the decoded frame, smaller under lowres), rounding to whole
// pixels and keeping it inside.
func scaleRect(r Rect, width, height, fw, fh int) Rect {
	if fw == width && fh == height {
		return r
	}
	x0 := r.X * fw / width
	y0 := r.Y * fh / height
	// Round the far edge to nearest so that a crop that ends at the image
	// edge still does.
	x1 := (2*(r.X+r.W)*fw + width) / (2 * width)
	y1 := (2*(r.Y+r.H)*fh + height) / (2 * height)
	return clampRect(Rect{x0, y0, x1 - x0, y1 - y0}, fw, fh)
}

// lowresLevel picks the largest FFmpeg lowres level l in [0, 3] such that
// the crop scaled by 1/2^l still has both sides >= size.
func lowresLevel(crop Rect, size int) int {
	for l := 3; l > 0; l-- {
		if crop.W>>l >= size && crop.H>>l >= size {
			return l
		}
	}
	return 0
}
