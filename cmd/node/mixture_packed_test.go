package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/node"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// mixtureGets reads one epoch of a mixture, position by position in its
// order, through the node's store as the pipelines do (each sample by
// its global index), and returns, for each source whose store is packed,
// how many of its samples it read and how many GETs the node's counting
// store under it answered meanwhile.
func mixtureGets(t *testing.T, ctx context.Context, store storage.Store, cat *dataset.MixtureCatalog, mix *cluster.Mixture) (samples, gets map[string]int64) {
	t.Helper()
	counted := map[int]*storage.CountingStore{}
	before := map[int]storage.RequestStats{}
	for s, src := range cat.Sources() {
		ps, ok := src.Store.(*dataset.PackedStore)
		if !ok {
			continue
		}
		c, ok := ps.Unwrap().(*storage.CountingStore)
		if !ok {
			t.Fatalf("source %s: the packed store reads %T, want the node's counting store", src.Name, ps.Unwrap())
		}
		counted[s], before[s] = c, c.Stats()
	}
	ss, ok := store.(storage.SampleStore)
	if !ok {
		t.Fatalf("the mixture's store %T reads no samples by index", store)
	}
	samples, gets = map[string]int64{}, map[string]int64{}
	order := mix.Epoch(0)
	var buf []byte
	for p := range mix.Len() {
		idx, pad := order.Sample(p)
		if pad {
			continue
		}
		smp, _, err := cat.Sample(ctx, idx)
		if err != nil {
			t.Fatal(err)
		}
		s, _, _ := cat.Source(idx)
		samples[cat.Sources()[s].Name]++
		if buf, err = ss.GetSample(ctx, idx, smp.Key, buf[:0]); err != nil {
			t.Fatalf("position %d (%s): %v", p, smp.Key, err)
		}
	}
	for s, c := range counted {
		after := c.Stats()
		for _, op := range []storage.StoreOp{storage.OpGet, storage.OpGetRange} {
			for _, oc := range []storage.Outcome{storage.OutcomeOK, storage.OutcomeNotFound, storage.OutcomeRange, storage.OutcomeError} {
				gets[cat.Sources()[s].Name] += after.Count(op, oc) - before[s].Count(op, oc)
			}
		}
	}
	return samples, gets
}

