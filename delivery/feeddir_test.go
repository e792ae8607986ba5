package delivery

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunDirectorySymlink: a run directory that is a symlink is refused,
// whoever owns its target: the link's owner (in /tmp, anyone) could point
// it elsewhere after the checks, at sockets trainers would then trust.
// The refusal names the link and its target.
func TestRunDirectorySymlink(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "feed")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	err := prepareDir(link, 0o700)
	if err == nil || !strings.Contains(err.Error(), "symlink") || !strings.Contains(err.Error(), real) {
		t.Fatalf("a symlinked run directory: %v, want it refused naming the link and its target", err)
	}
	// A dangling one too, with the same words.
	dangling := filepath.Join(base, "gone")
	if err := os.Symlink(filepath.Join(base, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	if err := prepareDir(dangling, 0o700); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("a dangling symlink as run directory: %v, want it refused as a symlink", err)
	}
	// The real directory is fine.
	if err := prepareDir(real, 0o700); err != nil {
		t.Fatal(err)
	}
}
