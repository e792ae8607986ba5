package main

import (
	"io"
	"strings"
	"testing"
)

// TestBoundFlags: the bounds on what a peer without a key can make the
// coordinator hold have flags with the documented defaults, and a bound
// of 0 or less is refused naming its flag.
func TestBoundFlags(t *testing.T) {
	base := []string{"--dataset", "d", "--listen", "127.0.0.1:1", "--gossip", "127.0.0.1:2"}
	o, err := parseFlags(base, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.gossipStreams != 32 || o.gossipBytes != 4<<20 || o.metricsConns != 64 || o.httpConns != 64 {
		t.Errorf("defaults: streams %d, bytes %d, metrics conns %d, http conns %d", o.gossipStreams, o.gossipBytes, o.metricsConns, o.httpConns)
	}
	for _, c := range []struct{ flag, value string }{
		{"--gossip-max-streams", "0"}, {"--gossip-max-stream-bytes", "0"}, {"--metrics-max-conns", "-2"}, {"--http-max-conns", "0"},
	} {
		_, err := parseFlags(append(base, c.flag, c.value), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%s %s: %v, want an error naming the flag", c.flag, c.value, err)
		}
	}
}
