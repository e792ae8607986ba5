package cluster

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// A Mixture is the sample stream of a job that draws from several
// sources (datasets) with weights, which may change during the job (a
// schedule). Like Order it is a pure function: the sample at each
// position of the job's stream is fixed by the seed, the sources' sizes,
// the round and the schedule alone, whatever the cluster's size and
// whatever restarts happened.
//
// # One index space
//
// Source s owns the global indices [Offset(s), Offset(s)+N_s), in the
// order the sources are listed; a composite catalog
// (dataset.MixtureCatalog) maps a global index back to the source's own
// sample. An epoch of the job is L positions (Len): the sources' samples
// together, N = N_0 + N_1 + ..., rounded up to whole rounds (L =
// ceil(N/Round)×Round), so that everything that works on an epoch's
// positions — leases, commits, resume tokens, the journal — works on a
// mixture unchanged, and a lease or a batch of whole rounds holds exact
// counts. The job's stream numbers its positions P = epoch×L + offset.
//
// # Rounds: exact proportions
//
// Each epoch is cut into rounds of Round positions from its first. A round
// holds each source in an exact count: the largest-remainder
// apportionment of the round's length by the weights in force at the
// round's first position (Hamilton's method: each source gets the floor
// of its quota, and the positions left go to the largest fractional
// parts, ties to the source listed first). Every round under the same
// weights therefore holds the same counts. Within a round, which
// positions go to which source is a keyed shuffle of the round's slots
// (so finding a position's draw costs O(Round)). The proportions are
// exact per round, so a batch that is a whole number of rounds
// (standalone: Round divides batch size × ranks; cluster: Round divides
// the batch size and the coordinator leases whole rounds,
// Config.Align) holds each source in exactly the round's counts times
// the number of rounds; a weight too small to give its source one
// position in a round is refused.
//
// # Source epochs: exactly once
//
// Source s's positions, in stream order, are its draws 0, 1, 2, ...;
// draws [e×N_s, (e+1)×N_s) are source epoch e, and draw d is the sample
// at position d mod N_s of the source's own epoch order
// NewOrder(seed_s, e, N_s, block, window), a permutation of the source
// (seed_s: the job's seed keyed by the source's name). So every draw
// number is taken by exactly one position, and each source epoch holds
// each of the source's samples exactly once: a committed history of the
// positions exactly once (the cluster's promise) is a committed history
// of each source's samples exactly once per source epoch. A source
// epoch does not line up with the job's epochs: a small source with a
// large weight goes through several of its epochs in one of the job's,
// a large one with a small weight through part of one.
//
// # Schedules
//
// A schedule is a list of phases, each a set of weights from a job
// sample P on; a phase starts with the first round that begins at or
// after its P (a round is never split between two sets of weights).
// A change is a step, or a linear ramp (MixPhase.Linear): the rounds
// from the previous phase's first round to this one's each take the
// weights interpolated linearly between the two phases' at the round's
// index, w(r) = w0 + (w1-w0)·(r-r0)/(r1-r0), and are apportioned by
// largest remainders as any round is (exactly, in integers), so a ramp
// is exact per round too. The draws counted before any round are a sum
// over the phases before it (and, within a ramp, a prefix kept every
// rampStride rounds), so At costs O(log phases + Round) after a step and
// O(log phases + Round + rampStride) within a ramp; a ramp's prefixes are
// worked out when the mixture is made, O(its rounds).
//
// # Counts per epoch
//
// In place of weights, a mixture may give each source a count per epoch
// (MixPhase): an epoch is then the counts together rounded up to whole
// rounds, holds exactly each source's count (and its share of the
// positions that fill the last round), and each round holds each source
// within one of its quota (mixCounts). Source epochs are as above: a
// count above a source's size goes through several of its epochs in one
// of the job's, a count below through part of one.
//
// # Where a sample was drawn
//
// The draws invert: a source's sample is at one place of each of the
// source's epoch orders (Order.PositionOf), which fixes its draw numbers,
// and the rounds' counts and shuffles place each draw in the job's
// stream. PositionsOf finds an epoch's positions of a sample that way,
// without reading the epoch.
//
// A Mixture is immutable and safe for concurrent use.
type Mixture struct {
	seed    uint64
	block   int
	window  int
	round   int64
	total   int64 // L: whole rounds
	indices int64 // N: the sources' samples together
	names   []string
	sizes   []int64
	offsets []int64  // Offset(s)
	keys    []uint64 // per-source order seeds
	rkey    uint64   // the rounds' shuffles' key
	rpe     int64    // rounds per epoch: L/round
	phases  []mixPhase
	ident   string
}

// mixPhase is one phase of a schedule, as rounds and counts.
type mixPhase struct {
	at     int64 // the job sample the phase was given from
	from   int64 // its first global round
	weight []*big.Rat
	full   []int64 // per source, in a round
	fullP  []int64 // prefix sums of full: source s holds slots [fullP[s], fullP[s+1])
	before []int64 // per source, the draws of every round before from
	linear bool    // the rounds before from ramp to weight from the previous phase's
	ramp   *mixRamp
	counts *mixCounts // counts per epoch in place of weights (the only phase)
}

