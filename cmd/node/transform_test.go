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