// TestMixturePackedChunks: a mixture's packed sources (tar shards with a
// manifest, and Parquet files) beside an ImageFolder are read in chunks
// of their own orders' blocks — one ranged GET per block and shard or
// row group, not one per sample — in cluster mode, once the
// coordinator's job gives the order's block and window (the store as
// the node opens it, the job applied as the cluster source does), and
// standalone.
func TestMixturePackedChunks(t *testing.T) {
	root, keys := makeDataset(t, 48)
	packed, _ := packDataset(t, root, keys, 16)   // 3 shards of 16
	pq, _ := parquetDataset(t, root, keys, 16, 8) // 3 files of 2 row groups of 8
	folder, _ := makeDataset(t, 48)
	const block, window = 8, 2 // 6 blocks of 8: each within a shard, each a row group
	spec := "p=" + packed + ":1,q=" + pq + ":1,f=" + folder + ":1"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logger := slog.New(slog.DiscardHandler)
	for _, mode := range []string{"cluster", "standalone"} {
		t.Run(mode, func(t *testing.T) {
			args := []string{"--mixture", spec, "--pack-cache", "256MiB", "--batch-size", "12", "--seed", "3", "--size", "32"}
			if mode == "standalone" {
				args = append(args, "--standalone", "--block", "8", "--mix-window", "2")
			} else {
				args = append(args, "--join", "127.0.0.1:1", "--gossip", "127.0.0.1:0", "--listen", "127.0.0.1:0") // never dialled
			}
			o, err := parseFlags(args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			data, err := openNodeData(ctx, o, logger)
			if err != nil {
				t.Fatal(err)
			}
			defer data.close()
			mix := data.mix
			if mode == "cluster" {
				// What the cluster source does with the coordinator's
				// job: the assembly's OnJob, then the job's mixture.
				asm, err := node.Assemble(node.AssemblyConfig{Ranks: 2, Pipeline: actors.DefaultConfig(), Deps: actors.Deps{Store: data.store},
					Logger: logger, UseDecoder: func(*actors.Config, *actors.Deps) error { return nil }})
				if err != nil {
					t.Fatal(err)
				}
				defer asm.Close()
				j := node.Job{Samples: 144, Seed: 3, Epochs: 1, BatchSize: 12, Block: block, Window: window}
				asm.ClusterConfig(node.Config{Node: "n"}, 0, nil).OnJob(j)
				if mix, _, err = data.clusterMix.mixture(j); err != nil {
					t.Fatal(err)
				}
			}
			cat := dataset.MixtureOf(data.store)
			if cat == nil || mix == nil {
				t.Fatalf("no mixture opened (store %s)", data.store)
			}
			var names []string
			for _, src := range cat.Sources() {
				names = append(names, src.Name)
			}
			if got := strings.Join(names, ","); got != "p,q,f" {
				t.Fatalf("sources %s, want p,q,f", got)
			}
			samples, gets := mixtureGets(t, ctx, data.store, cat, mix)
			if len(gets) != 2 {
				t.Fatalf("packed sources %v, want p and q", gets)
			}
			for _, name := range []string{"p", "q"} {
				n, gets := samples[name], gets[name]
				t.Logf("%s: packed source %s: %d GETs for %d samples (%.3f a sample; blocks of %d)", mode, name, gets, n, float64(gets)/float64(n), block)
				if n != 48 {
					t.Fatalf("%d samples of source %s in the mixture's epoch, want 48 (weights 1:1:1, rounds of 12)", n, name)
				}
				// 6 blocks, each in one shard or row group: 6 chunk
				// reads, where one a sample is 48.
				if gets != 6 {
					t.Errorf("%s: source %s took %d GETs for %d samples, want one per block of %d (6)", mode, name, gets, n, block)
				}
			}
		})
	}
}

// TestClusterMixturePacked runs nodes in cluster mode over a mixture of
// a packed dataset and an ImageFolder, against a coordinator in this
// process: each source's samples are delivered once in the job's epoch
// (48 draws of each in 96 positions), and the packed source's are read
// in chunks of its order's blocks — each node logs the source's chunk
// cache and its summary counts it — not one ranged GET per sample. On
// one node that is one GET a block (6 for 48 samples); on two, a block
// whose samples lie in both nodes' leases is fetched by each, so at most
// twice that.
func TestClusterMixturePacked(t *testing.T) {
	root, keys := makeDataset(t, 48)
	packed, pkeys := packDataset(t, root, keys, 16) // 3 shards of 16
	folder, fkeys := makeDataset(t, 48)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const block, window, round = 8, 2, 8 // 6 blocks of 8, each within a shard
	phases, err := cluster.ParseMixSchedule("p:1,f:1", []string{"p", "f"})
	if err != nil {
		t.Fatal(err)
	}
	mix, err := cluster.NewMixture(cluster.MixSpec{Seed: 3, Block: block, Window: cluster.EffectiveWindow(block, window), Round: round,
		Sources: []cluster.MixSource{{Name: "p", Samples: 48}, {Name: "f", Samples: 48}}, Phases: phases})
	if err != nil {
		t.Fatal(err)
	}
	digest := dataset.MixtureDigest(mix.Identity(), []dataset.MixtureDigestSource{
		{Name: "p", Samples: 48, Digest: dataset.ManifestDigest(discoverDir(t, ctx, packed))},
		{Name: "f", Samples: 48, Digest: dataset.ManifestDigest(discoverDir(t, ctx, folder))}})
	chunkRe := regexp.MustCompile(`chunk cache".* source=p chunks=(\d+) .* read_alone=(\d+)`)
	for _, nodes := range []int{1, 2} {
		t.Run(fmt.Sprintf("nodes=%d", nodes), func(t *testing.T) {
			cfg := cluster.DefaultConfig()
			cfg.Samples, cfg.Epochs, cfg.ShardSize, cfg.Block, cfg.Window, cfg.Seed, cfg.Align = mix.Len(), 1, 24, block, window, 3, round
			cfg.MinRanks = 2 * nodes // every node's ranks share the epoch
			c := startCoordinator(t, ctx, cfg, round, digest)
			type result struct {
				out, logs string
				err       error
			}
			dir := t.TempDir()
			results := make([]result, nodes)
			var wg sync.WaitGroup
			for i := range nodes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := &results[i]
					r.out, r.logs, r.err = runNode(ctx, c.nodeArgs(t, "--id", fmt.Sprintf("n%d", i), "--mixture", "p="+packed+":1,f="+folder+":1",
						"--sink", "log:"+filepath.Join(dir, fmt.Sprintf("d%d.log", i)), "--size", "32", "--ranks", "2",
						"--stats-json", filepath.Join(dir, fmt.Sprintf("s%d.json", i)), "--pack-cache", "256MiB")) // chunks, though the directory is local
				}()
			}
			wg.Wait()
			for _, r := range results {
				if r.err != nil {
					t.Fatalf("node: %v\n%s%s", r.err, r.out, r.logs)
				}
			}
			c.waitDone(t, ctx)

			count := map[string]int{}
			chunks, alone := 0, 0
			for i, r := range results {
				b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("d%d.log", i)))
				if err != nil {
					t.Fatal(err)
				}
				mine := 0
				for _, line := range strings.Split(string(b), "\n") {
					if cols := strings.Split(line, "\t"); len(cols) == 4 && cols[0] == "0" {
						count[cols[3]]++
						mine++
					}
				}
				if mine == 0 {
					t.Errorf("node %d delivered nothing: its ranks never shared the epoch", i)
				}
				mm := chunkRe.FindStringSubmatch(r.logs)
				if mm == nil {
					t.Fatalf("node %d: no chunk cache figures of source p in the log:\n%s", i, r.logs)
				}
				c, _ := strconv.Atoi(mm[1])
				a, _ := strconv.Atoi(mm[2])
				stats := readStats(t, filepath.Join(dir, fmt.Sprintf("s%d.json", i)))
				pack, _ := stats["pack"].(map[string]any)
				if pack == nil || pack["chunks"].(float64) != float64(c) || pack["read_alone"].(float64) != float64(a) {
					t.Errorf("node %d: --stats-json pack %v: want the packed source's %d chunks and %d read alone", i, stats["pack"], c, a)
				}
				chunks, alone = chunks+c, alone+a
			}
			for _, src := range []struct {
				name string
				keys []string
			}{{"p", pkeys}, {"f", fkeys}} {
				for _, k := range src.keys {
					if n := count[src.name+"/"+k]; n != 1 {
						t.Errorf("%s/%s delivered %d times, want once", src.name, k, n)
					}
				}
			}
			if len(count) != 96 {
				t.Errorf("%d distinct samples delivered, want the 96 of both sources", len(count))
			}
			t.Logf("%d node(s): packed source p: %d chunk GETs and %d single GETs for 48 samples (%.3f a sample)", nodes, chunks, alone, float64(chunks+alone)/48)
			if chunks < 6 || chunks > 6*nodes || alone > 4 {
				t.Errorf("%d node(s): source p took %d chunk reads and %d single reads for 48 samples in blocks of %d; want one a block and node at most (6 each)", nodes, chunks, alone, block)
			}
		})
	}
}

// TestAddPackedStats: every counter of dataset.PackedStats is summed (a
// field added there and not here would read 0 for a mixture).
func TestAddPackedStats(t *testing.T) {
	var one dataset.PackedStats
	v := reflect.ValueOf(&one).Elem()
	for i := range v.NumField() {
		v.Field(i).SetInt(int64(i + 1))
	}
	sum := reflect.ValueOf(addPackedStats(one, one))
	for i := range v.NumField() {
		if got := sum.Field(i).Int(); got != 2*int64(i+1) {
			t.Errorf("%s: %d summed with itself is %d", v.Type().Field(i).Name, i+1, got)
		}
	}
}