// mixCounts is a mixture given as counts per epoch: each of the job's
// epochs (rpe rounds, L positions) holds source s exactly epoch[s]
// times: its count c_s, plus, when the counts together (C) are no whole
// number of rounds, its share of the L-C positions that fill the last
// round (their largest-remainder apportionment by the counts). Each
// round holds each source floor(epoch[s]/rpe) times, and e_s = epoch[s]
// mod rpe rounds hold one more: lay the sources' extra draws end to end
// (source 0's e_0, then source 1's, ...) and deal them to the rounds in
// turn, round t mod rpe taking extra number t (McNaughton's wrap-around:
// as e_s < rpe, no round takes two of one source's, and every round
// takes the same number). So every round holds each source within one
// of its quota round×epoch[s]/L, and every epoch exactly its counts.
type mixCounts struct {
	c     []int64 // per source, its count per epoch as given (all: the size)
	total int64   // C
	rpe   int64
	epoch []int64 // per source, its draws in an epoch
	fl    []int64 // per source, epoch/rpe: its draws in every round
	first []int64 // per source, the first round of its extra draws (they wrap)
	extra []int64 // per source, epoch mod rpe: the rounds with one more
}

// maxCountTotal bounds a mixture's counts together (and so its epoch).
const maxCountTotal = 1 << 56

// spread works out an epoch of rpe rounds of n positions.
func (mc *mixCounts) spread(rpe, n int64) {
	mc.rpe = rpe
	w := make([]*big.Rat, len(mc.c))
	for s, c := range mc.c {
		w[s] = big.NewRat(c, mc.total)
	}
	fill := apportion(rpe*n-mc.total, w)
	var t int64
	for s, c := range mc.c {
		e := c + fill[s]
		mc.epoch = append(mc.epoch, e)
		mc.fl = append(mc.fl, e/rpe)
		mc.extra = append(mc.extra, e%rpe)
		mc.first = append(mc.first, t%rpe)
		t += e % rpe
	}
}

// before is each source's draws in the first j rounds of an epoch (j
// at most rpe).
func (mc *mixCounts) before(j int64) []int64 {
	out := make([]int64, len(mc.c))
	for s := range out {
		a, e := mc.first[s], mc.extra[s]
		// its extra rounds [a, a+e), wrapping past rpe, below j
		x := max(0, min(a+e, j)-a)
		if a+e > mc.rpe {
			x = max(0, j-a) + min(j, a+e-mc.rpe)
		}
		out[s] = j*mc.fl[s] + x
	}
	return out
}

// rampStride is how many rounds of a ramp apart its prefix sums are kept.
const rampStride = 256

// mixRamp is the linear ramp of rounds [from, from+span) of a phase to
// the next phase's weights: round from+t holds the largest-remainder
// apportionment of the round by (a·(span-t) + b·t) / (q·span), a and b
// the two phases' weights as numerators over their common denominator q.
type mixRamp struct {
	span, q int64
	a, b    []int64
	cum     [][]int64 // cum[j][s]: source s's draws in rounds [from, from+j·rampStride)
}

// MixSource is one source of a mixture: its name (unique, used in keys
// and seeds) and its sample count.
type MixSource struct {
	Name    string
	Samples int64
}

// MixPhase is one step of a schedule: from job sample At on (from the
// first round that starts there or after), the sources are drawn in
// proportion to Weights, one per source in MixSpec.Sources' order: a
// decimal ("0.7"), an integer or a fraction ("7/10"), >= 0, not all 0.
// Weights need not sum to 1: each counts as its share of their sum.
//
// Weights may instead be counts per epoch, every source's: "N/epoch"
// (N >= 1; more than the source's size repeats it, fewer samples it)
// or "all/epoch" (its size). Each of the job's epochs then holds
// exactly those draws of each source (mixCounts: the epoch is their sum
// rounded up to whole rounds, the positions that fill the last round
// apportioned by the counts; each round within one of its quota). A
// mixture of counts has one phase, at 0: no schedule.
type MixPhase struct {
	At      int64
	Weights []string
	// Linear ramps to Weights: the rounds from the previous phase's
	// first to this one's take weights interpolated linearly between
	// the two (per round, each exact); false is a step. The first phase
	// has nothing to ramp from.
	Linear bool
}

// MixSpec describes a Mixture.
type MixSpec struct {
	Seed uint64
	// Block and Window are every source's epoch order's (see Order).
	Block, Window int
	// Round is the positions of one round, >= 1: choose the global batch
	// (batch size × ranks) or a divisor of it.
	Round   int
	Sources []MixSource
	// Phases is the schedule: the first At 0, Ats increasing.
	Phases []MixPhase
}

// ErrMixture is wrapped by every error NewMixture and ParseMixSchedule
// return.
var ErrMixture = errors.New("cluster: invalid mixture")

