package coord

import (
	"testing"

	"github.com/longshore/longshore/cluster"
)

// TestMixtureStatus: each source's committed samples are those of the
// committed positions (counted one by one through the mixture), a
// complete epoch's every position but the dropped.
func TestMixtureStatus(t *testing.T) {
	m, err := cluster.NewMixture(cluster.MixSpec{Seed: 3, Block: 1, Window: 1, Round: 8,
		Sources: []cluster.MixSource{{Name: "a", Samples: 30}, {Name: "b", Samples: 9}, {Name: "c", Samples: 50}},
		Phases:  []cluster.MixPhase{{Weights: []string{"1", "1", "2"}}, {At: 100, Weights: []string{"3", "1", "4"}}}})
	if err != nil {
		t.Fatal(err)
	}
	state := cluster.State{Epochs: []cluster.EpochState{
		{Complete: true, Dropped: []cluster.Range{{Start: 88, End: 96}}},
		{Committed: []cluster.Range{{Start: 0, End: 16}, {Start: 40, End: 64}}},
	}}
	want := map[string]int64{}
	count := func(e int, a, b int64) {
		for p := a; p < b; p++ {
			want[m.Name(m.DrawAt(int64(e)*m.Len()+p).Source)]++
		}
	}
	count(0, 0, 88)
	count(1, 0, 16)
	count(1, 40, 64)
	for _, s := range mixtureStatus(m, state) {
		if s.Committed != want[s.Source] {
			t.Errorf("%s: committed %d of %d, want %d", s.Source, s.Committed, s.Samples, want[s.Source])
		}
	}
}
