// Package procmem reads the process's own peak resident memory and CPU
// time.
package procmem

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// CPU is the user and system CPU time the process has used so far (0
// where getrusage fails).
func CPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// PeakRSS is the process's peak resident set size in bytes (VmHWM in
// /proc/self/status), or 0 where that is not available. Linux's rusage
// ru_maxrss is no use for a process started by a big parent: it keeps the
// high-water mark of the memory the process had before its exec, and Go's
// os/exec forks with vfork, so a child reports its parent's.
func PeakRSS() int64 {
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
