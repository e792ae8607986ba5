// Command longshore-gpucheck measures what only a GPU can show, for
// scripts/gpu-check.sh. It needs no FFmpeg (only libcuda, from the
// driver), so it runs on a machine with nothing but a driver and PyTorch.
//
//	longshore-gpucheck copy  [--device 0] [--json PATH]
//	    the device's pinned host-to-device peak (cuMemcpyHtoDAsync from
//	    cuMemHostAlloc memory, large copies, one stream) and the
//	    DeviceUploader's GB/s in each host mode over slots of
//	    shared memory (memfd, as the feed's), and a round-trip check: each
//	    slot's device copy read back equals the host bytes.
//	longshore-gpucheck serve --feed-dir DIR [--upload host|device] ...
//	    the node's feed over a synthetic dataset (a pattern decoder, no
//	    image decoding), one rank on --device, for the Python trainer of
//	    scripts/gpu_train_check.py; stops on SIGTERM or after --epochs.
//
// --twin runs either against the in-memory gpu.Twin (a CPU check of the
// plumbing; its numbers mean nothing). It must be built with -tags cuda
// for a real device (make gpu-check-bundle).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/actorstest"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cmd/internal/version"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/delivery"
	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/storage"
)

func main() {
	version.Exit("longshore-gpucheck")
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: longshore-gpucheck copy|serve [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "copy":
		err = copyCheck(os.Args[2:], os.Stdout)
	case "serve":
		err = serve(os.Args[2:], os.Stderr)
	default:
		err = fmt.Errorf("unknown command %q: want copy or serve", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "longshore-gpucheck: %v\n", err)
		os.Exit(1)
	}
}

func driver(twin bool) gpu.Driver {
	if twin {
		return gpu.NewTwin(gpu.TwinConfig{DeviceBytes: 8 << 30})
	}
	return gpu.DefaultDriver()
}

// CopyReport is copy's JSON.
type CopyReport struct {
	Device        gpu.DeviceInfo `json:"device"`
	Driver        string         `json:"driver"`
	PeakBytes     int64          `json:"peak_copy_bytes"`
	PinnedPeakGBs float64        `json:"pinned_peak_gb_s"`
	PageableGBs   float64        `json:"pageable_gb_s"`
	SlotBytes     int            `json:"slot_bytes"`
	Slots         int            `json:"slots"`
	Modes         []ModeReport   `json:"upload"`
}

// ModeReport is one host mode's uploader figures.
type ModeReport struct {
	Mode         string         `json:"mode"`
	Fallbacks    []gpu.Fallback `json:"fallbacks,omitempty"`
	Uploads      int            `json:"uploads"`
	GBs          float64        `json:"gb_s"`
	OfPinnedPeak float64        `json:"of_pinned_peak"`
	// MsPerUpload: one Upload's time (enqueue, copy, wait) and, beside it,
	// what the copy alone takes at the pinned peak: the rest is overhead.
	MsPerUpload  float64 `json:"ms_per_upload"`
	CopyMsAtPeak float64 `json:"copy_ms_at_pinned_peak,omitempty"`
	RoundTrips   int     `json:"round_trips_checked"`
	RoundTripsOK bool    `json:"round_trips_equal"`
	Error        string  `json:"error,omitempty"`
}

