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
	"time"
)

func mustMixture(t testing.TB, spec MixSpec) *Mixture {
	t.Helper()
	m, err := NewMixture(spec)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func threeSources() MixSpec {
	return MixSpec{Seed: 7, Block: 1, Window: 1, Round: 10,
		Sources: []MixSource{{"a", 37}, {"b", 11}, {"c", 52}},
		Phases:  []MixPhase{{At: 0, Weights: []string{"0.5", "0.3", "0.2"}}, {At: 200, Weights: []string{"1", "1", "2"}}}}
}

// TestMixtureRounds: every round holds each source in the
// largest-remainder counts of the weights in force at its start, the
// schedule's change taking effect at the round that begins there.
func TestMixtureRounds(t *testing.T) {
	m := mustMixture(t, threeSources())
	if m.Len() != 100 {
		t.Fatalf("Len %d, want 100", m.Len())
	}
	for _, tc := range []struct {
		p     int64
		want  []int64
		start int64
	}{
		{0, []int64{5, 3, 2}, 0},
		{95, []int64{5, 3, 2}, 90},
		{199, []int64{5, 3, 2}, 190},
		{200, []int64{3, 2, 5}, 200}, // 2.5, 2.5, 5: the tie's extra to the first listed
		{1234, []int64{3, 2, 5}, 1230},
	} {
		got, start, end := m.Counts(tc.p)
		if !slices.Equal(got, tc.want) || start != tc.start || end != tc.start+10 {
			t.Errorf("Counts(%d) = %v [%d, %d), want %v [%d, %d)", tc.p, got, start, end, tc.want, tc.start, tc.start+10)
		}
		seen := make([]int64, 3)
		for p := start; p < end; p++ {
			s, _ := m.Source(m.At(p))
			seen[s]++
		}
		if !slices.Equal(seen, got) {
			t.Errorf("round at %d draws %v, want %v", tc.p, seen, got)
		}
	}
}

// TestMixtureDocExample: docs/mixtures.md's example of the rounding.
func TestMixtureDocExample(t *testing.T) {
	m := mustMixture(t, MixSpec{Block: 1, Window: 1, Round: 32,
		Sources: []MixSource{{"web", 1000}, {"books", 1000}, {"code", 1000}},
		Phases:  []MixPhase{{Weights: []string{"0.7", "0.2", "0.1"}}}})
	if got, _, _ := m.Counts(0); !slices.Equal(got, []int64{23, 6, 3}) {
		t.Errorf("0.7/0.2/0.1 in 32: %v, want [23 6 3]", got)
	}
}

// TestMixtureWholeRounds: when the round does not divide the sources'
// samples, an epoch is rounded up to whole rounds (so a lease or a batch
// of whole rounds is exact whatever the epoch's end); the next epoch's
// rounds start at its first position, and its indices stay the sources'.
func TestMixtureWholeRounds(t *testing.T) {
	spec := threeSources()
	spec.Round = 32 // 100 = 3×32 + 4: an epoch of 4 rounds, 128 positions
	spec.Phases = spec.Phases[:1]
	m := mustMixture(t, spec)
	if m.Len() != 128 || m.Indices() != 100 {
		t.Fatalf("Len %d, Indices %d; want 128 and 100", m.Len(), m.Indices())
	}
	for _, tc := range []struct {
		p          int64
		want       []int64
		start, end int64
	}{
		{0, []int64{16, 10, 6}, 0, 32}, // 16, 9.6, 6.4
		{97, []int64{16, 10, 6}, 96, 128},
		{128, []int64{16, 10, 6}, 128, 160},
	} {
		got, start, end := m.Counts(tc.p)
		if !slices.Equal(got, tc.want) || start != tc.start || end != tc.end {
			t.Errorf("Counts(%d) = %v [%d, %d), want %v [%d, %d)", tc.p, got, start, end, tc.want, tc.start, tc.end)
		}
	}
	for p := int64(0); p < 2*m.Len(); p++ {
		if i := m.At(p); i < 0 || i >= m.Indices() {
			t.Fatalf("At(%d) = %d outside [0, %d)", p, i, m.Indices())
		}
	}
	// Padding past an epoch's end wraps onto its first rounds.
	e := m.Epoch(1)
	for pos := int64(0); pos < 40; pos++ {
		i, pad := e.Sample(m.Len() + pos)
		j, _ := e.Sample(pos)
		if !pad || i != j {
			t.Fatalf("Sample(%d) = %d %v; want %d, padding", m.Len()+pos, i, pad, j)
		}
	}
}

// TestMixtureSpecErrors: a bad spec is refused, naming the problem.
func TestMixtureSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*MixSpec)
		want string
	}{
		{"no sources", func(s *MixSpec) { s.Sources = nil }, "no sources"},
		{"dup", func(s *MixSpec) { s.Sources[1].Name = "a" }, `"a" named twice`},
		{"bad name", func(s *MixSpec) { s.Sources[1].Name = "b/x" }, "source name"},
		{"empty source", func(s *MixSpec) { s.Sources[2].Samples = 0 }, `"c" has 0 samples`},
		{"round", func(s *MixSpec) { s.Round = 0 }, "round 0"},
		{"first not 0", func(s *MixSpec) { s.Phases[0].At = 5 }, "must start at 0"},
		{"not increasing", func(s *MixSpec) { s.Phases[1].At = 0 }, "must increase"},
		{"same round", func(s *MixSpec) {
			s.Phases[1].At = 201 // round 21, as 205 is
			s.Phases = append(s.Phases, MixPhase{At: 205, Weights: []string{"1", "1", "1"}})
		}, "same round"},
		{"negative", func(s *MixSpec) { s.Phases[0].Weights[0] = "-1" }, `weight "-1"`},
		{"not a number", func(s *MixSpec) { s.Phases[0].Weights[0] = "x" }, `weight "x"`},
		{"all zero", func(s *MixSpec) { s.Phases[0].Weights = []string{"0", "0", "0"} }, "all 0"},
		{"too small", func(s *MixSpec) { s.Phases[0].Weights = []string{"1000", "1", "1"} }, `"b"'s weight 0.0010`},
		{"count", func(s *MixSpec) { s.Phases[0].Weights = []string{"1"} }, "1 of them for 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := threeSources()
			spec.Phases = slices.Clone(spec.Phases)
			spec.Sources = slices.Clone(spec.Sources)
			for i := range spec.Phases {
				spec.Phases[i].Weights = slices.Clone(spec.Phases[i].Weights)
			}
			tc.edit(&spec)
			_, err := NewMixture(spec)
			if !errors.Is(err, ErrMixture) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want ErrMixture naming %q", err, tc.want)
			}
		})
	}
}

