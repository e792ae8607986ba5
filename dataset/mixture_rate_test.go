package dataset

import "testing"

// TestSplitRate: parts in proportion to the weights, equal without
// any, none without a share, and never 0 under a share.
func TestSplitRate(t *testing.T) {
	for _, c := range []struct {
		rps  float64
		w    []float64
		want []float64
	}{
		{100, []float64{3, 1}, []float64{75, 25}},
		{100, []float64{0, 0}, []float64{50, 50}},
		{90, nil, []float64{}},
		{0, []float64{1, 2}, []float64{0, 0}},
		{100, []float64{1, 0}, []float64{100, 1}},
		{1, []float64{1, 0}, []float64{1, 0.5}},
	} {
		got := splitRate(c.rps, c.w)
		if len(got) != len(c.want) {
			t.Errorf("splitRate(%v, %v) = %v; want %v", c.rps, c.w, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("splitRate(%v, %v) = %v; want %v", c.rps, c.w, got, c.want)
				break
			}
		}
	}
}
