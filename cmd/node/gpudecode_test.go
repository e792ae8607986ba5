//go:build !(cuda && cgo)

package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/longshore/longshore/gpu"
)

// TestDecodeDeviceWithoutCUDA: --decode-device cuda in a plain build
// stops the node at start with the reason, whether or not devices are
// visible; it never falls back to the CPU quietly.
func TestDecodeDeviceWithoutCUDA(t *testing.T) {
	g := gpuFlags{gpus: "auto", upload: "host", uploadHM: "register", decodeOn: "cuda"}
	if err := g.check(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for name, drv := range map[string]gpu.Driver{"no driver": gpu.NoDriver{}, "twin devices": gpu.NewTwin(gpu.TwinConfig{Devices: 2})} {
		_, _, err := setupGPUs(drv, g, 1, &out)
		if err == nil || !strings.Contains(err.Error(), "--decode-device cuda") || !strings.Contains(err.Error(), "built without CUDA") {
			t.Errorf("%s: %v, want --decode-device cuda refused as built without CUDA", name, err)
		}
	}
	g.decodeOn = "gpu"
	if err := g.check(); err == nil || !strings.Contains(err.Error(), "want cpu or cuda") {
		t.Errorf("--decode-device gpu: %v", err)
	}
}