func TestParseMixSchedule(t *testing.T) {
	names := []string{"a", "b", "c"}
	got, err := ParseMixSchedule("a:0.7,b:0.3; a:1/2, c:1/2 @100000", names)
	if err != nil {
		t.Fatal(err)
	}
	want := []MixPhase{{0, []string{"0.7", "0.3", "0"}, false}, {100000, []string{"1/2", "0", "1/2"}, false}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	got, err = ParseMixSchedule("a:1; b:1@100 linear; c:1 @ 200 step", names)
	if err != nil {
		t.Fatal(err)
	}
	want = []MixPhase{{0, []string{"1", "0", "0"}, false}, {100, []string{"0", "1", "0"}, true}, {200, []string{"0", "0", "1"}, false}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("linear: got %v, want %v", got, want)
	}
	for _, tc := range []struct{ text, want string }{
		{"a:1;b:1", "say from which sample"},
		{"a:1,d:1", `no source "d"`},
		{"a:1,a:2", "weighted twice"},
		{"a=1", "want name:weight"},
		{"a:1@x", "want a sample number"},
		{"a:1;b:1@5 curvy", "then linear or step"},
	} {
		if _, err := ParseMixSchedule(tc.text, names); !errors.Is(err, ErrMixture) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want one naming %q", tc.text, err, tc.want)
		}
	}
}

