package main

import (
	"bytes"
	"math"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/longshore/longshore/actors"
)

// TestPlanMemory: --memory-budget's shares for 8 ranks of batch 32 at
// 224x224 (4.8 MB a slot).
func TestPlanMemory(t *testing.T) {
	c := actors.DefaultConfig()
	const slot = 32 * 3 * 224 * 224
	for _, tc := range []struct {
		budget     int64
		slotsSet   bool
		env        string
		slots      int
		fetchBytes int64
		goLimit    int64
		err        string
	}{
		{budget: 1 << 30, slots: 4, fetchBytes: (1 << 28) / 8, goLimit: 1<<30 - 8*4*slot},
		{budget: 256 << 20, slots: 3, fetchBytes: (1 << 26) / 8, goLimit: 256<<20 - 8*3*slot},
		{budget: 256 << 20, slotsSet: true, slots: 4, fetchBytes: (1 << 26) / 8, goLimit: 256<<20 - 8*4*slot},
		{budget: 256 << 20, env: "300MiB", slots: 3, fetchBytes: (1 << 26) / 8},
		{budget: 64 << 20, err: "the batch slots alone take"},
	} {
		p, err := planMemory(tc.budget, c, 8, tc.slotsSet, tc.env)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("budget %d: error %v, want %q", tc.budget, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("budget %d: %v", tc.budget, err)
			continue
		}
		if want := (memoryPlan{slots: tc.slots, fetchBytes: tc.fetchBytes, goLimit: tc.goLimit}); p != want {
			t.Errorf("budget %d slotsSet %v env %q: %+v, want %+v", tc.budget, tc.slotsSet, tc.env, p, want)
		}
	}
}

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
