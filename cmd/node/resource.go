package main

import (
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
	// On Linux ru_maxrss is in kilobytes.
	return usage{CPU: cpu, PeakRSS: ru.Maxrss * 1024}
}
