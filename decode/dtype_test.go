package decode

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

const imagenetNorm = "normalize(mean=[0.485,0.456,0.406],std=[0.229,0.224,0.225])"

// normalize(mean, std) is torchvision's Normalize after ToTensor: the
// last op, three values or one for all channels, std > 0; Ops gives it
// back; a float output without it is ToTensor alone.
func TestNormalizeOp(t *testing.T) {
	tr := mustTransform(t, "resize(short=256)|center_crop|grayscale(p=0.2)|"+imagenetNorm)
	if !tr.Normalize || tr.Mean != [3]float64{0.485, 0.456, 0.406} || tr.Std != [3]float64{0.229, 0.224, 0.225} || len(tr.Pixel) != 1 {
		t.Errorf("compiled: %+v", tr)
	}
	again, err := tr.Ops().Compile()
	if err != nil || !reflect.DeepEqual(again, tr) {
		t.Errorf("Ops %q compiles to %+v, %v", tr.Ops(), again, err)
	}
	if tr := mustTransform(t, "resize| normalize( mean = 1/2 , std=0.5 )"); !tr.Normalize || tr.Mean != [3]float64{0.5, 0.5, 0.5} || tr.Std != [3]float64{0.5, 0.5, 0.5} {
		t.Errorf("one value: %+v", tr)
	}
	for _, tc := range []struct{ s, want string }{
		{"resize|normalize", "needs mean and std"},
		{"resize|normalize(mean=[0.5,0.5],std=0.5)", "one value or three"},
		{"resize|normalize(mean=0.5,std=[1,0,1])", "std"},
		{"resize|normalize(mean=0.5,std=0.5)|grayscale", "last"},
		{"resize|normalize(mean=[0.5,0.5,0.5,std=0.5)", "bracket"},
		{"resize|normalize(mean=[a,1,2],std=1)", "not a number"},
	} {
		if _, err := ParseTransform(tc.s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseTransform(%q): %v, want an error with %q", tc.s, err, tc.want)
		}
	}
	// normalize writes floats: a uint8 output refuses it.
	c := DefaultConfig()
	c.Transform = mustTransform(t, "resize|"+imagenetNorm)
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "float16") {
		t.Errorf("normalize with a uint8 output: %v", err)
	}
	c.DType = Float16
	if err := c.Validate(); err != nil {
		t.Errorf("normalize with float16: %v", err)
	}
	if c.SampleBytes() != 2*3*224*224 || c.Spec().DType() != Float16 {
		t.Errorf("float16 spec: %v, %d bytes", c.Spec(), c.SampleBytes())
	}
	c.DType = DType(9)
	if err := c.Validate(); err == nil {
		t.Error("DType 9: no error")
	}
}

// normCase is one conversion torchFloats computes.
type normCase struct {
	norm      bool
	mean, std [3]float64
}

