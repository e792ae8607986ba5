package video

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestDeviceDecoder: the decoder each test clip takes on a GPU, read from
// this FFmpeg's build (no device needed). Debian 12's FFmpeg has NVDEC
// paths for every codec the package's clips use; AV1, which the CPU
// decodes with libdav1d, goes to FFmpeg's native decoder there.
func TestDeviceDecoder(t *testing.T) {
	want := map[string]string{"cfr_h264.mp4": "h264", "hevc.mp4": "hevc", "vp9.webm": "vp9", "av1.mkv": "av1"}
	d, err := NewDecoder(Config{Frames: 4, Size: 32})
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, d.Config().SampleBytes())
	for name, dev := range want {
		c, err := d.Decode(read(t, name), 1, dst)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.Device || c.Fallback != "" {
			t.Errorf("%s on the CPU: Device %v, Fallback %q", name, c.Device, c.Fallback)
		}
		if got := DeviceDecoder(c.Codec); got != dev {
			t.Errorf("%s: the CPU's %s goes to %q on a device, want %q", name, c.Codec, got, dev)
		}
	}
	for _, name := range []string{"theora", "no-such-decoder", "mp3"} {
		if got := DeviceDecoder(name); got != "" {
			t.Errorf("DeviceDecoder(%q) = %q, want none", name, got)
		}
	}
}

// TestOpenDevice: without the NVIDIA driver (this CI's machines) opening
// a device fails at once, saying what is missing; with one, the device
// opens and closes. The device path itself is checked on a GPU by
// scripts/gpu-check.sh (longshore-nvdeccheck).
func TestOpenDevice(t *testing.T) {
	dev, err := OpenDevice(0)
	if err == nil {
		t.Logf("GPU 0 opened through FFmpeg's CUDA hwaccel")
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
		return
	}
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "libcuda.so.1") {
		t.Errorf("OpenDevice without a driver: %v, want ErrNoDevice naming libcuda.so.1", err)
	}
	if _, err := OpenDevice(-1); !errors.Is(err, ErrNoDevice) {
		t.Errorf("OpenDevice(-1): %v, want ErrNoDevice", err)
	}
}

// TestDeviceFallback: a clip the device refuses is decoded on the CPU,
// from the start of its source again (memory, or a ranged reader the
// refusal left mid-object), with the same pixels as the CPU alone and
// the reason in Clip.Fallback; a clip the CPU cannot decode either fails
// with the CPU's error.
func TestDeviceFallback(t *testing.T) {
	cfg := Config{Frames: 4, Size: 32, Train: true, Sampling: Random}
	cpu, _ := NewDecoder(cfg)
	dev, _ := NewDecoder(cfg)
	dev.UseDevice(TwinDevice())
	want := make([]byte, cfg.SampleBytes())
	got := make([]byte, cfg.SampleBytes())
	for _, name := range []string{"cfr_h264.mp4", "vfr_h264.mkv", "hevc.mp4", "vp9.webm", "av1.mkv"} {
		data := read(t, name)
		wc, err := cpu.Decode(data, 7, want)
		if err != nil {
			t.Fatalf("%s on the CPU: %v", name, err)
		}
		gc, err := dev.Decode(data, 7, got)
		if err != nil || gc.Device || gc.Fallback != FallbackRefused || !bytes.Equal(got, want) || !slices.Equal(gc.PTS, wc.PTS) {
			t.Errorf("%s in memory: %v, Device %v, Fallback %q, same pixels %v", name, err, gc.Device, gc.Fallback, bytes.Equal(got, want))
		}
		clear(got)
		r := NewRangeReader(context.Background(), memRange{data}, "k", int64(len(data)), 4<<10)
		gc, err = dev.DecodeReader(r, int64(len(data)), 7, got)
		if err != nil || gc.Fallback != FallbackRefused || !bytes.Equal(got, want) {
			t.Errorf("%s ranged: %v, Fallback %q, same pixels %v", name, err, gc.Fallback, bytes.Equal(got, want))
		}
	}
	data := read(t, "cfr_h264.mp4")
	_, cerr := cpu.Decode(data[:len(data)/2], 7, want)
	_, derr := dev.Decode(data[:len(data)/2], 7, got)
	if cerr == nil || derr == nil || errors.Is(derr, errDevice) || cerr.Error() != derr.Error() {
		t.Errorf("a cut clip: CPU %v, device %v; want the CPU's error from both", cerr, derr)
	}
}
