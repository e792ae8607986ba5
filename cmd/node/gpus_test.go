package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/longshore/longshore/gpu"
)

func TestSetupGPUs(t *testing.T) {
	var out bytes.Buffer
	host := gpuFlags{gpus: "auto", upload: "host", uploadHM: "register"}
	// A plain build (no CUDA): auto means no devices, --ranks as given.
	s, ranks, err := setupGPUs(gpu.NoDriver{}, host, 3, &out)
	if err != nil || ranks != 3 || s.newUploader() != nil || s.rankDevice() != nil {
		t.Fatalf("plain build: %v ranks %d", err, ranks)
	}
	dev := host
	dev.upload = "device"
	if _, _, err := setupGPUs(gpu.NoDriver{}, dev, 1, &out); err == nil || !strings.Contains(err.Error(), "built without CUDA") {
		t.Fatalf("--upload device without CUDA: %v", err)
	}
	// Two devices: one rank each, uploaders on the rank's device.
	tw := gpu.NewTwin(gpu.TwinConfig{Devices: 2})
	s, ranks, err = setupGPUs(tw, dev, 1, &out)
	if err != nil || ranks != 2 {
		t.Fatalf("twin: %v ranks %d", err, ranks)
	}
	if rd := s.rankDevice()(1); rd == nil || rd.Info.Ordinal != 1 || !rd.Export {
		t.Fatalf("rank 1 device %+v", rd)
	}
	pool, _ := gpu.NewHostPool(gpu.HeapAllocator{}, 2, 4096)
	u, err := s.newUploader()(1, pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Upload(context.Background(), pool.Slot(0), 10); err != nil {
		t.Fatal(err)
	}
	if ds := u.(gpu.DeviceLocator).Slot(0); ds.Device != 1 {
		t.Fatalf("rank 1's uploader on device %d", ds.Device)
	}
	u.(gpu.SlotReleaser).ReleaseSlot(0)
	u.Close()
	pool.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if st := tw.Stats(); st.Live() != 0 {
		t.Fatalf("twin holds %+v", st)
	}
	if !strings.Contains(out.String(), "rank 1 on GPU 1") {
		t.Fatalf("no per-rank device line in %q", out.String())
	}
	bad := dev
	bad.ranksSet = true
	bad.gpus = "0,1"
	if _, _, err := setupGPUs(tw, bad, 3, &out); err == nil {
		t.Fatal("--gpus 0,1 --ranks 3 accepted")
	}
}

func TestUploadFlags(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseFlags([]string{"--standalone", "--dataset", "x", "--upload", "gpu", "--upload-host", "dma"}, &out); err == nil ||
		!strings.Contains(err.Error(), "--upload \"gpu\"") || !strings.Contains(err.Error(), "--upload-host") {
		t.Fatalf("bad --upload flags: %v", err)
	}
	o, err := parseFlags([]string{"--standalone", "--dataset", "x", "--ranks", "2"}, &out)
	if err != nil || !o.gpuFlags.ranksSet || o.gpuFlags.gpus != "auto" || o.gpuFlags.upload != "host" {
		t.Fatalf("defaults: %+v %v", o.gpuFlags, err)
	}
}
