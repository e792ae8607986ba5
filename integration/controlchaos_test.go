//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The control-plane chaos tests: every container stays alive, but the
// control connections between coordinator and nodes (TCP port 7000, both
// the ones the nodes dial and the ones the coordinator dials) are broken
// from the host, inside the containers' own network namespaces
// (nsenter -t <pid> -n). Gossip (7001) and MinIO are left alone, so no
// node is ever declared failed: what is tested is that control messages
// lost with a connection are repaired. Each test runs the same job clean
// first (in the same test binary) and logs the ratio of the two job times.

const controlPort = "7000"

// controlJob is the job both tests run: long enough (about 30 s of
// epochs on an idle host) for many 3 s fault rounds, with short epochs
// (4 steps per rank), so that many epoch ends (leases done, streams
// ended, next epoch's grants) meet a fault.
const controlEpochs = 40

func controlJob() map[string]string {
	set := chaosSettings()
	set["DATASET_SIZE"] = "192"
	set["LONGSHORE_EPOCHS"] = strconv.Itoa(controlEpochs)
	return set
}

// jobSeconds is the time from the start of epoch 0 to the coordinator's
// "job done" (container start-up and the wait for ranks left out).
func (s *stack) jobSeconds() float64 {
	s.t.Helper()
	var start, end time.Time
	for _, ev := range s.coordEvents("epoch complete") {
		if ev["epoch"] == "0" {
			start = slogTime(s.t, ev).Add(-time.Duration(seconds(ev) * float64(time.Second)))
		}
	}
	if done := s.coordEvents("job done"); len(done) > 0 {
		end = slogTime(s.t, done[len(done)-1])
	}
	if start.IsZero() || end.IsZero() {
		s.Errorf("no epoch 0 or no job done in the coordinator's log")
		return -1
	}
	return end.Sub(start).Seconds()
}

var clean struct {
	sync.Mutex
	seconds float64
}

// cleanJobSeconds runs controlJob with no faults (once per test binary)
// and returns its job time.
func cleanJobSeconds(t *testing.T) float64 {
	t.Helper()
	clean.Lock()
	defer clean.Unlock()
	if clean.seconds > 0 {
		return clean.seconds
	}
	var secs float64
	t.Run("clean", func(t *testing.T) {
		s := startStack(t, controlJob())
		s.finish(5*time.Minute, "node1", "node2", "node3")
		s.check(controlEpochs)
		secs = s.jobSeconds()
		t.Logf("clean job: %.2f s", secs)
	})
	if secs <= 0 {
		t.Fatalf("the clean run of the job failed: no baseline")
	}
	clean.seconds = secs
	return secs
}

// netns is a container's network namespace: the host pid of its process
// and the namespace's identity (the link /proc/<pid>/ns/net).
type netns struct{ pid, id string }

// netns returns service's network namespace.
func (s *stack) netns(service string) netns {
	s.t.Helper()
	pid := docker(s.t, "inspect", "-f", "{{.State.Pid}}", s.container(service))
	id, err := os.Readlink("/proc/" + pid + "/ns/net")
	if err != nil {
		s.Fatalf("%s: %v", service, err)
	}
	return netns{pid, id}
}

