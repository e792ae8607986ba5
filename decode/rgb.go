package decode

import "fmt"

// RGBSlack is how many readable bytes TransformRGB needs past a picture's
// last pixel (the scaler's vector loads may read that far; they use none
// of it).
const RGBSlack = resizeSlack

// TransformRGB transforms a picture decoded elsewhere (width×height
// interleaved RGB at full size, stride bytes a row: what the GPU's JPEG
// decoders produce) into dst exactly as Decode would transform a decoded
// picture of that size with this seed: the same crop, flip, filter and
// layout (Decode's FFmpeg path at lowres 0), then the same pixel ops and
// dtype (a float Config.DType converted as Decode does). rgb must extend RGBSlack
// bytes past the last pixel. Info.Format is left empty: the caller knows
// what it decoded.
func (d *Decoder) TransformRGB(rgb []byte, width, height, stride int, sampleSeed uint64, dst []byte) (Info, error) {
	if d.closed {
		return Info{}, fmt.Errorf("decode: Decoder is closed")
	}
	if len(dst) != d.bytes {
		return Info{}, fmt.Errorf("decode: dst has %d bytes, want %d (Config.SampleBytes)", len(dst), d.bytes)
	}
	if width < 1 || height < 1 || stride < 3*width || len(rgb) < (height-1)*stride+3*width+RGBSlack {
		return Info{}, fmt.Errorf("decode: TransformRGB: %d bytes for a %dx%d picture (stride %d) and %d of slack", len(rgb), width, height, stride, RGBSlack)
	}
	s := SamplingFor(d.cfg.Transform, width, height, sampleSeed)
	info := Info{Width: width, Height: height, Crop: s.Crop, Flip: s.Flip, VFlip: s.VFlip}
	info.Region = readRegion(s.Box, clampRect(s.Clip, width, height), d.size)
	r := info.Region
	src := rgb[r.Y*stride+3*r.X:]
	out := dst
	if d.u8 != nil {
		out = d.u8
	}
	err := d.resize.scaleRGBBytes(d.resizeImpl, src, stride, r.W, r.H, out, d.size, d.cfg.Layout, info.Flip, info.VFlip,
		mapOnto(s.Box, r, d.size))
	if err == nil {
		d.finish(sampleSeed, out, dst)
	}
	return info, err
}