// torchFloats runs torchvision's ToTensor (and Normalize(mean, std) when
// norm) over every byte value in each channel, cast to each dtype, for
// each case (in one python3, which starts slowly), and returns the bits:
// [case][dtype][channel][value].
func torchFloats(t *testing.T, cases []normCase) []map[DType][3][256]uint32 {
	t.Helper()
	script := `
import sys, json
import numpy as np, torch
from PIL import Image
from torchvision import transforms as T
img = Image.fromarray(np.stack([np.arange(256, dtype=np.uint8)] * 3, axis=-1).reshape(1, 256, 3), "RGB")
for norm, mean, std in json.loads(sys.argv[1]):
    x = T.ToTensor()(img)
    if norm:
        x = T.Normalize(mean, std)(x)
    for dt, view in ((torch.float16, torch.int16), (torch.bfloat16, torch.int16), (torch.float32, torch.int32)):
        print(json.dumps(x.to(dt).view(view).reshape(3, 256).tolist()))
`
	var job []any
	for _, c := range cases {
		job = append(job, []any{c.norm, c.mean, c.std})
	}
	jb, _ := json.Marshal(job)
	out, err := exec.Command("/usr/bin/python3", "-c", script, string(jb)).Output()
	if err != nil {
		t.Fatalf("python3 with torch, torchvision (scripts/deps.sh python): %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3*len(cases) {
		t.Fatalf("torch gave %d lines", len(lines))
	}
	var res []map[DType][3][256]uint32
	for k := range cases {
		m := map[DType][3][256]uint32{}
		for i, dt := range []DType{Float16, BFloat16, Float32} {
			var v [3][256]int64
			if err := json.Unmarshal([]byte(lines[3*k+i]), &v); err != nil {
				t.Fatal(err)
			}
			var b [3][256]uint32
			for c := range 3 {
				for x := range 256 {
					b[c][x] = uint32(v[c][x]) & (1<<(8*dt.Size()) - 1)
				}
			}
			m[dt] = b
		}
		res = append(res, m)
	}
	return res
}

// The conversion to floats is torchvision's, bit for bit: ToTensor's
// float32 /255, Normalize's float32 (x - mean) / std, then torch's cast
// to float16 or bfloat16 (round to nearest even), for every byte value of
// every channel, with ImageNet's mean and std, another set, and none.
func TestFloatsMatchTorch(t *testing.T) {
	cases := []normCase{
		{false, [3]float64{}, [3]float64{1, 1, 1}},
		{true, [3]float64{0.485, 0.456, 0.406}, [3]float64{0.229, 0.224, 0.225}},
		{true, [3]float64{0.5, 0.5, 0.5}, [3]float64{0.5, 0.5, 0.5}},
		{true, [3]float64{0.48145466, 0.4578275, 0.40821073}, [3]float64{0.26862954, 0.26130258, 0.27577711}}, // CLIP's
		{true, [3]float64{0.1, 0.5, 0.499}, [3]float64{1e-5, 100, 0.0625}},                                    // float16 overflow, subnormals
	}
	all := torchFloats(t, cases)
	for k, tc := range cases {
		want := all[k]
		tr := Transform{Normalize: tc.norm, Mean: tc.mean, Std: tc.std}
		for _, dt := range []DType{Float16, BFloat16, Float32} {
			var lut [3][256]uint32
			floatLUT(&lut, dt, tr)
			for c := range 3 {
				for v := range 256 {
					if lut[c][v] != want[dt][c][v] {
						t.Fatalf("%v norm=%v mean %v std %v: channel %d value %d: bits %#x, torch %#x", dt, tc.norm, tc.mean, tc.std, c, v, lut[c][v], want[dt][c][v])
					}
				}
			}
		}
	}
}

// toFloats is the naive reference of the conversion: element by element,
// the channel taken from the layout, through the LUT TestFloatsMatchTorch
// holds to torch.
func toFloats(u8 []byte, size int, l Layout, dt DType, tr Transform) []byte {
	var lut [3][256]uint32
	floatLUT(&lut, dt, tr)
	out := make([]byte, len(u8)*dt.Size())
	for i, v := range u8 {
		c := i / (size * size)
		if l == NHWC {
			c = i % 3
		}
		if dt == Float32 {
			binary.NativeEndian.PutUint32(out[4*i:], lut[c][v])
		} else {
			binary.NativeEndian.PutUint16(out[2*i:], uint16(lut[c][v]))
		}
	}
	return out
}

// A float sample is the uint8 sample (geometry, then pixel ops) converted
// element by element, written straight into the slot: on every decoder
// path and layout, and through TransformRGB (the GPU path's transform).
// Info, crop and flips are the uint8 sample's.
func TestFloatSamples(t *testing.T) {
	ops := "random_resized_crop(scale=0.2:1)|hflip|vflip(p=0.5)|brightness(factor=0.5:1.5)|grayscale(p=0.3)"
	for _, dt := range []DType{Float16, BFloat16, Float32} {
		for _, l := range []Layout{NCHW, NHWC} {
			for _, fast := range []bool{true, false} {
				for _, norm := range []string{"", "|" + imagenetNorm} {
					const size = 24
					plain, c := newDecoderPath(t, ops, size, l, true, fast)
					fc := c
					fc.Transform = mustTransform(t, ops+norm)
					fc.Transform.Size = size
					fc.DType = dt
					fd, err := NewDecoder(fc)
					if err != nil {
						t.Fatal(err)
					}
					if fc.SampleBytes() != dt.Size()*c.SampleBytes() {
						t.Fatalf("%v: %d bytes a sample", dt, fc.SampleBytes())
					}
					u8, got := make([]byte, c.SampleBytes()), make([]byte, fc.SampleBytes())
					for _, f := range []string{"jpeg_420.jpg", "png_rgba.png", "webp_lossy.webp", "jpeg_cmyk.jpg"} {
						data := readFixture(t, f)
						for seed := uint64(0); seed < 4; seed++ {
							ia, err1 := plain.Decode(data, seed, u8)
							ib, err2 := fd.Decode(data, seed, got)
							if err1 != nil || err2 != nil {
								t.Fatal(err1, err2)
							}
							if ia != ib {
								t.Fatalf("infos differ: %+v, %+v", ia, ib)
							}
							if want := toFloats(u8, size, l, dt, fc.Transform); !bytes.Equal(got, want) {
								t.Fatalf("%v %v fast=%v %q %s seed %d: not the uint8 sample converted", dt, l, fast, norm, f, seed)
							}
						}
					}
					w, h := 53, 31
					rgb := make([]byte, 3*w*h+RGBSlack)
					for i := range rgb[:3*w*h] {
						rgb[i] = byte(i*5 + i/(3*w)*11)
					}
					if _, err := plain.TransformRGB(rgb, w, h, 3*w, 9, u8); err != nil {
						t.Fatal(err)
					}
					if _, err := fd.TransformRGB(rgb, w, h, 3*w, 9, got); err != nil {
						t.Fatal(err)
					}
					if want := toFloats(u8, size, l, dt, fc.Transform); !bytes.Equal(got, want) {
						t.Fatalf("%v %v %q TransformRGB: not the uint8 sample converted", dt, l, norm)
					}
					// The uint8-sized slot is refused.
					if _, err := fd.Decode(readFixture(t, "jpeg_420.jpg"), 0, u8); err == nil {
						t.Fatal("a uint8-sized dst: no error")
					}
					fd.Close()
				}
			}
		}
	}
}

// f16 reads a float16's bits (for the fidelity test).
func f16(b uint16) float64 {
	sign := 1.0
	if b&0x8000 != 0 {
		sign = -1
	}
	e, m := int(b>>10)&0x1f, float64(b&0x3ff)
	switch e {
	case 0:
		return sign * m * 0x1p-24
	case 0x1f:
		return sign * math.Inf(1)
	}
	return sign * (1 + m/1024) * math.Ldexp(1, e-15)
}

// bf16 reads a bfloat16's bits.
func bf16(b uint16) float64 { return float64(math.Float32frombits(uint32(b) << 16)) }
