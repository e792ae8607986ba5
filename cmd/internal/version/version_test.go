package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longshore/longshore/internal/buildversion"
)

func TestAsked(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"--version"}, true},
		{[]string{"-version"}, true},
		{nil, false},
		{[]string{"--version", "x"}, false},
		{[]string{"--dataset", "--version"}, false},
	} {
		if got := Asked(c.args); got != c.want {
			t.Errorf("Asked(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

func TestStringDevel(t *testing.T) {
	old := buildversion.Version
	defer func() { buildversion.Version = old }()
	buildversion.Version = ""
	if s := String("x"); !strings.HasPrefix(s, "x devel") {
		t.Errorf("String = %q, want x devel...", s)
	}
	buildversion.Version = "1.2.3"
	if s := String("x"); !strings.HasPrefix(s, "x 1.2.3 (go") {
		t.Errorf("String = %q, want x 1.2.3 (go...", s)
	}
}

// TestEveryBinary builds every command under cmd/ with the version set
// the way `make release` sets it and runs each with --version.
func TestEveryBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every binary")
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	const v = "9.8.7-test"
	build := exec.Command("go", "build", "-o", out+"/",
		"-ldflags", "-X github.com/longshore/longshore/internal/buildversion.Version="+v, "./cmd/...")
	build.Dir = root
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/...: %v\n%s", err, b)
	}
	n := 0
	for _, d := range dirs {
		if !d.IsDir() || d.Name() == "internal" {
			continue
		}
		n++
		name := Binary(d.Name())
		b, err := exec.Command(filepath.Join(out, d.Name()), "--version").CombinedOutput()
		if err != nil {
			t.Errorf("%s --version: %v\n%s", name, err, b)
			continue
		}
		if want := name + " " + v + " (go"; !strings.HasPrefix(string(b), want) {
			t.Errorf("%s --version printed %q, want it to start %q", name, b, want)
		}
	}
	if n < 5 {
		t.Fatalf("only %d commands under cmd/", n)
	}
}
