package decode

import (
	"fmt"
	"math"
)

// PixelOps are the ops a transform may apply after its geometry, to the
// decoded Size×Size uint8 RGB sample in place, on the CPU (Decode and
// TransformRGB, so the GPU JPEG path's samples too). Each op's random
// draws come from its own stream, seeded by the sample's seed and the
// op's place among the pixel ops: the same (seed, epoch, index) gives the
// same pixels wherever the sample is decoded, and the crop and flip draws
// do not depend on which pixel ops follow.
//
//   - brightness(factor=lo:hi): torchvision's ColorJitter(brightness)
//     on a PIL image: a factor uniform in [lo, hi] (one number: that
//     factor), then ImageEnhance.Brightness: each byte v becomes
//     trunc(float32(factor)·float32(v)) clamped to [0, 255], as PIL's
//     Image.blend with black computes it. factor >= 0.
//   - grayscale(p=P): torchvision's RandomGrayscale(P) (P 1 when absent:
//     Grayscale(3)): with probability P, every pixel becomes its ITU-R
//     601-2 luma in all three channels, as PIL's convert("L") rounds it:
//     (19595·R + 38470·G + 7471·B + 2^15) >> 16.
var PixelOps = []string{"brightness", "grayscale"}

type pixelKind uint8

const (
	pixelBrightness pixelKind = iota + 1
	pixelGrayscale
)

// pixelOp is a compiled pixel op.
type pixelOp struct {
	kind   pixelKind
	lo, hi float64 // brightness: the factor's range
	p      float64 // grayscale: its probability
}

func compilePixelOp(op Op) (pixelOp, error) {
	var c pixelOp
	var p *params
	switch op.Name {
	case "brightness":
		p = readParams(op, "factor")
		if _, ok := p.vals["factor"]; !ok {
			p.fail("needs factor=lo:hi (or one factor)")
		}
		c = pixelOp{kind: pixelBrightness}
		c.lo, c.hi = p.span("factor", 1, 1)
		if !(c.lo >= 0 && c.lo <= c.hi) || math.IsInf(c.hi, 0) {
			p.fail("factor %v:%v: want 0 <= lo <= hi", c.lo, c.hi)
		}
	case "grayscale":
		p = readParams(op, "p")
		c = pixelOp{kind: pixelGrayscale, p: p.float("p", 1)}
		if !(c.p >= 0 && c.p <= 1) {
			p.fail("p %v out of [0, 1]", c.p)
		}
	default:
		return c, fmt.Errorf("decode: unknown op %q (geometry: random_resized_crop, hflip, resize, center_crop; pixel ops: %v)", op.Name, PixelOps)
	}
	if len(p.errs) > 0 {
		return c, p.errs[0]
	}
	return c, nil
}

// compilePixel compiles a validated transform's pixel ops.
func compilePixel(ops Ops) []pixelOp {
	out := make([]pixelOp, 0, len(ops))
	for _, op := range ops {
		c, err := compilePixelOp(op)
		if err != nil {
			panic(err) // Config.Validate refused it
		}
		out = append(out, c)
	}
	return out
}

// pixelSalt separates the pixel ops' draws from the crop's and the
// flip's; op i's stream is seeded by sampleSeed ^ pixelSalt ^ mix64(i+1).
const pixelSalt = 0xbb67ae8584caa73b

// pixelRNG is op i's random stream for the sample with seed sampleSeed.
func pixelRNG(sampleSeed uint64, i int) rng {
	return rng{s: sampleSeed ^ pixelSalt ^ mix64(uint64(i)+1)}
}

// brightnessLUT fills lut with what brightness by factor makes of each
// byte value (PIL's Image.blend(black, image, factor) arithmetic).
func brightnessLUT(lut *[256]byte, factor float64) {
	f := float32(factor)
	for v := range lut {
		x := f * float32(v)
		switch {
		case x <= 0:
			lut[v] = 0
		case x >= 255:
			lut[v] = 255
		default:
			lut[v] = byte(x)
		}
	}
}

// luma is PIL's convert("L") of one RGB pixel.
func luma(r, g, b byte) byte {
	return byte((uint32(r)*19595 + uint32(g)*38470 + uint32(b)*7471 + 0x8000) >> 16)
}

// pixels applies ops to the size×size sample dst in layout l, in order,
// with the randomness of sampleSeed. lut is scratch.
func pixels(ops []pixelOp, sampleSeed uint64, dst []byte, size int, l Layout, lut *[256]byte) {
	for i, op := range ops {
		r := pixelRNG(sampleSeed, i)
		switch op.kind {
		case pixelBrightness:
			factor := op.lo
			if op.hi > op.lo {
				factor = r.uniform(op.lo, op.hi)
			}
			if factor == 1 {
				continue
			}
			brightnessLUT(lut, factor)
			for j, v := range dst {
				dst[j] = lut[v]
			}
		case pixelGrayscale:
			if op.p < 1 && !(r.float64() < op.p) {
				continue
			}
			n := size * size
			if l == NHWC {
				for j := 0; j+2 < len(dst); j += 3 {
					y := luma(dst[j], dst[j+1], dst[j+2])
					dst[j], dst[j+1], dst[j+2] = y, y, y
				}
				continue
			}
			rp, gp, bp := dst[:n], dst[n:2*n], dst[2*n:3*n]
			for j := range rp {
				y := luma(rp[j], gp[j], bp[j])
				rp[j], gp[j], bp[j] = y, y, y
			}
		}
	}
}
