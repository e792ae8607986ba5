package main

import (
	"fmt"
	"io"
	"sync/atomic"
	"syscall"
	"time"
)

// startCPU is the CPU the process had used when the Go program began
// (package initialisation of main): the dynamic loader resolving the
// shared libraries FFmpeg brings (some 200 on Debian 12), the runtime's
// start and the imported packages' initialisation. Loading is CPU-bound
// once the libraries are in the page cache, so this is about the wall
// time between exec and the program's start too.
var startCPU = processCPU()

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Startup says where a run's time before its first batch went. Every
// figure but LoadCPU counts from the program's start (started).
type Startup struct {
	// StartedUnix is the program's start in Unix seconds: a launcher that
	// noted when it ran the node sees the time exec and the libraries
	// took as StartedUnix minus its own time.
	StartedUnix float64 `json:"started_unix"`
	// LoadCPUSeconds is the CPU spent before the program's start
	// (startCPU).
	LoadCPUSeconds float64 `json:"load_cpu_seconds"`
	// OpenedSeconds: the dataset opened and its samples known (a
	// directory listed, a manifest or a packed index read).
	OpenedSeconds float64 `json:"opened_seconds"`
	// ServingSeconds: the pipelines started (--sink feed: the trainers'
	// sockets listening).
	ServingSeconds float64 `json:"serving_seconds"`
	// FirstBatchSeconds: the first batch delivered (to the sink, or sent
	// to a trainer), as Summary.FirstBatchSeconds.
	FirstBatchSeconds float64 `json:"first_batch_seconds"`
}

// startupClock notes a run's start-up phases as they pass, each from the
// program's start.
type startupClock struct {
	opened, serving time.Duration
	first           atomic.Int64 // nanoseconds to the first batch delivered; 0: none yet
}

func (c *startupClock) open()  { c.opened = time.Since(started) }
func (c *startupClock) serve() { c.serving = time.Since(started) }

// noteFirst notes the first batch delivered (to the sink, or sent to a
// trainer); later calls keep it. Any goroutine may call it.
func (c *startupClock) noteFirst() {
	if c.first.Load() == 0 {
		c.first.CompareAndSwap(0, int64(max(time.Since(started), 1)))
	}
}

// firstBatch is the seconds to the first batch delivered; 0: none yet.
func (c *startupClock) firstBatch() float64 { return time.Duration(c.first.Load()).Seconds() }

// startup is c's figures with the first batch at firstBatch (seconds
// from the program's start; 0: none delivered).
func (c *startupClock) startup(firstBatch float64) *Startup {
	if c == nil {
		return nil
	}
	return &Startup{
		StartedUnix:       float64(started.UnixNano()) / 1e9,
		LoadCPUSeconds:    startCPU.Seconds(),
		OpenedSeconds:     c.opened.Seconds(),
		ServingSeconds:    c.serving.Seconds(),
		FirstBatchSeconds: firstBatch,
	}
}

func printStartup(w io.Writer, s *Startup) {
	if s == nil {
		return
	}
	fmt.Fprintf(w, "  start-up      %.3f s of CPU loading libraries before the program; from its start: dataset opened at %.3f s, serving at %.3f s, first batch at %.3f s\n",
		s.LoadCPUSeconds, s.OpenedSeconds, s.ServingSeconds, s.FirstBatchSeconds)
}
