package main

import (
	"syscall"
	"time"

	"github.com/longshore/longshore/cmd/internal/procmem"
)

// usage is the process's CPU time and peak resident memory so far.
type usage struct {
	CPU     time.Duration
	PeakRSS int64 // bytes
}

func readUsage() usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return usage{}
	}
	cpu := procmem.CPU()
	// Linux's ru_maxrss (kilobytes) keeps the high-water mark of the
	// memory the process had before its exec: a node started by a big
	// parent through vfork (as Go's os/exec does) reports the parent's.
	// VmHWM is this program's own.
	if hwm := procmem.PeakRSS(); hwm > 0 {
		return usage{CPU: cpu, PeakRSS: hwm}
	}
	return usage{CPU: cpu, PeakRSS: ru.Maxrss * 1024}
}
