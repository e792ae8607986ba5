package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/longshore/longshore/actors/ffdecode"
	"github.com/longshore/longshore/actors/nvdecode"
	"github.com/longshore/longshore/decode/video"
	"github.com/longshore/longshore/delivery"
	"github.com/longshore/longshore/gpu"
)

// gpuFlags are the node's device options.
type gpuFlags struct {
	gpus     string // --gpus
	upload   string // --upload: host or device
	uploadHM string // --upload-host
	decodeOn string // --decode-device: cpu or cuda
	ranksSet bool   // --ranks given explicitly
	video    bool   // --media video: --decode-device cuda is NVDEC's, not nvJPEG's
}

func registerGPUFlags(fs *flag.FlagSet, g *gpuFlags) {
	fs.StringVar(&g.gpus, "gpus", "auto", "GPUs, one rank each: auto (every visible device in a -tags cuda build with a driver; none otherwise), none, all, or ordinals like 0,1; with devices --ranks must match or be left out")
	fs.StringVar(&g.upload, "upload", "host", "where batches are delivered: host (shared memory; the trainer pins it and copies with .cuda(non_blocking=True)) or device (the node copies each batch into a device slot of the rank's GPU and exports it to trainers that ask, over CUDA IPC; needs --gpus and a -tags cuda build)")
	fs.StringVar(&g.decodeOn, "decode-device", "cpu", "where samples are decoded: cpu, or cuda. Images: nvJPEG as the batch stage (the GPU's JPEG engine in whole batches, its hybrid backend for progressive JPEGs, crop and resize on the device; the CPU for the rest, each counted with its reason; needs a -tags cuda build and a driver). Video (--media video): the GPU's video decoders (NVDEC) through FFmpeg's CUDA hwaccel (any build; needs the driver), streams NVDEC refuses on the CPU, counted. On the ranks' GPUs, else GPU 0. Not audio")
	fs.StringVar(&g.uploadHM, "upload-host", "register", "with --upload device: how slots reach the device: register (page-lock the shared memory in place), staged (through a pinned bounce buffer) or pageable; a path that fails falls back to the next, counted")
}

func (g gpuFlags) check() error {
	var errs []error
	if g.upload != "host" && g.upload != "device" {
		errs = append(errs, fmt.Errorf("--upload %q: want host or device", g.upload))
	}
	if g.decodeOn != "cpu" && g.decodeOn != "cuda" {
		errs = append(errs, fmt.Errorf("--decode-device %q: want cpu or cuda", g.decodeOn))
	}
	if _, err := gpu.ParseHostMode(g.uploadHM); err != nil {
		errs = append(errs, fmt.Errorf("--upload-host: %w", err))
	}
	return errors.Join(errs...)
}

// gpuSetup is the node's devices: which GPU each rank uses, and, with
// --upload device, the opened devices the ranks' uploaders copy to.
type gpuSetup struct {
	plan gpu.DevicePlan
	info []gpu.DeviceInfo // by rank
	devs []gpu.Device     // by rank, with --upload device
	// stages: with --decode-device cuda, the batch decode stage's
	// device per GPU decoding (the ranks' devices, else GPU 0);
	// decoders: the per-sample services on the same GPUs, started only
	// for a transform with pixel ops (the stage resizes on the device
	// and applies none), ords: those GPUs.
	stages   []*nvdecode.Device
	decoders []*nvdecode.Service
	ords     []int
	// video: with --decode-device cuda and --media video, those GPUs'
	// NVDEC instead.
	video  *ffdecode.VideoDevices
	host   gpu.HostMode
	stderr io.Writer
}

