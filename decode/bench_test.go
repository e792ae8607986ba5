package decode

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// BenchmarkDecode is decode + crop + resize into a 224² slot, one
// goroutine, one warm Decoder, a new sample seed per iteration.
//
//	go test ./decode/ -run XXX -bench Decode -benchmem
//
// bench_470x390 is ImageNet's typical train JPEG (quality 96, 4:4:4):
// lowres never applies to it at 224 (a crop needs both sides >= 448).
// large_1280x1024 (quality 90, 4:2:0) is where it does.
func BenchmarkDecode(b *testing.B) {
	for _, file := range []string{"bench_470x390_q96_444.jpg", "large_1280x1024_q90_420.jpg"} {
		data := readFixture(b, file)
		for _, kind := range []string{"train", "eval", "resize"} {
			for _, lowres := range []bool{true, false} {
				for _, path := range []Path{PathTurbo, PathFFmpeg} {
					name := fmt.Sprintf("%s/%s/lowres=%v/%v", file[:len(file)-4], kind, lowres, path)
					b.Run(name, func(b *testing.B) {
						d, c := newDecoderPath(b, kind, 224, NCHW, lowres, path == PathTurbo)
						dst := make([]byte, c.SampleBytes())
						b.SetBytes(int64(len(data)))
						b.ReportAllocs()
						levels := 0
						seed := uint64(0)
						for b.Loop() {
							seed++
							info, err := d.Decode(data, seed, dst)
							if err != nil {
								b.Fatal(err)
							}
							levels += info.Lowres
						}
						b.ReportMetric(float64(levels)/float64(b.N), "lowres/op")
					})
				}
			}
		}
	}
}

// BenchmarkDecodeFormats: the other formats at their fixture size.
func BenchmarkDecodeFormats(b *testing.B) {
	for _, file := range []string{"jpeg_420.jpg", "jpeg_progressive.jpg", "png_rgb.png", "webp_lossy.webp", "webp_lossless.webp"} {
		data := readFixture(b, file)
		b.Run(file, func(b *testing.B) {
			d, c := newDecoder(b, "train", 224, NHWC, true)
			dst := make([]byte, c.SampleBytes())
			b.ReportAllocs()
			seed := uint64(0)
			for b.Loop() {
				seed++
				if _, err := d.Decode(data, seed, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParseHeader(b *testing.B) {
	data := readFixture(b, "bench_470x390_q96_444.jpg")
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := parseHeader(data); err != nil {
			b.Fatal(err)
		}
	}
}

// datasetJPEGs reads every JPEG under LONGSHORE_DECODE_DATASET (see
// TestTurboDataset), or skips.
func datasetJPEGs(b *testing.B) [][]byte {
	b.Helper()
	dir := os.Getenv("LONGSHORE_DECODE_DATASET")
	if dir == "" {
		b.Skip("LONGSHORE_DECODE_DATASET not set")
	}
	var files [][]byte
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ext := strings.ToLower(filepath.Ext(p)); ext == ".jpeg" || ext == ".jpg" {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			files = append(files, data)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if len(files) == 0 {
		b.Fatalf("no JPEGs under %s", dir)
	}
	return files
}

// BenchmarkDecodeDataset decodes a real-photo dataset with the Train
// (default) and Eval transforms (224, NCHW), one file per iteration in
// order, and reports this thread's CPU time per image (cpu-ms/img), which
// other processes on a shared machine disturb less than wall time. The
// variants are the decoder: the fast path (turbo, the default) or FFmpeg
// for every JPEG (Lowres on, the default, in both). Run it with
// -benchtime=Nx, N a multiple of the number of files, and repeat the run
// with one variant at a time, alternating (-count runs one variant's
// repetitions back to back):
//
//	export LONGSHORE_DECODE_DATASET=~/.cache/longshore/datasets/imagenet-like-n512-s1
//	go test -c -o /tmp/decode.test ./decode/ && cd decode
//	for i in 1 2 3 4 5 6; do for v in turbo ffmpeg; do
//	    /tmp/decode.test -test.run '^$' -test.bench "DecodeDataset/train/$v\$" -test.benchtime 1024x
//	done; done
func BenchmarkDecodeDataset(b *testing.B) {
	files := datasetJPEGs(b)
	for _, kind := range []string{"train", "eval"} {
		for _, v := range []struct {
			name string
			fast bool
		}{{"turbo", true}, {"ffmpeg", false}} {
			b.Run(kind+"/"+v.name, func(b *testing.B) {
				d, c := newDecoderPath(b, kind, 224, NCHW, true, v.fast)
				dst := make([]byte, c.SampleBytes())
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				i := 0
				t0 := threadCPU()
				for b.Loop() {
					if _, err := d.Decode(files[i%len(files)], SampleSeed(1, i/len(files), int64(i%len(files))), dst); err != nil {
						b.Fatal(err)
					}
					i++
				}
				b.ReportMetric(float64((threadCPU()-t0).Microseconds())/1000/float64(i), "cpu-ms/img")
			})
		}
	}
}

// BenchmarkDTypes is the train decode of bench_470x390 into a 224² slot
// of each output dtype, side by side in one run (the float ones with
// ImageNet's normalize), and reports each one's time against uint8's
// (the ratio is the conversion's cost; measure on a quiet machine):
//
//	go test ./decode/ -run XXX -bench DTypes -benchmem
func BenchmarkDTypes(b *testing.B) {
	data := readFixture(b, "bench_470x390_q96_444.jpg")
	var base float64
	for _, dt := range []DType{Uint8, Float16, BFloat16, Float32} {
		for _, l := range []Layout{NCHW, NHWC} {
			b.Run(fmt.Sprintf("%v/%v", dt, l), func(b *testing.B) {
				c := DefaultConfig()
				c.Layout, c.DType = l, dt
				if dt != Uint8 {
					c.Transform = mustTransform(b, Presets["train"]+"|"+imagenetNorm)
				}
				d, err := NewDecoder(c)
				if err != nil {
					b.Fatal(err)
				}
				defer d.Close()
				dst := make([]byte, c.SampleBytes())
				b.ReportAllocs()
				seed := uint64(0)
				for b.Loop() {
					seed++
					if _, err := d.Decode(data, seed, dst); err != nil {
						b.Fatal(err)
					}
				}
				ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				if dt == Uint8 && l == NCHW {
					base = ns
				}
				if base > 0 {
					b.ReportMetric(ns/base, "x_uint8")
				}
			})
		}
	}
}

// BenchmarkToFloat is the conversion alone: one 224² sample's 150,528
// bytes into float16 (NCHW, NHWC) and float32 values through the LUT.
func BenchmarkToFloat(b *testing.B) {
	tr := mustTransform(b, "resize|"+imagenetNorm)
	src := make([]byte, 3*224*224)
	for i := range src {
		src[i] = byte(i * 7)
	}
	for _, dt := range []DType{Float16, Float32} {
		for _, l := range []Layout{NCHW, NHWC} {
			b.Run(fmt.Sprintf("%v/%v", dt, l), func(b *testing.B) {
				var lut [3][256]uint32
				floatLUT(&lut, dt, tr)
				dst := make([]byte, len(src)*dt.Size())
				b.SetBytes(int64(len(src)))
				for b.Loop() {
					toFloat(&lut, dt == Float32, src, dst, 224, l)
				}
			})
		}
	}
}
