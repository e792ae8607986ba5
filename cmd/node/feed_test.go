package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/feed"
)

// statsFields are the --stats-json fields every mode writes.
var statsFields = []string{"dataset", "dataset_samples", "epochs", "ranks", "batch_size", "images", "pads", "batches",
	"seconds", "images_per_second", "first_batch_seconds", "cpu_seconds", "peak_rss_bytes", "failures", "bottleneck",
	"bottleneck_reason", "stages"}

func readStats(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	for _, f := range statsFields {
		if _, ok := s[f]; !ok {
			t.Errorf("stats JSON lacks %q", f)
		}
	}
	return s
}

// TestStandaloneFeedEnds: --sink feed exits 0 by itself once every epoch
// is delivered and the trainer has left, printing the summary and
// writing --stats-json like the other sinks.
func TestStandaloneFeedEnds(t *testing.T) {
	root, _ := makeDataset(t, 30)
	dir := t.TempDir()
	feedDir, statsPath := filepath.Join(dir, "feed"), filepath.Join(dir, "s.json")
	var out, errb bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run([]string{"--standalone", "--dataset", root, "--epochs", "2", "--batch-size", "8", "--size", "32",
			"--sink", "feed", "--feed-dir", feedDir, "--stats-json", statsPath, "--progress", "never"}, &out, &errb)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var c *feed.Client
	for c == nil {
		var err error
		if c, err = feed.DialContext(ctx, filepath.Join(feedDir, feed.SocketName(0)), feed.DialConfig{}); err != nil {
			c = nil
			select {
			case <-ctx.Done():
				t.Fatalf("no feed socket: %v\n%s", err, errb.String())
			case rc := <-code:
				t.Fatalf("node exited %d before serving:\n%s", rc, errb.String())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	images, err := trainer(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	waitExit(t, ctx, code, &errb)
	s := readStats(t, statsPath)
	if got := s["images"].(float64); got != float64(images) || images != 60 {
		t.Errorf("stats say %v images, the trainer got %d (want 60)", got, images)
	}
	if !strings.Contains(out.String(), "images/s") {
		t.Errorf("no summary:\n%s", out.String())
	}
	checkStartup(t, s, out.String())
}

// trainer reads c's batches until io.EOF, releasing each: a trainer
// that trains on nothing. It returns how many samples the batches held,
// and the error that ended the reading if it was not io.EOF.
func trainer(ctx context.Context, c *feed.Client) (int, error) {
	images := 0
	for {
		b, err := c.Next(ctx)
		if errors.Is(err, io.EOF) {
			return images, nil
		}
		if err != nil {
			return images, err
		}
		images += b.Len()
		b.Release()
	}
}

// waitExit waits for the node's exit code once its trainers left: it
// must be 0, and come before ctx ends.
func waitExit(t *testing.T, ctx context.Context, code <-chan int, errb *bytes.Buffer) {
	t.Helper()
	select {
	case rc := <-code:
		if rc != 0 {
			t.Fatalf("exit %d\n%s", rc, errb.String())
		}
	case <-ctx.Done():
		t.Fatal("the node did not exit after the trainers left")
	}
}

// checkStartup checks a run's start-up phases (--stats-json "startup",
// the summary's start-up line): each after the one before, the first
// batch the summary's.
func checkStartup(t *testing.T, s map[string]any, summary string) {
	t.Helper()
	su, ok := s["startup"].(map[string]any)
	if !ok {
		t.Fatalf("stats JSON lacks startup: %v", s["startup"])
	}
	num := func(k string) float64 {
		v, ok := su[k].(float64)
		if !ok {
			t.Fatalf("startup lacks %q: %v", k, su)
		}
		return v
	}
	if num("started_unix") <= 0 || num("load_cpu_seconds") < 0 {
		t.Errorf("startup: start %v, load CPU %v", su["started_unix"], su["load_cpu_seconds"])
	}
	opened, serving, first := num("opened_seconds"), num("serving_seconds"), num("first_batch_seconds")
	if !(0 < opened && opened <= serving && serving <= first) {
		t.Errorf("startup phases out of order: opened %v, serving %v, first batch %v", opened, serving, first)
	}
	if first != s["first_batch_seconds"].(float64) {
		t.Errorf("startup's first batch %v, the summary's %v", first, s["first_batch_seconds"])
	}
	if !strings.Contains(summary, "start-up") {
		t.Errorf("summary lacks the start-up line:\n%s", summary)
	}
}

// TestFeedOneActorSystem: --sink feed's ranks share one actor system
// (each holds protoactor's process registry, about 2.8 MB), where they
// had one each: 8 for --ranks 8.
func TestFeedOneActorSystem(t *testing.T) {
	const ranks = 8
	root, _ := makeDataset(t, 32)
	feedDir := filepath.Join(t.TempDir(), "feed")
	before := actors.SystemsMade()
	var out, errb bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run([]string{"--standalone", "--dataset", root, "--epochs", "1", "--batch-size", "2", "--size", "16",
			"--ranks", strconv.Itoa(ranks), "--sink", "feed", "--feed-dir", feedDir, "--progress", "never"}, &out, &errb)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	images := make(chan int, ranks)
	for r := 0; r < ranks; r++ {
		go func() {
			var c *feed.Client
			for c == nil {
				var err error
				if c, err = feed.DialContext(ctx, filepath.Join(feedDir, feed.SocketName(r)), feed.DialConfig{}); err != nil {
					c = nil
					select {
					case <-ctx.Done():
						t.Errorf("rank %d: no feed socket: %v", r, err)
						images <- -1
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			}
			defer c.Close()
			n, err := trainer(ctx, c)
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
				n = -1
			}
			images <- n
		}()
	}
	total := 0
	for r := 0; r < ranks; r++ {
		if n := <-images; n < 0 {
			t.Fatalf("a trainer failed:\n%s", errb.String())
		} else {
			total += n
		}
	}
	waitExit(t, ctx, code, &errb)
	if total != 32 {
		t.Errorf("the trainers got %d images, want 32", total)
	}
	if got := actors.SystemsMade() - before; got != 1 {
		t.Errorf("the node made %d actor systems for %d ranks, want 1", got, ranks)
	}
}
