package config

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/cmd/internal/config/configtest"
)

func newFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Int("batch-size", 32, "samples per batch")
	fs.Int("epochs", 1, "epochs")
	fs.Bool("drop-last", false, "drop the last batch")
	fs.Duration("linger", 30*time.Second, "how long to wait")
	fs.String("dataset", "", "the dataset")
	fs.String("join", "", "comma-separated addresses")
	fs.String("s3-endpoint", "", "S3 endpoint URL")
	fs.String("api-token", "", "a token given inline")
	fs.String("metrics-token-file", "", "a file holding a token")
	fs.String("max-failures", "1%", "failure budget")
	Register(fs)
	return fs
}

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestPrecedence: the file sets what neither the environment nor the
// command line does; the environment beats the file; the command line
// beats both.
func TestPrecedence(t *testing.T) {
	p := write(t, "batch-size: 64\nepochs: 3\ndrop-last: true\nlinger: 5s\njoin: [a:1, b:2]\nmax-failures: 2%\n")
	fs := newFlags()
	args := []string{"--config", p, "--epochs", "7"}
	if err := Load(fs, args, env(map[string]string{"LONGSHORE_BATCH_SIZE": "16"})); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"batch-size": "16", "epochs": "7", "drop-last": "true", "linger": "5s", "join": "a:1,b:2", "max-failures": "2%"} {
		if got := fs.Lookup(name).Value.String(); got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
	if Path([]string{"--config=x.yaml"}, env(nil)) != "x.yaml" || Path(nil, env(map[string]string{"LONGSHORE_CONFIG": "e.yaml"})) != "e.yaml" {
		t.Error("Path")
	}
}

// TestEveryProblemAtOnce: unknown keys (with a suggestion) and values a
// flag refuses are all reported, each with its line and key.
func TestEveryProblemAtOnce(t *testing.T) {
	p := write(t, "batch-sise: 8\nepochs: many\ndrop-last: maybe\nlinger: {a: 1}\nprint-config: true\n")
	err := Load(newFlags(), []string{"--config", p}, env(nil))
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("Load: %v", err)
	}
	for _, want := range []string{":1: batch-sise: no such flag (--batch-sise); did you mean batch-size?", ":2: epochs:", ":3: drop-last:", ":4: linger: a map", ":5: print-config: not a configuration key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q:\n%v", want, err)
		}
	}
}

// TestPrintRoundTrip: --print-config's output is a config file that
// gives the same configuration, secrets redacted.
func TestPrintRoundTrip(t *testing.T) {
	fs := newFlags()
	args := []string{"--dataset", "s3://b/p", "--linger", "1m", "--s3-endpoint", "http://user:pw@minio:9000", "--api-token", "s3cret",
		"--metrics-token-file", "/etc/tok", "--join", "a:1,b:2", "--max-failures", "100"}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Print(&out, fs); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if strings.Contains(s, "s3cret") || strings.Contains(s, ":pw@") || !strings.Contains(s, "api-token: "+Redacted) || !strings.Contains(s, "/etc/tok") {
		t.Errorf("secrets not redacted, or a file name redacted:\n%s", s)
	}
	if !strings.Contains(s, "# samples per batch\nbatch-size: 32") {
		t.Errorf("no usage comment:\n%s", s)
	}
	fs2 := newFlags()
	if err := Load(fs2, []string{"--config", write(t, s)}, env(nil)); err != nil {
		t.Fatalf("loading the printed config: %v\n%s", err, s)
	}
	fs.VisitAll(func(f *flag.Flag) {
		got := fs2.Lookup(f.Name).Value.String()
		if Secret(f.Name) || f.Name == "s3-endpoint" {
			return
		}
		if got != f.Value.String() {
			t.Errorf("%s: %q after the round trip, was %q", f.Name, got, f.Value.String())
		}
	})
}

// TestPrintRoundTripValues: a value that YAML would read as something
// else written plain (null, ~: no value at all; an alias, a comment, a
// list, a block) loads back as the string it was (`--sink null` printed
// as `sink: null` loaded back as --sink "").
func TestPrintRoundTripValues(t *testing.T) {
	for _, v := range []string{"null", "Null", "NULL", "~", "*", "*x", "&a", "#c", "a #c", "[a]", "{b: 1}", "- x", ": y", "'q", `"q`,
		"%p", "@a", "`b", "|", ">", "yes", "no", "on", "off", "true", "0x10", "1e3", ".inf", "a: b", " lead", "trail ", "!tag", "-", "?"} {
		fs := newFlags()
		if err := fs.Parse([]string{"--dataset", v}); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := Print(&out, fs); err != nil {
			t.Fatal(err)
		}
		fs2 := newFlags()
		if err := Load(fs2, []string{"--config", write(t, out.String())}, env(nil)); err != nil {
			t.Errorf("--dataset %q: loading the printed config: %v\n%s", v, err, configtest.Lines(out.String(), "dataset:"))
			continue
		}
		if got := fs2.Lookup("dataset").Value.String(); got != v {
			t.Errorf("--dataset %q printed as %s loads back as %q", v, strings.TrimSpace(configtest.Lines(out.String(), "dataset:")), got)
		}
	}
}
