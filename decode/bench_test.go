package decode

import (
	"fmt"
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

func BenchmarkFlip(b *testing.B) {
	for _, layout := range []Layout{NCHW, NHWC} {
		b.Run(layout.String(), func(b *testing.B) {
			dst := make([]byte, 3*224*224)
			for b.Loop() {
				flipHorizontal(dst, 224, layout)
			}
		})
	}
}