// TestMixtureIdentity: the identity names what fixes the stream, and
// another weight, round or source size changes it; weights that only
// scale differently do not.
func TestMixtureIdentity(t *testing.T) {
	base := mustMixture(t, threeSources()).Identity()
	if want := "mixture/2 round=10 a=37 b=11 c=52 @0,a:1/2,b:3/10,c:1/5 @20,a:1/4,b:1/4,c:1/2"; base != want {
		t.Errorf("identity %q, want %q", base, want)
	}
	scaled := threeSources()
	scaled.Phases[0].Weights = []string{"5", "3", "2"}
	if got := mustMixture(t, scaled).Identity(); got != base {
		t.Errorf("scaled weights: identity %q, want %q", got, base)
	}
	for name, edit := range map[string]func(*MixSpec){
		"weight": func(s *MixSpec) { s.Phases[1].Weights = []string{"1", "2", "2"} },
		"round":  func(s *MixSpec) { s.Round = 20 },
		"size":   func(s *MixSpec) { s.Sources = []MixSource{{"a", 37}, {"b", 12}, {"c", 52}} },
		"when":   func(s *MixSpec) { s.Phases[1].At = 300 },
	} {
		spec := threeSources()
		edit(&spec)
		if got := mustMixture(t, spec).Identity(); got == base {
			t.Errorf("another %s: the same identity %q", name, got)
		}
	}
}

// quickSpec is a random mixture spec for testing/quick.
type quickSpec struct{ MixSpec }

func (quickSpec) Generate(r *rand.Rand, _ int) reflect.Value {
	n := 1 + r.Intn(4)
	spec := MixSpec{Seed: r.Uint64(), Block: 1 + r.Intn(4), Window: 1 + r.Intn(3), Round: 4 + r.Intn(29)}
	var total int64
	for s := 0; s < n; s++ {
		size := int64(1 + r.Intn(60))
		spec.Sources = append(spec.Sources, MixSource{fmt.Sprintf("s%d", s), size})
		total += size
	}
	if r.Intn(3) == 0 { // counts per epoch: up to twice a source's size, or all
		ws := make([]string, n)
		for s := range ws {
			ws[s] = fmt.Sprintf("%d/epoch", 1+r.Int63n(2*spec.Sources[s].Samples))
			if r.Intn(4) == 0 {
				ws[s] = "all/epoch"
			}
		}
		spec.Phases = []MixPhase{{Weights: ws}}
		return reflect.ValueOf(quickSpec{spec})
	}
	at := int64(0)
	for k := 0; k < 1+r.Intn(3); k++ {
		ws := make([]string, n)
		for s := range ws {
			ws[s] = fmt.Sprint(1 + r.Intn(9)) // each at least 1/(9n) >= 1/36 of a round >= 4: maybe no slot
		}
		ws[r.Intn(n)] = "0"
		if n == 1 {
			ws[0] = "1"
		}
		spec.Phases = append(spec.Phases, MixPhase{At: at, Weights: ws, Linear: k > 0 && r.Intn(2) == 0})
		at += int64(spec.Round) + r.Int63n(3*total)
	}
	return reflect.ValueOf(quickSpec{spec})
}

// quickMixture makes q's mixture, or nil when its weights are refused
// (too small for a round: TestMixtureSpecErrors covers it).
func quickMixture(q quickSpec) *Mixture {
	m, err := NewMixture(q.MixSpec)
	if err != nil {
		return nil
	}
	return m
}

// TestQuickMixtureRoundsExact: every round of the first epochs holds
// each source in exactly its round's counts, which are the
// largest-remainder apportionment: within one of the quota, summing to
// the round.
func TestQuickMixtureRoundsExact(t *testing.T) {
	prop := func(q quickSpec) bool {
		m := quickMixture(q)
		if m == nil {
			return true
		}
		end := 4*m.Len() + q.Phases[len(q.Phases)-1].At
		for start := int64(0); start < end; {
			counts, s0, e0 := m.Counts(start)
			if s0 != start {
				t.Logf("round at %d starts at %d", start, s0)
				return false
			}
			got := make([]int64, m.Sources())
			for p := s0; p < e0; p++ {
				s, _ := m.Source(m.At(p))
				got[s]++
			}
			var sum int64
			for _, c := range counts {
				sum += c
			}
			if !slices.Equal(got, counts) || sum != e0-s0 {
				t.Logf("round [%d, %d): drew %v, counts %v", s0, e0, got, counts)
				return false
			}
			start = e0
		}
		return true
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 200}); err != nil {
		t.Error(err)
	}
}

