package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestMetricsFlags: --metrics off loopback needs a token file; its kin
// need --metrics.
func TestMetricsFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--metrics", "0.0.0.0:9464"}, "not a loopback address"},
		{[]string{"--metrics", "9464"}, "want HOST:PORT"},
		{[]string{"--metrics-linger", "5s"}, "need --metrics"},
		{[]string{"--report-every", "-1s"}, "need 0 or more"},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"--standalone", "--dataset", t.TempDir()}, tc.args...)
		if code := run(args, &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}