// inNetns runs a command in ns (host binaries), unless its process is
// gone (a node that finished): a reused pid must never put a rule in
// another namespace, such as the host's.
func inNetns(ns netns, args ...string) (string, error) {
	pid := ns.pid
	if id, _ := os.Readlink("/proc/" + pid + "/ns/net"); id != ns.id {
		return "", fmt.Errorf("pid %s has left its namespace %s (the container exited)", pid, ns.id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nsenter", append([]string{"-t", pid, "-n"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("nsenter -t %s -n %s: %v\n%s", pid, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// resetControl aborts every established control connection in pid's
// namespace (ss -K: the kernel's sock_destroy; the local socket fails
// with ECONNABORTED and the peer gets a RST) and returns how many it
// killed. The listening socket is left alone (state established).
func resetControl(pid netns) (int, error) {
	out, err := inNetns(pid, "ss", "-K", "-tnH", "state", "established",
		"( sport = :"+controlPort+" or dport = :"+controlPort+" )")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	return n, nil
}

// rejectRules answer every segment of an established control connection
// arriving in the namespace with a RST (a new connection's SYN passes):
// while they are in place, whatever is sent on a connection, old or
// just made, resets it, as when a proxy in front of a control address is
// restarted.
var rejectRules = [][]string{
	{"INPUT", "-p", "tcp", "--dport", controlPort, "-m", "conntrack", "--ctstate", "ESTABLISHED", "-j", "REJECT", "--reject-with", "tcp-reset"},
	{"INPUT", "-p", "tcp", "--sport", controlPort, "-m", "conntrack", "--ctstate", "ESTABLISHED", "-j", "REJECT", "--reject-with", "tcp-reset"},
}

// dropRules are the iptables rules that make the control connections
// half-open: every segment to or from a control port arriving in the
// namespace is silently dropped (in INPUT only, so the senders see no
// local error: their segments just vanish, as on a dead path).
var dropRules = [][]string{
	{"INPUT", "-p", "tcp", "--dport", controlPort, "-j", "DROP"},
	{"INPUT", "-p", "tcp", "--sport", controlPort, "-j", "DROP"},
}

// droppedPackets sums the packet counters of pid's control DROP rules.
func droppedPackets(pid netns) int { return countPackets(pid, "DROP") }

// rejectedPackets sums the packet counters of pid's control REJECT rules.
func rejectedPackets(pid netns) int { return countPackets(pid, "REJECT") }

func countPackets(pid netns, target string) int {
	out, err := inNetns(pid, "iptables", "-w", "-L", "INPUT", "-v", "-n", "-x")
	if err != nil {
		return 0
	}
	n := 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && f[2] == target && strings.Contains(l, "pt:"+controlPort) {
			var p int
			fmt.Sscan(f[0], &p)
			n += p
		}
	}
	return n
}

func iptables(pid netns, op string, rule []string) error {
	_, err := inNetns(pid, append([]string{"iptables", "-w", op}, rule...)...)
	return err
}

// chaosLoop calls fault(round) every 3 s from when node1 is into epoch 0
// until the coordinator reports the job done (or maxRounds rounds), and
// returns the number of rounds and when the first fault was made.
func (s *stack) chaosLoop(maxRounds int, fault func(round int)) (int, time.Time) {
	s.t.Helper()
	s.waitDelivered("node1", 0, 3, 2*time.Minute)
	coord := s.container("coordinator")
	tick := time.NewTicker(3 * time.Second)
	defer tick.Stop()
	backstop := time.After(6 * time.Minute)
	round := 0
	var first time.Time
	for ; round < maxRounds; round++ {
		if out, _ := exec.Command("docker", "logs", "--tail", "30", coord).CombinedOutput(); strings.Contains(string(out), `msg="job done"`) {
			break
		}
		if round == 0 {
			first = time.Now()
		}
		fault(round)
		select {
		case <-tick.C:
		case <-backstop:
			s.Fatalf("the job was not done after 6 minutes of faults (%d rounds)", round)
		}
	}
	return round, first
}

// checkHit fails the test unless the job was done after the first fault
// (call it once the coordinator has exited).
func (s *stack) checkHit(first time.Time) {
	s.t.Helper()
	if first.IsZero() || s.firstAfter(first, "job done", nil) < 0 {
		s.Errorf("the job was done before the first fault: the faults did not hit it")
	}
}

// TestChaosControlResets: every 3 s every established control connection
// is aborted, alternately in the coordinator's namespace and in each
// node's (so both ends see their connection torn down, whoever dialed
// it), and for 500 ms after that whatever is sent on an established
// control connection there is answered with a RST (rejectRules), as when
// a proxy in front of the port restarts. Every process stays alive.
// Before the control links (cluster.Link) this stalled the job for good. The job finishes, exactly once in
// committed history, and within 2x the time of the same job run clean.
func TestChaosControlResets(t *testing.T) {
	base := cleanJobSeconds(t)
	s := startStack(t, controlJob())
	pids := map[string]netns{}
	for _, svc := range []string{"coordinator", "node1", "node2", "node3"} {
		pids[svc] = s.netns(svc)
	}
	killed, rejected := 0, 0
	rounds, first := s.chaosLoop(1000, func(round int) {
		sides := []string{"coordinator"}
		if round%2 == 1 {
			sides = []string{"node1", "node2", "node3"}
		}
		for _, svc := range sides {
			n, err := resetControl(pids[svc])
			if err != nil {
				t.Logf("round %d, %s: %v", round, svc, err) // a node may have finished
				continue
			}
			killed += n
			for _, r := range rejectRules {
				if err := iptables(pids[svc], "-I", r); err != nil {
					t.Logf("round %d, %s: %v", round, svc, err)
				}
			}
		}
		time.Sleep(500 * time.Millisecond) // the reject window: nothing sent on a connection gets through
		for _, svc := range sides {
			rejected += rejectedPackets(pids[svc])
			for _, r := range rejectRules {
				iptables(pids[svc], "-D", r)
			}
		}
	})
	s.finish(5*time.Minute, "node1", "node2", "node3")
	s.checkHit(first)
	s.check(controlEpochs)
	secs := s.jobSeconds()
	ratio := secs / base
	t.Logf("control connections reset every 3 s: %d rounds, %d connections aborted, %d segments answered with a RST; job %.2f s against %.2f s clean: %.2fx",
		rounds, killed, rejected, secs, base, ratio)
	if rounds < 3 || killed == 0 {
		s.Errorf("only %d rounds aborted %d connections: the faults did not hit the job", rounds, killed)
	}
	if ratio > 2 {
		s.Errorf("the job took %.2fx its clean time with resets every 3 s; the bound is 2x", ratio)
	}
	s.logEpochs()
}

// TestChaosControlHalfOpen: three times, all control traffic is silently
// dropped for 6 s (in every container's namespace, both directions; no
// RST, no local error: the connections look open to both ends), then
// restored for 3 s. Every process stays alive. The job finishes, exactly
// once in committed history.
func TestChaosControlHalfOpen(t *testing.T) {
	base := cleanJobSeconds(t)
	s := startStack(t, controlJob())
	var pids []netns
	for _, svc := range []string{"coordinator", "node1", "node2", "node3"} {
		pids = append(pids, s.netns(svc))
	}
	packets := 0
	set := func(op string) error {
		var first error
		for _, pid := range pids {
			if op == "-D" {
				packets += droppedPackets(pid)
			}
			for _, r := range dropRules {
				if err := iptables(pid, op, r); err != nil && first == nil {
					first = err
				}
			}
		}
		return first
	}
	dropped := 0
	var lastHeal time.Time
	// Rounds of 3 s: drop at rounds 0, 3, 6, restore at 2, 5, 8.
	rounds, first := s.chaosLoop(9, func(round int) {
		switch round % 3 {
		case 0:
			if err := set("-I"); err != nil {
				s.Fatalf("round %d: %v", round, err)
			}
			dropped++
		case 2:
			if err := set("-D"); err != nil {
				s.Fatalf("round %d: %v", round, err)
			}
			lastHeal = time.Now()
		}
	})
	if rounds%3 != 0 { // the job ended while dropping
		set("-D")
	}
	s.finish(5*time.Minute, "node1", "node2", "node3")
	s.checkHit(first)
	s.check(controlEpochs)
	secs := s.jobSeconds()
	t.Logf("control traffic dropped %d times for 6 s (%d packets dropped): job %.2f s against %.2f s clean: %.2fx", dropped, packets, secs, base, secs/base)
	if packets == 0 {
		s.Errorf("no control packet was dropped")
	}
	if dropped < 2 {
		s.Errorf("only %d drop periods hit the job", dropped)
	}
	if !lastHeal.IsZero() && s.firstAfter(lastHeal, "job done", nil) < 0 {
		t.Logf("note: the job was done before the last drop was healed")
	}
	s.logEpochs()
}