// NewMixture checks spec and returns its mixture.
func NewMixture(spec MixSpec) (*Mixture, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrMixture}, args...)...)
	}
	if len(spec.Sources) == 0 {
		return nil, bad("no sources")
	}
	if spec.Round < 1 {
		return nil, bad("round %d: need at least 1", spec.Round)
	}
	if spec.Block < 1 || spec.Window < 1 {
		return nil, bad("block %d, window %d: need at least 1", spec.Block, spec.Window)
	}
	m := &Mixture{seed: spec.Seed, block: spec.Block, window: spec.Window, round: int64(spec.Round), rkey: mix64(spec.Seed ^ 0x726f756e64)} // "round"
	seen := map[string]bool{}
	for _, s := range spec.Sources {
		if s.Name == "" || strings.ContainsAny(s.Name, ",;:=@/ \t\n") {
			return nil, bad("source name %q: want a non-empty name without , ; : = @ / or spaces", s.Name)
		}
		if seen[s.Name] {
			return nil, bad("source %q named twice", s.Name)
		}
		seen[s.Name] = true
		if s.Samples < 1 {
			return nil, bad("source %q has %d samples: need at least 1", s.Name, s.Samples)
		}
		m.names = append(m.names, s.Name)
		m.sizes = append(m.sizes, s.Samples)
		m.offsets = append(m.offsets, m.indices)
		m.keys = append(m.keys, mix64(spec.Seed^0x6d6978747572)^nameHash(s.Name)) // "mixtur"
		m.indices += s.Samples
	}
	if len(spec.Phases) == 0 {
		return nil, bad("no weights")
	}
	counts, err := m.countsOf(spec.Phases)
	if err != nil {
		return nil, err
	}
	epoch := m.indices // an epoch: the index space, or the counts together
	if counts != nil {
		epoch = counts.total
	}
	m.rpe = (epoch + m.round - 1) / m.round
	m.total = m.rpe * m.round
	if counts != nil {
		counts.spread(m.rpe, m.round)
		m.phases = []mixPhase{{counts: counts, before: make([]int64, len(m.names))}}
		m.ident = m.identity()
		return m, nil
	}
	for i, p := range spec.Phases {
		if i == 0 && p.At != 0 {
			return nil, bad("the schedule's first weights are from sample %d: they must start at 0", p.At)
		}
		if i > 0 && p.At <= spec.Phases[i-1].At {
			return nil, bad("the schedule's samples must increase: %d after %d", p.At, spec.Phases[i-1].At)
		}
		if len(p.Weights) != len(m.names) {
			return nil, bad("weights from sample %d: %d of them for %d sources", p.At, len(p.Weights), len(m.names))
		}
		if i == 0 && p.Linear {
			return nil, bad("the schedule's first weights cannot ramp: there is nothing before them")
		}
		ph := mixPhase{at: p.At, from: m.roundFrom(p.At), linear: p.Linear}
		sum := new(big.Rat)
		for s, w := range p.Weights {
			r, ok := new(big.Rat).SetString(strings.TrimSpace(w))
			if !ok || r.Sign() < 0 {
				return nil, bad("weight %q of source %q: want a number >= 0", w, m.names[s])
			}
			ph.weight = append(ph.weight, r)
			sum.Add(sum, r)
		}
		if sum.Sign() == 0 {
			return nil, bad("weights from sample %d are all 0", p.At)
		}
		for _, r := range ph.weight {
			r.Quo(r, sum)
		}
		ph.full = apportion(m.round, ph.weight)
		for s, r := range ph.weight {
			if r.Sign() > 0 && ph.full[s] == 0 {
				return nil, bad("source %q's weight %s from sample %d gives it no sample in a round of %d: raise the weight or the round", m.names[s], r.FloatString(4), p.At, m.round)
			}
		}
		ph.fullP = prefix(ph.full)
		if i > 0 {
			prev := m.phases[i-1]
			if ph.from == prev.from {
				return nil, bad("weights from samples %d and %d start in the same round (round %d): at most one change a round", prev.at, p.At, ph.from)
			}
			if ph.linear {
				ramp, err := newRamp(m.round, prev, ph)
				if err != nil {
					return nil, bad("the ramp to the weights from sample %d: %v", p.At, err)
				}
				m.phases[i-1].ramp = ramp
				prev = m.phases[i-1]
			}
			ph.before = make([]int64, len(m.names))
			seg := m.segDraws(prev, ph.from)
			for s := range ph.before {
				ph.before[s] = prev.before[s] + seg[s]
			}
		} else {
			ph.before = make([]int64, len(m.names))
		}
		m.phases = append(m.phases, ph)
	}
	m.ident = m.identity()
	return m, nil
}

// countsOf reads a mixture of counts per epoch (MixPhase.Weights each
// "N/epoch" or "all/epoch"): nil for one of weights. Counts are a whole
// epoch's draws, so they are every source's or none's, and not with a
// schedule.
func (m *Mixture) countsOf(phases []MixPhase) (*mixCounts, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrMixture}, args...)...)
	}
	counted := false
	for _, p := range phases {
		for _, w := range p.Weights {
			counted = counted || IsMixCount(w)
		}
	}
	if !counted {
		return nil, nil
	}
	if len(phases) > 1 {
		return nil, bad("counts per epoch with a schedule: counts fix each of the job's epochs whole, a schedule changes weights at job samples; give weights to schedule them")
	}
	p := phases[0]
	switch {
	case p.At != 0:
		return nil, bad("counts per epoch from sample %d: they are from sample 0, for every epoch", p.At)
	case p.Linear:
		return nil, bad("counts per epoch cannot ramp")
	case len(p.Weights) != len(m.names):
		return nil, bad("counts: %d of them for %d sources", len(p.Weights), len(m.names))
	}
	mc := &mixCounts{}
	for s, w := range p.Weights {
		if !IsMixCount(w) {
			return nil, bad("source %q has a weight (%s) and another a count per epoch: give every source a weight or every source a count", m.names[s], w)
		}
		n, err := ParseMixCount(w)
		if err != nil {
			return nil, bad("count %q of source %q: want N/epoch (N a whole number >= 1) or all/epoch", w, m.names[s])
		}
		if n == CountAll {
			n = m.sizes[s]
		}
		if n > maxCountTotal-mc.total {
			return nil, bad("counts per epoch: more than %d together", int64(maxCountTotal))
		}
		mc.c = append(mc.c, n)
		mc.total += n
	}
	return mc, nil
}

