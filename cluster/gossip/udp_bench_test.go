package gossip

import (
	"bufio"
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

// BenchmarkScaleUDP is BenchmarkScale over real UDP and TCP on loopback,
// one member per process (LONGSHORE_GOSSIP_PROCS of them, default 64):
// the time until every member has a new member, and until every member
// has dropped one killed with SIGKILL. Each child prints its view (how
// many members, whether it has the newest and the victim) when it changes;
// the parent reads the lines as they come. Wall-clock figures: run it on a
// quiet machine, -benchtime=1x.
//
//	go test -run '^$' -bench BenchmarkScaleUDP -benchtime=1x ./cluster/gossip
func BenchmarkScaleUDP(b *testing.B) {
	n := 64
	if v, err := strconv.Atoi(os.Getenv("LONGSHORE_GOSSIP_PROCS")); err == nil && v > 2 {
		n = v
	}
	for _, profile := range []string{"local", "lan", "large"} {
		b.Run(fmt.Sprintf("members=%d/profile=%s", n, profile), func(b *testing.B) {
			for range b.N {
				udpOnce(b, n, profile)
			}
		})
	}
}

// udpChildEnv carries a child's settings: profile, name, join address,
// and the names whose presence it reports.
const udpChildEnv = "LONGSHORE_GOSSIP_UDP_CHILD"

// TestGossipUDPChild is a member process of BenchmarkScaleUDP; it does
// nothing unless started by it.
func TestGossipUDPChild(t *testing.T) {
	spec := os.Getenv(udpChildEnv)
	if spec == "" {
		t.Skip("a child of BenchmarkScaleUDP only")
	}
	f := strings.Split(spec, ",") // profile,name,join,watch...
	var join []string
	if f[2] != "" {
		join = []string{f[2]}
	}
	m, err := Start(context.Background(), Config{
		Meta:     Meta{ID: f[1], Role: RoleNode, ActorAddr: "127.0.0.1:1", Ranks: rankNames(f[1], 8)},
		BindAddr: "127.0.0.1:0", Join: join, Profile: f[0],
	})
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("addr %s\n", m.Addr())
	watch := f[3:]
	last := ""
	for {
		line := fmt.Sprintf("view %d", count(m))
		for _, w := range watch {
			line += fmt.Sprintf(" %v", has(m, w))
		}
		if line != last {
			fmt.Println(line)
			last = line
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// udpMember is a child process and the last view it reported.
type udpMember struct {
	cmd  *exec.Cmd
	addr chan string
	mu   sync.Mutex
	view string
}

func udpOnce(b *testing.B, n int, profile string) {
	newest, victim := fmt.Sprintf("u%04d", n), fmt.Sprintf("u%04d", n/2)
	var members []*udpMember
	defer func() {
		for _, m := range members {
			m.cmd.Process.Kill()
			m.cmd.Wait()
		}
	}()
	start := func(i int, join string) *udpMember {
		name := fmt.Sprintf("u%04d", i)
		cmd := exec.Command(os.Args[0], "-test.run=^TestGossipUDPChild$")
		// One P a member: hundreds of processes on a few cores otherwise
		// spend their time in the schedulers of the others.
		cmd.Env = append(os.Environ(), "GOMAXPROCS=1", udpChildEnv+"="+strings.Join([]string{profile, name, join, newest, victim}, ","))
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatalf("member %d: %v", i, err)
		}
		m := &udpMember{cmd: cmd, addr: make(chan string, 1)}
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				l := sc.Text()
				switch {
				case strings.HasPrefix(l, "addr "):
					m.addr <- strings.TrimPrefix(l, "addr ")
				case strings.HasPrefix(l, "view "):
					m.mu.Lock()
					m.view = l
					m.mu.Unlock()
				}
			}
		}()
		members = append(members, m)
		return m
	}
	addrOf := func(m *udpMember) string {
		select {
		case a := <-m.addr:
			m.addr <- a
			return a
		case <-time.After(time.Minute):
			b.Fatalf("a member never said its address")
			return ""
		}
	}
	waitAll := func(what string, limit time.Duration, ok func(view string) bool, skip int) time.Duration {
		t0 := time.Now()
		for deadline := t0.Add(limit); ; time.Sleep(20 * time.Millisecond) {
			all := true
			for i, m := range members {
				if i == skip {
					continue
				}
				m.mu.Lock()
				v := m.view
				m.mu.Unlock()
				if !ok(v) {
					all = false
					break
				}
			}
			if all {
				return time.Since(t0)
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d members over UDP: %s never reached every member", n, what)
			}
		}
	}
	first := start(0, "")
	seed := addrOf(first)
	for i := 1; i < n; i++ {
		// Each joins through an earlier member, as in BenchmarkScale.
		start(i, addrOf(members[(i*7919)%i]))
	}
	// Setting up is not measured: hundreds of members on a few cores
	// take minutes to all see each other.
	waitAll("the first members", 15*time.Minute, func(v string) bool { return strings.HasPrefix(v, fmt.Sprintf("view %d ", n)) }, -1)

	t0 := time.Now()
	addrOf(start(n, seed)) // its process is up and has joined the seed
	up := time.Since(t0)
	join := waitAll("a join", 5*time.Minute, func(v string) bool { return strings.HasPrefix(v, fmt.Sprintf("view %d true", n+1)) }, -1)
	b.Logf("the new member's process took %v to start and join", up)

	members[n/2].cmd.Process.Kill() // SIGKILL: no leave
	detect := waitAll("a kill", 5*time.Minute, func(v string) bool { return strings.HasPrefix(v, fmt.Sprintf("view %d true false", n)) }, n/2)

	b.ReportMetric(join.Seconds(), "join-s")
	b.ReportMetric(detect.Seconds(), "detect-s")
}