// TestQuickMixtureOncePerSourceEpoch: over the job's stream, each
// source's draws are numbered 0, 1, 2, ... in stream order, and every
// complete source epoch draws each of its samples exactly once.
func TestQuickMixtureOncePerSourceEpoch(t *testing.T) {
	prop := func(q quickSpec) bool {
		m := quickMixture(q)
		if m == nil {
			return true
		}
		end := (6 + q.Phases[len(q.Phases)-1].At/m.Len()) * m.Len() // an epoch's end: a round's
		drawn := make([]map[int64]int64, m.Sources())               // draw number -> local
		for p := int64(0); p < end; p++ {
			d := m.DrawAt(p)
			s, local := m.Source(d.Index)
			if s != d.Source || local != d.Local || d.Index != m.Offset(s)+d.Local {
				t.Logf("p %d: draw %+v, index in source %d at %d", p, d, s, local)
				return false
			}
			if drawn[s] == nil {
				drawn[s] = map[int64]int64{}
			}
			if d.D != int64(len(drawn[s])) {
				t.Logf("p %d: source %d's draw %d after %d draws: not in stream order", p, s, d.D, len(drawn[s]))
				return false
			}
			if _, dup := drawn[s][d.D]; dup {
				t.Logf("p %d: source %d's draw %d twice", p, s, d.D)
				return false
			}
			drawn[s][d.D] = local
		}
		for s, ds := range drawn {
			n := int64(len(ds))
			for k := int64(0); k < n; k++ {
				if _, ok := ds[k]; !ok {
					t.Logf("source %d: %d draws, draw %d missing", s, n, k)
					return false
				}
			}
			size := m.Size(s)
			for e := int64(0); (e+1)*size <= n; e++ {
				seen := make([]bool, size)
				for k := e * size; k < (e+1)*size; k++ {
					if seen[ds[k]] {
						t.Logf("source %d epoch %d: sample %d twice", s, e, ds[k])
						return false
					}
					seen[ds[k]] = true
				}
			}
		}
		return true
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 200}); err != nil {
		t.Error(err)
	}
}

// TestQuickMixtureDeterministic: the stream is a function of the spec:
// two mixtures of one spec agree, an epoch's view is the stream at
// epoch×Len()+pos, and another seed gives another stream.
func TestQuickMixtureDeterministic(t *testing.T) {
	prop := func(q quickSpec, epoch uint8) bool {
		a, b := quickMixture(q), quickMixture(q)
		if a == nil {
			return true
		}
		e := int(epoch % 5)
		view := b.Epoch(e)
		for pos := int64(0); pos < a.Len(); pos++ {
			if a.At(int64(e)*a.Len()+pos) != view.At(pos) {
				return false
			}
		}
		other := q.MixSpec
		other.Seed++
		c := quickMixture(quickSpec{other})
		if c == nil {
			return true
		}
		// Only a stream that goes through a source of 20 or more
		// samples tells seeds apart for sure.
		end := 3*a.Len() + q.Phases[len(q.Phases)-1].At
		draws := make([]int64, a.Sources())
		differ := false
		for p := int64(0); p < end; p++ {
			d := a.DrawAt(p)
			draws[d.Source]++
			differ = differ || d.Index != c.At(p)
		}
		informative := false
		for s, n := range draws {
			informative = informative || (a.Size(s) >= 20 && n >= a.Size(s))
		}
		if differ || !informative {
			return true
		}
		t.Logf("seeds %d and %d give the same stream", q.Seed, other.Seed)
		return false
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 200}); err != nil {
		t.Error(err)
	}
}