// roundFrom is the first global round that starts at or after job sample p.
func (m *Mixture) roundFrom(p int64) int64 {
	e, pos := p/m.total, p%m.total
	j := (pos + m.round - 1) / m.round
	return e*m.rpe + j // j == rpe is the next epoch's first round
}

// segDraws is each source's draws in rounds [ph.from, r) under phase ph
// (r at most the next phase's first round).
func (m *Mixture) segDraws(ph mixPhase, r int64) []int64 {
	if ph.counts != nil { // the only phase, from round 0
		out := ph.counts.before(r % m.rpe)
		for s, n := range ph.counts.epoch {
			out[s] += r / m.rpe * n
		}
		return out
	}
	out := make([]int64, len(ph.full))
	t := r - ph.from
	if t <= 0 {
		return out
	}
	if ph.ramp == nil {
		for s := range out {
			out[s] = t * ph.full[s]
		}
		return out
	}
	j := t / rampStride
	copy(out, ph.ramp.cum[j])
	for k := j * rampStride; k < t; k++ {
		for s, c := range ph.ramp.counts(m.round, k) {
			out[s] += c
		}
	}
	return out
}

// roundCounts is each source's count in global round r under phase ph.
func (m *Mixture) roundCounts(ph mixPhase, r int64) []int64 {
	if ph.counts != nil {
		j := r % m.rpe
		lo, hi := ph.counts.before(j), ph.counts.before(j+1)
		for s := range hi {
			hi[s] -= lo[s]
		}
		return hi
	}
	if ph.ramp == nil {
		return ph.full
	}
	return ph.ramp.counts(m.round, r-ph.from)
}

// newRamp makes the ramp of prev's rounds to ph's weights.
func newRamp(round int64, prev, ph mixPhase) (*mixRamp, error) {
	rp := &mixRamp{span: ph.from - prev.from, q: 1}
	// q: the weights' common denominator (they are reduced).
	for _, ws := range [][]*big.Rat{prev.weight, ph.weight} {
		for _, w := range ws {
			d := w.Denom()
			if !d.IsInt64() {
				return nil, errors.New("a weight's denominator is too large")
			}
			g := gcd(rp.q, d.Int64())
			q, ok := mulOK(rp.q/g, d.Int64())
			if !ok {
				return nil, errors.New("the weights' common denominator is too large")
			}
			rp.q = q
		}
	}
	if _, ok := mulOK(rp.q, rp.span); !ok {
		return nil, errors.New("too fine: the weights' common denominator × the ramp's rounds overflows")
	}
	if qs, _ := mulOK(rp.q, rp.span); qs > (1<<62)/max(round, 1) {
		return nil, errors.New("too fine: the weights' common denominator × the ramp's rounds × the round overflows")
	}
	for s := range prev.weight {
		rp.a = append(rp.a, ratOver(prev.weight[s], rp.q))
		rp.b = append(rp.b, ratOver(ph.weight[s], rp.q))
	}
	acc := make([]int64, len(rp.a))
	for t := int64(0); t < rp.span; t++ {
		if t%rampStride == 0 {
			rp.cum = append(rp.cum, slices.Clone(acc))
		}
		for s, c := range rp.counts(round, t) {
			acc[s] += c
		}
	}
	if rp.span%rampStride == 0 {
		rp.cum = append(rp.cum, slices.Clone(acc))
	}
	return rp, nil
}

// counts is the apportionment of a round of n at the ramp's round t: the
// largest remainders of n·(a·(span-t) + b·t) / (q·span), ties to the
// lower index, in int64 (newRamp checked n·q·span fits).
func (rp *mixRamp) counts(n, t int64) []int64 {
	den := rp.q * rp.span
	out := make([]int64, len(rp.a))
	rem := make([]int64, len(rp.a))
	left := n
	for s := range rp.a {
		// a·(span-t) + b·t <= q·span, so the product stays below n·q·span.
		num := n * (rp.a[s]*(rp.span-t) + rp.b[s]*t)
		out[s], rem[s] = num/den, num%den
		left -= out[s]
	}
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(x, y int) bool { return rem[idx[x]] > rem[idx[y]] })
	for i := int64(0); i < left; i++ {
		out[idx[i]]++
	}
	return out
}

// ratOver is w's numerator over q (q a multiple of w's denominator).
func ratOver(w *big.Rat, q int64) int64 {
	return w.Num().Int64() * (q / w.Denom().Int64())
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// mulOK is a×b for a, b >= 0, and whether it fits an int64.
func mulOK(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	if a > (1<<63-1)/b {
		return 0, false
	}
	return a * b, true
}

// apportion divides n among the shares w (summing to 1) by largest
// remainders, ties to the lower index.
func apportion(n int64, w []*big.Rat) []int64 {
	out := make([]int64, len(w))
	rem := make([]*big.Rat, len(w))
	left := n
	for s, r := range w {
		q := new(big.Rat).Mul(r, new(big.Rat).SetInt64(n))
		fl := new(big.Int).Quo(q.Num(), q.Denom()) // q >= 0: truncation is the floor
		out[s] = fl.Int64()
		rem[s] = q.Sub(q, new(big.Rat).SetInt(fl))
		left -= out[s]
	}
	idx := make([]int, len(w))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return rem[idx[a]].Cmp(rem[idx[b]]) > 0 })
	for i := int64(0); i < left; i++ {
		out[idx[i]]++
	}
	return out
}

func prefix(c []int64) []int64 {
	p := make([]int64, len(c)+1)
	for i, v := range c {
		p[i+1] = p[i] + v
	}
	return p
}

