package integration

import (
	"path/filepath"
	"testing"

	"github.com/longshore/longshore/storage/miniotest"
)

// TestClusterStoreBudget: the coordinator's --job-store-rps is divided
// among the live nodes by their ranks. Two nodes of two ranks each get
// half each; a node's own --store-rps caps what it uses of its share; the
// nodes' --stats-json and logs say what was in force; and the job is
// exactly once over MinIO.
func TestClusterStoreBudget(t *testing.T) {
	srv := miniotest.Start(t)
	dir, keys := makeDataset(t, 120)
	bucket := srv.NewBucket(t)
	uploadTree(t, srv, bucket, "ds/", dir)
	c := startCluster(t, job{dataset: srv.URL(bucket, "ds"), env: srv.Env(), epochs: 1, batch: 8, shard: 16, balance: "equal",
		commit: 2, minRanks: 4, extraCoord: []string{"--job-store-rps", "400"}})
	stats := []string{filepath.Join(c.dir, "n1.json"), filepath.Join(c.dir, "n2.json")}
	n1 := c.addNode("--stats-json", stats[0])
	n2 := c.addNode("--stats-json", stats[1], "--store-rps", "150")
	c.finish()
	c.history(keys)

	// The job starts once both nodes' four ranks joined (--min-ranks 4)
	// and ends before either leaves: the shares at the end are the two
	// nodes' halves.
	for i, want := range []struct{ budget, ceiling float64 }{{200, 200}, {200, 150}} {
		s := readNodeStats(t, stats[i])
		if s.Store == nil {
			t.Fatalf("n%d's --stats-json has no store figures", i+1)
		}
		if s.Store.Budget != want.budget || s.Store.Ceiling != want.ceiling {
			t.Errorf("n%d: store budget %v, ceiling %v; want %v and %v", i+1, s.Store.Budget, s.Store.Ceiling, want.budget, want.ceiling)
		}
	}
	for i, p := range []*proc{n1, n2} {
		evs := procEvents(t, p, "store budget: the job's share for this node")
		if len(evs) == 0 {
			t.Errorf("n%d never logged its share of the store budget:\n%s", i+1, tail(p.stderr, 20))
			continue
		}
		t.Logf("n%d: shares %v", i+1, func() (out []string) {
			for _, ev := range evs {
				out = append(out, ev["store_rps"])
			}
			return out
		}())
	}
	if len(c.coordEvents("store budget divided")) == 0 {
		t.Errorf("the coordinator never logged dividing the budget")
	}
}

// TestClusterMixtureStoreBudget: a mixture node's share of the
// coordinator's --job-store-rps is split among its S3 sources by their
// weights (1:3): one node of two ranks takes the whole 400, its sources
// 100 and 300; its --stats-json's store figures are the sources' summed
// (the share, and the limits summed).
func TestClusterMixtureStoreBudget(t *testing.T) {
	srv := miniotest.Start(t)
	dirA, _ := makeDataset(t, 24)
	dirB, _ := makeDataset(t, 40)
	ba, bb := srv.NewBucket(t), srv.NewBucket(t)
	uploadTree(t, srv, ba, "ds/", dirA)
	uploadTree(t, srv, bb, "ds/", dirB)
	spec := "a=" + srv.URL(ba, "ds") + ":1,b=" + srv.URL(bb, "ds") + ":3"
	c := startCluster(t, job{env: srv.Env(), epochs: 1, batch: 8, shard: 16, balance: "equal", commit: 2, minRanks: 2,
		extraCoord: []string{"--mixture", spec, "--job-store-rps", "400"}})
	stats := filepath.Join(c.dir, "n1.json")
	n1 := c.addNode("--mixture", spec, "--stats-json", stats)
	c.finish()
	s := readNodeStats(t, stats)
	if s.Store == nil {
		t.Fatal("the mixture node's --stats-json has no store figures")
	}
	if s.Store.Budget != 400 || s.Store.Ceiling != 400 {
		t.Errorf("store budget %v, ceiling %v; want the node's share, 400, split 100 + 300", s.Store.Budget, s.Store.Ceiling)
	}
	evs := procEvents(t, n1, "store budget: the job's share for this node")
	if len(evs) == 0 || evs[len(evs)-1]["sources"] != "a=100,b=300" {
		t.Errorf("the node's budget log %v; want its share 400 split a=100,b=300:\n%s", evs, tail(n1.stderr, 20))
	}
	if s.Images == 0 || s.Store.Requests < s.Images {
		t.Errorf("%d samples, %d store requests; want at least one request a sample", s.Images, s.Store.Requests)
	}
}
