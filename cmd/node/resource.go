package main

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
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
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	// Linux's ru_maxrss (kilobytes) keeps the high-water mark of the
	// memory the process had before its exec: a node started by a big
	// parent through vfork (as Go's os/exec does) reports the parent's.
	// VmHWM is this program's own.
	if hwm := vmHWM(); hwm > 0 {
		return usage{CPU: cpu, PeakRSS: hwm}
	}
	return usage{CPU: cpu, PeakRSS: ru.Maxrss * 1024}
}

// vmHWM is the process's peak resident set size from /proc/self/status,
// in bytes, or 0 where that is not available.
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			f := bytes.Fields(v) // "123456 kB"
			if len(f) == 2 && string(f[1]) == "kB" {
				if kb, err := strconv.ParseInt(string(f[0]), 10, 64); err == nil {
					return kb * 1024
				}
			}
		}
	}
	return 0
}
