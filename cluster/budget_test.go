package cluster

import (
	"math"
	"testing"
)

func TestStoreShares(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget float64
		ranks  map[string]int
		want   map[string]float64
	}{
		{"none", 0, map[string]int{"a": 8}, map[string]float64{}},
		{"one node", 1000, map[string]int{"a": 8}, map[string]float64{"a": 1000}},
		{"by ranks", 900, map[string]int{"a": 8, "b": 8, "c": 2}, map[string]float64{"a": 400, "b": 400, "c": 100}},
		{"a node without ranks", 100, map[string]int{"a": 4, "b": 0}, map[string]float64{"a": 100}},
		{"no ranks at all", 100, map[string]int{"a": 0}, map[string]float64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := StoreShares(tc.budget, tc.ranks)
			sum := 0.0
			for _, v := range got {
				sum += v
			}
			if len(got) != len(tc.want) || sum > tc.budget+1e-9 {
				t.Fatalf("got %v (sum %v), want %v", got, sum, tc.want)
			}
			for n, w := range tc.want {
				if math.Abs(got[n]-w) > 1e-9 {
					t.Errorf("%s: %v, want %v", n, got[n], w)
				}
			}
		})
	}
	// 4,096 hosts of 8 ranks: every share an equal 1/4096th.
	ranks := map[string]int{}
	for i := range 4096 {
		ranks[string(rune('a'+i%26))+string(rune(i))] = 8
	}
	got := StoreShares(3500*4096/8, ranks)
	for n, v := range got {
		if math.Abs(v-437.5) > 1e-6 {
			t.Fatalf("%q: %v, want 437.5", n, v)
		}
	}
}

func TestShareChanged(t *testing.T) {
	for _, tc := range []struct {
		old, new float64
		want     bool
	}{
		{0, 10, true}, {10, 0, true}, {0, 0, false}, {100, 100.5, false}, {100, 98, true}, {100, 102, true},
	} {
		if got := ShareChanged(tc.old, tc.new); got != tc.want {
			t.Errorf("ShareChanged(%v, %v) = %v, want %v", tc.old, tc.new, got, tc.want)
		}
	}
}