// setupGPUs decides the ranks' devices (gpu.PlanDevices) and, with
// --upload device, opens them. It returns the number of ranks.
func setupGPUs(drv gpu.Driver, g gpuFlags, ranks int, stderr io.Writer) (*gpuSetup, int, error) {
	visible, visErr := drv.Devices()
	plan, err := gpu.PlanDevices(g.gpus, ranks, g.ranksSet, visible, visErr)
	if err != nil {
		return nil, 0, err
	}
	s := &gpuSetup{plan: plan, stderr: stderr}
	s.host, _ = gpu.ParseHostMode(g.uploadHM)
	if g.upload == "device" && plan.Device == nil {
		why := visErr
		if why == nil {
			why = errors.New("--gpus " + g.gpus)
		}
		return nil, 0, fmt.Errorf("--upload device needs a GPU per rank: %w", why)
	}
	for _, ord := range plan.Device {
		for _, d := range visible {
			if d.Ordinal == ord {
				s.info = append(s.info, d)
			}
		}
	}
	if g.upload == "device" {
		for r, ord := range plan.Device {
			d, err := drv.Open(ord)
			if err != nil {
				s.Close()
				return nil, 0, fmt.Errorf("rank %d: open GPU %d: %w", r, ord, err)
			}
			s.devs = append(s.devs, d)
		}
	}
	if g.decodeOn == "cuda" {
		start := s.startDecoders
		if g.video {
			start = s.openVideoDevices
		}
		if err := start(visible, visErr); err != nil {
			s.Close()
			return nil, 0, err
		}
	}
	for r, d := range s.info {
		mode := "host delivery"
		if s.devs != nil {
			mode = "device delivery (" + s.host.String() + ")"
		}
		fmt.Fprintf(stderr, "longshore-node: rank %d on GPU %d %s (%s), %s\n", r, d.Ordinal, d.UUID, d.Name, mode)
	}
	return s, plan.Ranks, nil
}

// newUploader is actors.Deps.NewUploader: a device uploader that exports
// its slots with --upload device, else nil (the pipeline's HostUploader).
func (s *gpuSetup) newUploader() func(int, *gpu.HostPool) (gpu.Uploader, error) {
	if s == nil || s.devs == nil {
		return nil
	}
	return func(rank int, pool *gpu.HostPool) (gpu.Uploader, error) {
		u, err := gpu.NewDeviceUploader(s.devs[rank], pool, gpu.UploaderConfig{Host: s.host, Export: true})
		if err != nil {
			return nil, err
		}
		for _, f := range u.Stats().Fallbacks {
			fmt.Fprintf(s.stderr, "longshore-node: rank %d: upload falls back from %v to %v: %s\n", rank, f.From, f.To, f.Reason)
		}
		return u, nil
	}
}

// rankDevice is delivery.Config.RankDevice.
func (s *gpuSetup) rankDevice() func(int) *delivery.RankDevice {
	if s == nil || s.info == nil {
		return nil
	}
	return func(r int) *delivery.RankDevice {
		return &delivery.RankDevice{Info: s.info[r], Export: s.devs != nil}
	}
}

// Close closes the opened devices (after every pipeline has closed).
func (s *gpuSetup) Close() error {
	if s == nil {
		return nil
	}
	var errs []error
	for _, d := range s.decoders {
		errs = append(errs, d.Close())
	}
	for _, d := range s.stages {
		errs = append(errs, d.Close())
	}
	if s.video != nil {
		errs = append(errs, s.video.Close())
	}
	for _, d := range s.devs {
		errs = append(errs, d.Close())
	}
	return errors.Join(errs...)
}

// startDecoders starts --decode-device cuda's services: one per device
// the ranks use, else on GPU 0. Without a driver, a device or a cuda
// build it fails: the node does not start with a decoder it cannot have.
func (s *gpuSetup) startDecoders(visible []gpu.DeviceInfo, visErr error) error {
	if visErr != nil {
		return fmt.Errorf("--decode-device cuda: %w", visErr)
	}
	if len(visible) == 0 {
		return fmt.Errorf("--decode-device cuda: %w", gpu.ErrNoDevice)
	}
	ords := []int{visible[0].Ordinal}
	if len(s.plan.Device) > 0 {
		ords = uniqueOrdinals(s.plan.Device)
	}
	s.ords = ords
	for _, o := range ords {
		dev, err := newDecodeDevice(o)
		if err != nil {
			return fmt.Errorf("--decode-device cuda: GPU %d: %w", o, err)
		}
		s.stages = append(s.stages, dev)
		hw := "the JPEG engine in whole batches and the hybrid backend"
		if st := dev.Stats(); st.NoHardware != "" {
			hw = "the hybrid backend only (no JPEG engine: " + st.NoHardware + ")"
		}
		fmt.Fprintf(s.stderr, "longshore-node: decoding JPEGs on GPU %d with nvJPEG as the batch stage: %s, crop and resize on the device\n", o, hw)
	}
	return nil
}

