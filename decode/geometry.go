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

// vflipSalt is the vertical flip's: its own stream, so adding a vflip
// moves neither the crop nor the horizontal flip.
const vflipSalt = 0x3c6ef372fe94f82b

// roundHalfEven is Python's round(), which torchvision's integer maths uses.
func roundHalfEven(x float64) int { return int(math.RoundToEven(x)) }

// Box is a rectangle in source pixel coordinates that need not lie on
// pixel boundaries (pixel (i, j) covers [i, i+1)×[j, j+1)): origin (X, Y),
// size W×H.
type Box struct{ X, Y, W, H float64 }

func boxOf(r Rect) Box { return Box{float64(r.X), float64(r.Y), float64(r.W), float64(r.H)} }

// Sampling is the geometry of one sample: where the Size×Size output lies
// on the source image and which source pixels it is filtered from.
//
// Output pixel (i, j) (before the flip) is centred at source coordinates
// (Box.X + (i+0.5)·Box.W/Size, Box.Y + (j+0.5)·Box.H/Size) and is the
// triangle filter's weighted mean of the source pixels around that centre,
// the triangle max(1, Box.W/Size) source pixels wide on each side (so
// widened when downscaling: antialiased), over the pixels of Clip only,
// with the weights renormalised: PIL's bilinear resize, which torchvision
// 0.14 uses on PIL images.
type Sampling struct {
	// Crop (with Flip) is what CropFor returns: Train's crop box; Eval's
	// Box rounded to whole pixels (for display: the samples use Box);
	// Resize's whole image.
	Crop Rect
	// Flip, VFlip: the sample is mirrored left to right (F.hflip of the
	// output), then top to bottom (F.vflip), after any geometry.
	Flip, VFlip bool
	// Box is the part of the source the output covers, exactly: Train's
	// crop, Eval's center crop of the resized image mapped back to
	// source pixels (fractional), Resize's whole image.
	Box Box
	// Clip is what the filter may read: Train's crop (torchvision crops,
	// then resizes the crop alone), the whole image for Eval
	// (Resize-then-CenterCrop filters across the crop's edges) and
	// Resize.
	Clip Rect
}

// SamplingFor computes, for a width×height source image, the geometry of
// the sample with seed sampleSeed (see Sampling). It is pure: the same
// arguments always give the same answer.
//
//   - Train: torchvision's RandomResizedCrop.get_params: up to 10 attempts
//     with area fraction uniform in [ScaleMin, ScaleMax] and aspect ratio
//     log-uniform in [RatioMin, RatioMax], sides rounded half to even; the
//     first that fits wins, at a uniform position. Otherwise the fallback:
//     a center crop of the whole image with its ratio clamped to the range.
//   - Eval: Resize(ResizeShort) then CenterCrop(Size): the short side
//     resized to ResizeShort and the long one to int(ResizeShort ·
//     long/short) (truncated), the crop's origin there at
//     round((resized - Size)/2) (half to even, Python's round), all
//     mapped back to source coordinates without rounding.
//   - Resize: the whole image.
//
// After any of them, Flip is true with probability FlipProb and VFlip
// with probability VFlipProb, each from its own stream (the same streams
// whatever the geometry), so adding a flip moves no other draw.
//
// Box and Crop lie inside the image with sides > 0 when width and height
// are >= 1.
func SamplingFor(t Transform, width, height int, sampleSeed uint64) Sampling {
	if width < 1 || height < 1 {
		return Sampling{}
	}
	whole := Rect{0, 0, width, height}
	var s Sampling
	switch t.Geometry {
	case Train:
		crop, _ := randomResizedCrop(t, width, height, &rng{s: sampleSeed})
		s = Sampling{Crop: crop, Box: boxOf(crop), Clip: crop}
	case Eval:
		box := centerCropBox(t, width, height)
		s = Sampling{Crop: roundBox(box, width, height), Box: box, Clip: whole}
	default:
		s = Sampling{Crop: whole, Box: boxOf(whole), Clip: whole}
	}
	// The flips, after any geometry, each from its own stream: adding
	// one moves neither the geometry's draws nor the other flip.
	if t.FlipProb > 0 {
		fr := rng{s: sampleSeed ^ flipSalt}
		s.Flip = fr.float64() < t.FlipProb
	}
	if t.VFlipProb > 0 {
		vr := rng{s: sampleSeed ^ vflipSalt}
		s.VFlip = vr.float64() < t.VFlipProb
	}
	return s
}

