package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/storage/s3"
)

// TestStoreFlagDefaults: by default the node's S3 store hedges slow GETs
// (p95, within the 5% budget) and abandons a body that stops making
// progress for 2 s; --hedge-quantile 0 and --progress-timeout 0 turn
// them off, and a negative deadline is refused.
func TestStoreFlagDefaults(t *testing.T) {
	opts := func(args ...string) s3.Options {
		t.Helper()
		o, err := parseFlags(append([]string{"--standalone", "--dataset", "x"}, args...), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		var so s3.Options
		o.faults.s3Options(&so)
		return so
	}
	if so := opts(); so.HedgeQuantile != 0.95 || so.HedgeBudget != s3.DefaultHedgeBudget || so.ProgressTimeout != 2*time.Second {
		t.Errorf("defaults: hedge quantile %v budget %v, progress timeout %v; want 0.95, %v, 2s", so.HedgeQuantile, so.HedgeBudget, so.ProgressTimeout, s3.DefaultHedgeBudget)
	}
	if so := opts("--hedge-quantile", "0", "--progress-timeout", "0"); so.HedgeQuantile != 0 || so.ProgressTimeout != 0 {
		t.Errorf("turned off: hedge quantile %v, progress timeout %v", so.HedgeQuantile, so.ProgressTimeout)
	}
	if so := opts("--progress-timeout", "500ms"); so.ProgressTimeout != 500*time.Millisecond {
		t.Errorf("--progress-timeout 500ms: %v", so.ProgressTimeout)
	}
	_, err := parseFlags([]string{"--standalone", "--dataset", "x", "--progress-timeout", "-1s"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--progress-timeout") {
		t.Errorf("--progress-timeout -1s: %v; want it refused", err)
	}
}
