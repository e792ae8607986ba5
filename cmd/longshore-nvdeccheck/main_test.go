package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longshore/longshore/decode/video"
)

func TestDiff(t *testing.T) {
	if m, x := diff([]byte{0, 10, 255, 7}, []byte{2, 10, 250, 7}); m != 7.0/4 || x != 5 {
		t.Errorf("diff = %v, %d; want 1.75, 5", m, x)
	}
	if m, x := diff([]byte{1}, []byte{1, 2}); m != 255 || x != 255 {
		t.Errorf("diff of unequal lengths = %v, %d; want the worst", m, x)
	}
}

// TestTwinRun: the tool over the committed clips with the twin device
// (refuses every stream): every clip compared, all on the CPU with the
// reason, both passes timed, the report written; a directory with a
// damaged clip reports it and goes on.
func TestTwinRun(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"cfr_h264.mp4", "hevc.mp4", "vp9.webm", "av1.mkv"} {
		b, err := os.ReadFile(filepath.Join("../../testdata/media", n))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, n), b, 0o644)
		if n == "cfr_h264.mp4" {
			os.WriteFile(filepath.Join(dir, "cut.mp4"), b[:len(b)/3], 0o644)
		}
	}
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout bytes.Buffer
	if err := run([]string{"--media", dir, "--twin", "--frames", "4", "--size", "32", "--workers", "2", "--reps", "2", "--json", out}, &stdout); err != nil {
		t.Fatal(err)
	}
	var r Result
	b, _ := os.ReadFile(out)
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Clips) != 5 || r.OnDevice != 0 || !r.WithinTolerance || r.CPU.Clips != 8 || r.NVDEC.Clips != 8 || r.NVDEC.Fallbacks["refused"] != 8 || r.CPU.CPUMsPerClip <= 0 {
		t.Errorf("report:\n%s", b)
	}
	for _, c := range r.Clips {
		if (c.File == "cut.mp4") != (c.Error != "") || (c.Error == "" && (c.Fallback != "refused" || c.MeanAbs != 0 || !c.SameFrames || c.DeviceDecoder == "")) {
			t.Errorf("clip %+v", c)
		}
	}
	dev, err := video.OpenDevice(0)
	if err == nil {
		dev.Close() // a GPU here: the device run is gpu-check.sh's
		return
	}
	if err := run([]string{"--media", dir, "--device", "0"}, &stdout); err == nil || !strings.Contains(err.Error(), "libcuda.so.1") {
		t.Errorf("without --twin and without a driver: %v, want the driver named", err)
	}
}
