// Package configtest checks a binary's --print-config through its run
// function (its main without the exit): that what it prints is a config
// file that loads back, with --config, to the same configuration.
package configtest

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Run is a binary's main without the exit: args in, the exit code out.
type Run func(args []string, stdout, stderr io.Writer) int

// Printed runs args with --print-config and returns what it printed; an
// exit other than 0 fails t.
func Printed(t testing.TB, run Run, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(append(args, "--print-config"), &out, &errb); code != 0 {
		t.Fatalf("%v --print-config: exit %d: %s", args, code, errb.String())
	}
	return out.String()
}

// LoadsBack writes printed to a file in dir named for name, prints the
// configuration it loads (--config), and fails t unless that is printed
// the same, naming the lines that differ.
func LoadsBack(t testing.TB, run Run, dir, name, printed string) {
	t.Helper()
	path := filepath.Join(dir, name+".printed.yaml")
	if err := os.WriteFile(path, []byte(printed), 0o644); err != nil {
		t.Fatal(err)
	}
	again := Printed(t, run, "--config", path)
	if again != printed {
		t.Errorf("%s: the printed configuration loads back to another:\n%s", name, diff(printed, again))
	}
}

// Lines is s's lines that contain sub, for a failure's message.
func Lines(s, sub string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// diff names the lines of a and b that the other lacks.
func diff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ina, inb := in(a), in(b)
	var out strings.Builder
	for _, l := range strings.Split(a, "\n") {
		if !inb[l] {
			out.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ina[l] {
			out.WriteString("+ " + l + "\n")
		}
	}
	return out.String()
}

// MixtureFileRound checks a binary that takes --mixture: with only the
// mixture file giving round:, --print-config shows that round as
// mixture-round (the effective one, not the flag's default 0), whether
// --mixture comes from the command line, the environment
// (LONGSHORE_MIXTURE) or --config, and the printed configuration loads
// back to the same (LoadsBack). base is the other flags the binary
// needs ("--name value" or a bool's "--name"), given in each case's own
// way; extra goes with the command line's case only; check, if not
// nil, is called with each case's print.
func MixtureFileRound(t *testing.T, run Run, base, extra []string, check func(t *testing.T, name, printed string)) {
	dir := t.TempDir()
	mix := filepath.Join(dir, "mix.yaml")
	if err := os.WriteFile(mix, []byte("round: 12\nsources:\n  - name: a\n    dataset: "+dir+"/a\n    weight: 1\n  - name: b\n    dataset: "+dir+"/b\n    weight: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var yaml strings.Builder
	for i := 0; i < len(base); i++ {
		name, value := strings.TrimPrefix(base[i], "--"), "true"
		if i+1 < len(base) && !strings.HasPrefix(base[i+1], "--") {
			value = base[i+1]
			i++
		}
		yaml.WriteString(name + ": " + value + "\n")
	}
	conf := filepath.Join(dir, "conf.yaml")
	if err := os.WriteFile(conf, []byte(yaml.String()+"mixture: "+mix+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  bool
		args []string
	}{
		{"flag", false, append(append(append([]string(nil), base...), "--mixture", mix), extra...)},
		{"config", false, []string{"--config", conf}},
		{"env", true, base},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env {
				t.Setenv("LONGSHORE_MIXTURE", mix)
			}
			out := Printed(t, run, tc.args...)
			if !strings.Contains(out, "\nmixture-round: 12\n") {
				t.Errorf("--print-config does not show the file's round 12:\n%s", Lines(out, "mixture"))
			}
			if tc.env {
				os.Unsetenv("LONGSHORE_MIXTURE") // the printed file alone (t.Setenv restores it)
			}
			LoadsBack(t, run, dir, tc.name, out)
			if check != nil {
				check(t, tc.name, out)
			}
		})
	}
}
