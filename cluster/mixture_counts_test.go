package cluster

import (
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/quick"
)

// countsSpec is a mixture given as counts per epoch: all of a small
// source (a, 30 samples) and 100 of a large one (b, 1000 samples).
func countsSpec(round int) MixSpec {
	return MixSpec{Seed: 5, Block: 2, Window: 3, Round: round,
		Sources: []MixSource{{"a", 30}, {"b", 1000}},
		Phases:  []MixPhase{{Weights: []string{"all/epoch", "100/epoch"}}}}
}

// TestMixtureCountsPerEpoch: a mixture of counts per epoch — all of a
// (30) and 100 of b (1000) — has epochs of 130 positions, each holding
// exactly 30 of a and 100 of b; a's samples come exactly once in each
// job epoch (its own epoch, as its count is its size) and b's exactly
// once in each of its own epochs (ten job epochs each); the rounds'
// Counts and DrawsIn agree with the draws.
func TestMixtureCountsPerEpoch(t *testing.T) {
	m := mustMixture(t, countsSpec(10))
	if m.Len() != 130 || m.Indices() != 1030 {
		t.Fatalf("Len %d, Indices %d; want 130 and 1030", m.Len(), m.Indices())
	}
	var bDraws []int64 // b's locals in stream order
	for e := int64(0); e < 20; e++ {
		got := make([]int64, 2)
		aSeen := make([]bool, 30)
		for pos := int64(0); pos < m.Len(); pos++ {
			d := m.DrawAt(e*m.Len() + pos)
			if d.Index != m.Offset(d.Source)+d.Local {
				t.Fatalf("epoch %d pos %d: draw %+v", e, pos, d)
			}
			got[d.Source]++
			switch d.Source {
			case 0:
				if aSeen[d.Local] || d.SourceEpoch(m) != e {
					t.Fatalf("epoch %d: a's sample %d twice, or in a's epoch %d", e, d.Local, d.SourceEpoch(m))
				}
				aSeen[d.Local] = true
			case 1:
				if d.D != int64(len(bDraws)) {
					t.Fatalf("epoch %d pos %d: b's draw %d after %d draws", e, pos, d.D, len(bDraws))
				}
				bDraws = append(bDraws, d.Local)
			}
		}
		if !slices.Equal(got, []int64{30, 100}) {
			t.Errorf("epoch %d draws %v, want [30 100]", e, got)
		}
		if in := m.DrawsIn(int(e), []Range{{0, m.Len()}}); !slices.Equal(in, []int64{30, 100}) {
			t.Errorf("epoch %d: DrawsIn %v, want [30 100]", e, in)
		}
		sum := make([]int64, 2)
		for p := e * m.Len(); p < (e+1)*m.Len(); p += int64(m.Round()) {
			c, start, end := m.Counts(p)
			if start != p || end != p+10 || c[0]+c[1] != 10 {
				t.Fatalf("Counts(%d) = %v [%d, %d)", p, c, start, end)
			}
			drawn := make([]int64, 2)
			for q := start; q < end; q++ {
				drawn[m.DrawAt(q).Source]++
			}
			if !slices.Equal(drawn, c) {
				t.Errorf("round at %d draws %v, Counts says %v", p, drawn, c)
			}
			sum[0], sum[1] = sum[0]+c[0], sum[1]+c[1]
		}
		if !slices.Equal(sum, []int64{30, 100}) {
			t.Errorf("epoch %d: its rounds' Counts sum to %v", e, sum)
		}
	}
	for se := 0; se < 2; se++ {
		if got := slices.Sorted(slices.Values(bDraws[se*1000 : (se+1)*1000])); !slices.Equal(got, seq(1000)) {
			t.Errorf("b's epoch %d (job epochs %d-%d): not each of its 1000 samples once", se, 10*se, 10*se+9)
		}
	}
}

func seq(n int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i)
	}
	return out
}

// TestMixtureCountsWholeRounds: counts summing to no whole number of
// rounds (130 in rounds of 32) make an epoch of whole rounds (160), each
// source its count and its share of the 30 positions that fill the last
// round, apportioned by the counts (largest remainders of 6.92 and
// 23.08): a 30+7, b 100+23.
func TestMixtureCountsWholeRounds(t *testing.T) {
	m := mustMixture(t, countsSpec(32))
	if m.Len() != 160 {
		t.Fatalf("Len %d, want 160", m.Len())
	}
	for e := 0; e < 3; e++ {
		if got := m.DrawsIn(e, []Range{{0, m.Len()}}); !slices.Equal(got, []int64{37, 123}) {
			t.Errorf("epoch %d draws %v, want [37 123]", e, got)
		}
	}
}

