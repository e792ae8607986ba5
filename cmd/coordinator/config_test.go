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
// flag, every value valid), the command line overrides it, --print-config
// prints the result with the files' paths and not their contents; a
// file's problems are all reported with their keys.
func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"gossip.key", "tls.crt", "tls.key", "ca.crt", "metrics.token", "http.token"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("s3cr3t-"+f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	example, err := os.ReadFile("../../docs/longshore-coordinator.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "coordinator.yaml")
	example = bytes.ReplaceAll(example, []byte("/etc/longshore/"), []byte(dir+"/"))
	example = bytes.ReplaceAll(example, []byte("/var/log/longshore/"), []byte(dir+"/"))
	if err := os.WriteFile(path, example, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := runTo([]string{"--config", path, "--epochs", "2", "--print-config"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"\nepochs: 2\n", "\ndataset: s3://imagenet/train\n", "\nmin-ranks: 64\n", "\nlog-format: json\n",
		"\nreport-every: 1m0s\n", "\nmetrics-linger: 30s\n", "\ncheckpoint: s3://longshore-jobs/jobs/imagenet-r50\n",
		"\nhttp-token-file: " + dir, "\ntls-peer-name: gpu-*.internal\n", "\njob-store-rps: 3000\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--print-config lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "s3cr3t") {
		t.Errorf("--print-config printed a secret:\n%s", out.String())
	}

	// The environment overrides the file; the command line overrides both.
	t.Setenv("LONGSHORE_BATCH_SIZE", "64")
	t.Setenv("LONGSHORE_EPOCHS", "9")
	o, err := parseFlags([]string{"--config", path, "--epochs", "3"}, &errb)
	if err != nil {
		t.Fatal(err)
	}
	if o.batchSize != 64 || o.cluster.Epochs != 3 || o.cluster.MinRanks != 64 || o.checkpoint != "s3://longshore-jobs/jobs/imagenet-r50" {
		t.Errorf("batch %d, epochs %d, min-ranks %d, checkpoint %q: want 64 (env), 3 (flag), 64 and the file's checkpoint",
			o.batchSize, o.cluster.Epochs, o.cluster.MinRanks, o.checkpoint)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("dataset: "+dir+"\nlisten: 127.0.0.1:1\ngossip: 127.0.0.1:2\nepochs: zero\nbatchsize: 2\nbalance: fair\nlog-format: xml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := runTo([]string{"--config", bad}, &out, &errb); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	for _, want := range []string{"epochs:", "batchsize: no such flag", "--balance \"fair\"", "--log-format \"xml\""} {
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
	if err := os.WriteFile(conf, []byte("listen: 127.0.0.1:1\ngossip: 127.0.0.1:2\nmixture: "+mix+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  bool
		args []string
	}{
		{"flag", false, []string{"--listen", "127.0.0.1:1", "--gossip", "127.0.0.1:2", "--mixture", mix}},
		{"config", false, []string{"--config", conf}},
		{"env", true, []string{"--listen", "127.0.0.1:1", "--gossip", "127.0.0.1:2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env {
				t.Setenv("LONGSHORE_MIXTURE", mix)
			}
			out := configtest.Printed(t, runTo, tc.args...)
			if !strings.Contains(out, "\nmixture-round: 12\n") {
				t.Errorf("--print-config does not show the file's round 12:\n%s", configtest.Lines(out, "mixture"))
			}
			if tc.env {
				os.Unsetenv("LONGSHORE_MIXTURE") // the file alone
			}
			configtest.LoadsBack(t, runTo, dir, tc.name, out)
		})
	}
}
