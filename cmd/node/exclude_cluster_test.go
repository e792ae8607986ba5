package main

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// TestClusterExclude: the coordinator's dataset is the one left after
// --exclude (its digest covers what is left). A node given no exclusion
// list is refused at its welcome, saying to use the same list; a node
// given the same list serves the job, and no excluded sample is in any
// epoch.
func TestClusterExclude(t *testing.T) {
	root, keys := makeDataset(t, 30)
	excluded := []string{keys[2], keys[11], keys[29]}
	listPath := filepath.Join(t.TempDir(), "exclude.txt")
	if err := os.WriteFile(listPath, []byte("# quarantined by hand\n"+strings.Join(excluded, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st, err := storage.NewDirStore(root)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(listPath)
	ex, err := dataset.ReadExclusions(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	ds, err := dataset.Discover(ctx, st, dataset.DiscoverOptions{Exclude: ex})
	if err != nil || len(ds.Samples) != 27 {
		t.Fatalf("discover with exclusions: %v", err)
	}
	cfg := cluster.DefaultConfig()
	cfg.Samples, cfg.Epochs, cfg.Seed = int64(len(ds.Samples)), 2, 4
	c := startCoordinator(t, ctx, cfg, 4, dataset.ManifestDigest(ds))
	node := func(id, logPath string, extra ...string) (string, error) {
		out, logs, err := runNode(ctx, c.nodeArgs(t, append([]string{"--id", id, "--dataset", root, "--sink", "log:" + logPath, "--size", "32"}, extra...)...))
		return out + logs, err
	}

	dir := t.TempDir()
	out, err := node("plain", filepath.Join(dir, "plain.log"))
	if err == nil || !strings.Contains(out, "dataset differs") || !strings.Contains(out, "--exclude") {
		t.Fatalf("a node without the exclusion list: %v; want it refused, naming --exclude:\n%s", err, out)
	}
	logPath := filepath.Join(dir, "excluding.log")
	if out, err := node("excluding", logPath, "--exclude", listPath); err != nil {
		t.Fatalf("a node with the same list: %v\n%s", err, out)
	}
	c.waitDone(t, ctx)
	lf, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	seen := map[string]map[string]bool{}
	sc := bufio.NewScanner(lf)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) >= 4 && (cols[0] == "0" || cols[0] == "1") {
			if seen[cols[0]] == nil {
				seen[cols[0]] = map[string]bool{}
			}
			seen[cols[0]][cols[3]] = true
		}
	}
	for _, ep := range []string{"0", "1"} {
		if len(seen[ep]) != 27 {
			t.Errorf("epoch %s delivered %d distinct samples; want the 27 left", ep, len(seen[ep]))
		}
		for k := range seen[ep] {
			if slices.Contains(excluded, k) {
				t.Errorf("epoch %s delivered the excluded %s", ep, k)
			}
		}
	}
}
