package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestInsecureRefusal: off loopback without a gossip key or TLS the
// coordinator refuses to start, naming what to give; --insecure
// overrides; loopback needs nothing.
func TestInsecureRefusal(t *testing.T) {
	open := []string{"--dataset", "d", "--listen", "127.0.0.1:9000", "--advertise", "coordinator:9000", "--gossip", "10.1.2.3:7946"}
	var errb bytes.Buffer
	if code := run(open, &errb); code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, errb.String())
	}
	for _, want := range []string{"--gossip 10.1.2.3:7946 is not a loopback address", "--gossip-key-file", "--advertise coordinator:9000", "--tls-cert", "--insecure"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	if _, err := parseFlags(append(open, "--insecure"), io.Discard); err != nil {
		t.Errorf("--insecure: %v", err)
	}
	if _, err := parseFlags([]string{"--dataset", "d", "--listen", "127.0.0.1:1", "--gossip", "[::1]:2"}, io.Discard); err != nil {
		t.Errorf("loopback: %v", err)
	}
}
