package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/longshore/longshore/storage/faultproxy"
	"github.com/longshore/longshore/storage/miniotest"
)

// BenchmarkHedgeEpoch: one standalone epoch of 600 small JPEGs from
// MinIO through the fault proxy, 2% of GETs' bodies trickled (half a
// second for these objects), without and with --hedge-quantile 0.95. It
// reports the node's own epoch time and the store's hedges (the epoch
// figures of docs/faults.md).
//
//	go test -run '^$' -bench BenchmarkHedgeEpoch -benchtime 1x -count 3 ./integration
func BenchmarkHedgeEpoch(b *testing.B) {
	srv := miniotest.Start(b)
	dir, _ := makeDataset(b, 600)
	bucket := srv.NewBucket(b)
	cl := srv.Client(b)
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		_, err = cl.FPutObject(b.Context(), bucket, "ds/"+filepath.ToSlash(rel), p, minioPutOptions())
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	_, nodeBin := binaries(b)
	for _, q := range []string{"0", "0.95"} {
		b.Run("hedge="+q, func(b *testing.B) {
			for range b.N {
				p := faultproxy.Start(b, srv.Endpoint, faultproxy.Rule{Ops: faultproxy.OpGet, Prob: 0.02, Seed: 3, Fault: faultproxy.Trickle(1 << 10)})
				wd := b.TempDir()
				stats := filepath.Join(wd, "s.json")
				out, err := runNode(nodeBin, wd, srv.Env(), "--standalone", "--dataset", srv.URL(bucket, "ds"), "--s3-endpoint", p.URL,
					"--epochs", "1", "--batch-size", "8", "--size", "16", "--transform", "resize", "--sink", "null",
					"--progress", "never", "--fetch-concurrency", "8", "--hedge-quantile", q, "--stats-json", stats)
				if err != nil {
					b.Fatalf("node: %v\n%s", err, out)
				}
				var s struct {
					Seconds float64 `json:"seconds"`
					Images  int64   `json:"images"`
					Store   struct {
						Hedges    int64 `json:"hedges"`
						HedgeWins int64 `json:"hedge_wins"`
						Timeouts  int64 `json:"timeouts"`
					} `json:"store"`
				}
				raw, err := os.ReadFile(stats)
				if err != nil {
					b.Fatal(err)
				}
				if err := json.Unmarshal(raw, &s); err != nil {
					b.Fatal(err)
				}
				if s.Images != 600 {
					b.Fatalf("%d images delivered, want 600", s.Images)
				}
				b.ReportMetric(s.Seconds, "epoch-s")
				b.ReportMetric(float64(s.Store.Hedges), "hedges")
				b.ReportMetric(float64(s.Store.HedgeWins), "hedge-wins")
				b.ReportMetric(float64(p.Fired(0)), "slow-bodies")
				p.Close()
			}
		})
	}
}

// runNode runs the node binary in dir to its end, with text logs.
func runNode(bin, dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "LONGSHORE_LOG_FORMAT=text"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s: %w", bin, err)
	}
	return out, nil
}
