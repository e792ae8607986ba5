package decode

import (
	"bytes"
	"strconv"
	"testing"
)

// PixelDrawsFor says what each pixel op drew for a sample, and it is
// what the decoder applied: decoding with the random ops gives the same
// bytes as decoding with their draws written in as fixed ops
// (brightness(factor=F), grayscale present or not), for samples that
// drew both grayscale decisions and many factors.
func TestPixelDrawsAreWhatTheDecoderApplied(t *testing.T) {
	const geo = "random_resized_crop(scale=0.2:1,ratio=3/4:4/3)|hflip(p=0.5)"
	random := geo + "|brightness(factor=0.4:1.6)|grayscale(p=0.5)|brightness(factor=0.9)"
	tr := mustTransform(t, random)
	for _, l := range []Layout{NCHW, NHWC} {
		dec, c := newDecoderPath(t, random, 32, l, true, true)
		got, want := make([]byte, c.SampleBytes()), make([]byte, c.SampleBytes())
		grays := 0
		for _, f := range []string{"jpeg_444.jpg", "png_rgb.png"} {
			data := readFixture(t, f)
			for seed := uint64(0); seed < 24; seed++ {
				draws, err := PixelDrawsFor(tr, seed)
				if err != nil {
					t.Fatal(err)
				}
				if len(draws) != 3 || draws[0].Op != "brightness" || draws[1].Op != "grayscale" || draws[2].Op != "brightness" {
					t.Fatalf("seed %d: draws %+v, want brightness, grayscale, brightness", seed, draws)
				}
				if f := draws[0].Factor; !(f >= 0.4 && f < 1.6) || draws[2].Factor != 0.9 {
					t.Fatalf("seed %d: factors %v and %v, want one in [0.4, 1.6) and 0.9", seed, f, draws[2].Factor)
				}
				again, _ := PixelDrawsFor(tr, seed)
				if again[0] != draws[0] || again[1] != draws[1] {
					t.Fatalf("seed %d: PixelDrawsFor is not pure: %+v then %+v", seed, draws, again)
				}
				fixed := geo + "|brightness(factor=" + strconv.FormatFloat(draws[0].Factor, 'g', -1, 64) + ")"
				if draws[1].Gray {
					fixed += "|grayscale"
					grays++
				}
				fixed += "|brightness(factor=0.9)"
				explicit, _ := newDecoderPath(t, fixed, 32, l, true, true)
				ig, err1 := dec.Decode(data, seed, got)
				iw, err2 := explicit.Decode(data, seed, want)
				explicit.Close()
				if err1 != nil || err2 != nil {
					t.Fatal(err1, err2)
				}
				if ig != iw || !bytes.Equal(got, want) {
					t.Fatalf("%v %s seed %d: the decoder's sample is not the one its draws %+v give (%s)", l, f, seed, draws, fixed)
				}
			}
		}
		if grays == 0 || grays == 48 {
			t.Errorf("%v: %d of 48 samples grayscale: want both decisions drawn", l, grays)
		}
	}
	// No pixel ops: no draws; a bad op list is refused.
	if d, err := PixelDrawsFor(mustTransform(t, "train"), 1); err != nil || len(d) != 0 {
		t.Errorf("train: draws %+v, %v; want none", d, err)
	}
	bad := mustTransform(t, "train")
	bad.Pixel = Ops{{Name: "sharpen"}}
	if _, err := PixelDrawsFor(bad, 1); err == nil {
		t.Error("an unknown pixel op: no error")
	}
}
