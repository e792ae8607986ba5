package journal

import (
	"context"
	"fmt"
	"testing"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/storage"
)

// benchState is a mid-epoch state of n samples: "ranks" leaves one
// uncommitted hole per rank (the usual shape: each rank's committed
// prefix), "worst" commits every other 256-sample shard (O(shards)).
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
	return s
}

// BenchmarkWrite reports the entry size and the time of one journal
// write (encode + conditional put + prune) to a local directory (fsync)
// and to the in-memory store.
func BenchmarkWrite(b *testing.B) {
	for _, n := range []int64{1_000_000, 10_000_000} {
		for _, shape := range []string{"ranks", "worst"} {
			for _, where := range []string{"dir", "mem"} {
				b.Run(fmt.Sprintf("samples=%d/%s/%s", n, shape, where), func(b *testing.B) {
					var store storage.Store = storage.NewMemStore("b")
					if where == "dir" {
						d, err := storage.NewDirStore(b.TempDir())
						if err != nil {
							b.Fatal(err)
						}
						store = d
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
