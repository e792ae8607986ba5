package main

import (
	"io"
	"testing"

	"github.com/longshore/longshore/cluster"
)

// TestShape: the job's block, window and shard size for plain and packed
// datasets, fresh and restored: a flag wins, then the journal's order,
// then the dataset's defaults (the standalone node's too).
func TestShape(t *testing.T) {
	base := []string{"--dataset", "d", "--listen", "127.0.0.1:1", "--gossip", "127.0.0.1:2"}
	def := cluster.DefaultConfig()
	type shape struct{ block, window, shard int }
	old := &cluster.State{Block: 256} // a journal from before windows: window 0
	for _, tc := range []struct {
		name          string
		args          []string
		env           map[string]string
		restore       *cluster.State
		plain, packed shape
	}{
		{"default", nil, nil, nil,
			shape{1, def.Window, def.ShardSize}, shape{cluster.PackedBlock, def.Window, cluster.PackedBlock * def.Window}},
		{"block flag", []string{"--block", "64"}, nil, nil,
			shape{64, def.Window, def.ShardSize}, shape{64, def.Window, 64 * def.Window}},
		{"block 1 keeps a full shuffle", []string{"--block", "1"}, nil, nil,
			shape{1, def.Window, def.ShardSize}, shape{1, def.Window, def.ShardSize}},
		{"window 1: blocks one after another", []string{"--mix-window", "1"}, nil, nil,
			shape{1, 1, def.ShardSize}, shape{cluster.PackedBlock, 1, def.ShardSize}},
		{"shard flag", []string{"--shard-size", "512"}, nil, nil,
			shape{1, def.Window, 512}, shape{cluster.PackedBlock, def.Window, 512}},
		{"env", nil, map[string]string{"LONGSHORE_BLOCK": "32", "LONGSHORE_MIX_WINDOW": "8"}, nil,
			shape{32, 8, def.ShardSize}, shape{32, 8, 256}},
		{"restored: the journal's order", nil, nil, &cluster.State{Block: 16, Window: 64},
			shape{16, 64, def.ShardSize}, shape{16, 64, 1024}},
		{"restored from before windows", nil, nil, old,
			shape{256, 1, def.ShardSize}, shape{256, 1, def.ShardSize}},
		{"restored, flags win", []string{"--block", "8", "--mix-window", "2"}, nil, old,
			shape{8, 2, def.ShardSize}, shape{8, 2, 16}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			o, err := parseFlags(append(base, tc.args...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				packed bool
				want   shape
			}{{false, tc.plain}, {true, tc.packed}} {
				var got shape
				got.block, got.window, got.shard = o.shape(c.packed, tc.restore)
				if got != c.want {
					t.Errorf("packed %v: block, window, shard = %v, want %v", c.packed, got, c.want)
				}
			}
		})
	}
}
