package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPytorchTrainExample runs examples/pytorch_train.py briefly against
// this server: ResNet-18 on CPU for 3 steps with a checkpoint at step 2
// and at the end, then --resume to step 4, which must start from the batch
// after step 3's commit. Small crops and batches keep it to seconds. It
// needs /usr/bin/python3 with torch and torchvision (Debian:
// python3-torch python3-torchvision); it fails, not skips, when they are missing.
func TestPytorchTrainExample(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "feed_server")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ds := os.Getenv("LONGSHORE_TEST_DATASET")
	if ds == "" {
		out, err := exec.Command("../../scripts/dataset.sh", "512").Output()
		if err != nil {
			t.Fatalf("scripts/dataset.sh 512: %v", err)
		}
		ds = strings.TrimSpace(string(out))
	}
	sockDir, ready := filepath.Join(dir, "s"), filepath.Join(dir, "ready")
	srv := exec.Command(bin, "--dataset", ds, "--dir", sockDir, "--ready", ready, "--batch-size", "8", "--size", "64",
		"--decoders", "1", "--epochs", "1", "--seed", "5")
	var srvErr strings.Builder
	srv.Stderr = &srvErr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Signal(os.Interrupt); srv.Wait() }()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("feed_server did not start:\n%s", srvErr.String())
		}
	}
	ckpt := filepath.Join(dir, "ckpt")
	train := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("/usr/bin/python3", append([]string{"examples/pytorch_train.py", "--ckpt", ckpt,
			"--num-classes", "10", "--commit-every", "2"}, args...)...)
		cmd.Dir = "../.."
		cmd.Env = append(os.Environ(), "LONGSHORE_FEED_DIR="+sockDir, "LOCAL_RANK=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("pytorch_train.py %v: %v\n%s\nfeed_server:\n%s", args, err, out, srvErr.String())
		}
		return string(out)
	}
	out := train("--steps", "3")
	for _, want := range []string{"step 3 (epoch 0 batch 2)", "checkpoint at step 2", "checkpoint at step 3"} {
		if !strings.Contains(out, want) {
			t.Fatalf("first run: no %q in\n%s", want, out)
		}
	}
	out2 := train("--steps", "4", "--resume")
	for _, want := range []string{"resumed at step 3", "step 4 (epoch 0 batch 3)", "checkpoint at step 4"} {
		if !strings.Contains(out2, want) {
			t.Fatalf("resumed run: no %q in\n%s", want, out2)
		}
	}
	t.Logf("%s\n%s", out, out2)
}
