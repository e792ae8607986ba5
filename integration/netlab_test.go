package integration

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// netLab is a network namespace joined to this one by a veth pair whose
// two ends are shaped by tbf to a bandwidth cap: a store in it is
// across a link, not on the loopback. (This kernel has no netem, so
// delay is added in user space, by the fault proxy.)
type netLab struct {
	ns     string // the namespace's name
	hostIP string // this side's end of the pair
	nsIP   string // the namespace's end
	rate   string // tbf's rate on both ends, as tc reads it ("1gbit")
}

// newNetLab makes the namespace and the link, capped at rate each way,
// and removes them when the benchmark ends. It needs root, ip and tc;
// without them it fails saying so.
func newNetLab(b testing.TB, rate string) *netLab {
	b.Helper()
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Fatalf("netlab: %s not found (Debian: iproute2): %v", tool, err)
		}
	}
	id := os.Getpid() % 200
	l := &netLab{
		ns:     fmt.Sprintf("longshore-bench-%d", os.Getpid()),
		hostIP: fmt.Sprintf("10.77.%d.1", id),
		nsIP:   fmt.Sprintf("10.77.%d.2", id),
		rate:   rate,
	}
	host, peer := fmt.Sprintf("lsb%d", os.Getpid()), fmt.Sprintf("lsb%dn", os.Getpid())
	run := func(args ...string) {
		b.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			b.Fatalf("netlab: %s: %v\n%s(needs root: network namespaces, veth and tc)", strings.Join(args, " "), err, out)
		}
	}
	inNS := func(args ...string) { run(append([]string{"ip", "netns", "exec", l.ns}, args...)...) }
	run("ip", "netns", "add", l.ns)
	b.Cleanup(func() { exec.Command("ip", "netns", "del", l.ns).Run() })
	run("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
	b.Cleanup(func() { exec.Command("ip", "link", "del", host).Run() }) // takes its peer with it
	run("ip", "link", "set", peer, "netns", l.ns)
	run("ip", "addr", "add", l.hostIP+"/24", "dev", host)
	run("ip", "link", "set", host, "up")
	inNS("ip", "addr", "add", l.nsIP+"/24", "dev", peer)
	inNS("ip", "link", "set", peer, "up")
	inNS("ip", "link", "set", "lo", "up")
	// tbf shapes what leaves each end: requests one way, data the other.
	shape := []string{"root", "tbf", "rate", rate, "burst", "512kb", "latency", "100ms"}
	run(append([]string{"tc", "qdisc", "add", "dev", host}, shape...)...)
	inNS(append([]string{"tc", "qdisc", "add", "dev", peer}, shape...)...)
	return l
}