// TestMixtureWorldSizes: the stream does not depend on how positions are
// shared out. Rank r of R taking positions r, r+R, ... (the standalone
// rule) or contiguous shards (the cluster's leases) and the merge by
// position give back the same sequence, and every global batch of B×R
// positions, B a multiple of the round, holds exactly B×R/round rounds'
// counts.
func TestMixtureWorldSizes(t *testing.T) {
	spec := threeSources()
	spec.Round = 8
	m := mustMixture(t, spec)
	var ref []int64
	for p := int64(0); p < 3*m.Len(); p++ {
		ref = append(ref, m.At(p))
	}
	for _, world := range []int{1, 2, 3} {
		got := make([]int64, len(ref))
		for r := 0; r < world; r++ {
			for p := int64(r); p < int64(len(ref)); p += int64(world) {
				got[p] = m.At(p) // what rank r computes on its own
			}
		}
		if !slices.Equal(got, ref) {
			t.Errorf("world %d: another stream", world)
		}
		b := int64(8 * world)
		for e := int64(0); e < 3; e++ {
			for start := int64(0); start+b <= m.Len(); start += b {
				got := make([]int64, 3)
				for p := start; p < start+b; p++ {
					s, _ := m.Source(ref[e*m.Len()+p])
					got[s]++
				}
				counts, _, _ := m.Counts(e*m.Len() + start)
				for s := range counts {
					counts[s] *= int64(world)
				}
				if !slices.Equal(got, counts) {
					t.Errorf("world %d, epoch %d, global batch at %d: %v, want %v", world, e, start, got, counts)
				}
			}
		}
	}
}

func BenchmarkMixtureAt(b *testing.B) {
	spec := threeSources()
	spec.Sources = []MixSource{{"a", 1_281_167}, {"b", 50_000}, {"c", 10_000_000}}
	spec.Round = 256
	spec.Block, spec.Window = 16, 128
	m := mustMixture(b, spec)
	b.Run("random", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			m.At(int64(i) * 7919 % (4 * m.Len()))
		}
	})
	// A rank of 8 reading its positions in order, as the feeders do.
	b.Run("rank", func(b *testing.B) {
		e := m.Epoch(1)
		for i := 0; i < b.N; i++ {
			e.At(int64(i) * 8 % m.Len())
		}
	})
	// Random positions inside a linear ramp of 100,000 rounds, side by
	// side with "random" (after a step): up to rampStride apportionments
	// more to count a round's draws before it.
	ramp := spec
	ramp.Phases = []MixPhase{{At: 0, Weights: []string{"0.7", "0.2", "0.1"}},
		{At: 256 * 100_000, Weights: []string{"0.1", "0.2", "0.7"}, Linear: true}}
	mr := mustMixture(b, ramp)
	b.Run("random-in-ramp", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			mr.At(int64(i) * 7919 % (256 * 100_000))
		}
	})
	// Random positions of counts per epoch (all of a, a sample of c,
	// repeats of b), side by side with "random": the round's counts and
	// the draws before it are O(sources) sums.
	counts := spec
	counts.Phases = []MixPhase{{Weights: []string{"all/epoch", "200000/epoch", "2000000/epoch"}}}
	mc := mustMixture(b, counts)
	b.Run("random-counts", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			mc.At(int64(i) * 7919 % (4 * mc.Len()))
		}
	})
	// Making a mixture whose ramp spans a million rounds of 256: each
	// round's apportionment is worked out once, when it is made.
	ramp.Phases[1].At = 256 * 1_000_000
	b.Run("new-ramp-1M-rounds", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			mustMixture(b, ramp)
		}
	})
}

// TestMixtureDrawsIn: the per-source count of ranges of positions is
// what counting their draws one by one gives, whole rounds or not,
// across a schedule's phases.
func TestMixtureDrawsIn(t *testing.T) {
	m := mustMixture(t, threeSources())
	for e := range 3 {
		for _, rs := range [][]Range{
			{{0, m.Len()}},
			{{3, 17}},
			{{0, 10}, {20, 41}, {55, 99}},
			{{7, 8}, {30, 100}},
			{{m.Len() - 5, m.Len() + 20}}, // padding past the end is not counted
		} {
			want := make([]int64, m.Sources())
			for _, r := range rs {
				for p := r.Start; p < min(r.End, m.Len()); p++ {
					want[m.DrawAt(int64(e)*m.Len()+p).Source]++
				}
			}
			if got := m.DrawsIn(e, rs); !slices.Equal(got, want) {
				t.Errorf("epoch %d, %v: DrawsIn %v, counted %v", e, rs, got, want)
			}
		}
	}
}

