package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	core "github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/internal/testports"
	"github.com/longshore/longshore/storage"
)

// The mixture tests run a weighted mixture of three datasets (121, 40
// and 200 samples: 361, an epoch of 46 whole rounds of 8 = 368
// positions) with a schedule of three phases, batches of 8 (the round)
// on 2-rank nodes, two epochs.
const (
	mixBatch    = 8
	mixSchedule = "a:0.5,b:0.25,c:0.25; a:1,b:1,c:2@184; a:3,b:1,c:4@400"
)

var mixSizes = []int{121, 40, 200}

// mixFixture makes the three sources and returns the --mixture flag and
// the key of every global index (the node's MixtureCatalog order).
func mixFixture(t *testing.T) (spec string, keys []string) {
	t.Helper()
	var parts []string
	for s, n := range mixSizes {
		name := string(rune('a' + s))
		dir, _ := makeDataset(t, n)
		parts = append(parts, name+"="+dir)
		st, err := storage.NewDirStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		ds, err := dataset.Discover(context.Background(), st, dataset.DiscoverOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, smp := range ds.Samples {
			keys = append(keys, name+"/"+smp.Key)
		}
	}
	return strings.Join(parts, ","), keys
}

// mixExpected is the job's stream: the key at each position of each
// epoch, and the mixture, as the cluster.Mixture of the job (the
// coordinator's seed 11, block 1) draws it.
func mixExpected(t *testing.T, keys []string, epochs int) (*core.Mixture, [][]string) {
	t.Helper()
	var srcs []core.MixSource
	names := []string{"a", "b", "c"}
	for s, n := range mixSizes {
		srcs = append(srcs, core.MixSource{Name: names[s], Samples: int64(n)})
	}
	phases, err := core.ParseMixSchedule(mixSchedule, names)
	if err != nil {
		t.Fatal(err)
	}
	m, err := core.NewMixture(core.MixSpec{Seed: 11, Block: 1, Window: core.EffectiveWindow(1, core.DefaultWindow),
		Round: mixBatch, Sources: srcs, Phases: phases})
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]string, epochs)
	for e := range epochs {
		for p := range m.Len() {
			out[e] = append(out[e], keys[m.At(int64(e)*m.Len()+p)])
		}
	}
	return m, out
}

func mixJob(spec string, extraCoord ...string) job {
	return job{epochs: 2, batch: mixBatch, shard: 16, balance: "equal", commit: 2, stepTime: 20 * time.Millisecond,
		extraCoord: append([]string{"--mixture", spec, "--mixture-schedule", mixSchedule}, extraCoord...)}
}

func (c *cluster) addMixNode(spec string) *proc {
	return c.addNode("--mixture", spec, "--mixture-schedule", mixSchedule)
}

// checkMixture checks committed history against the mixture's stream:
// each epoch's committed real samples are exactly its positions' (so
// each source's draws, in every source epoch exactly once: checked
// directly too); every committed batch is one whole round holding each
// source in its exact count, and padding comes in whole rounds. It
// returns each epoch's committed samples per source, sorted.
func checkMixture(t *testing.T, h *history, m *core.Mixture, want [][]string) map[string][]string {
	t.Helper()
	for k, s := range h.nodeAcked {
		if a, ok := h.allAcked[k]; !ok || a < s {
			t.Errorf("node logged commit %v step %d, coordinator acknowledged %d", k, s, a)
		}
	}
	// Not h.checkResume: it goes by key, and a mixture draws a small
	// source's samples several times an epoch. The multiset of each
	// epoch's committed samples being its positions' (below) is the
	// stronger check: a position committed twice would show.
	var rounds [][]int64
	for _, p := range []int64{0, 184, 400} {
		c, _, _ := m.Counts(p + mixBatch) // the round after the phase's start
		rounds = append(rounds, c)
	}
	perSource, batches := checkMixtureEpochs(t, h, want, func(k stepKey, counts []int64, pads, size int) {
		switch {
		case size != mixBatch:
			t.Errorf("committed batch %v holds %d samples, want a round of %d", k, size, mixBatch)
		case pads != 0 && pads != mixBatch:
			t.Errorf("committed batch %v: %d of %d padding, want whole rounds", k, pads, size)
		case pads == 0 && !slices.ContainsFunc(rounds, func(r []int64) bool { return slices.Equal(r, counts) }):
			t.Errorf("committed batch %v holds %v of the sources, not a round's counts %v", k, counts, rounds)
		}
	})
	// Each source: D draws over the job, every sample floor(D/N) or
	// ceil(D/N) times (the draws are whole source epochs and a part).
	for s, n := range mixSizes {
		name := string(rune('a' + s))
		count := map[string]int{}
		d := 0
		for e := range want {
			for _, k := range perSource[fmt.Sprintf("%d/%s", e, name)] {
				count[k]++
				d++
			}
		}
		lo, hi := d/n, (d+n-1)/n
		for k, c := range count {
			if c < lo || c > hi {
				t.Errorf("source %s: %s committed %d times in %d draws of %d samples, want %d..%d", name, k, c, d, n, lo, hi)
			}
		}
		if lo > 0 && len(count) != n {
			t.Errorf("source %s: %d distinct samples committed in %d draws of %d", name, len(count), d, n)
		}
	}
	t.Logf("%d committed batches of %d, each one round: counts per phase %v", batches, mixBatch, rounds)
	for k := range perSource {
		sort.Strings(perSource[k])
	}
	return perSource
}

