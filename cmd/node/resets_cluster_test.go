package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/coord"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/internal/testports"
)

// resetProxy forwards TCP connections from its address to target and
// resets every connection it carries (RST, both ways) each time another
// every bytes have gone through it, or on Reset: a control connection
// that keeps breaking while both processes stay up.
type resetProxy struct {
	l      net.Listener
	target string
	every  int64

	// silent, if set, makes each fault a half-open connection: for that
	// long everything sent either way is silently dropped, then the
	// connections are reset (as a keepalive would find them dead).
	silent time.Duration

	mu     sync.Mutex
	conns  map[net.Conn]bool
	bytes  int64 // since the last reset
	quiet  bool  // dropping everything (silent)
	resets atomic.Int64
}

func startResetProxy(t *testing.T, target string, every int64, silent time.Duration) *resetProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &resetProxy{l: l, target: target, every: every, silent: silent, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { l.Close(); p.Reset() })
	go p.serve()
	return p
}

func (p *resetProxy) Addr() string { return p.l.Addr().String() }

func (p *resetProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.carry(c)
	}
}

func (p *resetProxy) carry(c net.Conn) {
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[u] = true, true
	p.mu.Unlock()
	go p.pipe(u, c)
	p.pipe(c, u)
}

func (p *resetProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			quiet := p.quiet
			p.mu.Unlock()
			if quiet {
				continue // dropped without a word
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
			p.mu.Lock()
			p.bytes += int64(n)
			due := p.every > 0 && p.bytes >= p.every
			if due && p.silent > 0 {
				p.quiet, p.bytes, due = true, 0, false
				time.AfterFunc(p.silent, func() { // fault timing, not a wait
					p.Reset()
					p.mu.Lock()
					p.quiet = false
					p.mu.Unlock()
				})
			}
			p.mu.Unlock()
			if due {
				p.Reset()
			}
		}
		if err != nil {
			break
		}
	}
	src.Close()
	dst.Close()
}

// Reset breaks every connection the proxy carries with a TCP reset.
func (p *resetProxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // RST, not FIN
		}
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
	p.bytes = 0
	p.resets.Add(1)
}

// syncBuffer is a commit log the test reads after the job.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestClusterControlResets: every control connection between the
// coordinator and a node process breaks (a TCP reset, both directions:
// a proxy in front of each end's advertised control address) each time
// another few KiB went through, while both processes stay up. Control
// messages lost with a connection are sent again (cluster.Link), so the
// job finishes, every epoch committed exactly once in the coordinator's
// accounting and every sample delivered in every epoch. Before the links
// a lost grant, stream end or ack was never sent again and the job
// stalled for good.
//
// For a figure: LONGSHORE_RESETS_PERIOD=3s resets both proxies on that
// period instead (LONGSHORE_RESETS_EPOCHS sets the job's length), and the
// test runs the job once without resets first and logs both times.
func TestClusterControlResets(t *testing.T) {
	if inChildProcess(t) {
		return
	}
	samples, epochs, every := 32, 40, int64(4<<10)
	var period time.Duration
	if v := os.Getenv("LONGSHORE_RESETS_PERIOD"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		period, every = d, 0
		if v := os.Getenv("LONGSHORE_RESETS_EPOCHS"); v != "" {
			fmt.Sscan(v, &epochs)
		}
		clean := runResetsJob(t, samples, epochs, -1, 0, 0)
		withResets := runResetsJob(t, samples, epochs, 0, period, 0)
		t.Logf("clean %v, resets every %v: %v (%.2fx)", clean.Round(time.Millisecond), period, withResets.Round(time.Millisecond), withResets.Seconds()/clean.Seconds())
		return
	}
	runResetsJob(t, samples, epochs, every, 0, 0)
}

// TestClusterControlHalfOpen: as TestClusterControlResets, but each fault
// is a half-open connection: for 300 ms everything either end sends is
// dropped without a word, then the connection is found dead and reset.
func TestClusterControlHalfOpen(t *testing.T) {
	if inChildProcess(t) {
		return
	}
	runResetsJob(t, 32, 30, 8<<10, 0, 300*time.Millisecond)
}

// childTestEnv names the test a child test process runs itself.
const childTestEnv = "LONGSHORE_TEST_IN_CHILD"

// inChildProcess runs t again in a child process of the test binary and
// reports whether it did (the caller then returns; the child's failure
// is t's), or is false in that child, which runs the test's body.
//
// The resets tests' coordinator redials its peer through a proxy that
// keeps breaking the connection, and protoactor's remote.Start writes
// gRPC's global logger, which every gRPC client goroutine reads: a later
// test's remote in the same process raced with the leftover dialling
// (the race detector saw it in TestClusterRankErrorStopsNode). Each
// process of ours starts one remote; so does this child.
func inChildProcess(t *testing.T) bool {
	t.Helper()
	if os.Getenv(childTestEnv) == t.Name() {
		return false
	}
	args := []string{"-test.run=^" + t.Name() + "$", "-test.count=1", "-test.v"}
	if d, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout="+time.Until(d).Round(time.Second).String())
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), childTestEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("child test process:\n%s", out)
	if err != nil {
		t.Fatalf("%s in a child process: %v", t.Name(), err)
	}
	return true
}

