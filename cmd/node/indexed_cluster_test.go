package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/coord"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/storage"
)

// TestClusterIndexed runs the node in cluster mode over datasets whose
// manifest has an index beside it, plain and packed, with a manifest
// cache of a few pieces: the node takes the lazy path (it says so), and
// every sample of the coordinator's dataset is delivered once.
func TestClusterIndexed(t *testing.T) {
	root, keys := makeDataset(t, 40)
	t.Run("plain", func(t *testing.T) {
		var text strings.Builder
		text.WriteString("key,label\n")
		for _, k := range keys {
			fmt.Fprintf(&text, "%s,%s\n", k, filepath.Dir(k))
		}
		if err := os.WriteFile(filepath.Join(root, "manifest.csv"), []byte(text.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(filepath.Join(root, "manifest.csv")) })
		runIndexedCluster(t, root, "plain", keys)
	})
	t.Run("packed", func(t *testing.T) {
		packed, pkeys := packDataset(t, root, keys, 8)
		runIndexedCluster(t, packed, "packed", pkeys)
	})
}

func runIndexedCluster(t *testing.T, dir, layout string, want []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st, err := storage.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	key := storage.ManifestJSONLName
	if _, err := os.Stat(filepath.Join(dir, storage.ManifestCSVName)); err == nil {
		key = storage.ManifestCSVName
	}
	x, err := storage.WriteManifestIndex(ctx, st, key, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := storage.Discover(ctx, st, storage.DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if x.Digest != storage.ManifestDigest(ds) || x.Layout() != layout {
		t.Fatalf("index: %s %s, dataset %s", x.Digest, x.Layout(), storage.ManifestDigest(ds))
	}
	cfg := cluster.DefaultConfig()
	cfg.Samples, cfg.Epochs, cfg.ShardSize, cfg.Block, cfg.Window, cfg.Seed = x.Samples, 1, 8, 4, 2, 3
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	rem, actorAddr, err := wire.StartRemote(sys, freeAddr(t), "")
	if err != nil {
		t.Fatal(err)
	}
	defer rem.Shutdown(false)
	co, err := coord.Start(sys, coord.Config{Cluster: cfg, BatchSize: 4, Digest: x.Digest, TickEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Shutdown(context.Background())
	m, err := gossip.Start(ctx, gossip.Config{
		Meta:     gossip.Meta{ID: "coordinator", Role: gossip.RoleCoordinator, ActorAddr: actorAddr, Incarnation: uint64(time.Now().UnixNano())},
		BindAddr: freeAddr(t), Profile: "local",
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
	logPath := filepath.Join(t.TempDir(), "d.log")
	args := []string{"--join", m.Addr(), "--gossip", freeAddr(t), "--listen", freeAddr(t), "--gossip-profile", "local",
		"--dataset", dir, "--sink", "log:" + logPath, "--size", "32", "--progress", "never", "--ranks", "2",
		"--manifest-cache", "2KiB", "--log-format", "text"}
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestNodeProcess$")
	cmd.Env = append(os.Environ(), nodeProcessEnv+"="+strings.Join(args, "\n"))
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("node: %v\n%s%s", err, out.String(), errb.String())
	}
	select {
	case <-co.Done():
	case <-ctx.Done():
		t.Fatal("the coordinator never saw the job done")
	}
	if !strings.Contains(errb.String(), "reading the manifest through its index") {
		t.Errorf("the node did not take the lazy path:\n%s", errb.String())
	}
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	count := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if cols := strings.Split(sc.Text(), "\t"); len(cols) == 4 && cols[0] == "0" {
			count[cols[3]]++
		}
	}
	var got []string
	for k, c := range count {
		if c != 1 {
			t.Errorf("%s delivered %d times", k, c)
		}
		got = append(got, k)
	}
	sort.Strings(got)
	sorted := append([]string(nil), want...)
	sort.Strings(sorted)
	if strings.Join(got, ",") != strings.Join(sorted, ",") {
		t.Errorf("delivered %d distinct keys %q, want the dataset's %d", len(got), got, len(want))
	}
}
