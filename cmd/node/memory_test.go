package main

import (
	"bytes"
	"math"
	"runtime/debug"
	"strings"
	"testing"
)

// TestMemoryBudgetRun: a standalone run under --memory-budget says what
// the budget set, sets the Go heap's limit, and delivers every sample.
func TestMemoryBudgetRun(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	defer debug.SetMemoryLimit(math.MaxInt64)
	root, _ := makeDataset(t, 40)
	var out, errb bytes.Buffer
	code := run([]string{"--standalone", "--dataset", root, "--epochs", "2", "--batch-size", "8", "--ranks", "2",
		"--size", "32", "--progress", "never", "--memory-budget", "8MiB"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "--memory-budget 8 MiB: 4 slot(s) a rank") {
		t.Errorf("stderr lacks the budget's line:\n%s", errb.String())
	}
	if got, want := debug.SetMemoryLimit(-1), int64(8<<20-2*4*8*3*32*32); got != want {
		t.Errorf("Go memory limit %d, want %d (the budget less the slots)", got, want)
	}
	code = run([]string{"--standalone", "--dataset", root, "--ranks", "8", "--memory-budget", "1MiB", "--progress", "never"}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "the batch slots alone take") {
		t.Errorf("a budget below the slots: exit %d, want 2 and the reason:\n%s", code, errb.String())
	}
}

// TestPprofLoopbackOnly: the profiles have no token, so --pprof serves
// on loopback only.
func TestPprofLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "example.com:6060", "6060"} {
		var out, errb bytes.Buffer
		code := run([]string{"--standalone", "--dataset", t.TempDir(), "--pprof", addr}, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), "--pprof") {
			t.Errorf("--pprof %s: exit %d, want 2:\n%s", addr, code, errb.String())
		}
	}
}