// TestMixtureLinearRamp: a linear phase's weights are reached by a ramp
// from the previous phase's first round: round k of a ramp of D rounds
// holds the largest-remainder counts of w0 + (w1-w0)·k/D, and the
// weights after it are the phase's.
func TestMixtureLinearRamp(t *testing.T) {
	spec := MixSpec{Seed: 3, Block: 1, Window: 1, Round: 10,
		Sources: []MixSource{{"a", 40}, {"b", 13}, {"c", 7}}, // an epoch of 60: 6 rounds
		Phases: []MixPhase{{At: 0, Weights: []string{"1", "0", "0"}},
			{At: 100, Weights: []string{"0", "1", "0"}, Linear: true},       // rounds 0-9 ramp a -> b
			{At: 140, Weights: []string{"0", "1", "0"}},                     // a step to the same
			{At: 200, Weights: []string{"1/3", "1/3", "1/3"}, Linear: true}, // rounds 14-19 ramp
		}}
	m := mustMixture(t, spec)
	want := map[int64][]int64{}
	for k := int64(0); k < 10; k++ {
		want[k] = []int64{10 - k, k, 0} // exact quotas: b's weight k/10
	}
	for k := int64(10); k < 14; k++ {
		want[k] = []int64{0, 10, 0}
	}
	// Rounds 14..19 ramp (0,1,0) -> (1/3,1/3,1/3) over 6 rounds: round
	// 14+t's quotas are 10·(t/18, 1-2t/18, t/18).
	want[14] = []int64{0, 10, 0}
	want[15] = []int64{1, 9, 0} // 0.556, 8.889, 0.556: 2 left, to b (.889) and a (ties c, listed first)
	want[16] = []int64{1, 8, 1} // 1.111, 7.778, 1.111: 1 left, to b
	want[17] = []int64{2, 7, 1} // 1.667 each fraction: 2 left, to a and b
	want[18] = []int64{2, 6, 2} // 2.222, 5.556, 2.222: 1 left, to b
	want[19] = []int64{3, 4, 3} // 2.778, 4.444, 2.778: 2 left, to a and c
	want[20] = []int64{4, 3, 3} // 1/3 each, 3.333: 1 left, to a
	for r := int64(0); r < 24; r++ {
		w, ok := want[r]
		if !ok {
			continue
		}
		got, start, end := m.Counts(r * 10)
		if !slices.Equal(got, w) || start != r*10 || end != r*10+10 {
			t.Errorf("round %d: Counts %v [%d, %d), want %v", r, got, start, end, w)
		}
		drew := make([]int64, 3)
		for p := start; p < end; p++ {
			drew[m.DrawAt(p).Source]++
		}
		if !slices.Equal(drew, got) {
			t.Errorf("round %d drew %v, counts %v", r, drew, got)
		}
	}
	if id := m.Identity(); !strings.Contains(id, "@10~linear,") || !strings.Contains(id, " @14,") {
		t.Errorf("identity %q: want the ramps marked, the step not", id)
	}
	step := spec
	step.Phases = slices.Clone(spec.Phases)
	step.Phases[1].Linear = false
	if mustMixture(t, step).Identity() == m.Identity() {
		t.Error("a step and a ramp to the same weights: the same identity")
	}
	spec.Phases[0].Linear = true
	if _, err := NewMixture(spec); !errors.Is(err, ErrMixture) || !strings.Contains(err.Error(), "cannot ramp") {
		t.Errorf("a first phase that ramps: err %v", err)
	}
}

