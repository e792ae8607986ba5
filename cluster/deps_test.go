package cluster

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the core pure (in the manner of tailscale's
// tstest/deptest): no I/O, no clocks, no goroutine plumbing, no ambient
// randomness, and nothing outside the standard library. The shells
// (gossip, remote actors) live in other packages and import this one,
// never the reverse. It asks the go command, so it sees exactly what a
// build links.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}NONSTD {{end}}{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	bad := map[string]string{
		"os":            "I/O belongs in the shell",
		"net":           "I/O belongs in the shell",
		"syscall":       "I/O belongs in the shell",
		"time":          "time is an abstract Tick here; the shell owns the clock",
		"sync":          "one goroutine owns the state machine; no locks needed",
		"math/rand":     "randomness comes only from the seed",
		"math/rand/v2":  "randomness comes only from the seed",
		"crypto/rand":   "randomness comes only from the seed",
		"runtime/cgo":   "pure Go",
		"os/exec":       "I/O belongs in the shell",
		"net/http":      "I/O belongs in the shell",
		"log":           "report through Ready and errors, not logs",
		"log/slog":      "report through Ready and errors, not logs",
		"unsafe":        "no need",
		"context":       "nothing here blocks",
		"io":            "I/O belongs in the shell",
		"io/fs":         "I/O belongs in the shell",
		"encoding/json": "the journal's encoding belongs to the shell",
	}
	// Packages the standard library pulls in indirectly (fmt uses os, io,
	// sync...) are fine: what matters is what this package imports itself.
	direct, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, direct)
	}
	for _, p := range strings.Fields(string(direct)) {
		if why, ok := bad[p]; ok {
			t.Errorf("cluster imports %s: %s", p, why)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if p, ok := strings.CutPrefix(line, "NONSTD "); ok && p != "github.com/longshore/longshore/cluster" {
			t.Errorf("cluster depends on %s: the core uses only the standard library", p)
		}
	}
}