// nameHash is FNV-1a 64 of a source's name.
func nameHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// Len is L, the positions of one of the job's epochs: the sources'
// samples together (Indices), rounded up to whole rounds.
func (m *Mixture) Len() int64 { return m.total }

// Indices is N, the sources' samples together: the global indices are
// [0, N).
func (m *Mixture) Indices() int64 { return m.indices }

// Sources is the number of sources.
func (m *Mixture) Sources() int { return len(m.names) }

// Name is source s's name.
func (m *Mixture) Name(s int) string { return m.names[s] }

// Size is source s's sample count, N_s.
func (m *Mixture) Size(s int) int64 { return m.sizes[s] }

// Offset is the first global index of source s.
func (m *Mixture) Offset(s int) int64 { return m.offsets[s] }

// Round is the positions of a full round.
func (m *Mixture) Round() int { return int(m.round) }

// Source returns the source of global index i and i's index in it.
func (m *Mixture) Source(i int64) (s int, local int64) {
	if i < 0 || i >= m.indices {
		panic(fmt.Sprintf("cluster: Mixture.Source(%d) outside [0, %d)", i, m.indices))
	}
	s = sort.Search(len(m.offsets), func(k int) bool { return m.offsets[k] > i }) - 1
	return s, i - m.offsets[s]
}

// Draw is what position P of the job's stream takes: source S's draw D
// (its Dth sample drawn since the job began), which is sample Local of
// the source, global index Index; D/N_s is the source epoch.
type Draw struct {
	Source int
	D      int64
	Local  int64
	Index  int64
}

// SourceEpoch is the draw's source epoch.
func (d Draw) SourceEpoch(m *Mixture) int64 { return d.D / m.sizes[d.Source] }

// DrawAt returns what job sample p (epoch × Len() + offset) draws. It
// costs O(Round): a round is worked out whole (MixEpoch keeps the last
// one). It panics for p < 0.
func (m *Mixture) DrawAt(p int64) Draw {
	if p < 0 {
		panic(fmt.Sprintf("cluster: Mixture.DrawAt(%d): negative", p))
	}
	r, slot := m.roundOf(p)
	return m.roundDraws(r, nil)[slot]
}

// roundOf returns the global round of job sample p and p's slot in it.
func (m *Mixture) roundOf(p int64) (r, slot int64) {
	e, pos := p/m.total, p%m.total
	j := pos / m.round
	return e*m.rpe + j, pos - j*m.round
}

// roundDraws returns the draws of global round r's positions, in
// dst's storage.
func (m *Mixture) roundDraws(r int64, dst []Draw) []Draw {
	n := m.round
	ph := m.phases[sort.Search(len(m.phases), func(i int) bool { return m.phases[i].from > r })-1]
	pre := ph.fullP
	if ph.ramp != nil || ph.counts != nil {
		pre = prefix(m.roundCounts(ph, r))
	}
	f := newFeistel(uint64(n), mix64(m.rkey^uint64(r)*0x9e3779b97f4a7c15))
	// Source s's slots are the shuffled slots that land in [pre[s],
	// pre[s+1]); its draws go to them in position order, so that its
	// stream is its draws in order. They are consecutive positions of
	// its epoch orders, read with Fill.
	locals := make([]int64, n)
	first := m.segDraws(ph, r)
	for s := range m.names {
		first[s] += ph.before[s]
		out := locals[pre[s]:pre[s+1]]
		for d := first[s]; len(out) > 0; {
			se, at := d/m.sizes[s], d%m.sizes[s]
			k := min(int64(len(out)), m.sizes[s]-at)
			NewOrder(m.keys[s], int(se), m.sizes[s], m.block, m.window).Fill(at, out[:k])
			out, d = out[k:], d+k
		}
	}
	next := slices.Clone(pre[:len(m.names)])
	dst = dst[:0]
	for slot := int64(0); slot < n; slot++ {
		q := int64(f.permute(uint64(slot)))
		s := sort.Search(len(m.names), func(i int) bool { return pre[i+1] > q })
		k := next[s]
		next[s]++
		local := locals[k]
		dst = append(dst, Draw{Source: s, D: first[s] + k - pre[s], Local: local, Index: m.offsets[s] + local})
	}
	return dst
}

// At returns the global index at job sample p.
func (m *Mixture) At(p int64) int64 { return m.DrawAt(p).Index }

// Epoch returns epoch's positions as an order: Len() positions, At(pos)
// the global index at job sample epoch×Len()+pos. Unlike an Order it is
// not a permutation of [0, Len()): a source drawn beyond its share of
// the index space repeats samples within the job's epoch (in another of
// its own epochs), and one drawn below it leaves some out.
func (m *Mixture) Epoch(epoch int) *MixEpoch {
	if epoch < 0 {
		panic(fmt.Sprintf("cluster: Mixture.Epoch(%d): negative", epoch))
	}
	return &MixEpoch{m: m, base: int64(epoch) * m.total, round: -1}
}

// MixEpoch is one epoch of a Mixture (Mixture.Epoch). It keeps the
// draws of the last round asked for, so that a rank reading its
// positions in order works each round out once: it is for one reader
// at a time (each feeder makes its own); the Mixture is safe for
// concurrent use.
type MixEpoch struct {
	m     *Mixture
	base  int64
	round int64
	draws []Draw
}

// Len is the epoch's positions, the mixture's Len.
func (e *MixEpoch) Len() int64 { return e.m.total }

