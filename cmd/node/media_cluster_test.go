package main

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// TestClusterAudio runs --media audio in cluster mode (a packed dataset:
// the coordinator reads its manifest) against a coordinator in this
// process: every waveform once, and each the very window the standalone
// node gives it (the window follows seed, epoch, index, not who served it).
func TestClusterAudio(t *testing.T) {
	root := audioDataset(t)
	keys := relKeys(t, root)
	packed, _ := packDataset(t, root, keys, 4)
	media := []string{"--media", "audio", "--transform", "train", "--audio-seconds", "0.5", "--sample-rate", "8000", "--seed", "4"}
	want := map[string]string{}
	for _, l := range runMedia(t, root, media...) {
		if f := strings.Fields(l); f[0] == "0" {
			want[f[1]] = f[2]
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st, err := storage.NewDirStore(packed)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := storage.Discover(ctx, st, storage.DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := cluster.DefaultConfig()
	cfg.Samples, cfg.Epochs, cfg.ShardSize, cfg.Seed = int64(len(ds.Samples)), 1, 4, 4
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	rem, actorAddr, err := wire.StartRemote(sys, freeAddr(t), "")
	if err != nil {
		t.Fatal(err)
	}
	defer rem.Shutdown(false)
	co, err := coord.Start(sys, coord.Config{Cluster: cfg, BatchSize: 3, Digest: storage.ManifestDigest(ds), TickEvery: 100 * time.Millisecond})
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
	args := append([]string{"--join", m.Addr(), "--gossip", freeAddr(t), "--listen", freeAddr(t), "--gossip-profile", "local",
		"--dataset", packed, "--sink", "log:" + logPath, "--log-pixels", "--progress", "never", "--ranks", "2",
		"--log-format", "text", "--decoders", "2"}, media...)
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
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]string{}
	count := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if cols[0] != "0" || len(cols) != 5 {
			continue // commits, sessions, pads
		}
		for _, k := range keys {
			if strings.HasSuffix(cols[3], k) {
				count[k]++
				got[k] = cols[4]
			}
		}
	}
	for _, k := range keys {
		if count[k] != 1 {
			t.Errorf("%s delivered %d times", k, count[k])
		}
		if got[k] != want[k] {
			t.Errorf("%s: cluster window %s, standalone %s", k, got[k], want[k])
		}
	}
	if len(want) != len(keys) || !slices.Equal(slices.Sorted(maps.Keys(got)), keys) {
		t.Errorf("delivered %v, want %v", slices.Sorted(maps.Keys(got)), keys)
	}
}