// TestMixtureLongRamp: a ramp of many rounds (past the prefixes kept
// every rampStride rounds) counts the draws before each round as summing
// the rounds one by one does, so DrawsIn and the draws' numbers agree.
func TestMixtureLongRamp(t *testing.T) {
	spec := MixSpec{Seed: 9, Block: 2, Window: 3, Round: 7,
		Sources: []MixSource{{"a", 500}, {"b", 300}, {"c", 200}},
		Phases: []MixPhase{{At: 0, Weights: []string{"0.6", "0.3", "0.1"}},
			{At: 7 * 1000, Weights: []string{"0.1", "0.2", "0.7"}, Linear: true}}}
	m := mustMixture(t, spec)
	sum := make([]int64, 3)
	for r := int64(0); r < 1100; r++ {
		counts, _, _ := m.Counts(r * 7)
		before := make([]int64, 3)
		m.drawsBefore(r, before)
		if !slices.Equal(before, sum) {
			t.Fatalf("round %d: draws before %v, summed %v", r, before, sum)
		}
		for s := range sum {
			sum[s] += counts[s]
		}
	}
	for _, e := range []int{0, 3, 6} { // epochs of 143 rounds; the ramp ends in epoch 6
		rs := []Range{{0, 300}, {303, 650}, {651, m.Len()}}
		want := make([]int64, 3)
		for _, r := range rs {
			for p := r.Start; p < r.End; p++ {
				want[m.DrawAt(int64(e)*m.Len()+p).Source]++
			}
		}
		if got := m.DrawsIn(e, rs); !slices.Equal(got, want) {
			t.Errorf("epoch %d: DrawsIn %v, counted %v", e, got, want)
		}
	}
	if got, _, _ := m.Counts(1050 * 7); !slices.Equal(got, []int64{1, 1, 5}) {
		t.Errorf("after the ramp: %v, want [1 1 5]", got) // 0.7, 1.4, 4.9: floors 0, 1, 4; 2 left, to c (.9) and a (.7)
	}
}

// scanPositions is where a global index is drawn in an epoch, found the
// slow way: every position's draw, in order (what longshore-lineage's
// --key did before Mixture.PositionsOf).
func scanPositions(m *Mixture, epoch int, index int64) []int64 {
	var out []int64
	ep := m.Epoch(epoch)
	for p := int64(0); p < ep.Len(); p++ {
		if ep.At(p) == index {
			out = append(out, p)
		}
	}
	return out
}

// TestMixturePositionsOf: the positions PositionsOf finds for a global
// index, by inverting the draws (the source's epoch orders and the
// rounds' counts and shuffles), are the ones reading every position's
// draw finds, for every index, in several epochs, under step schedules,
// linear ramps (some longer than rampStride rounds), blocks and windows,
// a source drawn many times an epoch and one left partly out.
func TestMixturePositionsOf(t *testing.T) {
	ramp := MixSpec{Seed: 3, Block: 1, Window: 1, Round: 10,
		Sources: []MixSource{{"a", 40}, {"b", 13}, {"c", 7}},
		Phases: []MixPhase{{At: 0, Weights: []string{"1", "0", "0"}},
			{At: 100, Weights: []string{"0", "1", "0"}, Linear: true},
			{At: 140, Weights: []string{"0", "1", "0"}},
			{At: 200, Weights: []string{"1/3", "1/3", "1/3"}, Linear: true}}}
	long := MixSpec{Seed: 9, Block: 2, Window: 3, Round: 7,
		Sources: []MixSource{{"a", 500}, {"b", 300}, {"c", 200}},
		Phases: []MixPhase{{At: 0, Weights: []string{"0.6", "0.3", "0.1"}},
			{At: 7 * 300, Weights: []string{"0.1", "0.2", "0.7"}, Linear: true}}}
	blocks := threeSources()
	blocks.Block, blocks.Window = 4, 3
	tiny := MixSpec{Seed: 11, Block: 1, Window: 1, Round: 8, // "one": 2 samples, half of every round
		Sources: []MixSource{{"one", 2}, {"big", 61}},
		Phases:  []MixPhase{{At: 0, Weights: []string{"1", "1"}}, {At: 64*3 + 5, Weights: []string{"1", "3"}}}}
	for name, spec := range map[string]MixSpec{"steps": threeSources(), "ramps": ramp, "long-ramp": long, "blocks": blocks, "tiny": tiny} {
		m := mustMixture(t, spec)
		found := 0
		for e := range 5 {
			for i := int64(0); i < m.Indices(); i++ {
				want, got := scanPositions(m, e, i), m.PositionsOf(e, i)
				if !slices.Equal(got, want) {
					t.Fatalf("%s epoch %d index %d: PositionsOf %v, the draws %v", name, e, i, got, want)
				}
				if ep := m.Epoch(e); !slices.Equal(ep.PositionsOf(i), want) {
					t.Fatalf("%s epoch %d index %d: MixEpoch.PositionsOf %v, the draws %v", name, e, i, ep.PositionsOf(i), want)
				}
				found += len(got)
			}
			if int64(found) != int64(e+1)*m.Len() {
				t.Fatalf("%s: %d positions found through epoch %d, want every one of %d", name, found, e, int64(e+1)*m.Len())
			}
		}
	}
}