func copyCheck(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("copy", flag.ContinueOnError)
	ord := fs.Int("device", 0, "device ordinal")
	twin := fs.Bool("twin", false, "use the in-memory twin (CPU plumbing check)")
	peak := fs.Int64("peak-bytes", 256<<20, "bytes per copy of the pinned-peak measurement")
	slotBytes := fs.Int("slot-bytes", 256*3*224*224, "bytes per slot (default: a batch of 256 NCHW 224x224 images)")
	slots := fs.Int("slots", 4, "slots in the pool")
	iters := fs.Int("iters", 40, "copies per measurement")
	out := fs.String("json", "", "write the report here (default stdout)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	drv := driver(*twin)
	dev, err := drv.Open(*ord)
	if err != nil {
		return err
	}
	defer dev.Close()
	rep := CopyReport{Device: dev.Info(), Driver: drv.Name(), PeakBytes: *peak, SlotBytes: *slotBytes, Slots: *slots}
	if rep.PinnedPeakGBs, err = peakGBs(dev, *peak, *iters, true); err != nil {
		return fmt.Errorf("pinned peak: %w", err)
	}
	if rep.PageableGBs, err = peakGBs(dev, *peak, max(*iters/4, 2), false); err != nil {
		return fmt.Errorf("pageable copies: %w", err)
	}
	for _, m := range []gpu.HostMode{gpu.HostRegister, gpu.HostStaged, gpu.HostPageable} {
		mr := uploadGBs(dev, m, *slots, *slotBytes, *iters)
		if rep.PinnedPeakGBs > 0 {
			mr.OfPinnedPeak = mr.GBs / rep.PinnedPeakGBs
			mr.CopyMsAtPeak = float64(*slotBytes) / rep.PinnedPeakGBs / 1e6
		}
		rep.Modes = append(rep.Modes, mr)
	}
	b, _ := json.MarshalIndent(rep, "", "  ")
	b = append(b, '\n')
	if *out != "" {
		return os.WriteFile(*out, b, 0o644)
	}
	_, err = stdout.Write(b)
	return err
}

// peakGBs times iters back-to-back copies of size bytes on one stream:
// from pinned memory (cuMemHostAlloc) or from Go heap memory (pageable).
func peakGBs(dev gpu.Device, size int64, iters int, pinned bool) (_ float64, err error) {
	var host []byte
	if pinned {
		if host, err = dev.AllocPinned(int(size)); err != nil {
			return 0, err
		}
		defer dev.FreePinned(host)
	} else {
		host = make([]byte, size)
	}
	d, err := dev.AllocDevice(size)
	if err != nil {
		return 0, err
	}
	defer dev.FreeDevice(d)
	s, err := dev.NewStream()
	if err != nil {
		return 0, err
	}
	defer dev.DestroyStream(s)
	e, err := dev.NewEvent()
	if err != nil {
		return 0, err
	}
	defer dev.DestroyEvent(e)
	run := func(n int) (time.Duration, error) {
		t0 := time.Now()
		for range n {
			if err := dev.CopyHtoDAsync(d, host, s); err != nil {
				return 0, err
			}
		}
		if err := dev.Record(e, s); err != nil {
			return 0, err
		}
		err := dev.Wait(context.Background(), e)
		return time.Since(t0), err
	}
	if _, err := run(3); err != nil { // warm-up: first-touch, clocks
		return 0, err
	}
	el, err := run(iters)
	if err != nil {
		return 0, err
	}
	return float64(size) * float64(iters) / el.Seconds() / 1e9, nil
}

// uploadGBs drives a DeviceUploader as the pipeline does (upload a slot,
// release it, next slot) over memfd shared memory, then checks round
// trips with fresh bytes each time.
func uploadGBs(dev gpu.Device, mode gpu.HostMode, slots, slotBytes, iters int) ModeReport {
	mr := ModeReport{Mode: mode.String()}
	fail := func(err error) ModeReport { mr.Error = err.Error(); return mr }
	pool, err := gpu.NewHostPool(delivery.NewShmAllocator("gpucheck"), slots, slotBytes)
	if err != nil {
		return fail(err)
	}
	defer pool.Close()
	u, err := gpu.NewDeviceUploader(dev, pool, gpu.UploaderConfig{Host: mode, NoFallback: true})
	if err != nil {
		return fail(err)
	}
	defer u.Close()
	rng := rand.New(rand.NewPCG(1, uint64(mode)))
	for i := range slots {
		fillRandom(rng, pool.Slot(i).Bytes())
	}
	ctx := context.Background()
	up := func(i int) error {
		if err := u.Upload(ctx, pool.Slot(i), slotBytes); err != nil {
			return err
		}
		u.ReleaseSlot(i)
		return nil
	}
	for i := range slots { // warm-up
		if err := up(i); err != nil {
			return fail(err)
		}
	}
	t0 := time.Now()
	for k := range iters {
		if err := up(k % slots); err != nil {
			return fail(err)
		}
	}
	el := time.Since(t0)
	mr.Uploads = iters
	mr.GBs = float64(slotBytes) * float64(iters) / el.Seconds() / 1e9
	mr.MsPerUpload = el.Seconds() * 1000 / float64(iters)
	mr.Fallbacks = u.Stats().Fallbacks
	mr.RoundTripsOK = true
	back := make([]byte, slotBytes)
	for k := range 2 * slots {
		i := k % slots
		s := pool.Slot(i)
		fillRandom(rng, s.Bytes())
		if err := u.Upload(ctx, s, slotBytes); err != nil {
			return fail(err)
		}
		if err := dev.CopyDtoH(back, u.Slot(i).Ptr); err != nil {
			return fail(err)
		}
		u.ReleaseSlot(i)
		mr.RoundTrips++
		if !bytes.Equal(back, s.Bytes()) {
			mr.RoundTripsOK = false
		}
	}
	return mr
}

func fillRandom(rng *rand.Rand, b []byte) {
	for i := 0; i+8 <= len(b); i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}

func serve(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	dir := fs.String("feed-dir", "", "directory of the rank socket (required)")
	upload := fs.String("upload", "host", "host (shared memory only) or device (DeviceUploader, exported over CUDA IPC)")
	ord := fs.Int("device", 0, "device ordinal")
	twin := fs.Bool("twin", false, "use the in-memory twin")
	samples := fs.Int("samples", 4096, "synthetic samples per epoch")
	epochs := fs.Int("epochs", 1000, "epochs")
	batch := fs.Int("batch-size", 128, "samples per batch")
	size := fs.Int("size", 224, "sample side")
	slots := fs.Int("slots", 4, "slots")
	decoders := fs.Int("decoders", 8, "decoders")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("serve: --feed-dir is required")
	}
	drv := driver(*twin)
	dev, err := drv.Open(*ord)
	if err != nil {
		return err
	}
	defer dev.Close()
	st := storage.NewMemStore("synthetic")
	ds := &dataset.Dataset{Classes: []string{"a", "b"}}
	for i := range *samples {
		key := fmt.Sprintf("s%06d", i)
		if _, err := st.Put(context.Background(), key, []byte(key), storage.Cond{}); err != nil {
			return err
		}
		ds.Samples = append(ds.Samples, dataset.Sample{Key: key, Label: int32(i % 2)})
	}
	cfg := actors.Config{BatchSize: *batch, Slots: *slots, Decoders: *decoders, Epochs: *epochs, Seed: 1,
		Sample: actors.Shape{Height: *size, Width: *size}}
	deps := actors.Deps{Store: st, NewDecoder: func() (actors.SampleDecoder, error) { return actorstest.PatternDecoder{}, nil },
		SampleSeed: actorstest.SampleSeed,
		Order:      func(seed uint64, epoch int, n int64) actors.Order { return cluster.NewOrder(seed, epoch, n, 1, 1) }}
	rd := &delivery.RankDevice{Info: dev.Info()}
	if *upload == "device" {
		rd.Export = true
		deps.NewUploader = func(_ int, pool *gpu.HostPool) (gpu.Uploader, error) {
			return gpu.NewDeviceUploader(dev, pool, gpu.UploaderConfig{Export: true})
		}
	} else if *upload != "host" {
		return fmt.Errorf("serve: --upload %q: want host or device", *upload)
	}
	s, err := delivery.New(delivery.Config{Dir: *dir, Ranks: 1, Job: "gpucheck", RankDevice: func(int) *delivery.RankDevice { return rd }},
		delivery.Standalone(cfg, ds, 1, deps))
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "longshore-gpucheck: serving %s (upload %s, device %s)\n", s.SocketPath(0), *upload, rd.Info.UUID)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case <-ctx.Done():
	case <-s.Finished():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Shutdown(sctx)
}
