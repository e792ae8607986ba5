package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
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
	py := "/usr/bin/python3"
	cmd := exec.Command(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "clients/python/tests")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "LONGSHORE_FEED_SERVER="+bin)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("pytest: %v", err)
	}
}