// TestQuickMixturePositionsOf: PositionsOf is the scan's answer for
// random mixtures (schedules, ramps, blocks, windows), every index, the
// first epochs and one past the schedule.
func TestQuickMixturePositionsOf(t *testing.T) {
	prop := func(q quickSpec) bool {
		m := quickMixture(q)
		if m == nil {
			return true
		}
		last := int(q.Phases[len(q.Phases)-1].At/m.Len()) + 1
		for _, e := range []int{0, 1, 2, last} {
			for i := int64(0); i < m.Indices(); i++ {
				if got, want := m.PositionsOf(e, i), scanPositions(m, e, i); !slices.Equal(got, want) {
					t.Logf("%+v epoch %d index %d: PositionsOf %v, the draws %v", q.MixSpec, e, i, got, want)
					return false
				}
			}
		}
		return true
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 100}); err != nil {
		t.Error(err)
	}
}

// BenchmarkMixturePositionsOf: finding where a key was drawn in an
// epoch, by reading every position's draw (scan, what longshore-lineage
// --key did) and by inverting the draws (PositionsOf), side by side on
// one mixture (ImageNet with two smaller sources, rounds of 256, blocks
// of 16, windows of 128), after a step and inside a linear ramp; the
// ratio is scan's time over PositionsOf's. Run it with -benchtime=3x:
// a scan reads 1.5 million positions.
func BenchmarkMixturePositionsOf(b *testing.B) {
	spec := MixSpec{Seed: 7, Block: 16, Window: 128, Round: 256,
		Sources: []MixSource{{"imagenet", 1_281_167}, {"small", 50_000}, {"mid", 200_000}},
		Phases:  []MixPhase{{At: 0, Weights: []string{"0.7", "0.2", "0.1"}}}}
	ramp := spec
	ramp.Phases = []MixPhase{spec.Phases[0], {At: 3 * 1_531_167, Weights: []string{"0.1", "0.2", "0.7"}, Linear: true}}
	for name, spec := range map[string]MixSpec{"step": spec, "ramp": ramp} {
		m := mustMixture(b, spec)
		b.Run(name, func(b *testing.B) {
			var scan, inverse time.Duration
			for i := 0; i < b.N; i++ {
				idx := int64(i) * 7919 % m.Indices()
				e := 1 + i%2
				t0 := time.Now()
				want := scanPositions(m, e, idx)
				t1 := time.Now()
				got := m.PositionsOf(e, idx)
				t2 := time.Now()
				if !slices.Equal(got, want) {
					b.Fatalf("index %d epoch %d: PositionsOf %v, scan %v", idx, e, got, want)
				}
				scan, inverse = scan+t1.Sub(t0), inverse+t2.Sub(t1)
			}
			b.ReportMetric(float64(scan.Nanoseconds())/float64(b.N)/1e6, "scan-ms/key")
			b.ReportMetric(float64(inverse.Nanoseconds())/float64(b.N)/1e3, "inverse-µs/key")
			b.ReportMetric(float64(scan)/float64(max(inverse, 1)), "scan/inverse")
		})
	}
}
