package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

// TestBoundFlags: the bounds on what a peer without a key can make the
// node hold have flags with the documented defaults, and a bound of 0 or
// less is refused naming its flag.
func TestBoundFlags(t *testing.T) {
	cluster := []string{"--join", "127.0.0.1:1", "--gossip", "127.0.0.1:2", "--listen", "127.0.0.1:3", "--dataset", "x"}
	o, err := parseFlags(cluster, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.gossipStreams != 32 || o.gossipBytes != 4<<20 || o.metricsConns != 64 || o.feedHello != 10*time.Second {
		t.Errorf("defaults: streams %d, bytes %d, metrics conns %d, hello %v", o.gossipStreams, o.gossipBytes, o.metricsConns, o.feedHello)
	}
	for _, c := range []struct{ flag, value string }{
		{"--gossip-max-streams", "0"}, {"--gossip-max-stream-bytes", "-1"}, {"--metrics-max-conns", "0"}, {"--feed-hello-timeout", "0s"},
	} {
		_, err := parseFlags(append(cluster, c.flag, c.value), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%s %s: %v, want an error naming the flag", c.flag, c.value, err)
		}
	}
}
