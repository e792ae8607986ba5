package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/coord"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/internal/testports"
	"github.com/longshore/longshore/storage"
)

// lineWatch is a node process's stderr: it closes seen once a line
// holds want.
type lineWatch struct {
	mu   sync.Mutex
	buf  strings.Builder
	want string
	seen chan struct{}
	once sync.Once
}

func (w *lineWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *lineWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func getReadyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	res, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestClusterReadyz: a node in a cluster answers /readyz 503 ("not
// welcomed") while its gossip holds no coordinator, and 200 once a
// coordinator has welcomed it.
func TestClusterReadyz(t *testing.T) {
	root, _ := makeDataset(t, 12)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // backstop only
	defer cancel()
	// The gossip the node joins, with no coordinator in it yet.
	seed, err := gossip.Start(ctx, gossip.Config{Meta: gossip.Meta{ID: "seed", Role: gossip.RoleNode}, BindAddr: testports.Addr(t, "127.0.0.1"), Profile: "local"})
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Shutdown(context.Background())
	joined := make(chan struct{})
	go func() {
		var once sync.Once
		for ev := range seed.Events() {
			if ev.Kind == gossip.Joined && ev.Name == "n1" {
				once.Do(func() { close(joined) })
			}
		}
	}()

	metrics := testports.Addr(t, "127.0.0.1")
	w := &lineWatch{want: "msg=ready", seen: make(chan struct{})}
	args := []string{"--join", seed.Addr(), "--gossip", testports.Addr(t, "127.0.0.1"), "--listen", testports.Addr(t, "127.0.0.1"), "--gossip-profile", "local",
		"--progress", "never", "--log-format", "text", "--id", "n1", "--dataset", root,
		"--sink", "log:" + filepath.Join(t.TempDir(), "batches.log"), "--size", "32", "--metrics", metrics}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestNodeProcess$")
	cmd.Env = append(os.Environ(), nodeProcessEnv+"="+strings.Join(args, "\n"))
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}) // closed once the node has exited: waitErr
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() { cmd.Process.Kill(); <-exited }()

	// In the gossip: its metrics server started before it joined.
	select {
	case <-joined:
	case <-exited:
		t.Fatalf("node exited: %v\n%s", waitErr, w)
	case <-ctx.Done():
		t.Fatalf("the node never joined the gossip:\n%s", w)
	}
	if code, body := getReadyz(t, metrics); code != http.StatusServiceUnavailable || !strings.Contains(body, "welcomed") {
		t.Errorf("GET /readyz with no coordinator: %d %q, want 503 saying it is not welcomed", code, body)
	}

	// A coordinator joins the gossip and welcomes the node.
	st, err := storage.NewDirStore(root)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := dataset.Discover(ctx, st, dataset.DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := cluster.DefaultConfig()
	cfg.Samples, cfg.Epochs, cfg.Seed = int64(len(ds.Samples)), 1, 3
	sys, actorAddr := coordinatorRemote(t)
	co, err := coord.Start(sys, coord.Config{Cluster: cfg, BatchSize: 4, Digest: dataset.ManifestDigest(ds), TickEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Shutdown(context.Background())
	m, err := gossip.Start(ctx, gossip.Config{
		Meta:     gossip.Meta{ID: "coordinator", Role: gossip.RoleCoordinator, ActorAddr: actorAddr, Incarnation: uint64(time.Now().UnixNano())},
		BindAddr: testports.Addr(t, "127.0.0.1"), Profile: "local", Join: []string{seed.Addr()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	go func() {
		for ev := range m.Events() {
			co.Membership(ev)
		}
	}()
	select {
	case <-w.seen:
	case <-exited:
		t.Fatalf("node exited: %v\n%s", waitErr, w)
	case <-ctx.Done():
		t.Fatalf("the node never said it is ready:\n%s", w)
	}
	if code, body := getReadyz(t, metrics); code != http.StatusOK || body != "ready\n" {
		t.Errorf("GET /readyz once welcomed: %d %q, want 200 \"ready\\n\"", code, body)
	}
}
