package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestPythonClient runs the Python client's tests (clients/python/tests)
// against this server over the real decoder and the demo dataset: zero
// copy, checksums against the Go pipeline, kill -9 and resume, torch
// views. It needs /usr/bin/python3 with numpy, pytest and torch (Debian:
// python3-numpy python3-pytest python3-torch); it fails, not skips, when
// they are missing.
func TestPythonClient(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	bin := filepath.Join(t.TempDir(), "feed_server")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// The tests wait on events; their bound on one wait only ends a
	// hung run (clients/python/tests/limits.py). Within go test's own
	// -timeout it is a quarter of what is left, and pytest is stopped
	// before go test would be, so a hang is reported with its output.
	ctx := context.Background()
	env := append(os.Environ(), "LONGSHORE_FEED_SERVER="+bin)
	if deadline, ok := t.Deadline(); ok {
		left := time.Until(deadline)
		if os.Getenv("LONGSHORE_TEST_HANG_S") == "" {
			env = append(env, fmt.Sprintf("LONGSHORE_TEST_HANG_S=%.0f", left.Seconds()/4))
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-left/20))
		defer cancel()
	}
	py := "/usr/bin/python3"
	cmd := exec.CommandContext(ctx, py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "clients/python/tests")
	cmd.Dir = "../.."
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("pytest: %v", err)
	}
}
