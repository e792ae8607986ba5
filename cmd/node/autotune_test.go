package main

import (
	"bytes"
	"strings"
	"testing"

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

// TestAutotuneFlags: --autotune where it is not wired, and bad budgets,
// are refused at start.
func TestAutotuneFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--standalone", "--dataset", "d", "--autotune", "--sink", "feed"}, "--autotune: standalone runs"},
		{[]string{"--join", "a:1", "--gossip", "b:1", "--listen", "c:1", "--dataset", "d", "--autotune", "--insecure"}, "--autotune: standalone runs"},
		{[]string{"--standalone", "--dataset", "d", "--autotune", "--cpu-budget", "0"}, "cpu-budget"},
		{[]string{"--standalone", "--dataset", "d", "--autotune", "--autotune-window", "0s"}, "--autotune-window"},
	} {
		var errb bytes.Buffer
		if _, err := parseFlags(tc.args, &errb); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