// At returns the global index at position pos of the epoch.
func (e *MixEpoch) At(pos int64) int64 { return e.DrawAt(pos).Index }

// DrawAt returns what position pos of the epoch draws.
func (e *MixEpoch) DrawAt(pos int64) Draw {
	if pos < 0 || pos >= e.m.total {
		panic(fmt.Sprintf("cluster: MixEpoch.At(%d) outside [0, %d)", pos, e.m.total))
	}
	r, slot := e.m.roundOf(e.base + pos)
	if r != e.round {
		e.draws, e.round = e.m.roundDraws(r, e.draws), r
	}
	return e.draws[slot]
}

// Sample maps a position of the epoch to a global index as
// Order.Sample does: a position at or beyond Len (a cluster's padding)
// wraps onto the start of the epoch and is reported as padding. Padding
// granted in whole rounds from Len on thus repeats whole rounds.
func (e *MixEpoch) Sample(pos int64) (index int64, pad bool) {
	if pos >= e.m.total {
		return e.At(pos % e.m.total), true
	}
	return e.At(pos), false
}

// Counts returns the draws of each source in the round holding job
// sample p, and the round's positions [start, end) as job samples.
func (m *Mixture) Counts(p int64) (counts []int64, start, end int64) {
	e, pos := p/m.total, p%m.total
	j := pos / m.round
	r := e*m.rpe + j
	k := sort.Search(len(m.phases), func(i int) bool { return m.phases[i].from > r }) - 1
	start = e*m.total + j*m.round
	return append([]int64(nil), m.roundCounts(m.phases[k], r)...), start, start + m.round
}

// Identity is the mixture's canonical description: its sources (name and
// count, in order), its round and its schedule (each phase's first round
// and weights, reduced). Two mixtures with the same seed, block, window
// and Identity draw the same stream. It is what a composite catalog's
// digest covers (dataset.MixtureCatalog), so that a resume under other
// weights is refused as a resume over another dataset is.
func (m *Mixture) Identity() string { return m.ident }

func (m *Mixture) identity() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mixture/2 round=%d", m.round)
	for s, n := range m.names {
		fmt.Fprintf(&b, " %s=%d", n, m.sizes[s])
	}
	for _, ph := range m.phases {
		fmt.Fprintf(&b, " @%d", ph.from)
		if ph.counts != nil { // its counts, all as the source's size
			for s, c := range ph.counts.c {
				fmt.Fprintf(&b, ",%s:%d/epoch", m.names[s], c)
			}
			continue
		}
		if ph.linear { // a step-only schedule keeps the identity it always had
			b.WriteString("~linear")
		}
		for s, w := range ph.weight {
			fmt.Fprintf(&b, ",%s:%s", m.names[s], w.RatString())
		}
	}
	return b.String()
}

// ParseMixSchedule parses a schedule: phases separated by ";", each
// "name:weight,name:weight@SAMPLE" (the first phase's "@0" may be left
// out), SAMPLE a job sample (epoch × the mixture's Len() + offset) and
// each weight as MixPhase's; "@SAMPLE linear" ramps to the phase's
// weights from the previous phase's start (MixPhase.Linear), "@SAMPLE
// step" (or nothing) is a step. A source a phase does not name has
// weight 0 in it. names are the sources, in order.
//
//	a:0.7,b:0.3;a:0.5,b:0.5@100000
//	a:0.7,b:0.3;a:0.5,b:0.5@100000 linear
func ParseMixSchedule(text string, names []string) ([]MixPhase, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: schedule %q: "+format, append([]any{ErrMixture, text}, args...)...)
	}
	index := map[string]int{}
	for i, n := range names {
		index[n] = i
	}
	var out []MixPhase
	for i, part := range strings.Split(text, ";") {
		part = strings.TrimSpace(part)
		ws, at, hasAt := strings.Cut(part, "@")
		p := MixPhase{Weights: make([]string, len(names))}
		for k := range p.Weights {
			p.Weights[k] = "0"
		}
		if hasAt {
			f := strings.Fields(at)
			if len(f) == 2 && (f[1] == "linear" || f[1] == "step") {
				p.Linear = f[1] == "linear"
				f = f[:1]
			}
			if len(f) != 1 {
				return nil, bad("phase %d: @%s: want a sample number, then linear or step or nothing", i+1, at)
			}
			v, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil || v < 0 {
				return nil, bad("phase %d: @%s: want a sample number >= 0", i+1, at)
			}
			p.At = v
		} else if i > 0 {
			return nil, bad("phase %d: %q: say from which sample (@N)", i+1, part)
		}
		named := map[string]bool{}
		for _, nw := range strings.Split(ws, ",") {
			name, w, ok := strings.Cut(strings.TrimSpace(nw), ":")
			if !ok {
				return nil, bad("phase %d: %q: want name:weight", i+1, nw)
			}
			if IsMixCount(w) {
				return nil, bad("phase %d: %s:%s: counts per epoch go on --mixture's sources (name=DATASET:N/epoch), not in a schedule, which changes weights", i+1, name, w)
			}
			k, known := index[name]
			if !known {
				return nil, bad("phase %d: no source %q (sources: %s)", i+1, name, strings.Join(names, ", "))
			}
			if named[name] {
				return nil, bad("phase %d: source %q weighted twice", i+1, name)
			}
			named[name] = true
			p.Weights[k] = w
		}
		out = append(out, p)
	}
	return out, nil
}

// MixFlagSource is one source as the --mixture flag names it: its name
// and its dataset (a directory, file://DIR or s3://bucket/prefix).
type MixFlagSource struct {
	Name, Dataset string
}

