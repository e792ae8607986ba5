package buildversion

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// exitEnv makes the test binary run ExitIfAsked("") instead of its tests.
const exitEnv = "BUILDVERSION_TEST_EXIT_IF_ASKED"

func TestMain(m *testing.M) {
	if os.Getenv(exitEnv) == "1" {
		ExitIfAsked("")
		os.Stdout.WriteString("not asked\n")
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// TestExitIfAsked: before main knows its name (gpu/internal/cuinit), a
// lone --version prints the executable's name and the version and exits
// 0; anything else returns.
func TestExitIfAsked(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
		rc   int
	}{
		{[]string{"--version"}, Binary(filepath.Base(os.Args[0])) + " devel", 0},
		{[]string{"-version"}, Binary(filepath.Base(os.Args[0])) + " devel", 0},
		{[]string{"--version", "--gpus=all"}, "not asked", 3},
		{nil, "not asked", 3},
	} {
		cmd := exec.Command(os.Args[0], c.args...)
		cmd.Env = append(os.Environ(), exitEnv+"=1")
		out, err := cmd.Output()
		rc := 0
		if ee, ok := err.(*exec.ExitError); ok {
			rc = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if rc != c.rc || !strings.HasPrefix(string(out), c.want) {
			t.Errorf("%q: exit %d, %q; want exit %d, %q...", c.args, rc, out, c.rc, c.want)
		}
	}
}

func TestBinary(t *testing.T) {
	for dir, want := range map[string]string{"node": "longshore-node", "coordinator": "longshore-coordinator",
		"longshore-node": "longshore-node", "longshore-pack": "longshore-pack"} {
		if got := Binary(dir); got != want {
			t.Errorf("Binary(%q) = %q, want %q", dir, got, want)
		}
	}
}
