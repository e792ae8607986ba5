package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// startWatch is stderr for a coordinator under test: it closes started
// once the coordinator logs that it is coordinating (it accepted its
// start), so a test waits on the event, not on a clock.
type startWatch struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	started chan struct{}
	once    sync.Once
}

func (w *startWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), "msg=coordinating") {
		w.once.Do(func() { close(w.started) })
	}
	return len(p), nil
}

func (w *startWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// startCoordinator runs a coordinator with args until it is coordinating
// (then stops it: nil) or fails to start (its error).
func startCoordinator(t *testing.T, args ...string) (error, string) {
	t.Helper()
	w := &startWatch{started: make(chan struct{})}
	o, err := parseFlags(args, w)
	if err != nil {
		t.Fatalf("flags %v: %v", args, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- coordinate(ctx, o, w) }()
	select {
	case <-w.started:
		cancel()
		<-done
		return nil, w.String()
	case err := <-done:
		if err == nil {
			t.Fatalf("coordinator returned nil before coordinating:\n%s", w)
		}
		return err, w.String()
	case <-time.After(time.Minute): // backstop only
		t.Fatalf("coordinator neither started nor failed:\n%s", w)
	}
	return nil, ""
}

// writeManifest writes a CSV manifest of n samples in dir, in order, or
// reversed.
func writeManifest(t *testing.T, dir string, n int, reversed bool) {
	t.Helper()
	var b strings.Builder
	for i := range n {
		k := i
		if reversed {
			k = n - 1 - i
		}
		fmt.Fprintf(&b, "img/%05d.jpg,%d\n", k, k%3)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.csv"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestResumeIdentity: a coordinator restarted on its --checkpoint with a
// dataset or order parameters other than the journal's refuses to start,
// naming what differs; --fresh starts over, --force-resume accepts a
// difference that the order survives.
func TestResumeIdentity(t *testing.T) {
	base := func(data, ckpt string, extra ...string) []string {
		return append([]string{"--dataset", data, "--listen", "127.0.0.1:0", "--gossip", "127.0.0.1:0",
			"--checkpoint", ckpt, "--epochs", "3", "--seed", "7", "--batch-size", "8", "--log-format", "text"}, extra...)
	}
	for _, c := range []struct {
		name    string
		reorder bool
		extra   []string
		want    []string // in the error
	}{
		{"reordered manifest", true, nil, []string{"dataset digest", "--fresh", "--force-resume"}},
		{"seed", false, []string{"--seed", "8"}, []string{"seed 7", "8"}},
		{"block", false, []string{"--block", "4"}, []string{"block 1", "4"}},
		{"window", false, []string{"--block", "1", "--mix-window", "3"}, nil}, // window with block 1 is the same order
		{"batch size", false, []string{"--batch-size", "16"}, []string{"batch size 8", "16"}},
		{"epochs", false, []string{"--epochs", "5"}, []string{"epochs 3", "5"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			data, ckpt := t.TempDir(), t.TempDir()
			writeManifest(t, data, 64, false)
			if err, log := startCoordinator(t, base(data, ckpt)...); err != nil {
				t.Fatalf("first start: %v\n%s", err, log)
			}
			writeManifest(t, data, 64, c.reorder)
			// later flags win
			err, log := startCoordinator(t, base(data, ckpt, c.extra...)...)
			if c.want == nil {
				if err != nil {
					t.Fatalf("same order refused: %v\n%s", err, log)
				}
				return
			}
			if err == nil {
				t.Fatalf("restart with another %s continued the journal's job:\n%s", c.name, log)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if c.name == "reordered manifest" || c.name == "batch size" || c.name == "epochs" {
				if err, log := startCoordinator(t, base(data, ckpt, append(c.extra, "--force-resume")...)...); err != nil {
					t.Errorf("--force-resume: %v\n%s", err, log)
				} else if !strings.Contains(log, "force") {
					t.Errorf("--force-resume continued without a warning:\n%s", log)
				}
			}
			if err, log := startCoordinator(t, base(data, ckpt, append(c.extra, "--fresh")...)...); err != nil {
				t.Errorf("--fresh: %v\n%s", err, log)
			}
		})
	}
}

// TestCorruptNewestGeneration: a coordinator whose newest journal
// generation is corrupt refuses to start, naming the object and the
// cause; --journal-fallback continues from the previous generation and
// says so.
func TestCorruptNewestGeneration(t *testing.T) {
	data, ckpt := t.TempDir(), t.TempDir()
	writeManifest(t, data, 64, false)
	args := []string{"--dataset", data, "--listen", "127.0.0.1:0", "--gossip", "127.0.0.1:0",
		"--checkpoint", ckpt, "--epochs", "2", "--batch-size", "8", "--log-format", "text"}
	for range 2 { // generations 1 and 2
		if err, log := startCoordinator(t, args...); err != nil {
			t.Fatalf("start: %v\n%s", err, log)
		}
	}
	newest := filepath.Join(ckpt, "gen", fmt.Sprintf("%020d", 2))
	b, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(newest, b[:len(b)/2], 0o644); err != nil { // torn
		t.Fatal(err)
	}
	err, log := startCoordinator(t, args...)
	if err == nil {
		t.Fatalf("started past a corrupt newest generation:\n%s", log)
	}
	for _, w := range []string{"gen/00000000000000000002", "checksum", "--journal-fallback"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	err, log = startCoordinator(t, append(args, "--journal-fallback")...)
	if err != nil {
		t.Fatalf("--journal-fallback: %v\n%s", err, log)
	}
	if !strings.Contains(log, "--journal-fallback") || !strings.Contains(log, "to=1") {
		t.Errorf("the fallback is not in the log:\n%s", log)
	}
}
