package coord

import (
	"strings"
	"testing"

	"github.com/longshore/longshore/cluster"
)

// TestShape: the job's block, window and shard size for plain and packed
// datasets, fresh and restored: a setting given wins, then the journal's
// order, then the dataset's defaults.
func TestShape(t *testing.T) {
	def := cluster.DefaultConfig()
	type shape struct{ block, window, shard int }
	with := func(block, window, shard int) cluster.Config {
		c := def
		if block > 0 {
			c.Block = block
		}
		if window > 0 {
			c.Window = window
		}
		if shard > 0 {
			c.ShardSize = shard
		}
		return c
	}
	old := &cluster.State{Block: 256} // a journal from before windows: window 0
	for _, tc := range []struct {
		name          string
		c             cluster.Config
		given         Given
		restore       *cluster.State
		plain, packed shape
	}{
		{"default", def, Given{}, nil,
			shape{1, def.Window, def.ShardSize}, shape{cluster.PackedBlock, def.Window, cluster.PackedBlock * def.Window}},
		{"block given", with(64, 0, 0), Given{Block: true}, nil,
			shape{64, def.Window, def.ShardSize}, shape{64, def.Window, 64 * def.Window}},
		{"block 1 keeps a full shuffle", with(1, 0, 0), Given{Block: true}, nil,
			shape{1, def.Window, def.ShardSize}, shape{1, def.Window, def.ShardSize}},
		{"window 1: blocks one after another", with(0, 1, 0), Given{Window: true}, nil,
			shape{1, 1, def.ShardSize}, shape{cluster.PackedBlock, 1, def.ShardSize}},
		{"shard given", with(0, 0, 512), Given{Shard: true}, nil,
			shape{1, def.Window, 512}, shape{cluster.PackedBlock, def.Window, 512}},
		{"restored: the journal's order", def, Given{}, &cluster.State{Block: 16, Window: 64},
			shape{16, 64, def.ShardSize}, shape{16, 64, 1024}},
		{"restored from before windows", def, Given{}, old,
			shape{256, 1, def.ShardSize}, shape{256, 1, def.ShardSize}},
		{"restored, settings given win", with(8, 2, 0), Given{Block: true, Window: true}, old,
			shape{8, 2, def.ShardSize}, shape{8, 2, 16}},
		{"restored, only the window given", with(0, 4, 0), Given{Window: true}, &cluster.State{Block: 16, Window: 64},
			shape{16, 4, def.ShardSize}, shape{16, 4, 64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range []struct {
				packed bool
				want   shape
			}{{false, tc.plain}, {true, tc.packed}} {
				var got shape
				got.block, got.window, got.shard = Shape(tc.c, tc.given, c.packed, tc.restore)
				if got != c.want {
					t.Errorf("packed %v: block, window, shard = %v, want %v", c.packed, got, c.want)
				}
			}
		})
	}
}

// TestStartChoiceCheck: the ways to start a job that contradict each
// other are refused, each with its reason; the consistent ones pass.
func TestStartChoiceCheck(t *testing.T) {
	for _, tc := range []struct {
		c    StartChoice
		want []string // substrings, one per error
	}{
		{StartChoice{}, nil},
		{StartChoice{Checkpoint: true}, nil},
		{StartChoice{Checkpoint: true, Fresh: true}, nil},
		{StartChoice{Checkpoint: true, Resume: "tok"}, nil},
		{StartChoice{Checkpoint: true, Resume: "tok", Force: true, Fallback: true}, nil},
		{StartChoice{Fresh: true}, []string{"need --checkpoint"}},
		{StartChoice{Resume: "tok"}, []string{"need --checkpoint"}},
		{StartChoice{Checkpoint: true, Fresh: true, Resume: "tok"}, []string{"contradict each other"}},
		{StartChoice{Force: true}, []string{"--force-resume and --journal-fallback need --checkpoint"}},
		{StartChoice{Fallback: true}, []string{"--force-resume and --journal-fallback need --checkpoint"}},
		{StartChoice{Checkpoint: true, Fresh: true, Fallback: true}, []string{"--fresh starts the job over"}},
		{StartChoice{Fresh: true, Resume: "tok", Force: true}, []string{"need --checkpoint", "contradict each other", "need --checkpoint", "starts the job over"}},
	} {
		errs := tc.c.Check()
		if len(errs) != len(tc.want) {
			t.Errorf("%+v: %v; want %d error(s) %q", tc.c, errs, len(tc.want), tc.want)
			continue
		}
		for i, err := range errs {
			if !strings.Contains(err.Error(), tc.want[i]) {
				t.Errorf("%+v: error %d %q; want it to say %q", tc.c, i, err, tc.want[i])
			}
		}
	}
}
