package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/feed"

	"github.com/prometheus/client_golang/prometheus"
)

// TestAutotuneRun: a standalone run with --autotune says so at the start
// and at the end (its setting, windows and changes), delivers every
// sample, and its metrics are exported under their own names.
func TestAutotuneRun(t *testing.T) {
	root, _ := makeDataset(t, 40)
	var out, errb bytes.Buffer
	code := run([]string{"--standalone", "--dataset", root, "--epochs", "2", "--batch-size", "8", "--ranks", "2", "--decoders", "1",
		"--size", "32", "--progress", "never", "--autotune", "--cpu-budget", "2", "--autotune-window", "10ms", "--log-format", "text"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"msg=\"autotune on\"", "cpu_budget_cores=2", "msg=\"autotune end\""} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	if !strings.Contains(out.String(), "longshore: 80 images") {
		t.Errorf("not every sample delivered:\n%s", out.String())
	}

	o, err := parseFlags([]string{"--standalone", "--dataset", root, "--autotune"}, &errb)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	o.autotune.register(reg)
	if fams, err := reg.Gather(); err != nil || len(fams) != 0 {
		t.Errorf("before the run: %d metric families (%v), want none", len(fams), err)
	}
}

// TestAutotuneFlags: bad budgets are refused at start; --autotune is
// taken in every mode.
func TestAutotuneFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--standalone", "--dataset", "d", "--autotune", "--sink", "feed"},
		{"--join", "a:1", "--gossip", "b:1", "--listen", "c:1", "--dataset", "d", "--autotune", "--insecure"},
		{"--join", "a:1", "--gossip", "b:1", "--listen", "c:1", "--dataset", "d", "--autotune", "--insecure", "--sink", "feed"},
	} {
		var errb bytes.Buffer
		if _, err := parseFlags(args, &errb); err != nil {
			t.Errorf("%v: %v, want it taken", args, err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--standalone", "--dataset", "d", "--autotune", "--cpu-budget", "0"}, "cpu-budget"},
		{[]string{"--standalone", "--dataset", "d", "--autotune", "--autotune-window", "0s"}, "--autotune-window"},
	} {
		var errb bytes.Buffer
		if _, err := parseFlags(tc.args, &errb); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// tunerWindows is how many windows the "autotune end" line of a run's
// log says the tuner measured (-1: no such line).
func tunerWindows(log string) int {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `msg="autotune end"`) {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "windows="); ok {
				n, err := strconv.Atoi(v)
				if err == nil {
					return n
				}
			}
		}
	}
	return -1
}

// TestAutotuneFeed: with --sink feed the tuner runs over the ranks'
// pipelines, which open when a trainer connects: it starts, measures
// windows while the trainer reads, and says so at the end; the trainer
// gets every sample.
func TestAutotuneFeed(t *testing.T) {
	root, _ := makeDataset(t, 120)
	feedDir := filepath.Join(t.TempDir(), "feed")
	var out, errb bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run([]string{"--standalone", "--dataset", root, "--epochs", "3", "--batch-size", "4", "--size", "32", "--decoders", "1",
			"--sink", "feed", "--feed-dir", feedDir, "--progress", "never", "--log-format", "text",
			"--autotune", "--cpu-budget", "2", "--autotune-window", "5ms"}, &out, &errb)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := feed.DialContext(ctx, filepath.Join(feedDir, feed.SocketName(0)), feed.DialConfig{})
	if err != nil {
		<-code // the node's output is read once it has exited
		t.Fatalf("dial: %v\n%s", err, errb.String())
	}
	images, err := trainer(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	waitExit(t, ctx, code, &errb)
	if images != 360 {
		t.Errorf("the trainer got %d samples, want 360", images)
	}
	n := tunerWindows(errb.String())
	t.Logf("the tuner measured %d windows", n)
	if n < 1 || !strings.Contains(errb.String(), `msg="autotune on"`) {
		t.Fatalf("the tuner measured %d windows (want some):\n%s", n, errb.String())
	}
}

// TestAutotuneCluster: in cluster mode the tuner runs over the sessions'
// pipelines, which start once the coordinator's welcome brings the job:
// it measures windows while the ranks deliver, and the node serves the
// whole job.
func TestAutotuneCluster(t *testing.T) {
	root, _ := makeDataset(t, 40)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ds := discoverDir(t, ctx, root)
	cfg := cluster.DefaultConfig()
	cfg.Samples, cfg.Epochs, cfg.Seed = int64(len(ds.Samples)), 3, 4
	c := startCoordinator(t, ctx, cfg, 4, dataset.ManifestDigest(ds))
	logPath := filepath.Join(t.TempDir(), "n.log")
	out, logs, err := runNode(ctx, c.nodeArgs(t, "--id", "tuned", "--dataset", root, "--sink", "log:"+logPath, "--size", "32", "--decoders", "1",
		"--step-time", "10ms", "--autotune", "--cpu-budget", "2", "--autotune-window", "5ms"))
	if err != nil {
		t.Fatalf("node: %v\n%s%s", err, out, logs)
	}
	c.waitDone(t, ctx)
	n := tunerWindows(logs)
	t.Logf("the tuner measured %d windows", n)
	if n < 1 || !strings.Contains(logs, `msg="autotune on"`) {
		t.Fatalf("the tuner measured %d windows (want some):\n%s", n, logs)
	}
}