// TestMixtureCountsRounds: a round of a count mixture holds each source
// within one of its quota (round × count / total: its floor or its
// ceiling), so batches keep the proportions as closely as rounding
// allows while the epoch is exact.
func TestMixtureCountsRounds(t *testing.T) {
	for _, spec := range []MixSpec{
		countsSpec(10), countsSpec(32),
		{Seed: 1, Block: 1, Window: 1, Round: 16, Sources: []MixSource{{"a", 7}, {"b", 500}, {"c", 90}, {"d", 3}},
			Phases: []MixPhase{{Weights: []string{"20/epoch", "all/epoch", "45/epoch", "1/epoch"}}}},
	} {
		m := mustMixture(t, spec)
		var total int64
		counts := make([]int64, m.Sources())
		for s, w := range spec.Phases[0].Weights {
			counts[s] = m.Size(s)
			if w != "all/epoch" {
				counts[s], _ = ParseMixCount(w)
			}
			total += counts[s]
		}
		for p := int64(0); p < m.Len(); p += int64(m.Round()) {
			c, _, _ := m.Counts(p)
			for s := range c {
				quota := float64(int64(m.Round())*counts[s]) / float64(total)
				if d := float64(c[s]) - quota; d <= -1 || d >= 1 {
					t.Errorf("%v: round at %d holds %d of %s, quota %.2f", spec.Phases[0].Weights, p, c[s], m.Name(s), quota)
				}
			}
		}
	}
}

// TestMixtureCountsErrors: counts are a whole epoch's draws, so a
// mixture gives counts or weights, not both, and counts with no
// schedule.
func TestMixtureCountsErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		phases []MixPhase
		want   string
	}{
		{"mixed", []MixPhase{{Weights: []string{"all/epoch", "0.5"}}}, `source "b" has a weight (0.5) and another a count per epoch`},
		{"schedule", []MixPhase{{Weights: []string{"all/epoch", "100/epoch"}}, {At: 500, Weights: []string{"1", "1"}}}, "counts per epoch with a schedule"},
		{"zero", []MixPhase{{Weights: []string{"0/epoch", "100/epoch"}}}, `count "0/epoch" of source "a"`},
		{"bad", []MixPhase{{Weights: []string{"x/epoch", "100/epoch"}}}, `count "x/epoch" of source "a"`},
		{"at", []MixPhase{{At: 10, Weights: []string{"all/epoch", "100/epoch"}}}, "counts per epoch from sample 10"},
		{"ramp", []MixPhase{{Weights: []string{"all/epoch", "100/epoch"}, Linear: true}}, "cannot ramp"},
		{"number", []MixPhase{{Weights: []string{"all/epoch"}}}, "counts: 1 of them for 2 sources"},
	} {
		spec := countsSpec(10)
		spec.Phases = tc.phases
		if _, err := NewMixture(spec); !errors.Is(err, ErrMixture) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want ErrMixture naming %q", tc.name, err, tc.want)
		}
	}
}

// TestMixtureCountsIdentity: the counts (all as the source's size) are
// the identity, so a changed count is another dataset digest, refused
// on resume; counts in the same ratio as weights are another mixture.
func TestMixtureCountsIdentity(t *testing.T) {
	base := mustMixture(t, countsSpec(10)).Identity()
	if want := "mixture/2 round=10 a=30 b=1000 @0,a:30/epoch,b:100/epoch"; base != want {
		t.Errorf("identity %q, want %q", base, want)
	}
	same := countsSpec(10)
	same.Phases = []MixPhase{{Weights: []string{"30/epoch", "100/epoch"}}}
	if got := mustMixture(t, same).Identity(); got != base {
		t.Errorf("all written as the size: identity %q, want %q", got, base)
	}
	for name, ws := range map[string][]string{
		"count":   {"all/epoch", "101/epoch"},
		"scaled":  {"60/epoch", "200/epoch"},
		"weights": {"30", "100"},
	} {
		spec := countsSpec(10)
		spec.Phases = []MixPhase{{Weights: ws}}
		if got := mustMixture(t, spec).Identity(); got == base {
			t.Errorf("%s %v: the same identity %q", name, ws, got)
		}
	}
}