// checkMixtureEpochs walks the committed batches of a 3-source mixture
// (a key's source is its first path element: a, b or c), calling batch
// with each one's real samples per source, its padding and its size, and
// checks each epoch's committed real samples are exactly want's. It
// returns the committed keys by "epoch/source" and the batches seen.
func checkMixtureEpochs(t *testing.T, h *history, want [][]string, batch func(k stepKey, counts []int64, pads, size int)) (map[string][]string, int) {
	t.Helper()
	perSource := map[string][]string{}
	got := make([][]string, len(want))
	batches := 0
	for k, ss := range h.delivered {
		if a, ok := h.acked[k.sessionEpoch]; !ok || k.step > a {
			continue
		}
		counts := make([]int64, 3)
		pads := 0
		for _, s := range ss {
			if s.pad {
				pads++
				continue
			}
			counts[s.key[0]-'a']++
			got[k.epoch] = append(got[k.epoch], s.key)
			src, _, _ := strings.Cut(s.key, "/")
			perSource[fmt.Sprintf("%d/%s", k.epoch, src)] = append(perSource[fmt.Sprintf("%d/%s", k.epoch, src)], s.key)
		}
		batch(k, counts, pads, len(ss))
		batches++
	}
	for e := range want {
		w := slices.Clone(want[e])
		sort.Strings(w)
		sort.Strings(got[e])
		if !slices.Equal(w, got[e]) {
			t.Errorf("epoch %d: committed %d samples, the mixture's %d positions differ (first: %v)", e, len(got[e]), len(w), firstDiff(w, got[e]))
		}
	}
	return perSource, batches
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("%q vs %q at %d", a[i], b[i], i)
		}
	}
	return fmt.Sprintf("lengths %d, %d", len(a), len(b))
}

// TestClusterMixture: the same 3-source mixture with a schedule on 1, 2
// and 3 nodes: every committed batch exact, each source exactly once per
// its epoch, and the same committed history per source at every size
// (the mixture's stream, a function of the seed and the mixture alone).
func TestClusterMixture(t *testing.T) {
	spec, keys := mixFixture(t)
	m, want := mixExpected(t, keys, 2)
	var first map[string][]string
	for nodes := 1; nodes <= 3; nodes++ {
		t.Run(fmt.Sprintf("nodes=%d", nodes), func(t *testing.T) {
			j := mixJob(spec)
			j.minRanks = 2 * nodes
			page := ""
			if nodes == 1 {
				page = testports.Addr(t, "127.0.0.1")
				j.extraCoord = append(j.extraCoord, "--http", page, "--metrics", testports.Addr(t, "127.0.0.1"), "--metrics-linger", "10s")
			}
			c := startCluster(t, j)
			for range nodes {
				c.addMixNode(spec)
			}
			if page != "" {
				checkMixturePage(t, c.coord, page, want)
			}
			c.finish()
			h, err := readHistory(c.nodeLogs, filepath.Join(c.dir, "coord.acks"))
			if err != nil {
				t.Fatal(err)
			}
			got := checkMixture(t, h, m, want)
			if first == nil {
				first = got
			} else if !mapsEqual(first, got) {
				t.Errorf("%d nodes committed another history per source than 1 node", nodes)
			}
		})
	}
}