// ParseMixFlags parses the --mixture and --mixture-schedule flags, as
// the coordinator and the node share them: spec is
// "name=DATASET:WEIGHT,..." (the weights left out when schedule gives
// them) or "name=DATASET:N/epoch,..." (counts per epoch, N a whole
// number or all; not with a schedule), schedule as ParseMixSchedule
// takes it. It returns the sources in order and the schedule (spec's
// weights or counts from sample 0 when schedule is empty). The errors
// name the flags.
func ParseMixFlags(spec, schedule string) ([]MixFlagSource, []MixPhase, error) {
	var srcs []MixFlagSource
	var weights []string
	var counted, weighted string // the first source with a count, with a weight
	for _, part := range strings.Split(spec, ",") {
		name, rest, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || name == "" || rest == "" {
			return nil, nil, fmt.Errorf("--mixture %q: %q: want name=DATASET:WEIGHT", spec, part)
		}
		src, weight := MixFlagSource{Name: name, Dataset: rest}, ""
		if i := strings.LastIndex(rest, ":"); i >= 0 {
			if _, ok := new(big.Rat).SetString(rest[i+1:]); ok {
				src.Dataset, weight = rest[:i], rest[i+1:]
			} else if IsMixCount(rest[i+1:]) {
				src.Dataset, weight = rest[:i], rest[i+1:]
				if _, err := ParseMixCount(weight); err != nil {
					return nil, nil, fmt.Errorf("--mixture: source %q: count %q: want N/epoch (N a whole number >= 1) or all/epoch", name, weight)
				}
			}
		}
		if src.Dataset == "" {
			return nil, nil, fmt.Errorf("--mixture: source %q names no dataset", name)
		}
		switch {
		case weight == "":
		case IsMixCount(weight):
			if weighted != "" {
				return nil, nil, fmt.Errorf("--mixture: source %q has a count per epoch and %q a weight: give every source a weight or every source a count", name, weighted)
			}
			if schedule != "" {
				return nil, nil, fmt.Errorf("--mixture-schedule with counts per epoch (source %q): counts fix each epoch of the job whole, a schedule changes weights; give weights to schedule them", name)
			}
			if counted == "" {
				counted = name
			}
		default:
			if counted != "" {
				return nil, nil, fmt.Errorf("--mixture: source %q has a weight and %q a count per epoch: give every source a weight or every source a count", name, counted)
			}
			if weighted == "" {
				weighted = name
			}
		}
		if schedule == "" && weight == "" {
			return nil, nil, fmt.Errorf("--mixture: source %q has no weight (name=DATASET:WEIGHT), and there is no --mixture-schedule", name)
		}
		if schedule != "" && weight != "" {
			return nil, nil, fmt.Errorf("--mixture: source %q has a weight and --mixture-schedule gives the weights: give them in one place", name)
		}
		srcs = append(srcs, src)
		weights = append(weights, weight)
	}
	if schedule == "" {
		return srcs, []MixPhase{{At: 0, Weights: weights}}, nil
	}
	names := make([]string, len(srcs))
	for i, s := range srcs {
		names[i] = s.Name
	}
	p, err := ParseMixSchedule(schedule, names)
	if err != nil {
		return nil, nil, fmt.Errorf("--mixture-schedule: %w", err)
	}
	return srcs, p, nil
}

// drawsBefore is each source's draws in the global rounds before round
// r, into out.
func (m *Mixture) drawsBefore(r int64, out []int64) {
	ph := m.phases[sort.Search(len(m.phases), func(i int) bool { return m.phases[i].from > r })-1]
	seg := m.segDraws(ph, r)
	for s := range out {
		out[s] = ph.before[s] + seg[s]
	}
}

// DrawsIn returns how many positions of each source the ranges of
// positions of epoch hold (ranges inside [0, Len()); padding past Len is
// not counted): the committed history of a cluster's epoch, per source.
// It costs O(log phases) a range, plus O(Round) for a range that starts
// or ends inside a round.
func (m *Mixture) DrawsIn(epoch int, ranges []Range) []int64 {
	out := make([]int64, len(m.names))
	lo, hi := make([]int64, len(m.names)), make([]int64, len(m.names))
	base := int64(epoch) * m.total
	var round []Draw
	partial := func(a, b int64) { // positions [a, b) of one round of the epoch
		r, _ := m.roundOf(base + a)
		round = m.roundDraws(r, round)
		for pos := a; pos < b; pos++ {
			out[round[pos%m.round].Source]++
		}
	}
	for _, rg := range ranges {
		a, b := max(rg.Start, 0), min(rg.End, m.total)
		if a >= b {
			continue
		}
		ra, rb := (a+m.round-1)/m.round, b/m.round // whole rounds [ra, rb) of the epoch
		if ra > rb {                               // inside one round
			partial(a, b)
			continue
		}
		if a < ra*m.round {
			partial(a, ra*m.round)
		}
		if b > rb*m.round {
			partial(rb*m.round, b)
		}
		m.drawsBefore(int64(epoch)*m.rpe+ra, lo)
		m.drawsBefore(int64(epoch)*m.rpe+rb, hi)
		for s := range out {
			out[s] += hi[s] - lo[s]
		}
	}
	return out
}