// TestParseMixFlagsCounts: --mixture's counts per epoch, name=DATASET:N/epoch
// or :all/epoch, as the weights are given; not with weights, nor with a
// schedule.
func TestParseMixFlagsCounts(t *testing.T) {
	srcs, phases, err := ParseMixFlags("small=/data/small:all/epoch,big=s3://b/big:100000/epoch", "")
	if err != nil {
		t.Fatal(err)
	}
	if want := []MixFlagSource{{"small", "/data/small"}, {"big", "s3://b/big"}}; !reflect.DeepEqual(srcs, want) {
		t.Errorf("sources %v, want %v", srcs, want)
	}
	if want := []MixPhase{{Weights: []string{"all/epoch", "100000/epoch"}}}; !reflect.DeepEqual(phases, want) {
		t.Errorf("phases %v, want %v", phases, want)
	}
	for _, tc := range []struct{ spec, sched, want string }{
		{"a=/a:all/epoch,b=/b:0.5", "", `source "b" has a weight and "a" a count per epoch`},
		{"a=/a:0.5,b=/b:3/epoch", "", `source "b" has a count per epoch and "a" a weight`},
		{"a=/a:all/epoch,b=/b", "a:1,b:1", "--mixture-schedule with counts per epoch"},
		{"a=/a:0/epoch,b=/b:1/epoch", "", `count "0/epoch"`},
		{"a=/a:many/epoch", "", `count "many/epoch"`},
	} {
		if _, _, err := ParseMixFlags(tc.spec, tc.sched); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q %q: err %v, want one naming %q", tc.spec, tc.sched, err, tc.want)
		}
	}
	if _, err := ParseMixSchedule("a:1/epoch,b:2/epoch", []string{"a", "b"}); err == nil || !strings.Contains(err.Error(), "counts per epoch") {
		t.Errorf("a count in a schedule: %v", err)
	}
}

// TestQuickMixtureCountsEpochs: for random counts (above, below or all
// of each source's size) and rounds, every epoch holds each source its
// count plus its share of the last round's filling (together Len), the
// same in every epoch, every round within one of the quota, and
// DrawsIn of any range what its positions draw.
func TestQuickMixtureCountsEpochs(t *testing.T) {
	prop := func(seed int64) bool {
		r := rand.New(rand.NewSource(seed))
		n := 1 + r.Intn(5)
		spec := MixSpec{Seed: r.Uint64(), Block: 1, Window: 1, Round: 1 + r.Intn(40)}
		var counts []int64
		var total int64
		for s := 0; s < n; s++ {
			size := int64(1 + r.Intn(200))
			c := 1 + r.Int63n(3*size)
			w := fmt.Sprintf("%d/epoch", c)
			if r.Intn(4) == 0 {
				c, w = size, "all/epoch"
			}
			spec.Sources = append(spec.Sources, MixSource{fmt.Sprintf("s%d", s), size})
			spec.Phases = append(spec.Phases, MixPhase{})
			spec.Phases[0].Weights = append(spec.Phases[0].Weights, w)
			counts = append(counts, c)
			total += c
		}
		spec.Phases = spec.Phases[:1]
		m := mustMixture(t, spec)
		if m.Len() != (total+int64(spec.Round)-1)/int64(spec.Round)*int64(spec.Round) {
			t.Logf("counts %v, round %d: Len %d", counts, spec.Round, m.Len())
			return false
		}
		var first []int64
		for e := 0; e < 3; e++ {
			got := m.DrawsIn(e, []Range{{0, m.Len()}})
			var sum int64
			for s := range got {
				if got[s] < counts[s] || got[s] > counts[s]+int64(spec.Round) {
					t.Logf("counts %v, round %d: epoch %d draws %v", counts, spec.Round, e, got)
					return false
				}
				sum += got[s]
			}
			if sum != m.Len() || (first != nil && !slices.Equal(got, first)) {
				t.Logf("counts %v, round %d: epoch %d draws %v (epoch 0 %v)", counts, spec.Round, e, got, first)
				return false
			}
			first = got
		}
		// DrawsIn of ranges that cut rounds: the draws one by one.
		e := r.Intn(3)
		x := r.Int63n(m.Len())
		y := x + r.Int63n(m.Len()-x+1)
		want := make([]int64, n)
		for p := x; p < y; p++ {
			want[m.DrawAt(int64(e)*m.Len()+p).Source]++
		}
		if got := m.DrawsIn(e, []Range{{x, y}}); !slices.Equal(got, want) {
			t.Logf("counts %v, round %d: DrawsIn(%d, [%d, %d)) = %v, want %v", counts, spec.Round, e, x, y, got, want)
			return false
		}
		for p := int64(0); p < m.Len(); p += int64(spec.Round) {
			c, _, _ := m.Counts(p)
			for s := range c {
				q := float64(int64(spec.Round)*first[s]) / float64(m.Len())
				if d := float64(c[s]) - q; d <= -1 || d >= 1 {
					t.Logf("counts %v: round at %d holds %d of s%d, quota %.3f", counts, p, c[s], s, q)
					return false
				}
			}
		}
		return true
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 300}); err != nil {
		t.Error(err)
	}
}
