package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/coord"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/internal/testports"
	"github.com/longshore/longshore/storage"
)

// nodeProcessEnv carries a node's arguments (one a line) to the test
// binary run as a node process (TestNodeProcess).
const nodeProcessEnv = "NODE_PROCESS_ARGS"

// TestNodeProcess is not a test: run by another test as a process of its
// own, it is longshore-node with the arguments in $NODE_PROCESS_ARGS.
func TestNodeProcess(t *testing.T) {
	args, ok := os.LookupEnv(nodeProcessEnv)
	if !ok {
		t.Skip("runs only as a node process started by another test")
	}
	code := run(strings.Split(args, "\n"), os.Stdout, os.Stderr)
	if os.Getenv(nodeSystemsEnv) != "" {
		fmt.Fprintf(os.Stderr, "%s%d\n", systemsLine, actors.SystemsMade())
	}
	os.Exit(code)
}

// With $NODE_PROCESS_SYSTEMS set, a node process ends its stderr with
// systemsLine and the number of actor systems its pipelines made
// (TestClusterOneActorSystem).
const (
	nodeSystemsEnv = "NODE_PROCESS_SYSTEMS"
	systemsLine    = "pipeline actor systems made: "
)

// testCoordinator is a coordinator in this process, wired as
// longshore-coordinator wires one (remote, coordinator actor, gossip
// membership feeding it), for the tests that run a node process against
// it. The node runs in a process of its own (runNode): protoactor's
// remote sets grpc's global logger when it starts, which races with a
// running remote in the same process.
type testCoordinator struct {
	co   *coord.Coordinator
	join string // the coordinator's gossip address, for --join
}

// The test process's one remote, which every test's coordinator joins in
// turn (each stops its coordinator actor when it ends, freeing the name).
// One remote a process, as each of our binaries has: protoactor's
// remote.Start writes gRPC's global logger, which the gRPC client
// goroutines of a remote started earlier read (its endpoint writers keep
// redialling a node that has exited until the coordinator hears it is
// gone), and the race detector saw a second Start race with them.
var sharedRemote struct {
	once sync.Once
	sys  *actor.ActorSystem
	addr string
	err  error
}

func coordinatorRemote(t *testing.T) (*actor.ActorSystem, string) {
	t.Helper()
	sharedRemote.once.Do(func() {
		sharedRemote.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
		_, sharedRemote.addr, sharedRemote.err = wire.StartRemote(sharedRemote.sys, "127.0.0.1:0", "")
	})
	if sharedRemote.err != nil {
		t.Fatal(sharedRemote.err)
	}
	return sharedRemote.sys, sharedRemote.addr
}

// startCoordinator starts a coordinator of the job cfg with batch size
// batch over the dataset whose manifest digest is digest; everything it
// started is stopped when the test ends.
func startCoordinator(t *testing.T, ctx context.Context, cfg cluster.Config, batch int, digest string) *testCoordinator {
	t.Helper()
	sys, actorAddr := coordinatorRemote(t)
	co, err := coord.Start(sys, coord.Config{Cluster: cfg, BatchSize: batch, Digest: digest, TickEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { co.Shutdown(context.Background()) })
	m, err := gossip.Start(ctx, gossip.Config{
		Meta:     gossip.Meta{ID: "coordinator", Role: gossip.RoleCoordinator, ActorAddr: actorAddr, Incarnation: uint64(time.Now().UnixNano())},
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
	return &testCoordinator{co: co, join: m.Addr()}
}

// nodeArgs are the arguments of a node joining c over loopback with the
// local gossip profile, text logs and no progress bar, followed by
// extra.
func (c *testCoordinator) nodeArgs(t *testing.T, extra ...string) []string {
	return append([]string{"--join", c.join, "--gossip", testports.Addr(t, "127.0.0.1"), "--listen", testports.Addr(t, "127.0.0.1"), "--gossip-profile", "local",
		"--progress", "never", "--log-format", "text"}, extra...)
}

// runNode runs longshore-node with args in a child process of the test
// binary until it exits, and returns its standard output and error.
func runNode(ctx context.Context, args []string) (stdout, stderr string, err error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestNodeProcess$")
	cmd.Env = append(os.Environ(), nodeProcessEnv+"="+strings.Join(args, "\n"))
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// waitDone waits until the coordinator has seen the job done.
func (c *testCoordinator) waitDone(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-c.co.Done():
	case <-ctx.Done():
		t.Fatal("the coordinator never saw the job done")
	}
}

// discoverDir is the dataset a local directory holds, as the coordinator
// of a test job discovers it.
func discoverDir(t *testing.T, ctx context.Context, dir string) *dataset.Dataset {
	t.Helper()
	st, err := storage.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := dataset.Discover(ctx, st, dataset.DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}
