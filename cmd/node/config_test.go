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

// TestPrintConfigMixtureFileRound: with only the mixture file giving
// round:, --print-config shows that round as mixture-round (the
// effective one, not the flag's default 0), whether --mixture comes from
// the command line, the environment or --config; and the printed
// configuration loads back to the same configuration, every flag of it.
func TestPrintConfigMixtureFileRound(t *testing.T) {
	dir := t.TempDir()
	mix := filepath.Join(dir, "mix.yaml")
	if err := os.WriteFile(mix, []byte("round: 12\nsources:\n  - name: a\n    dataset: "+dir+"/a\n    weight: 1\n  - name: b\n    dataset: "+dir+"/b\n    weight: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "conf.yaml")
	if err := os.WriteFile(conf, []byte("standalone: true\nmixture: "+mix+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  bool
		args []string
	}{
		{"flag", false, []string{"--standalone", "--mixture", mix, "--autotune", "--cpu-budget", "3.5"}},
		{"config", false, []string{"--config", conf}},
		{"env", true, []string{"--standalone"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env {
				t.Setenv("LONGSHORE_MIXTURE", mix)
			}
			out := configtest.Printed(t, run, tc.args...)
			if !strings.Contains(out, "\nmixture-round: 12\n") {
				t.Errorf("--print-config does not show the file's round 12:\n%s", configtest.Lines(out, "mixture"))
			}
			if tc.env {
				os.Unsetenv("LONGSHORE_MIXTURE") // the file alone
			}
			out2 := configtest.LoadsBack(t, run, dir, tc.name, out)
			// --cpu-budget is printed as given (it printed "" whatever it
			// was, which did not load back).
			if tc.name == "flag" && !strings.Contains(out2, "\ncpu-budget: 3.5\n") {
				t.Errorf("--cpu-budget 3.5 printed as:\n%s", configtest.Lines(out2, "cpu-budget"))
			}
		})
	}
}