func mapsEqual(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestClusterMixtureRestart: a node killed mid-epoch, then the
// coordinator killed and restarted from its journal, the node started
// again: committed history per source is the mixture's, as without
// faults. A coordinator restarted on that journal with another schedule
// is refused (the mixture's digest differs).
func TestClusterMixtureRestart(t *testing.T) {
	spec, keys := mixFixture(t)
	m, want := mixExpected(t, keys, 2)
	journalDir := filepath.Join(t.TempDir(), "journal")
	j := mixJob(spec, "--checkpoint", journalDir, "--journal-keep", "100000")
	j.minRanks, j.stepTime = 4, 60*time.Millisecond
	c := startCluster(t, j)
	c.addMixNode(spec)
	c.addMixNode(spec)
	c.midEpoch()
	c.nodes[1].kill(t)
	c.coord.kill(t)
	c.restartCoordinator()
	c.restartNode(1)
	c.finish()
	h, err := readHistory(c.nodeLogs, filepath.Join(c.dir, "coord.acks"))
	if err != nil {
		t.Fatal(err)
	}
	c.checkLives(h, 2)
	checkMixture(t, h, m, want)

	// Another schedule on the same journal: refused, naming the dataset.
	other := c.restartCoordinator("--mixture-schedule", "a:1,b:1,c:1")
	err = other.wait(t, time.Minute)
	b, _ := os.ReadFile(other.stderr)
	if err == nil || !strings.Contains(string(b), "dataset") {
		t.Errorf("a coordinator with another schedule on the journal: %v; want it refused naming the dataset:\n%s", err, tail(other.stderr, 10))
	}
}

// checkMixturePage waits for the coordinator's status.json at addr to
// say the job is done, and checks its per-source committed samples:
// every epoch's draws of each source, as the mixture's stream has them.
func checkMixturePage(t *testing.T, coord *proc, addr string, want [][]string) {
	t.Helper()
	wantN := map[string]int64{}
	for _, keys := range want {
		for _, k := range keys {
			src, _, _ := strings.Cut(k, "/")
			wantN[src]++
		}
	}
	var st struct {
		Done    bool `json:"done"`
		Mixture []struct {
			Source    string `json:"source"`
			Samples   int64  `json:"samples"`
			Committed int64  `json:"committed"`
		} `json:"mixture"`
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !st.Done {
		select {
		case <-coord.done:
			t.Fatalf("the coordinator exited before status.json said the job is done:\n%s", tail(coord.stderr, 10))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("status.json never said the job is done")
		}
		time.Sleep(100 * time.Millisecond)
		resp, err := http.Get("http://" + addr + "/status.json")
		if err != nil {
			continue // not serving yet
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			continue // the page is not up yet (the journal loading, ...)
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(st.Mixture) != 3 {
		t.Fatalf("status.json mixture %+v: want 3 sources", st.Mixture)
	}
	for i, m := range st.Mixture {
		if m.Source != string(rune('a'+i)) || m.Samples != int64(mixSizes[i]) || m.Committed != wantN[m.Source] {
			t.Errorf("status.json source %+v, want %c of %d samples, %d committed", m, 'a'+i, mixSizes[i], wantN[m.Source])
		}
	}
	t.Logf("status page, job done: %+v", st.Mixture)
}

// TestClusterMixtureExclude: --exclude of the mixture's keys
// (<source>/<key>) on the coordinator and the node: each source leaves
// out its own (the digests agree, so the node is welcomed), the excluded
// samples are never committed, and every other sample is.
func TestClusterMixtureExclude(t *testing.T) {
	spec, keys := mixFixture(t)
	excl := filepath.Join(t.TempDir(), "exclude")
	gone := map[string]bool{keys[5]: true, keys[121+7]: true, keys[161+100]: true} // one of each source
	var text strings.Builder
	for k := range gone {
		fmt.Fprintf(&text, "{\"key\": %q, \"reason\": \"decode/corrupt\"}\n", k)
	}
	if err := os.WriteFile(excl, []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	j := mixJob(spec, "--exclude", excl)
	j.minRanks = 2
	c := startCluster(t, j)
	c.addNode("--mixture", spec, "--mixture-schedule", mixSchedule, "--exclude", excl)
	c.finish()
	h, err := readHistory(c.nodeLogs, filepath.Join(c.dir, "coord.acks"))
	if err != nil {
		t.Fatal(err)
	}
	committed := map[string]int{}
	for k, ss := range h.delivered {
		if a, ok := h.acked[k.sessionEpoch]; ok && k.step <= a {
			for _, s := range ss {
				if !s.pad {
					committed[s.key]++
				}
			}
		}
	}
	for _, k := range keys {
		switch {
		case gone[k] && committed[k] > 0:
			t.Errorf("%s was excluded and committed %d times", k, committed[k])
		case !gone[k] && committed[k] == 0:
			t.Errorf("%s was not excluded and never committed", k)
		}
	}
	t.Logf("%d distinct samples committed, %d excluded", len(committed), len(gone))
}

// TestClusterMixtureDynamic: the mixture with --balance dynamic, one of
// four ranks five times slower, so the others steal the tails of its
// leases: the splits fall on whole rounds (the coordinator's revoke and
// where the rank stops), so every committed batch is still one whole
// round holding each source in its exact count, and each epoch's
// committed samples are exactly its positions' (checkMixture).
func TestClusterMixtureDynamic(t *testing.T) {
	spec, keys := mixFixture(t)
	m, want := mixExpected(t, keys, 2)
	j := mixJob(spec)
	j.balance, j.shard, j.stealMin, j.minRanks = "dynamic", 64, 4, 4
	c := startCluster(t, j)
	c.addNode("--mixture", spec, "--mixture-schedule", mixSchedule, "--slow-ranks", "0", "--slow-factor", "5")
	c.addMixNode(spec)
	c.finish()
	done := c.coordEvents("job done")
	if len(done) != 1 {
		t.Fatalf("job done events: %v", done)
	}
	revokes, _ := strconv.Atoi(done[0]["revokes"])
	if revokes == 0 {
		t.Fatalf("no lease was split (job done: %v): the test proves nothing", done[0])
	}
	h, err := readHistory(c.nodeLogs, filepath.Join(c.dir, "coord.acks"))
	if err != nil {
		t.Fatal(err)
	}
	checkMixture(t, h, m, want)
	t.Logf("%d lease splits", revokes)
}
