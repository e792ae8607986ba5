package decode

import (
	"fmt"
	"math"
	"unsafe"
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
		return c, fmt.Errorf("decode: unknown op %q (geometry: random_resized_crop, hflip, vflip, resize, center_crop; pixel ops: %v; last: normalize)", op.Name, PixelOps)
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

// PixelDraw is what one of a transform's pixel ops drew for a sample
// (PixelDrawsFor): Op is its name; Factor, brightness's factor (the
// one applied: a fixed factor is itself, 1 leaves the sample as it
// was); Gray, whether grayscale turned the sample gray.
type PixelDraw struct {
	Op     string
	Factor float64
	Gray   bool
}

// PixelDrawsFor returns what each of t's pixel ops (t.Pixel, in order)
// draws for the sample with seed sampleSeed: a pure function of the two,
// the very draws the Decoder applies (it calls the same code per op), so
// an answer about a sample (longshore-lineage) cannot drift from its
// pixels. It is nil without pixel ops, and an error for an op list
// Compile would refuse.
func PixelDrawsFor(t Transform, sampleSeed uint64) ([]PixelDraw, error) {
	if len(t.Pixel) == 0 {
		return nil, nil
	}
	out := make([]PixelDraw, len(t.Pixel))
	for i, op := range t.Pixel {
		c, err := compilePixelOp(op)
		if err != nil {
			return nil, err
		}
		out[i] = c.draw(sampleSeed, i)
	}
	return out, nil
}

// draw is what op, the ith pixel op, draws for the sample with seed
// sampleSeed: from its own stream, pixelRNG(sampleSeed, i).
func (op pixelOp) draw(sampleSeed uint64, i int) PixelDraw {
	r := pixelRNG(sampleSeed, i)
	switch op.kind {
	case pixelBrightness:
		factor := op.lo
		if op.hi > op.lo {
			factor = r.uniform(op.lo, op.hi)
		}
		return PixelDraw{Op: "brightness", Factor: factor}
	case pixelGrayscale:
		return PixelDraw{Op: "grayscale", Gray: op.p >= 1 || r.float64() < op.p}
	}
	panic(fmt.Sprintf("decode: pixel op kind %d", op.kind))
}

// pixels applies ops to the size×size sample dst in layout l, in order,
// with the randomness of sampleSeed (each op's draw, PixelDrawsFor's).
// lut is scratch.
func pixels(ops []pixelOp, sampleSeed uint64, dst []byte, size int, l Layout, lut *[256]byte) {
	for i, op := range ops {
		d := op.draw(sampleSeed, i)
		switch op.kind {
		case pixelBrightness:
			if d.Factor == 1 {
				continue
			}
			brightnessLUT(lut, d.Factor)
			for j, v := range dst {
				dst[j] = lut[v]
			}
		case pixelGrayscale:
			if !d.Gray {
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

// floatLUT fills lut with the bits of what each byte value v of each
// channel c becomes in a dt sample (Float16, BFloat16 or Float32), as
// torchvision computes it: ToTensor's float32(v)/255, then, if
// t.Normalize, Normalize's (x - float32(Mean[c])) / float32(Std[c]) in
// float32, then torch's cast to dt (round to nearest even).
// TestFloatsMatchTorch holds it to torch bit for bit.
func floatLUT(lut *[3][256]uint32, dt DType, t Transform) {
	for c := range lut {
		mean, std := float32(t.Mean[c]), float32(t.Std[c])
		for v := range lut[c] {
			x := float32(v) / 255
			if t.Normalize {
				x = (x - mean) / std
			}
			switch dt {
			case Float16:
				lut[c][v] = uint32(float16Bits(x))
			case BFloat16:
				lut[c][v] = uint32(bfloat16Bits(x))
			default:
				lut[c][v] = math.Float32bits(x)
			}
		}
	}
}

// float16Bits is x as IEEE 754 binary16, rounded to nearest even
// (overflow to infinity, subnormals kept), as torch's cast to half.
func float16Bits(x float32) uint16 {
	b := math.Float32bits(x)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff { // infinity, NaN
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e > 0 { // normal: 10 of the 23 bits, rounded; a carry moves the exponent
		h := uint32(e)<<10 | man>>13
		rem := man & 0x1fff
		if rem > 0x1000 || rem == 0x1000 && h&1 == 1 {
			h++
		}
		return sign | uint16(h)
	}
	// Subnormal (or zero): units of 2^-24.
	shift := uint(14 - e)
	if shift > 24 {
		return sign
	}
	m := man | 0x800000 // exp > 0 here: float32 subnormals returned above
	q := m >> shift
	rem, half := m&(1<<shift-1), uint32(1)<<(shift-1)
	if rem > half || rem == half && q&1 == 1 {
		q++
	}
	return sign | uint16(q)
}

// bfloat16Bits is x as bfloat16 (float32's upper half), rounded to
// nearest even, as torch's cast (NaN stays a NaN).
func bfloat16Bits(x float32) uint16 {
	b := math.Float32bits(x)
	if x != x {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// toFloat writes the uint8 sample src (size×size, layout l) into dst as
// the elements of lut (2 or 4 bytes each, host order).
func toFloat(lut *[3][256]uint32, wide bool, src, dst []byte, size int, l Layout) {
	n := size * size
	if wide {
		out := unsafe.Slice((*uint32)(unsafe.Pointer(&dst[0])), 3*n)
		if l == NHWC {
			for j := 0; j+2 < 3*n; j += 3 {
				out[j], out[j+1], out[j+2] = lut[0][src[j]], lut[1][src[j+1]], lut[2][src[j+2]]
			}
			return
		}
		for c := range 3 {
			o, s, t := out[c*n:(c+1)*n], src[c*n:(c+1)*n], &lut[c]
			for j, v := range s {
				o[j] = t[v]
			}
		}
		return
	}
	out := unsafe.Slice((*uint16)(unsafe.Pointer(&dst[0])), 3*n)
	if l == NHWC {
		for j := 0; j+2 < 3*n; j += 3 {
			out[j], out[j+1], out[j+2] = uint16(lut[0][src[j]]), uint16(lut[1][src[j+1]]), uint16(lut[2][src[j+2]])
		}
		return
	}
	for c := range 3 {
		o, s, t := out[c*n:(c+1)*n], src[c*n:(c+1)*n], &lut[c]
		for j, v := range s {
			o[j] = uint16(t[v])
		}
	}
}