// startServices starts the per-sample services on the decoding GPUs
// (once): --decode-device cuda with a transform's pixel ops, which the
// batch stage does not apply.
func (s *gpuSetup) startServices() error {
	if len(s.decoders) > 0 {
		return nil
	}
	for _, o := range s.ords {
		svc, err := newDecodeService(o)
		if err != nil {
			return fmt.Errorf("--decode-device cuda: GPU %d: %w", o, err)
		}
		s.decoders = append(s.decoders, svc)
		fmt.Fprintf(s.stderr, "longshore-node: decoding JPEGs on GPU %d with nvJPEG one image a call (the transform's pixel ops run on the CPU)\n", o)
	}
	return nil
}

// openVideoDevices opens --decode-device cuda's devices for video: the
// ranks' GPUs, else the first visible, else GPU 0 (a build without CUDA
// sees no device, and FFmpeg needs none of it: it loads the driver
// itself). Without a driver it fails: the node does not start with a
// decoder it cannot have.
func (s *gpuSetup) openVideoDevices(visible []gpu.DeviceInfo, _ error) error {
	ords := uniqueOrdinals(s.plan.Device)
	if len(ords) == 0 {
		ords = []int{0}
		if len(visible) > 0 {
			ords = []int{visible[0].Ordinal}
		}
	}
	var devs []*video.Device
	for _, o := range ords {
		d, err := video.OpenDevice(o)
		if err != nil {
			for _, d := range devs {
				d.Close()
			}
			return fmt.Errorf("--decode-device cuda: %w", err)
		}
		devs = append(devs, d)
		fmt.Fprintf(s.stderr, "longshore-node: decoding video on GPU %d with NVDEC (FFmpeg's CUDA hwaccel; streams it refuses go to the CPU, counted)\n", o)
	}
	s.video = ffdecode.NewVideoDevices(devs)
	return nil
}

// uniqueOrdinals is ords without repeats, in order.
func uniqueOrdinals(ords []int) []int {
	var out []int
	seen := map[int]bool{}
	for _, o := range ords {
		if !seen[o] {
			seen[o] = true
			out = append(out, o)
		}
	}
	return out
}

// videoDecodeStats are the video devices' counts (nil without them).
func (s *gpuSetup) videoDecodeStats() *ffdecode.VideoDeviceStats {
	if s == nil || s.video == nil {
		return nil
	}
	st := s.video.Stats()
	return &st
}

// videoDevices is what ffdecode.UseVideo decodes on (nil: the CPU).
func (s *gpuSetup) videoDevices() *ffdecode.VideoDevices {
	if s == nil {
		return nil
	}
	return s.video
}

// decodeStats sums the services' counts (nil without --decode-device cuda).
func (s *gpuSetup) decodeStats() *nvdecode.Stats {
	if s == nil || len(s.decoders)+len(s.stages) == 0 {
		return nil
	}
	var sum nvdecode.Stats
	var all []nvdecode.Stats
	for _, d := range s.decoders {
		all = append(all, d.Stats())
	}
	for _, d := range s.stages {
		all = append(all, d.Stats())
	}
	for _, st := range all {
		sum.MaxInFlight = max(sum.MaxInFlight, st.MaxInFlight)
		sum.Hardware += st.Hardware
		sum.Hybrid += st.Hybrid
		sum.CPU += st.CPU
		sum.Batches += st.Batches
		sum.Retried += st.Retried
		sum.MaxBatch = max(sum.MaxBatch, st.MaxBatch)
		if st.NoHardware != "" {
			sum.NoHardware = st.NoHardware
		}
		for k, v := range st.Reasons {
			if sum.Reasons == nil {
				sum.Reasons = map[string]int64{}
			}
			sum.Reasons[k] += v
		}
	}
	return &sum
}
