package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
)

// TestInsecureRefusal: cluster mode off loopback without a gossip key or
// TLS is refused before anything starts, naming what to give; --insecure
// overrides; loopback and standalone need nothing.
func TestInsecureRefusal(t *testing.T) {
	open := []string{"--dataset", "x", "--join", "10.0.0.1:7946", "--gossip", "0.0.0.0:7946", "--listen", "0.0.0.0:9000"}
	var out, errb bytes.Buffer
	if code := run(open, &out, &errb); code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, errb.String())
	}
	for _, want := range []string{"--gossip 0.0.0.0:7946 is not a loopback address", "--gossip-key-file", "--listen 0.0.0.0:9000", "--tls-cert", "--insecure"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	if _, err := parseFlags(append(open, "--insecure"), io.Discard); err != nil {
		t.Errorf("--insecure: %v", err)
	}
	if _, err := parseFlags(append(open, "--gossip-key-file", "k", "--tls-cert", "c", "--tls-key", "k", "--tls-ca", "a"), io.Discard); err != nil {
		t.Errorf("with a key and TLS: %v", err)
	}
	if _, err := parseFlags([]string{"--dataset", "x", "--join", "127.0.0.1:7946", "--gossip", "127.0.0.2:7946", "--listen", "127.0.0.2:9000"}, io.Discard); err != nil {
		t.Errorf("loopback: %v", err)
	}
	if _, err := parseFlags([]string{"--standalone", "--dataset", "x", "--gossip", "0.0.0.0:1"}, io.Discard); err != nil {
		t.Errorf("standalone: %v", err)
	}
}

func TestFeedAllowFlags(t *testing.T) {
	o, err := parseFlags([]string{"--standalone", "--dataset", "x", "--sink", "feed", "--feed-allow-uid", "1000, 1001", "--feed-allow-gid", "44", "--feed-allow-uid", "7"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(o.feedPeers.UIDs, o.feedPeers.GIDs) != "[1000 1001 7] [44]" {
		t.Errorf("uids %v gids %v", o.feedPeers.UIDs, o.feedPeers.GIDs)
	}
	if _, err := parseFlags([]string{"--standalone", "--dataset", "x", "--feed-allow-uid", "root"}, io.Discard); err == nil {
		t.Error("--feed-allow-uid root accepted")
	}
}
