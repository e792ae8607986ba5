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

// TestDecodeDeviceVideo: --media video --decode-device cuda decodes on
// the GPU's NVDEC through FFmpeg, in any build. Without the NVIDIA driver
// (this CI's machines) the node stops at start, saying what is missing,
// and never decodes on the CPU quietly instead; with one, every clip is
// delivered and counted by where it was decoded. Audio is refused.
func TestDecodeDeviceVideo(t *testing.T) {
	root := videoDataset(t)
	stats := filepath.Join(t.TempDir(), "stats.json")
	var out, errb bytes.Buffer
	code := run([]string{"--standalone", "--dataset", root, "--media", "video", "--clip-frames", "4", "--size", "32",
		"--max-failures", "5", "--epochs", "1", "--sink", "null", "--decode-device", "cuda", "--stats-json", stats}, &out, &errb)
	dev, err := video.OpenDevice(0)
	if err != nil {
		if code != 2 || !strings.Contains(errb.String(), "--decode-device cuda") || !strings.Contains(errb.String(), "libcuda.so.1") {
			t.Errorf("without a driver: exit %d, stderr:\n%s\nwant exit 2 naming --decode-device cuda and libcuda.so.1", code, errb.String())
		}
	} else {
		dev.Close()
		if code != 0 {
			t.Fatalf("with a driver: exit %d:\n%s", code, errb.String())
		}
		var s struct {
			Video *struct {
				NVDEC, CPU int64
			} `json:"gpu_video_decode"`
		}
		b, _ := os.ReadFile(stats)
		if err := json.Unmarshal(b, &s); err != nil || s.Video == nil || s.Video.NVDEC+s.Video.CPU != 6 {
			t.Errorf("with a driver: gpu_video_decode %+v (%v), want 6 clips counted:\n%s", s.Video, err, b)
		}
	}
	errb.Reset()
	code = run([]string{"--standalone", "--dataset", audioDataset(t), "--media", "audio", "--sink", "null", "--decode-device", "cuda"}, &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), "no audio decoder") {
		t.Errorf("audio on the GPU: exit %d, stderr:\n%s\nwant refused", code, errb.String())
	}
}
