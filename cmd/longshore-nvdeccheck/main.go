// Command longshore-nvdeccheck checks video decoding on a GPU's NVDEC
// (--decode-device cuda with --media video) for scripts/gpu-check.sh:
// every clip of a directory decoded on the CPU and on the device, the
// pixels compared, then each path timed over the same clips.
//
//	longshore-nvdeccheck --media DIR [--device 0] [--frames 16] [--size 112]
//	    [--workers N] [--reps 3] [--tolerance 1.5] [--json PATH] [--twin]
//
// The device path decodes on NVDEC through FFmpeg's CUDA hwaccel, copies
// the frames a clip shows to memory and scales and crops them as the CPU
// path does: its pixels differ from the CPU's only by NVDEC's output
// format (NV12, converted by swscale) against the CPU decoder's (planar
// 4:2:0). The mean absolute difference a clip may have is --tolerance
// (0-255 scale). A clip the device refuses (Clip.Fallback) is decoded on
// the CPU and reported as such.
//
// Timing: --workers goroutines (one a core by default), each with its own
// decoder, decode every clip --reps times: clips/s and the process's CPU
// seconds a clip, for the CPU path (one decoder thread a stream, as the
// node's default with one decoder a core) and for the device.
//
// It needs no -tags cuda build: FFmpeg loads the driver. --twin uses
// video.TwinDevice (refuses every stream): a CPU dry run of the tool.
// Exit status 1 when the device decoded no clip (but with --twin) or a
// device clip is out of tolerance.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/longshore/longshore/cmd/internal/version"
	"github.com/longshore/longshore/decode/video"
)

func main() {
	version.Exit("longshore-nvdeccheck")
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "longshore-nvdeccheck: %v\n", err)
		os.Exit(1)
	}
}

// Clip is one file's comparison.
type Clip struct {
	File          string  `json:"file"`
	Codec         string  `json:"codec"`          // the CPU's decoder
	DeviceDecoder string  `json:"device_decoder"` // the decoder the device path takes ("" none)
	Width         int     `json:"width"`
	Height        int     `json:"height"`
	OnDevice      bool    `json:"on_device"`
	Fallback      string  `json:"fallback,omitempty"`
	MeanAbs       float64 `json:"mean_abs_diff"`
	MaxAbs        int     `json:"max_abs_diff"`
	SameFrames    bool    `json:"same_frames"` // the same pts chosen for every target
	Error         string  `json:"error,omitempty"`
}

// Pass is one path's timing.
type Pass struct {
	Clips          int              `json:"clips"`
	Seconds        float64          `json:"seconds"`
	ClipsPerSecond float64          `json:"clips_per_second"`
	CPUSeconds     float64          `json:"cpu_seconds"`
	CPUMsPerClip   float64          `json:"cpu_ms_per_clip"`
	OnDevice       int              `json:"on_device"`
	Fallbacks      map[string]int64 `json:"fallbacks,omitempty"`
	Errors         int              `json:"errors"`
}

// Result is the JSON table.
type Result struct {
	Device          int     `json:"device"`
	Twin            bool    `json:"twin,omitempty"`
	Frames          int     `json:"frames"`
	Size            int     `json:"size"`
	Workers         int     `json:"workers"`
	Reps            int     `json:"reps"`
	Tolerance       float64 `json:"tolerance_mean_abs"`
	Clips           []Clip  `json:"clips"`
	CPU             Pass    `json:"cpu"`
	NVDEC           Pass    `json:"nvdec"`
	SpeedVsCPU      float64 `json:"nvdec_clips_per_second_vs_cpu"`
	PerCoreVsCPU    float64 `json:"nvdec_clips_per_cpu_second_vs_cpu"`
	OnDevice        int     `json:"clips_on_device"`
	WithinTolerance bool    `json:"within_tolerance"`
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("longshore-nvdeccheck", flag.ContinueOnError)
	dir := fs.String("media", "", "a directory of video files")
	ord := fs.Int("device", 0, "CUDA device ordinal")
	frames := fs.Int("frames", 16, "frames a clip")
	size := fs.Int("size", 112, "output side")
	workers := fs.Int("workers", runtime.NumCPU(), "decoders at once in the timed passes")
	reps := fs.Int("reps", 3, "times each clip is decoded in a timed pass")
	tol := fs.Float64("tolerance", 1.5, "the mean absolute difference (0-255) a device clip may have from the CPU's")
	out := fs.String("json", "", "write the report here too")
	twin := fs.Bool("twin", false, "video.TwinDevice instead of a GPU: a dry run on a CPU")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *workers < 1 || *reps < 1 {
		return errors.New("--media DIR needed; --workers and --reps at least 1")
	}
	files, err := mediaFiles(*dir)
	if err != nil {
		return err
	}
	var dev *video.Device
	if *twin {
		dev = video.TwinDevice()
	} else if dev, err = video.OpenDevice(*ord); err != nil {
		return err
	}
	defer dev.Close()
	cfg := video.Config{Frames: *frames, Size: *size, Threads: 1}
	rep := Result{Device: *ord, Twin: *twin, Frames: *frames, Size: *size, Workers: *workers, Reps: *reps, Tolerance: *tol, WithinTolerance: true}
	var good [][]byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		c := compare(cfg, dev, data)
		c.File = filepath.Base(f)
		if c.Error == "" {
			good = append(good, data)
		}
		if c.OnDevice {
			rep.OnDevice++
			if c.MeanAbs > *tol || !c.SameFrames {
				rep.WithinTolerance = false
			}
		}
		rep.Clips = append(rep.Clips, c)
	}
	if len(good) == 0 {
		return fmt.Errorf("%s: no clip the CPU decodes", *dir)
	}
	rep.CPU = timePass(cfg, nil, good, *workers, *reps)
	rep.NVDEC = timePass(cfg, dev, good, *workers, *reps)
	if rep.CPU.ClipsPerSecond > 0 && rep.CPU.CPUMsPerClip > 0 && rep.NVDEC.CPUMsPerClip > 0 {
		rep.SpeedVsCPU = rep.NVDEC.ClipsPerSecond / rep.CPU.ClipsPerSecond
		rep.PerCoreVsCPU = rep.CPU.CPUMsPerClip / rep.NVDEC.CPUMsPerClip
	}
	b, _ := json.MarshalIndent(rep, "", "  ")
	if *out != "" {
		if err := os.WriteFile(*out, b, 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "%s\n", b)
	switch {
	case !rep.WithinTolerance:
		return fmt.Errorf("device clips out of tolerance (mean abs > %v, or other frames chosen)", *tol)
	case rep.OnDevice == 0 && !*twin:
		return errors.New("the device decoded no clip")
	}
	return nil
}