// runResetsJob runs one job of a coordinator and a node process with
// proxies in front of both control addresses that reset every `every`
// bytes (or every period; every < 0: never), after dropping everything
// for silent first if that is set, checks it, and returns how long the
// node took.
func runResetsJob(t *testing.T, samples, epochs int, every int64, period, silent time.Duration) time.Duration {
	root, keys := makeDataset(t, samples)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second+time.Duration(epochs)*50*time.Millisecond)
	defer cancel()
	ds := discoverDir(t, ctx, root)
	cfg := cluster.DefaultConfig()
	cfg.Samples, cfg.Epochs, cfg.Seed, cfg.ShardSize = int64(len(ds.Samples)), epochs, 9, 4

	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	t.Cleanup(sys.Shutdown)
	listen := testports.Addr(t, "127.0.0.1")
	cproxy := startResetProxy(t, listen, every, silent)
	rem, actorAddr, err := wire.StartRemote(sys, listen, cproxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rem.Shutdown(false) })
	var commits syncBuffer
	co, err := coord.Start(sys, coord.Config{Cluster: cfg, BatchSize: 2, Digest: dataset.ManifestDigest(ds),
		TickEvery: 100 * time.Millisecond, CommitLog: &commits})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { co.Shutdown(context.Background()) })
	m, err := gossip.Start(ctx, gossip.Config{
		Meta:     gossip.Meta{ID: "coordinator", Role: gossip.RoleCoordinator, ActorAddr: actorAddr, Incarnation: 1},
		BindAddr: testports.Addr(t, "127.0.0.1"), Profile: "local",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	go func() {
		for ev := range m.Events() {
			co.Membership(ev)
		}
	}()

	nodeListen := testports.Addr(t, "127.0.0.1")
	nproxy := startResetProxy(t, nodeListen, every, silent)
	if period > 0 {
		go func() {
			tk := time.NewTicker(period)
			defer tk.Stop()
			for {
				select {
				case <-tk.C:
					cproxy.Reset()
					nproxy.Reset()
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	logPath := filepath.Join(t.TempDir(), "delivered.log")
	args := []string{"--join", m.Addr(), "--gossip", testports.Addr(t, "127.0.0.1"), "--listen", nodeListen, "--advertise", nproxy.Addr(),
		"--gossip-profile", "local", "--progress", "never", "--log-format", "text",
		"--id", "n1", "--ranks", "2", "--dataset", root, "--sink", "log:" + logPath, "--size", "32", "--commit-every", "2"}
	start := time.Now()
	out, logs, err := runNode(ctx, args)
	if err != nil {
		t.Fatalf("node: %v\n%s%s", err, out, logs)
	}
	select {
	case <-co.Done():
	case <-ctx.Done():
		st, _ := co.Status(context.Background())
		t.Fatalf("the job never finished: %+v", st.Epochs)
	}
	took := time.Since(start)
	t.Logf("%d epochs of %d samples in %v with %d + %d connection resets", epochs, samples, took.Round(time.Millisecond),
		cproxy.resets.Load(), nproxy.resets.Load())
	if every > 0 && cproxy.resets.Load()+nproxy.resets.Load() < 5 {
		t.Errorf("only %d resets: the test did not break the control connections", cproxy.resets.Load()+nproxy.resets.Load())
	}
	st, err := co.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for e, es := range st.Epochs {
		if !es.Complete || es.Committed != int64(samples) {
			t.Errorf("epoch %d: %+v; want complete with %d committed", e, es, samples)
		}
	}
	if st.Stats.Invalid != 0 {
		t.Errorf("the coordinator refused %d messages as invalid", st.Stats.Invalid)
	}
	if !strings.Contains(commits.String(), "ack\t") {
		t.Error("the commit log is empty")
	}
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) >= 4 && cols[0] != "commit" {
			if seen[cols[0]] == nil {
				seen[cols[0]] = map[string]bool{}
			}
			seen[cols[0]][cols[3]] = true
		}
	}
	for ep, ks := range seen {
		for _, k := range keys {
			if !ks[k] {
				t.Errorf("epoch %s never delivered %s", ep, k)
			}
		}
	}
	if len(seen) != epochs {
		t.Errorf("the node delivered %d epochs, want %d", len(seen), epochs)
	}
	return took
}
