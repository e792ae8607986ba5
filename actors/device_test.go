package actors

import (
	"bytes"
	"context"
	"runtime"
	"testing"

	"github.com/longshore/longshore/gpu"
)

// deviceDeps wires a DeviceUploader on the gpu twin into the pipeline.
func deviceDeps(t *testing.T, deps Deps, tw *gpu.Twin, cfg gpu.UploaderConfig) (Deps, func() *gpu.DeviceUploader) {
	t.Helper()
	dev, err := tw.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	var last *gpu.DeviceUploader
	deps.NewUploader = func(_ int, pool *gpu.HostPool) (gpu.Uploader, error) {
		u, err := gpu.NewDeviceUploader(dev, pool, cfg)
		last = u
		return u, err
	}
	return deps, func() *gpu.DeviceUploader { return last }
}

// Every batch's device copy holds the batch's host bytes, the uploader's
// slots all come back, and closing frees everything on the device.
func TestDeviceUploaderInThePipeline(t *testing.T) {
	checkNoLeaks(t)
	st, ds := makeDataset(t, 50, 3, 16)
	tw := gpu.NewTwin(gpu.TwinConfig{})
	deps, uploader := deviceDeps(t, testDeps(st, fakeDecoders(0, 1)), tw, gpu.UploaderConfig{Export: true})
	cfg := smallConfig()
	p, err := NewLoader(cfg, ds, deps)
	if err != nil {
		t.Fatal(err)
	}
	var held []*Batch // hold two batches at a time: slots rotate under them
	n := 0
	for {
		b, err := p.Next(context.Background())
		if err != nil {
			break
		}
		checkBatch(t, st, cfg, b)
		if b.Device == nil || b.Device.Export == nil {
			t.Fatalf("batch %d has no device location: %+v", b.Step, b.Device)
		}
		got, err := tw.ReadDevice(b.Device.Device, b.Device.Ptr, len(b.Images))
		if err != nil || !bytes.Equal(got, b.Images) {
			t.Fatalf("batch %d: device bytes differ from the host's (%v)", b.Step, err)
		}
		if b.Device.Ptr != b.Device.Export.Base+gpu.DevicePtr(b.Device.Offset) {
			t.Fatalf("slot pointer %#x is not base %#x + offset %d", b.Device.Ptr, b.Device.Export.Base, b.Device.Offset)
		}
		held = append(held, b)
		if len(held) == 2 {
			held[0].Release()
			held = held[1:]
		}
		n++
	}
	if n == 0 {
		t.Fatal("no batches")
	}
	// Close with a batch still held: its device buffer stays until it is
	// released, then everything goes.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if st := tw.Stats(); st.Allocations != 1 {
		t.Fatalf("device memory freed under a held batch: %+v", st)
	}
	for _, b := range held {
		b.Release()
	}
	us := uploader().Stats()
	if us.Held != 0 || us.BadReleases != 0 || us.Uploads != int64(n) || us.Mode != gpu.HostRegister {
		t.Fatalf("uploader stats %+v after %d batches", us, n)
	}
	if st := tw.Stats(); st.Live() != 1 { // the device context, the test's
		t.Fatalf("twin still holds %+v", st)
	}
	if v := tw.Violations(); len(v) > 0 {
		t.Fatalf("violations %q", v)
	}
}

// Closing the pipeline while a copy is in flight: the upload gives up,
// and the uploader waits for the device before it unregisters the slots'
// memory (the twin refuses an unregister under a pending copy).
func TestPipelineCloseDuringACopy(t *testing.T) {
	checkNoLeaks(t)
	st, ds := makeDataset(t, 50, 3, 16)
	tw := gpu.NewTwin(gpu.TwinConfig{Manual: true})
	deps, uploader := deviceDeps(t, testDeps(st, fakeDecoders(0, 1)), tw, gpu.UploaderConfig{})
	p, err := NewLoader(smallConfig(), ds, deps)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; tw.Stats().Waiters == 0; i++ { // an upload waits for its copy
		if i > 5_000_000 {
			t.Fatal("no upload started")
		}
		runtime.Gosched()
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if us := uploader().Stats(); us.Uploads != 0 {
		t.Fatalf("uploads completed with the device held: %+v", us)
	}
	if st := tw.Stats(); st.Live() != 1 || st.Pending != 0 {
		t.Fatalf("twin holds %+v after Close", st)
	}
	if v := tw.Violations(); len(v) > 0 {
		t.Fatalf("violations %q", v)
	}
}
