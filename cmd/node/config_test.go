package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longshore/longshore/cmd/internal/config/configtest"
)

// TestConfigFile: the example config in docs/ loads (every key is a
// flag, every value valid), the command line overrides it, and
// --print-config prints the result; a file's problems are all reported
// with their keys.
func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"gossip.key", "tls.crt", "tls.key", "ca.crt", "metrics.token"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	example, err := os.ReadFile("../../docs/longshore-node.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(path, bytes.ReplaceAll(example, []byte("/etc/longshore/"), []byte(dir+"/")), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"--config", path, "--ranks", "2", "--print-config"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"\nranks: 2\n", "\ndataset: s3://imagenet/train\n", "\nlog-format: json\n", "\nreport-every: 1m0s\n", "\nmetrics-token-file: " + dir} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--print-config lacks %q:\n%s", want, out.String())
		}
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("standalone: true\ndataset: "+dir+"\nepochs: zero\nrank: 2\nlog-format: xml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"--config", bad}, &out, &errb); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	for _, want := range []string{"epochs:", "rank: no such flag", "did you mean ranks?", "--log-format \"xml\""} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
}

// TestPrintConfigMixtureFileRound: a mixture file's round: is printed as
// mixture-round however --mixture is given, and the printed
// configuration loads back to the same (configtest.MixtureFileRound);
// --cpu-budget is printed as given (it printed "" whatever it was, which
// did not load back).
func TestPrintConfigMixtureFileRound(t *testing.T) {
	configtest.MixtureFileRound(t, run, []string{"--standalone"}, []string{"--autotune", "--cpu-budget", "3.5"}, func(t *testing.T, name, printed string) {
		if name == "flag" && !strings.Contains(printed, "\ncpu-budget: 3.5\n") {
			t.Errorf("--cpu-budget 3.5 printed as:\n%s", configtest.Lines(printed, "cpu-budget"))
		}
	})
}