// CropFor is SamplingFor's crop box and flip: for Train, the box and flip
// torchvision's F.resized_crop(img, Y, X, H, W, Size) and F.hflip would be
// given to produce the same sample; for Eval, the center crop rounded to
// whole source pixels (SamplingFor has it exactly); for Resize, the whole
// image.
func CropFor(t Transform, width, height int, sampleSeed uint64) (crop Rect, flip bool) {
	s := SamplingFor(t, width, height, sampleSeed)
	return s.Crop, s.Flip
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

// centerCropBox is Eval's box: CenterCrop(Size)'s square in the
// Resize(ResizeShort) image, in source coordinates.
func centerCropBox(t Transform, width, height int) Box {
	rw, rh := evalResized(t.ResizeShort, width, height)
	// CenterCrop's origin in the resized image (Python round).
	left := roundHalfEven(float64(rw-t.Size) / 2)
	top := roundHalfEven(float64(rh-t.Size) / 2)
	// PIL maps resized pixel x to source [x·sx, (x+1)·sx).
	sx := float64(width) / float64(rw)
	sy := float64(height) / float64(rh)
	return Box{float64(left) * sx, float64(top) * sy, float64(t.Size) * sx, float64(t.Size) * sy}
}

// roundBox is b rounded to whole pixels, inside a width×height image.
func roundBox(b Box, width, height int) Rect {
	return clampRect(Rect{
		X: roundHalfEven(b.X),
		Y: roundHalfEven(b.Y),
		W: roundHalfEven(b.W),
		H: roundHalfEven(b.H),
	}, width, height)
}

// readRegion is the part of clip that the filter reads for the outputs
// of a size×size sample of box: it holds every tap of every output that
// lies in clip (it may hold a pixel more at either end), so that the
// filter clipping its taps to the region clips them to clip. For Train
// (box and clip the crop) it is the crop.
func readRegion(box Box, clip Rect, size int) Rect {
	x0, x1 := tapSpan(box.X, box.W, size)
	y0, y1 := tapSpan(box.Y, box.H, size)
	x0, x1 = max(x0, clip.X), min(x1, clip.X+clip.W)
	y0, y1 = max(y0, clip.Y), min(y1, clip.Y+clip.H)
	return clampRect(Rect{x0, y0, x1 - x0, y1 - y0}, clip.X+clip.W, clip.Y+clip.H)
}

// tapSpan bounds, along one axis, the source pixels j that the outputs of
// a span [x, x+w) sampled at size points read: output i is centred at
// c = x + (i+0.5)·w/size and reads the j with |j + 0.5 - c| < s, s =
// max(w/size, 1). It returns [lo, hi), one pixel wider than needed at
// either end, so that float rounding cannot leave a tap out.
func tapSpan(x, w float64, size int) (lo, hi int) {
	scale := w / float64(size)
	s := max(scale, 1)
	first, last := x+0.5*scale, x+w-0.5*scale
	return int(math.Floor(first - s - 0.5)), int(math.Ceil(last+s-0.5)) + 1
}

// scaleBox maps b from source coordinates into a picture decoded at f
// times the source size (a DCT-scaled or lowres decode, f = M/8 or 2^-l,
// whose pixel i covers source [i/f, (i+1)/f)).
func scaleBox(b Box, f float64) Box { return Box{b.X * f, b.Y * f, b.W * f, b.H * f} }

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
// the box scaled by 1/2^l still has both sides >= size (the filter still
// downscales).
func lowresLevel(box Box, size int) int {
	for l := 3; l > 0; l-- {
		f := 1 / float64(int(1)<<l)
		if box.W*f >= float64(size) && box.H*f >= float64(size) {
			return l
		}
	}
	return 0
}

// Region is where a size×size sample of s lies on its width×height
// picture, as TransformRGB and the fast path's scaler use it: r, the part
// of the picture the filter reads (every tap of every output, clipped to
// Clip), and the sample's placement on r (output column i centred at x0 +
// (i+0.5)·sx in r's pixels, row j at y0 + (j+0.5)·sy). A resize elsewhere
// (on a GPU) given these reads what the CPU path reads.
func (s Sampling) Region(width, height, size int) (r Rect, x0, sx, y0, sy float64) {
	r = readRegion(s.Box, clampRect(s.Clip, width, height), size)
	m := mapOnto(s.Box, r, size)
	return r, m.X0, m.SX, m.Y0, m.SY
}
