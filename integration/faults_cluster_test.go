package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage/faultproxy"
	"github.com/longshore/longshore/storage/miniotest"
)

// nodeStats is the part of a node's --stats-json these tests read.
type nodeStats struct {
	Images   int64 `json:"images"`
	PeakRSS  int64 `json:"peak_rss_bytes"`
	Failures struct {
		Total    int64            `json:"total"`
		ByReason map[string]int64 `json:"by_reason"`
	} `json:"failures"`
	Store *struct {
		Requests       int64            `json:"requests"`
		Retries        int64            `json:"retries"`
		RetriesByCause map[string]int64 `json:"retries_by_cause"`
		Throttled      int64            `json:"throttled"`
		Budget         float64          `json:"budget"`
		Ceiling        float64          `json:"ceiling"`
	} `json:"store"`
}

func readNodeStats(t *testing.T, path string) nodeStats {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s nodeStats
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return s
}

// uploadTree copies every file under dir to bucket under prefix.
func uploadTree(t testing.TB, srv *miniotest.Server, bucket, prefix, dir string) {
	t.Helper()
	cl := srv.Client(t)
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		_, err = cl.FPutObject(t.Context(), bucket, prefix+filepath.ToSlash(rel), p, minioPutOptions())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

var manifestKey = regexp.MustCompile(`"key":"([^"]+)"`)

// TestClusterFaultSchedules: a coordinator and 2 nodes × 2 ranks read a
// plain and a packed dataset on MinIO through the fault-injecting proxy
// (storage/faultproxy), one schedule at a time, two epochs each. The
// coordinator reads MinIO directly; the nodes' every GET goes through
// the proxy. Transient schedules (SlowDown with and without Retry-After,
// 500, resets mid-body, short and corrupt bodies, a trickle past the
// request timeout, silence, a refused endpoint; for packed chunks a
// wrong Content-Range and a throttled rate) keep exactly once in
// committed history with no sample failed, and the nodes count their
// retries by cause; 403 and 404 on a key set (a whole shard, packed)
// fail exactly those samples, once per epoch, with their reason, in the
// nodes' counts and quarantine files, while every other sample is
// committed exactly once. Peak RSS per node is stated and bounded.
func TestClusterFaultSchedules(t *testing.T) {
	const n, perShard, epochs = 96, 12, 2
	srv := miniotest.Start(t)
	dir, keys := makeDataset(t, n)
	packed := filepath.Join(t.TempDir(), "packed")
	if out, err := exec.Command("go", "run", "../cmd/longshore-pack", "--dataset", dir, "--out", packed,
		"--per-shard", fmt.Sprint(perShard), "--shuffle=false").CombinedOutput(); err != nil {
		t.Fatalf("longshore-pack: %v\n%s", err, out)
	}
	bucket := srv.NewBucket(t)
	uploadTree(t, srv, bucket, "plain/", dir)
	uploadTree(t, srv, bucket, "packed/", packed)
	// The samples of shard 1 of the packed dataset, by their keys before
	// packing (what the checker compares).
	manifest, err := os.ReadFile(filepath.Join(packed, "manifest.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var shard1 []string
	for _, m := range manifestKey.FindAllStringSubmatch(string(manifest), -1) {
		if strings.HasPrefix(m[1], "shards/shard-000001.tar/") {
			shard1 = append(shard1, unpackedKey(m[1]))
		}
	}
	if len(shard1) != perShard {
		t.Fatalf("shard 1 holds %d samples in the manifest, want %d", len(shard1), perShard)
	}
	denied, gone := keys[3], keys[50]
	get, rng := faultproxy.OpGet, faultproxy.OpGetRange
	type schedule struct {
		name    string
		packed  bool
		rules   []faultproxy.Rule
		failing map[string]string // key -> failure class
		causes  []string          // retry causes the nodes must count
	}
	toSet := func(ks []string, class string) map[string]string {
		m := map[string]string{}
		for _, k := range ks {
			m[k] = class
		}
		return m
	}
	schedules := []schedule{
		{name: "plain/transient", rules: []faultproxy.Rule{
			{Ops: get, Skip: 5, FirstN: 4, Fault: faultproxy.SlowDown(0)},
			{Ops: get, Skip: 12, FirstN: 1, Fault: faultproxy.SlowDown(time.Second)},
			{Ops: get, Skip: 15, FirstN: 2, Fault: faultproxy.Status(500, "InternalError")},
			{Ops: get, Skip: 20, FirstN: 2, Fault: faultproxy.ResetAfter(200)},
			{Ops: get, Skip: 25, FirstN: 2, Fault: faultproxy.ShortBody(10)},
			{Ops: get, Skip: 30, FirstN: 2, Fault: faultproxy.Corrupt(4)},
			{Ops: get, Skip: 35, FirstN: 1, Fault: faultproxy.Trickle(200)},
			{Ops: get, Skip: 45, FirstN: 1, Fault: faultproxy.Silence()},
			{Ops: get, Skip: 60, FirstN: 1, Fault: faultproxy.Refuse(time.Second)},
		}, causes: []string{"throttle", "server", "conn", "bad_response", "timeout"}},
		{name: "plain/403+404", rules: []faultproxy.Rule{
			{Ops: faultproxy.Reads, Key: faultproxy.Keys("plain/" + denied), Fault: faultproxy.Status(403, "AccessDenied")},
			{Ops: faultproxy.Reads, Key: faultproxy.Keys("plain/" + gone), Fault: faultproxy.Status(404, "NoSuchKey")},
		}, failing: map[string]string{denied: "access_denied", gone: "not_found"}},
		{name: "packed/transient", packed: true, rules: []faultproxy.Rule{
			{Ops: rng, FirstN: 2, Fault: faultproxy.SlowDown(0)},
			{Ops: rng, Skip: 2, FirstN: 1, Fault: faultproxy.WrongRange(100)},
			{Ops: rng, Skip: 3, FirstN: 1, Fault: faultproxy.ShortBody(1)},
			{Ops: rng, Skip: 4, FirstN: 1, Fault: faultproxy.ResetAfter(1000)},
			// No Corrupt here: a ranged answer has no checksum to check
			// (docs/faults.md), so flipped bytes in a chunk are not seen.
			{Ops: rng, Skip: 5, FirstN: 3, Fault: faultproxy.SlowDownAbove(1)},
		}, causes: []string{"throttle", "bad_response", "conn"}},
		{name: "packed/403 on a shard", packed: true, rules: []faultproxy.Rule{
			{Ops: faultproxy.Reads, Key: faultproxy.Keys("packed/shards/shard-000001.tar"), Fault: faultproxy.Status(403, "AccessDenied")},
		}, failing: toSet(shard1, "access_denied")},
	}
	t.Logf("CLUSTER | schedule | node requests, retries (by cause), throttled | seconds | failed | peak RSS per node")
	for _, sc := range schedules {
		t.Run(strings.ReplaceAll(sc.name, " ", "_"), func(t *testing.T) {
			p := faultproxy.Start(t, srv.Endpoint, sc.rules...)
			datasetURL := srv.URL(bucket, "plain")
			if sc.packed {
				datasetURL = srv.URL(bucket, "packed")
			}
			c := startCluster(t, job{dataset: datasetURL, env: srv.Env(), epochs: epochs, batch: 4, shard: 8, balance: "equal",
				commit: 2, minRanks: 4})
			var stats, quarantines []string
			for i := range 2 {
				st := filepath.Join(c.dir, fmt.Sprintf("n%d.json", i+1))
				q := filepath.Join(c.dir, fmt.Sprintf("n%d.quarantine", i+1))
				stats, quarantines = append(stats, st), append(quarantines, q)
				// 403 on a shard fails an eighth of the samples (12 of 96
				// an epoch); how many of them one node gets depends on the
				// leases it takes, so each node's budget leaves room.
				// Hedging off: each schedule checks that its faults are
				// retried by cause, and a hedged GET (on by default) would
				// answer for the silent request before its timeout.
				args := []string{"--s3-endpoint", p.URL, "--stats-json", st, "--quarantine", q, "--max-failures", "50%",
					"--request-timeout", "2s", "--hedge-quantile", "0"}
				if sc.packed {
					// The schedules are written for the packed path's
					// chunks (one ranged GET a block); longshore-pack now
					// writes a manifest index, and with it a cluster node
					// would take the lazy path, which reads each packed
					// sample alone (docs/scale.md).
					args = append(args, "--manifest-cache", "0")
				}
				c.addNode(args...)
			}
			start := time.Now()
			c.finish()
			secs := time.Since(start).Seconds()
			var delivered []string
			for _, k := range keys {
				if _, fails := sc.failing[k]; !fails {
					delivered = append(delivered, k)
				}
			}
			c.history(delivered) // exactly once in committed history

			var failed, requests, retries, throttled int64
			causes := map[string]int64{}
			reasons := map[string]int64{}
			var rss []string
			for i, path := range stats {
				s := readNodeStats(t, path)
				failed += s.Failures.Total
				for r, k := range s.Failures.ByReason {
					reasons[r] += k
				}
				if s.Store == nil {
					t.Fatalf("n%d's --stats-json has no store figures", i+1)
				}
				requests, retries, throttled = requests+s.Store.Requests, retries+s.Store.Retries, throttled+s.Store.Throttled
				for cause, k := range s.Store.RetriesByCause {
					causes[cause] += k
				}
				rss = append(rss, fmt.Sprintf("%.0f MiB", float64(s.PeakRSS)/(1<<20)))
				// Bounded whatever the proxy does: the node's buffers are a
				// few fetches and slots of 16×16 samples, a packed window's
				// chunks; a leak per retry or per held connection would show.
				if s.PeakRSS > 512<<20 {
					t.Errorf("n%d peaked at %d MiB RSS", i+1, s.PeakRSS>>20)
				}
			}
			if want := int64(epochs * len(sc.failing)); failed != want {
				t.Errorf("the nodes counted %d failures (%v), want %d (%d samples × %d epochs)", failed, reasons, want, len(sc.failing), epochs)
			}
			wantReasons := map[string]int64{}
			for _, class := range sc.failing {
				wantReasons["fetch/"+class] += epochs
			}
			if fmt.Sprint(reasons) != fmt.Sprint(wantReasons) {
				t.Errorf("failures by reason %v, want %v", reasons, wantReasons)
			}
			quarantined := map[string]string{}
			for _, q := range quarantines {
				f, err := os.Open(q)
				if os.IsNotExist(err) {
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				sc := bufio.NewScanner(f)
				for sc.Scan() {
					var l dataset.ExclusionLine
					if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
						t.Fatalf("quarantine line %q: %v", sc.Text(), err)
					}
					quarantined[unpackedKey(l.Key)] = l.Class
				}
				f.Close()
			}
			if fmt.Sprint(quarantined) != fmt.Sprint(sc.failing) {
				t.Errorf("quarantined %v, want %v", quarantined, sc.failing)
			}
			if len(sc.failing) > 0 && retries != 0 {
				t.Errorf("403/404 were retried %d times (%v)", retries, causes)
			}
			for _, cause := range sc.causes {
				if causes[cause] == 0 {
					t.Errorf("retries by cause %v: no %s retry, though the schedule injects one", causes, cause)
				}
			}
			for i, r := range sc.rules {
				if p.Fired(i) == 0 {
					t.Errorf("rule %d (%v) never fired: the schedule did not run", i, r.Fault.Kind)
				}
			}
			t.Logf("CLUSTER | %-21s | %d requests, %d retries (%v), %d throttled | %.1f s | %d failed | %s",
				sc.name, requests, retries, causes, throttled, secs, failed, strings.Join(rss, ", "))
		})
	}
}