// mediaFiles are dir's regular files, sorted.
func mediaFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range ents {
		if e.Type().IsRegular() {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no files", dir)
	}
	sort.Strings(files)
	return files, nil
}

// compare decodes data on the CPU and on dev and compares the clips.
func compare(cfg video.Config, dev *video.Device, data []byte) Clip {
	cpu, err := video.NewDecoder(cfg)
	if err != nil {
		return Clip{Error: err.Error()}
	}
	on, _ := video.NewDecoder(cfg)
	on.UseDevice(dev)
	a, b := make([]byte, cfg.SampleBytes()), make([]byte, cfg.SampleBytes())
	ca, err := cpu.Decode(data, 1, a)
	c := Clip{Codec: ca.Codec, DeviceDecoder: video.DeviceDecoder(ca.Codec), Width: ca.Width, Height: ca.Height}
	if err != nil {
		c.Error = "cpu: " + err.Error()
		return c
	}
	cb, err := on.Decode(data, 1, b)
	if err != nil {
		c.Error = "device: " + err.Error()
		return c
	}
	c.OnDevice, c.Fallback = cb.Device, cb.Fallback
	c.MeanAbs, c.MaxAbs = diff(a, b)
	c.SameFrames = slices.Equal(ca.PTS, cb.PTS)
	return c
}

// diff is the mean and the largest absolute difference of a and b.
func diff(a, b []byte) (float64, int) {
	if len(a) != len(b) || len(a) == 0 {
		return 255, 255
	}
	var sum int64
	most := 0
	for i := range a {
		d := int(a[i]) - int(b[i])
		if d < 0 {
			d = -d
		}
		sum += int64(d)
		most = max(most, d)
	}
	return float64(sum) / float64(len(a)), most
}

// timePass decodes every clip reps times with workers decoders (on dev,
// or the CPU when dev is nil).
func timePass(cfg video.Config, dev *video.Device, clips [][]byte, workers, reps int) Pass {
	jobs := make(chan []byte)
	var mu sync.Mutex
	p := Pass{Fallbacks: map[string]int64{}}
	var wg sync.WaitGroup
	cpu0 := cpuSeconds()
	t0 := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, _ := video.NewDecoder(cfg)
			if dev != nil {
				d.UseDevice(dev)
			}
			dst := make([]byte, cfg.SampleBytes())
			for data := range jobs {
				c, err := d.Decode(data, 1, dst)
				mu.Lock()
				p.Clips++
				switch {
				case err != nil:
					p.Errors++
				case c.Device:
					p.OnDevice++
				case c.Fallback != "":
					p.Fallbacks[c.Fallback]++
				}
				mu.Unlock()
			}
		}()
	}
	for range reps {
		for _, c := range clips {
			jobs <- c
		}
	}
	close(jobs)
	wg.Wait()
	p.Seconds = time.Since(t0).Seconds()
	p.CPUSeconds = cpuSeconds() - cpu0
	p.ClipsPerSecond = float64(p.Clips) / p.Seconds
	p.CPUMsPerClip = 1000 * p.CPUSeconds / float64(p.Clips)
	return p
}

// cpuSeconds is the process's user and system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