// ParseMixCount reads a count per epoch as MixPhase.Weights gives it:
// "N/epoch" (N >= 1) is N, "all/epoch" is CountAll (the source's size).
// Anything else is an error (IsMixCount tells a count from a weight).
func ParseMixCount(w string) (n int64, err error) {
	v, isCount := strings.CutSuffix(strings.TrimSpace(w), "/epoch")
	if !isCount {
		return 0, fmt.Errorf("%w: %q is not a count per epoch (N/epoch or all/epoch)", ErrMixture, w)
	}
	if v == "all" {
		return CountAll, nil
	}
	n, perr := strconv.ParseInt(v, 10, 64)
	if perr != nil || n < 1 {
		return 0, fmt.Errorf("%w: count %q: want N/epoch, N a whole number >= 1, or all/epoch", ErrMixture, w)
	}
	return n, nil
}

// CountAll is ParseMixCount's "all/epoch": as many as the source holds.
const CountAll int64 = -1

// IsMixCount says whether a weight as MixPhase.Weights gives it is a
// count per epoch (ends in "/epoch"), well formed or not.
func IsMixCount(w string) bool { return strings.HasSuffix(strings.TrimSpace(w), "/epoch") }

// PositionsOf returns the positions of epoch at which global index is
// drawn, in increasing order: none, one or several (a mixture's epoch is
// no permutation). It inverts the draws instead of reading an epoch's:
// the index is sample i of source s, which each of s's epoch orders
// holds once, at Order.PositionOf(i), so source epoch se draws it as
// draw se×N_s + that; the epoch holds s's draws [before(first round),
// before(first round of the next epoch)) (the rounds' counts, summed
// as At sums them); the round of a draw in that range is found by
// bisection over the epoch's rounds; and its slot is the kth of the
// round's slots that its shuffle gives s, k its number among s's
// draws of the round (inverting the shuffle over s's share). It costs
// O(log rounds) a source epoch the job's epoch reaches into, plus, per
// position found, O(log rounds) counts and O(c log c) for the c
// positions source s holds in the round (c ≤ Round), against the
// O(Len()) of reading the epoch. It panics for an index outside
// [0, Indices()) or a negative epoch.
func (m *Mixture) PositionsOf(epoch int, index int64) []int64 {
	if epoch < 0 {
		panic(fmt.Sprintf("cluster: Mixture.PositionsOf(%d, %d): negative epoch", epoch, index))
	}
	s, local := m.Source(index)
	n := m.sizes[s]
	r0, r1 := int64(epoch)*m.rpe, int64(epoch+1)*m.rpe
	lo, hi := m.sourceDrawsBefore(s, r0), m.sourceDrawsBefore(s, r1)
	var out []int64
	var slots []int64 // source s's slots of round cached, in slot order
	cached := int64(-1)
	from := r0 // draws increase with their rounds: each bisection starts at the last one's round
	for se := lo / n; se*n < hi; se++ {
		d := se*n + NewOrder(m.keys[s], int(se), n, m.block, m.window).PositionOf(local)
		if d < lo || d >= hi {
			continue
		}
		// The round that holds draw d: the first whose draws after it pass d.
		r := from + int64(sort.Search(int(r1-from), func(k int) bool { return m.sourceDrawsBefore(s, from+int64(k)+1) > d }))
		if r != cached {
			slots, cached = m.sourceSlots(r, s, slots), r
		}
		out = append(out, (r-r0)*m.round+slots[d-m.sourceDrawsBefore(s, r)])
		from = r
	}
	return out
}

// PositionsOf returns the epoch's positions that draw global index
// (Mixture.PositionsOf).
func (e *MixEpoch) PositionsOf(index int64) []int64 {
	return e.m.PositionsOf(int(e.base/e.m.total), index)
}

// sourceDrawsBefore is source s's draws in the global rounds before
// round r (drawsBefore's, for one source).
func (m *Mixture) sourceDrawsBefore(s int, r int64) int64 {
	ph := m.phases[sort.Search(len(m.phases), func(i int) bool { return m.phases[i].from > r })-1]
	if ph.counts != nil { // rounds differ within an epoch (mixCounts)
		return ph.before[s] + m.segDraws(ph, r)[s]
	}
	t := r - ph.from
	if ph.ramp == nil {
		return ph.before[s] + t*ph.full[s]
	}
	j := t / rampStride
	d := ph.before[s] + ph.ramp.cum[j][s]
	for k := j * rampStride; k < t; k++ {
		d += ph.ramp.counts(m.round, k)[s]
	}
	return d
}

// sourceSlots returns, in dst's storage, the slots of global round r
// that draw from source s, in slot order: roundDraws gives s's draws of
// the round to them in that order. They are the slots its shuffle maps
// into s's share [pre[s], pre[s+1]), found by inverting the shuffle.
func (m *Mixture) sourceSlots(r int64, s int, dst []int64) []int64 {
	ph := m.phases[sort.Search(len(m.phases), func(i int) bool { return m.phases[i].from > r })-1]
	var lo, hi int64
	if ph.ramp != nil || ph.counts != nil { // rounds differ: this one's counts
		counts := m.roundCounts(ph, r)
		for _, c := range counts[:s] {
			lo += c
		}
		hi = lo + counts[s]
	} else {
		lo, hi = ph.fullP[s], ph.fullP[s+1]
	}
	f := newFeistel(uint64(m.round), mix64(m.rkey^uint64(r)*0x9e3779b97f4a7c15)) // roundDraws' shuffle
	dst = dst[:0]
	for q := lo; q < hi; q++ {
		dst = append(dst, int64(f.invert(uint64(q))))
	}
	slices.Sort(dst)
	return dst
}
