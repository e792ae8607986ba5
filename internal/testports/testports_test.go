package testports

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeOutsideEphemeral: every port given lies below the kernel's
// ephemeral range (so no bind(0) or outgoing connection beside the test
// can take it before the server binds it), is never given twice, and can
// be bound for TCP and UDP.
func TestFreeOutsideEphemeral(t *testing.T) {
	lo, hi := Range()
	if hi-lo < 1000 {
		t.Fatalf("range [%d, %d) too small", lo, hi)
	}
	seen := map[int]bool{}
	for range 500 {
		p := Free(t, "127.0.0.1")
		if p < lo || p >= hi {
			t.Fatalf("port %d outside [%d, %d)", p, lo, hi)
		}
		if seen[p] {
			t.Fatalf("port %d given twice", p)
		}
		seen[p] = true
	}
	// Each given port binds, and while one is held Free skips it.
	p := Free(t, "127.0.0.2")
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", strconv.Itoa(p)))
	if err != nil {
		t.Fatalf("bind a given port: %v", err)
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.2", strconv.Itoa(p)))
	if err != nil {
		t.Fatalf("bind a given port for UDP: %v", err)
	}
	u.Close()
}

// TestFreeSkipsTaken: a port in the range that something holds is never
// given.
func TestFreeSkipsTaken(t *testing.T) {
	lo, hi := Range()
	var held []net.Listener
	taken := map[int]bool{}
	for p := lo; p < hi && len(held) < 200; p += (hi - lo) / 200 {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.3", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		held = append(held, l)
		taken[p] = true
	}
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for range 300 {
		if p := Free(t, "127.0.0.3"); taken[p] {
			t.Fatalf("port %d is held, but was given", p)
		}
	}
}
