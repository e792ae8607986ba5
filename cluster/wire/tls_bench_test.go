package wire_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/certs"
	"github.com/longshore/longshore/cluster/wire"
)

const benchEchoEnv = "LONGSHORE_BENCH_ECHO" // "plain" or a certificate directory

// TestBenchEcho is BenchmarkRemote's other end, run in a child process:
// a remote (plaintext, or mutual TLS with the certificate directory in
// $LONGSHORE_BENCH_ECHO) with an echo actor, until its stdin closes.
func TestBenchEcho(t *testing.T) {
	mode := os.Getenv(benchEchoEnv)
	if mode == "" {
		t.Skip("run by BenchmarkRemote")
	}
	var opts []remote.ConfigOption
	if mode != "plain" {
		cfg, err := wire.LoadTLS(wire.TLSFiles{Cert: filepath.Join(mode, certs.HostCert), Key: filepath.Join(mode, certs.HostKey), CA: filepath.Join(mode, certs.CACert)})
		if err != nil {
			t.Fatal(err)
		}
		opts = cfg.RemoteOptions()
	}
	sys := quietSystem()
	_, addr, err := wire.StartRemote(sys, "127.0.0.1:0", "", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*wire.NodeEvents); ok {
			c.Respond(m)
		}
	}), "echo"); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("bench-echo %s\n", addr)
	bufio.NewReader(os.Stdin).ReadString('\n') // until the parent goes
}

// plainRemote is the parent's plaintext remote for BenchmarkRemote. A
// second remote in one process is not race-clean (grpc's global logger):
// only the benchmark starts it.
var plainRemote = sync.OnceValues(func() (*actor.ActorSystem, error) {
	sys := quietSystem()
	_, _, err := wire.StartRemote(sys, "127.0.0.1:0", "")
	return sys, err
})

// BenchmarkRemote measures control-message round trips (a NodeEvents
// with one Progress event, answered with itself) between two processes
// on loopback, over plaintext and over mutual TLS: sequentially (latency)
// and with 64 in flight (throughput, the shape of many ranks' traffic).
func BenchmarkRemote(b *testing.B) {
	for _, mode := range []string{"plain", "tls"} {
		b.Run(mode, func(b *testing.B) {
			var sys *actor.ActorSystem
			env := "plain"
			if mode == "plain" {
				s, err := plainRemote()
				if err != nil {
					b.Fatal(err)
				}
				sys = s
			} else {
				var p *pki
				p, sys = inProcessTLSRemote(b)
				dir := b.TempDir()
				crt, key, err := p.ca.Issue(certs.Host{Name: "node-b", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
				if err != nil {
					b.Fatal(err)
				}
				if err := certs.WriteHost(dir, crt, key, p.ca.CertPEM); err != nil {
					b.Fatal(err)
				}
				env = dir
			}
			peer := exec.Command(os.Args[0], "-test.run=^TestBenchEcho$", "-test.v")
			peer.Env = append(os.Environ(), benchEchoEnv+"="+env)
			stdin, _ := peer.StdinPipe()
			out, _ := peer.StdoutPipe()
			peer.Stderr = os.Stderr
			if err := peer.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() { stdin.Close(); peer.Wait() }()
			var addr string
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if a, ok := strings.CutPrefix(sc.Text(), "bench-echo "); ok {
					addr = a
					break
				}
			}
			if addr == "" {
				b.Fatal("the echo peer did not start")
			}
			pid := actor.NewPID(addr, "echo")
			we, _ := wire.EventOf(cluster.Progress{Rank: "n1/0", Session: cluster.Fence{Incarnation: 1, Seq: 2}, Lease: cluster.Fence{Incarnation: 1, Seq: 9}, Through: 77})
			msg := &wire.NodeEvents{Node: "n1", Incarnation: 1, Events: []*wire.Event{we}}
			if _, err := sys.Root.RequestFuture(pid, msg, time.Minute).Result(); err != nil { // connect both ways first
				b.Fatal(err)
			}
			b.Run("sequential", func(b *testing.B) {
				for b.Loop() {
					if _, err := sys.Root.RequestFuture(pid, msg, time.Minute).Result(); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("inflight64", func(b *testing.B) {
				fs := make(chan *actor.Future, 64)
				done := make(chan error, 1)
				go func() {
					var err error
					for f := range fs {
						if _, e := f.Result(); e != nil && err == nil {
							err = e
						}
					}
					done <- err
				}()
				for b.Loop() {
					fs <- sys.Root.RequestFuture(pid, msg, time.Minute)
				}
				close(fs)
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// inProcessTLSRemote starts a remote with mutual TLS in this process, for
// the benchmark only: a second remote in one process races on grpc's
// global logger (see echoServer), which the benchmark does not mind.
func inProcessTLSRemote(b *testing.B) (*pki, *actor.ActorSystem) {
	b.Helper()
	p := newPKI(b)
	sys := quietSystem()
	cfg, err := wire.NewTLS(p.host("coordinator"), p.pool(), "node-*")
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := wire.StartRemote(sys, "127.0.0.1:0", "", cfg.RemoteOptions()...); err != nil {
		b.Fatal(err)
	}
	return p, sys
}
