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

// TestPrintConfigMixtureFileRound: a mixture file's round: is printed as
// mixture-round however --mixture is given, and the printed
// configuration loads back to the same (configtest.MixtureFileRound).
func TestPrintConfigMixtureFileRound(t *testing.T) {
	configtest.MixtureFileRound(t, runTo, []string{"--listen", "127.0.0.1:1", "--gossip", "127.0.0.1:2"}, nil, nil)
}
