// Package testports hands tests ports for the processes they start.
//
// A test that starts a server in another process must name its port
// before the server binds it, so it picks a free one and lets it go; until
// the server binds it, anything else may take it. A port the kernel hands
// out for bind(0) or for an outgoing connection's source comes from its
// ephemeral range, which every test binary, MinIO client and gossip dial
// running beside the test draws from; two pickers may even draw the same
// one. So the ports given here lie below that range, where the kernel
// never hands one out, at random (test binaries run side by side), each
// checked free for TCP and UDP (gossip binds both) and never given twice
// by one process.
package testports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// span is how many ports below the ephemeral range are drawn from.
const span = 12000

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// Range is the half-open range [lo, hi) ports are drawn from: the span
// below the kernel's ephemeral range (net.ipv4.ip_local_port_range), not
// under 1024.
func Range() (lo, hi int) {
	hi = 32768 // the kernel's default low bound
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 1024 {
				hi = v
			}
		}
	}
	return max(1024, hi-span), hi
}

// Free returns a port on host free for TCP and UDP, outside the kernel's
// ephemeral range and not given before by this process.
func Free(t testing.TB, host string) int {
	t.Helper()
	p, err := pick(host)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Addr is Free's port joined to host.
func Addr(t testing.TB, host string) string {
	t.Helper()
	return net.JoinHostPort(host, strconv.Itoa(Free(t, host)))
}

func pick(host string) (int, error) {
	lo, hi := Range()
	mu.Lock()
	defer mu.Unlock()
	for range 1000 {
		p := lo + rand.IntN(hi-lo)
		if given[p] || !free(host, p) {
			continue
		}
		given[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("testports: no free port on %s in [%d, %d) after 1000 tries", host, lo, hi)
}

func free(host string, p int) bool {
	addr := net.JoinHostPort(host, strconv.Itoa(p))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}
