package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/longshore/longshore/decode"
)

// --transform takes the presets and op lists (decode.ParseTransform);
// --size is the output side either way.
func TestTransformFlag(t *testing.T) {
	parse := func(args ...string) (decode.Config, error) {
		o, err := parseFlags(append([]string{"--standalone", "--dataset", "x"}, args...), &bytes.Buffer{})
		if err != nil {
			return decode.Config{}, err
		}
		return o.decodeConfig()
	}
	dc, err := parse("--transform", "eval", "--size", "200")
	if err != nil || dc.Transform.Geometry != decode.Eval || dc.Transform.Size != 200 || len(dc.Transform.Pixel) != 0 {
		t.Errorf("--transform eval: %+v, %v", dc.Transform, err)
	}
	dc, err = parse("--transform", "random_resized_crop(scale=0.25:1)|hflip(p=0.5)|brightness(factor=0.6:1.4)", "--size", "96")
	if err != nil || dc.Transform.Geometry != decode.Train || dc.Transform.Size != 96 || dc.Transform.ScaleMin != 0.25 ||
		dc.Transform.Pixel.String() != "brightness(factor=0.6:1.4)" {
		t.Errorf("op list: %+v, %v", dc.Transform, err)
	}
	if _, err := parse("--transform", "resize|sepia"); err == nil || !strings.Contains(err.Error(), `"sepia"`) {
		t.Errorf("unknown op: %v", err)
	}
	// Video and audio keep their train/eval windows: an op list is refused
	// when the flags are checked.
	if _, err := parseFlags([]string{"--standalone", "--dataset", "x", "--media", "video", "--transform", "resize|grayscale"}, &bytes.Buffer{}); err == nil {
		t.Error("--media video with an op list accepted")
	}
}

// Resize's size and CenterCrop's size separately: a larger crop than
// eval's 256 is resize(short=N)|center_crop with --size; torchvision's
// Resize(256) + CenterCrop(224) spelled with both sizes is eval at 224;
// a center_crop size that --size contradicts is refused, and eval at a
// size above 256 says how to write it.
func TestTransformSizes(t *testing.T) {
	parse := func(args ...string) (decode.Config, error) {
		o, err := parseFlags(append([]string{"--standalone", "--dataset", "x"}, args...), &bytes.Buffer{})
		if err != nil {
			return decode.Config{}, err
		}
		return o.decodeConfig()
	}
	dc, err := parse("--transform", "resize(short=320)|center_crop", "--size", "288")
	if err != nil || dc.Transform.Geometry != decode.Eval || dc.Transform.ResizeShort != 320 || dc.Transform.Size != 288 {
		t.Errorf("resize(short=320)|center_crop --size 288: %+v, %v", dc.Transform, err)
	}
	eval, _ := parse("--transform", "eval")
	for _, s := range []string{"resize(size=256)|center_crop(size=224)", "resize(short=256)|center_crop(size=224)"} {
		dc, err = parse("--transform", s)
		if err != nil || dc.Transform.Geometry != decode.Eval || dc.Transform.ResizeShort != 256 || dc.Transform.Size != 224 || dc.Spec() != eval.Spec() {
			t.Errorf("%s: %+v, %v", s, dc.Transform, err)
		}
	}
	dc, err = parse("--transform", "resize(size=320)|center_crop(size=288)")
	if err != nil || dc.Transform.Size != 288 || dc.Transform.ResizeShort != 320 {
		t.Errorf("center_crop(size=288) without --size: %+v, %v", dc.Transform, err)
	}
	if _, err := parse("--transform", "resize(size=320)|center_crop(size=288)", "--size", "288"); err != nil {
		t.Errorf("center_crop(size=288) --size 288: %v", err)
	}
	if _, err := parse("--transform", "resize(size=320)|center_crop(size=288)", "--size", "224"); err == nil || !strings.Contains(err.Error(), "--size 224") {
		t.Errorf("center_crop(size=288) --size 224: %v", err)
	}
	if _, err := parse("--transform", "eval", "--size", "288"); err == nil || !strings.Contains(err.Error(), "resize(short=") {
		t.Errorf("eval --size 288: %v", err)
	}
}

// --dtype: uint8 by default; float16, bfloat16 or float32 convert in the
// decoder (ToTensor, then the transform's normalize), sizing the sample;
// normalize without a float dtype, and a float dtype for video or audio,
// are refused.
func TestDTypeFlag(t *testing.T) {
	parse := func(args ...string) (decode.Config, error) {
		o, err := parseFlags(append([]string{"--standalone", "--dataset", "x"}, args...), &bytes.Buffer{})
		if err != nil {
			return decode.Config{}, err
		}
		return o.decodeConfig()
	}
	if dc, err := parse(); err != nil || dc.DType != decode.Uint8 {
		t.Errorf("default: %v, %v", dc.DType, err)
	}
	norm := "resize(short=256)|center_crop|normalize(mean=[0.485,0.456,0.406],std=[0.229,0.224,0.225])"
	for name, dt := range map[string]decode.DType{"float16": decode.Float16, "bfloat16": decode.BFloat16, "float32": decode.Float32} {
		dc, err := parse("--dtype", name, "--transform", norm, "--size", "32")
		if err != nil || dc.DType != dt || !dc.Transform.Normalize || dc.SampleBytes() != dt.Size()*3*32*32 {
			t.Errorf("--dtype %s: %v, %+v, %v", name, dc.DType, dc.Transform, err)
		}
		o, err := parseFlags([]string{"--standalone", "--dataset", "x", "--dtype", name, "--size", "32"}, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		dc, _ = o.decodeConfig()
		ac, err := o.actorsConfig(dc)
		if err != nil || ac.Sample.DType() != dt || ac.Sample.SampleBytes() != dt.Size()*3*32*32 {
			t.Errorf("--dtype %s: pipeline sample %v, %v", name, ac.Sample, err)
		}
	}
	if _, err := parse("--transform", norm); err == nil || !strings.Contains(err.Error(), "--dtype") {
		t.Errorf("normalize with uint8: %v", err)
	}
	if _, err := parse("--dtype", "float64"); err == nil {
		t.Error("--dtype float64 accepted")
	}
	for _, media := range []string{"video", "audio"} {
		if _, err := parseFlags([]string{"--standalone", "--dataset", "x", "--media", media, "--transform", "eval", "--dtype", "float16"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "--dtype") {
			t.Errorf("--media %s --dtype float16: %v", media, err)
		}
	}
}
