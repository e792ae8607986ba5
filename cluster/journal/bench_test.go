package journal

import (
	"context"
	"fmt"
	"testing"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/miniotest"
	"github.com/longshore/longshore/storage/stores"
)

// benchState is a mid-epoch state of n samples on 64 ranks: "ranks"
// leaves one uncommitted hole per rank (the usual shape: each rank's
// committed prefix), "worst" commits every other 256-sample shard
// (O(shards)).
func benchState(n int64, shape string) cluster.State {
	s := cluster.State{Incarnation: 3, Samples: n, Seed: 1, Block: 1,
		Epochs: []cluster.EpochState{{Complete: true}, {}}}
	var rs []cluster.Range
	switch shape {
	case "ranks":
		const ranks = 64
		step := n / ranks
		for k := range int64(ranks) {
			rs = append(rs, cluster.Range{Start: k * step, End: k*step + step/2})
		}
	case "worst":
		for p := int64(0); p+256 <= n; p += 512 {
			rs = append(rs, cluster.Range{Start: p, End: p + 256})
		}
	}
	s.Epochs[1].Committed = rs
	// Each of 64 ranks' last commit in the open epoch (and in the epoch
	// that completed last), as the coordinator keeps them.
	for e := range s.Epochs {
		for k := range 64 {
			s.Epochs[e].Commits = append(s.Epochs[e].Commits, cluster.RankCommit{
				Rank: fmt.Sprintf("node-%02d/%d", k/8, k%8), Epoch: e, Session: cluster.Fence{Incarnation: 3, Seq: uint64(1000 + k)},
				Step: 12345, Offset: n / 128, Gen: 4321,
			})
		}
	}
	return s
}

// BenchmarkWrite reports the entry size and the time of one journal
// write (encode + conditional put + prune) to a local directory (fsync),
// to the in-memory store, and to a local MinIO server (S3 over loopback,
// the server on the same cores).
func BenchmarkWrite(b *testing.B) {
	parent := b
	var srv *miniotest.Server // one server for every sub-benchmark
	for _, n := range []int64{1_000_000, 10_000_000} {
		for _, shape := range []string{"ranks", "worst"} {
			for _, where := range []string{"dir", "mem", "minio"} {
				b.Run(fmt.Sprintf("samples=%d/%s/%s", n, shape, where), func(b *testing.B) {
					var store storage.Store = storage.NewMemStore("b")
					switch where {
					case "dir":
						d, err := storage.NewDirStore(b.TempDir())
						if err != nil {
							b.Fatal(err)
						}
						store = d
					case "minio":
						if srv == nil {
							srv = miniotest.Start(parent)
						}
						s3, err := stores.Open(context.Background(), srv.URL(srv.NewBucket(b), "jobs/bench"), srv.Options())
						if err != nil {
							b.Fatal(err)
						}
						store = s3
					}
					cfg := DefaultConfig()
					cfg.Store, cfg.Keep = store, 8
					j, err := Open(context.Background(), cfg)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := j.Start(context.Background(), StartOptions{}); err != nil {
						b.Fatal(err)
					}
					s := benchState(n, shape)
					peers := []string{"10.0.0.1:7946", "10.0.0.2:7946", "10.0.0.3:7946"}
					b.ResetTimer()
					for range b.N {
						if _, err := j.Write(context.Background(), s, peers); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(len(Encode(nil, Entry{State: s, Peers: peers}))), "bytes/entry")
				})
			}
		}
	}
}
