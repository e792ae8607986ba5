package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/delivery"
	"github.com/longshore/longshore/feed"
)

// startFeedServer builds examples/feed_server and serves the demo dataset
// (small crops, small batches: this is a smoke test) until the test ends.
func startFeedServer(t *testing.T, extra ...string) (socket string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "feed_server")
	if out, err := exec.Command("go", "build", "-o", bin, "../feed_server").CombinedOutput(); err != nil {
		t.Fatalf("build feed_server: %v\n%s", err, out)
	}
	ds := os.Getenv("LONGSHORE_TEST_DATASET")
	if ds == "" {
		out, err := exec.Command("../../scripts/dataset.sh", "512").Output()
		if err != nil {
			t.Fatalf("scripts/dataset.sh 512: %v", err)
		}
		ds = strings.TrimSpace(string(out))
	}
	sock := filepath.Join(dir, "s")
	ready := filepath.Join(dir, "ready")
	args := append([]string{"--dataset", ds, "--dir", sock, "--ready", ready, "--batch-size", "8", "--size", "64",
		"--decoders", "1", "--epochs", "1", "--seed", "7"}, extra...)
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("feed_server did not start:\n%s", stderr.String())
		}
	}
	return filepath.Join(sock, feed.SocketName(0))
}

// TestTrainCommitResume trains a few steps with checkpoints, then resumes
// in a new connection (as a restarted trainer would) and checks the feed
// continues exactly after the checkpoint's batch.
func TestTrainCommitResume(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds and runs the feed server")
	}
	sock := startFeedServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log strings.Builder
	o := options{Socket: sock, Ckpt: t.TempDir(), Steps: 5, CommitEvery: 2, Classes: 10, LR: 0.5}
	r1, err := run(ctx, o, 0, &log)
	if err != nil {
		t.Fatalf("first run: %v\n%s", err, log.String())
	}
	// steps 1..5 trained on batches 0..4; checkpoints at steps 2, 4 and 5 (the end)
	if r1.Steps != 5 || r1.Checkpointed != 3 || r1.LastCommit != (feed.Cursor{Epoch: 0, Step: 4}) {
		t.Fatalf("first run: %+v\n%s", r1, log.String())
	}
	// a trainer that died after step 4's checkpoint: roll the directory back to it
	o.Resume, o.Steps = true, 7
	if err := writeJSON(filepath.Join(o.Ckpt, "model.json"), checkpoint{Step: 4, Model: newModel(10, 3)}); err != nil {
		t.Fatal(err)
	}
	tok4, err := delivery.LocalCommitter{Job: "standalone", BatchSize: 8}.Commit(ctx, 0, 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(loaderPath(o.Ckpt, 0, 4), loaderState{Token: tok4, Epoch: 0, Step: 3}); err != nil {
		t.Fatal(err)
	}
	r2, err := run(ctx, o, 0, &log)
	if err != nil {
		t.Fatalf("resumed run: %v\n%s", err, log.String())
	}
	if r2.ResumedStep != 4 || r2.First == nil || *r2.First != (feed.Cursor{Epoch: 0, Step: 4}) || r2.Steps != 7 {
		t.Fatalf("resumed run: %+v (first %v), want resume at step 4 with batch 4 first\n%s", r2, r2.First, log.String())
	}
	t.Logf("%s", log.String())
}
