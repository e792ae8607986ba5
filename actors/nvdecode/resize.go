package nvdecode

import (
	"encoding/binary"
	"math"

	"github.com/longshore/longshore/decode"
)

// The device resize: crop, resize and flip of a full-size decoded RGB
// picture into one sample, on the GPU (gpu/nvjpeg's resize kernel) or in
// Go (ResizePlan.Resize, the twin): the same tables, the same float32
// arithmetic in the same order, so the twin's pixels are the kernel's.
//
// The geometry is the CPU path's for the same seed (decode.SamplingFor,
// Sampling.Region); the filter is its filter, the triangle widened by the
// downscale factor (PIL's antialiased bilinear, decode/resize.c),
// normalised over the region, in float32 instead of Q14 fixed point.
// The CPU path decodes at 1/2-1/8 scale where the crop allows and the
// device decodes whole, so the two differ by the decoders' scaling;
// TestDeviceResizeMatchesCPUPath bounds it by the tolerance.

// Axis is one axis's filter table: output i reads Count[i] source pixels
// from First[i] (region coordinates) with weights W[i*K : i*K+Count[i]]
// (summing to 1).
type Axis struct {
	First, Count []int32
	W            []float32
	K            int
}

// ResizePlan is one sample's device resize: the region of the W×H
// picture it reads, and the tables of both axes.
type ResizePlan struct {
	W, H   int         // the decoded picture
	Region decode.Rect // what the filter reads
	Size   int
	Layout decode.Layout
	Flip   bool // left to right (a kernel argument); a vertical flip is in Y's order
	X, Y   Axis // X: output columns before the flip; Y: output rows, mirrored for a vertical flip
}

// PlanResize is the device resize of the sample of seed for a w×h
// picture under t (its geometry; pixel ops are not the resize's).
func PlanResize(t decode.Transform, layout decode.Layout, w, h int, seed uint64) ResizePlan {
	s := decode.SamplingFor(t, w, h, seed)
	r, x0, sx, y0, sy := s.Region(w, h, t.Size)
	p := ResizePlan{W: w, H: h, Region: r, Size: t.Size, Layout: layout, Flip: s.Flip,
		X: axisTable(r.W, t.Size, x0, sx), Y: axisTable(r.H, t.Size, y0, sy)}
	if s.VFlip {
		// The vertical flip mirrors the rows' table (as the CPU path's
		// scaler does): output row i takes row Size-1-i's taps, so the
		// kernel, given the tables, needs no flag for it.
		p.Y.mirror()
	}
	return p
}

// mirror reverses the order of a's outputs: output i gets output
// len-1-i's taps and weights.
func (a *Axis) mirror() {
	n := len(a.First)
	for i, j := 0, n-1; i < j; i, j = i+1, j-1 {
		a.First[i], a.First[j] = a.First[j], a.First[i]
		a.Count[i], a.Count[j] = a.Count[j], a.Count[i]
		for k := range a.K {
			a.W[i*a.K+k], a.W[j*a.K+k] = a.W[j*a.K+k], a.W[i*a.K+k]
		}
	}
}

// axisTable is decode/resize.c's taps for every output of an axis of n
// region pixels: output i centred at c = x0 + (i+0.5)·scale, source
// pixel j weighing max(0, 1 - |j+0.5-c|/s), s = max(scale, 1),
// normalised over the pixels in [0, n).
func axisTable(n, size int, x0, scale float64) Axis {
	s := max(scale, 1)
	k := min(int(2*s)+2, n)
	a := Axis{First: make([]int32, size), Count: make([]int32, size), W: make([]float32, size*k), K: k}
	f := make([]float64, k)
	for i := range size {
		c := x0 + (float64(i)+0.5)*scale
		lo := max(int(math.Floor(c-s-0.5))+1, 0)
		hi := int(math.Ceil(c+s-0.5)) - 1
		hi = min(hi, n-1)
		lo = min(lo, n-1)
		hi = max(hi, lo)
		cnt := min(hi-lo+1, k)
		sum := 0.0
		for j := range cnt {
			v := 1 - math.Abs(float64(lo+j)+0.5-c)/s
			f[j] = max(v, 0)
			sum += f[j]
		}
		if !(sum > 0) {
			f[0], sum = 1, 1
			for j := 1; j < cnt; j++ {
				f[j] = 0
			}
		}
		a.First[i], a.Count[i] = int32(lo), int32(cnt)
		for j := range cnt {
			a.W[i*k+j] = float32(f[j] / sum)
		}
	}
	return a
}

// Resize is the twin of the device kernel: it writes the sample of the
// W×H interleaved RGB picture rgb (stride bytes a row) into dst
// (3·Size² bytes, in Layout), reading only Region. Each output is
// Σ_rows wy · (Σ_cols wx · src) in float32, products and sums rounded
// separately (no fused multiply-add, as the kernel's mul.rn/add.rn), then
// floor(v + 0.5) clamped to 0..255.
func (p *ResizePlan) Resize(rgb []byte, stride int, dst []byte) {
	n := p.Size
	plane := n * n
	for oy := range n {
		fy, cy := int(p.Y.First[oy]), int(p.Y.Count[oy])
		wy := p.Y.W[oy*p.Y.K:]
		for ox := range n {
			i := ox
			if p.Flip {
				i = n - 1 - ox
			}
			fx, cx := int(p.X.First[i]), int(p.X.Count[i])
			wx := p.X.W[i*p.X.K:]
			var acc [3]float32
			for ty := range cy {
				row := rgb[(p.Region.Y+fy+ty)*stride+3*(p.Region.X+fx):]
				var r [3]float32
				for tx := range cx {
					w := wx[tx]
					px := row[3*tx:]
					r[0] = r[0] + float32(w*float32(px[0]))
					r[1] = r[1] + float32(w*float32(px[1]))
					r[2] = r[2] + float32(w*float32(px[2]))
				}
				w := wy[ty]
				acc[0] = acc[0] + float32(w*r[0])
				acc[1] = acc[1] + float32(w*r[1])
				acc[2] = acc[2] + float32(w*r[2])
			}
			for c := range 3 {
				v := float32(math.Floor(float64(acc[c] + 0.5)))
				b := byte(min(max(v, 0), 255))
				if p.Layout == decode.NHWC {
					dst[3*(oy*n+ox)+c] = b
				} else {
					dst[c*plane+oy*n+ox] = b
				}
			}
		}
	}
}

// TableBytes is the size of the plan's tables in the kernel's layout.
func (p *ResizePlan) TableBytes() int { return 4 * (4*p.Size + p.Size*p.X.K + p.Size*p.Y.K) }

// PutTables writes the plan's tables into dst (TableBytes long) in the
// kernel's layout (gpu/nvjpeg.ResizePTX), little-endian 4-byte words:
// the columns' first taps and counts, the rows', the columns' weights
// (Size·X.K), the rows' (Size·Y.K).
func (p *ResizePlan) PutTables(dst []byte) {
	n := p.Size
	w := 0
	put := func(v uint32) {
		binary.LittleEndian.PutUint32(dst[4*w:], v)
		w++
	}
	for _, a := range []*Axis{&p.X, &p.Y} {
		for i := range n {
			put(uint32(a.First[i]))
		}
		for i := range n {
			put(uint32(a.Count[i]))
		}
	}
	for _, a := range []*Axis{&p.X, &p.Y} {
		for _, f := range a.W[:n*a.K] {
			put(math.Float32bits(f))
		}
	}
}
