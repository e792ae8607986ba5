package actors

import (
	"fmt"
	"math"
)

// The node's tuner (--autotune): the bottleneck report acting. Every
// window it reads what the pipelines measured (each stage's busy
// fraction, the samples delivered, how much of its time the consumer
// waited for data, the CPU the process used) and moves one knob of the
// node's setting -- the reads in flight (fetchers), the decoders, the
// batch slots -- or holds. This file is its pure half: windows in, the
// next setting and its reason out; the shell (tune_shell.go) measures
// and applies.
//
// The rules, in order:
//
//  0. It decides on the mean of the setting's last judgeWindows windows
//     (the window a change was made in mixes two settings and is
//     skipped), so one window's noise moves nothing.
//  1. A change is on trial until judgeWindows windows of it are seen. A
//     knob grown that did not bring a third of the gain expected of it
//     (or keepGain, if less) is put back and not grown past that value
//     again; a knob shrunk that cost more than lossTolerance of the
//     throughput is put back and not shrunk below it again. That is the hysteresis: a setting that was tried
//     and judged is not tried again, so the tuner does not oscillate.
//     What it learned is forgotten when the throughput drifts by more
//     than driftForget from what it was when learned, for forgetWindows
//     windows in a row (the data, the trainer or the host changed).
//  2. Budgets: a setting whose memory (slots, fetched bytes, decode
//     scratch; TuneBudget.MemoryOf) is over the memory budget, or whose
//     decoders are over the CPU budget's cores, or whose process used
//     more than the CPU budget (by cpuTolerance), is cut first.
//  3. While the consumer waits for data (Wait above waitHigh), the busiest
//     of fetch and decode, if it is busy at least busyHigh of its time,
//     grows: half as many decoders again (one at least), or twice the
//     reads in flight (while their limit binds, the rate follows it:
//     Little's law); if neither is saturated (under slotSlack), the
//     slots grow by half (work comes in bursts they do not absorb).
//     Never past a budget (a grow that would pass the memory budget is
//     cut to what fits, or makes room by giving up an idle decoder or a
//     slot in the same change); never for a gain under minGain.
//  4. While the consumer does not wait (Wait under waitLow), an idle
//     stage shrinks: one decoder fewer when the rest would still be at
//     most shrinkBusy busy, the reads in flight down to twice what is
//     used (Little's law with fetchHeadroom). Idle decoders hold cores
//     the trainer could use; idle reads hold fetch buffers.
//
// Between waitLow and waitHigh, and when nothing applies, it holds.
type Tuner struct {
	b   TuneBudget
	cur TuneSetting

	n      int         // windows seen
	settle int         // windows to skip (the one a change was made in)
	trial  *tuneChange // the change being judged
	// ceil and floor are the values a knob must not grow past, or
	// shrink below, learned from changes put back; 0: none.
	ceil, floor [numKnobs]int
	learnedAt   float64      // the rate when they were learned
	drifted     int          // windows in a row the rate was driftForget away from it
	rate        float64      // the recent rate (an average over windows)
	hist        []TuneWindow // the setting's last windows (judgeWindows at most)
	why         string       // why grow grew nothing
}

// TuneSetting is what the tuner sets: the node's reads in flight and
// decoders (summed over its ranks, which share them out) and each
// rank's batch slots.
type TuneSetting struct {
	Fetchers int `json:"fetchers"`
	Decoders int `json:"decoders"`
	Slots    int `json:"slots"`
}

func (s TuneSetting) String() string {
	return fmt.Sprintf("%d fetchers, %d decoders, %d slots a rank", s.Fetchers, s.Decoders, s.Slots)
}

func (s TuneSetting) get(k knob) int {
	switch k {
	case knobFetchers:
		return s.Fetchers
	case knobDecoders:
		return s.Decoders
	}
	return s.Slots
}

func (s *TuneSetting) set(k knob, v int) {
	switch k {
	case knobFetchers:
		s.Fetchers = v
	case knobDecoders:
		s.Decoders = v
	default:
		s.Slots = v
	}
}

// TuneBudget is what the tuner may use, and the sizes it prices memory
// with.
type TuneBudget struct {
	// Cores is the CPU the loader may use, in cores: the decoders never
	// outnumber its whole cores, and a window whose process used more
	// (TuneWindow.CPU) cuts a decoder. 0: no CPU budget (MaxDecoders
	// bounds them).
	Cores float64
	// Memory bounds MemoryOf(setting), in bytes; 0: no memory budget.
	Memory int64
	// Ranks share the fetchers and decoders; each has Slots slots.
	Ranks int
	// SlotBytes is one batch slot; DecodeQueue the tasks a decoder
	// queues (each holds a fetch buffer); DecoderBytes what a decoder
	// holds beside (its scratch sample, with a decode deadline).
	SlotBytes    int64
	DecodeQueue  int
	DecoderBytes int64
	// The knobs' bounds: slots a rank (MaxSlots: the pool the ranks
	// allocated), reads in flight and decoders over the node.
	MinSlots, MaxSlots       int
	MaxFetchers, MaxDecoders int
}

// MemoryOf is what setting s holds at most, in bytes, with fetched
// objects of objectBytes on average: the ranks' slots, their fetch
// buffers in use (reads in flight and samples queued at decoders: the
// scheduler keeps them within that), and the decoders' own.
func (b TuneBudget) MemoryOf(s TuneSetting, objectBytes int64) int64 {
	ranks := int64(max(b.Ranks, 1))
	bufs := int64(s.Fetchers) + int64(s.Decoders)*int64(max(b.DecodeQueue, 1))
	return ranks*int64(s.Slots)*b.SlotBytes + bufs*objectBytes + int64(s.Decoders)*b.DecoderBytes
}

// maxDecoders is the most decoders the budget allows.
func (b TuneBudget) maxDecoders() int {
	n := max(b.MaxDecoders, 1)
	if b.Cores > 0 {
		n = min(n, max(int(math.Floor(b.Cores+1e-9)), 1))
	}
	return max(n, max(b.Ranks, 1)) // every rank decodes with one at least
}

func (b TuneBudget) maxFetchers() int { return max(b.MaxFetchers, max(b.Ranks, 1)) }

func (b TuneBudget) minSlots() int { return max(b.MinSlots, 1) }

func (b TuneBudget) maxSlots() int { return max(b.MaxSlots, b.minSlots()) }

// TuneWindow is what one window measured, over the node.
type TuneWindow struct {
	// Seconds is the window's length; Samples the samples delivered in it.
	Seconds float64
	Samples int64
	// FetchBusy and DecodeBusy are the stages' busy fractions (Stats).
	FetchBusy, DecodeBusy float64
	// Wait is the share of the consumer's time spent waiting for data:
	// the trainers' own figure where they report it, else the feed
	// stage's busy fraction.
	Wait float64
	// CPU is the cores the process used over the window (0: not
	// measured).
	CPU float64
	// ObjectBytes is the mean fetched object, for MemoryOf.
	ObjectBytes int64
}

func (w TuneWindow) rate() float64 {
	if w.Seconds <= 0 {
		return 0
	}
	return float64(w.Samples) / w.Seconds
}

// TuneDecision is one window's outcome: the setting from and to (equal
// when it holds), the knob moved and why.
type TuneDecision struct {
	Window   int         `json:"window"`
	From     TuneSetting `json:"from"`
	To       TuneSetting `json:"to"`
	Knob     string      `json:"knob,omitempty"`
	Reason   string      `json:"reason"`
	Rate     float64     `json:"samples_per_second"`
	Memory   int64       `json:"memory_bytes"`
	Changed  bool        `json:"changed"`
	Reverted bool        `json:"reverted,omitempty"`
}

type knob int

const (
	knobFetchers knob = iota
	knobDecoders
	knobSlots
	numKnobs
)

var knobNames = [numKnobs]string{"fetchers", "decoders", "slots"}

func (k knob) String() string { return knobNames[k] }

// tuneChange is a change on trial.
type tuneChange struct {
	k        knob
	from, to int
	grow     bool
	before   float64     // the rate before it (recentRate)
	prev     TuneSetting // the setting before it, put back if it is refused
	expect   float64     // the gain expected of a grow (0.25: 25%)
}

const (
	// waitHigh: the consumer waiting more than this share of its time
	// is the loader's to fix; under waitLow the loader keeps ahead and
	// idle stages shrink. The summary's rule calls a consumer that waits
	// under 5% the bottleneck.
	waitHigh = 0.05
	waitLow  = 0.02
	// busyHigh: a stage busy this much of its time limits the rate.
	busyHigh = 0.8
	// shrinkBusy: a stage shrinks only if what is left would be busy at
	// most this much (room for bursts).
	shrinkBusy = 0.7
	// minGain: a grow expected to bring less is not worth its cost (and
	// could not be told from noise).
	minGain = 0.06
	// keepGain: a grow that brought this much is kept even when more
	// was expected of it (a second decoder on a shared host's cores
	// brought 27% where 100% was expected).
	keepGain = 0.1
	// lossTolerance: a shrink that cost more throughput than this is
	// put back.
	lossTolerance = 0.05
	// judgeWindows: a change is judged on the mean of this many windows
	// after it, against as many before it.
	judgeWindows = 4
	// slotsExpect caps the gain expected of more slots: what they bring
	// is bursts absorbed, not a stage's capacity.
	slotsExpect = 0.12
	// slotSlack: more slots are tried only while the busiest stage is
	// busy less than this (a stage waits for a slot).
	slotSlack = 1 - 2*minGain
	// driftForget: what was learned is forgotten when the rate moves
	// this far from the rate it was learned at.
	driftForget = 0.3
	// forgetWindows: ... for this many windows in a row (a shared host's
	// speed swings for a few seconds; a new dataset or trainer stays).
	forgetWindows = 10
	// cpuTolerance over the CPU budget before a decoder is cut (the
	// measurement's noise, the pipeline's own threads).
	cpuTolerance = 0.1
	// rateSmoothing: the weight of a new window in the average rate.
	rateSmoothing = 0.3
)

// NewTuner starts a tuner at start, brought within b.
func NewTuner(b TuneBudget, start TuneSetting) *Tuner {
	t := &Tuner{b: b}
	t.cur = t.clamp(start)
	return t
}

// fitStart cuts s until it is within the memory budget at objectBytes
// (slots first, then reads in flight, then decoders), as Decide's
// budget rule would, window after window.
func (t *Tuner) fitStart(s TuneSetting, objectBytes int64) TuneSetting {
	for !t.fits(s, objectBytes) {
		switch {
		case s.Slots > t.lo(knobSlots):
			s.Slots--
		case s.Fetchers > t.lo(knobFetchers):
			s.Fetchers--
		case s.Decoders > t.lo(knobDecoders):
			s.Decoders--
		default:
			return s
		}
	}
	return s
}

// Fit brings the setting within the memory budget at once, for fetched
// objects of objectBytes on average (a guess before any was read): what
// a tuner does before its first window.
func (t *Tuner) Fit(objectBytes int64) TuneSetting {
	t.cur = t.fitStart(t.cur, objectBytes)
	return t.cur
}

// Setting is the setting now.
func (t *Tuner) Setting() TuneSetting { return t.cur }

// Budget is the tuner's budget.
func (t *Tuner) Budget() TuneBudget { return t.b }

func (t *Tuner) clamp(s TuneSetting) TuneSetting {
	s.Fetchers = min(max(s.Fetchers, t.lo(knobFetchers)), t.b.maxFetchers())
	s.Decoders = min(max(s.Decoders, max(t.b.Ranks, 1)), t.b.maxDecoders())
	s.Slots = min(max(s.Slots, t.b.minSlots()), t.b.maxSlots())
	return s
}

func (t *Tuner) lo(k knob) int {
	switch k {
	case knobSlots:
		return t.b.minSlots()
	case knobFetchers:
		return min(fetchMinAuto*max(t.b.Ranks, 1), t.b.maxFetchers())
	}
	return max(t.b.Ranks, 1)
}

func (t *Tuner) hi(k knob) int {
	switch k {
	case knobFetchers:
		return t.b.maxFetchers()
	case knobDecoders:
		return t.b.maxDecoders()
	}
	return t.b.maxSlots()
}

// fits reports whether s is within the memory budget.
func (t *Tuner) fits(s TuneSetting, obj int64) bool {
	return t.b.Memory <= 0 || t.b.MemoryOf(s, obj) <= t.b.Memory
}

// Decide takes a window's measurements and returns what to do: the
// setting to apply (the same as now when it holds) and why.
func (t *Tuner) Decide(w TuneWindow) TuneDecision {
	t.n++
	rate := w.rate()
	d := TuneDecision{Window: t.n, From: t.cur, To: t.cur, Rate: rate, Memory: t.b.MemoryOf(t.cur, w.ObjectBytes)}
	hold := func(why string) TuneDecision { d.Reason = why; return d }
	move := func(k knob, to int, why string, trial *tuneChange) TuneDecision {
		d.To.set(k, to)
		d.Knob, d.Reason, d.Changed = k.String(), why, true
		d.Memory = t.b.MemoryOf(d.To, w.ObjectBytes)
		if trial != nil {
			if trial.before == 0 {
				trial.before = t.recentRate()
			}
			if trial.prev == (TuneSetting{}) {
				trial.prev = t.cur
			}
		}
		t.cur = d.To
		t.settle = 1
		t.trial = trial
		t.hist = t.hist[:0]
		return d
	}
	if w.Seconds <= 0 {
		return hold("an empty window")
	}
	if t.settle > 0 {
		t.settle--
		return hold("the window of the last change: not judged")
	}
	if w.Samples == 0 && w.FetchBusy == 0 && w.DecodeBusy == 0 {
		return hold("nothing ran in the window")
	}
	t.hist = append(t.hist, w)
	if len(t.hist) > judgeWindows {
		t.hist = t.hist[1:]
	}
	if len(t.hist) < judgeWindows {
		return hold(fmt.Sprintf("measuring %s (%d of %d windows)", t.cur, len(t.hist), judgeWindows))
	}
	// Decide on the mean of the setting's last windows: one window's
	// noise moves nothing.
	w = meanWindow(t.hist)
	rate = w.rate()
	d.Rate = rate
	if t.rate == 0 {
		t.rate = rate
	} else {
		t.rate += rateSmoothing * (rate - t.rate)
	}
	if t.learnedAt > 0 && math.Abs(t.rate/t.learnedAt-1) > driftForget {
		if t.drifted++; t.drifted >= forgetWindows {
			t.ceil, t.floor, t.learnedAt, t.drifted = [numKnobs]int{}, [numKnobs]int{}, 0, 0
		}
	} else {
		t.drifted = 0
	}

	// 1. Judge the change on trial, over judgeWindows windows.
	if c := t.trial; c != nil {
		t.trial = nil
		after := rate
		gain := after/math.Max(c.before, 1e-9) - 1
		if c.grow && gain < math.Min(c.expect/3, keepGain) {
			t.learn(knobCeil, c.k, c.from)
			d.Reverted = true
			return t.restore(c.prev, move, fmt.Sprintf("%s %d -> %d gained %+.1f%% (%.0f -> %.0f samples/s; %.0f%% expected): put back, not tried again",
				c.k, c.from, c.to, 100*gain, c.before, after, 100*c.expect))
		}
		if !c.grow && gain < -lossTolerance {
			t.learn(knobFloor, c.k, c.from)
			d.Reverted = true
			return t.restore(c.prev, move, fmt.Sprintf("%s %d -> %d lost %.1f%% (%.0f -> %.0f samples/s): put back, not tried again",
				c.k, c.from, c.to, -100*gain, c.before, after))
		}
		t.rate = after // kept: the rate it brought is the reference
	}

	// 2. Budgets.
	if !t.fits(t.cur, w.ObjectBytes) {
		for _, k := range []knob{knobSlots, knobFetchers, knobDecoders} {
			v := t.cur.get(k)
			if v <= t.lo(k) {
				continue
			}
			to := v - 1
			if k == knobFetchers {
				to = max(t.lo(k), v*3/4)
			}
			return move(k, to, fmt.Sprintf("over the memory budget (%s of %s): %s %d -> %d",
				bytesHuman(d.Memory), bytesHuman(t.b.Memory), k, v, to), nil)
		}
		return hold(fmt.Sprintf("over the memory budget (%s of %s) at the smallest setting", bytesHuman(d.Memory), bytesHuman(t.b.Memory)))
	}
	if v := t.cur.Decoders; v > t.lo(knobDecoders) && t.b.Cores > 0 && w.CPU > t.b.Cores*(1+cpuTolerance) {
		t.learn(knobCeil, knobDecoders, v-1) // not grown back on the next swing
		return move(knobDecoders, v-1, fmt.Sprintf("the process used %.2f cores, over the CPU budget of %.2f: decoders %d -> %d", w.CPU, t.b.Cores, v, v-1), nil)
	}

	// 3. Grow the bottleneck while the consumer waits.
	if w.Wait > waitHigh {
		if d2, ok := t.grow(w, rate, move); ok {
			return d2
		}
		why := t.why
		// The bottleneck cannot grow; an idle stage beside it may still
		// shrink.
		if d2, ok := t.shrinkIdle(w, move); ok {
			return d2
		}
		return hold(fmt.Sprintf("the consumer waited %.0f%% of the time; %s", 100*w.Wait, why))
	}

	// 4. Shrink what is idle while the consumer keeps up.
	if w.Wait < waitLow {
		if d2, ok := t.shrinkIdle(w, move); ok {
			return d2
		}
		return hold(fmt.Sprintf("the consumer waited %.1f%% of the time: the loader keeps ahead", 100*w.Wait))
	}
	return hold(fmt.Sprintf("the consumer waited %.1f%% of the time: within the dead band", 100*w.Wait))
}

// recentRate is the mean rate of the setting's last windows.
func (t *Tuner) recentRate() float64 {
	if len(t.hist) == 0 {
		return t.rate
	}
	return meanWindow(t.hist).rate()
}

// meanWindow averages windows: samples over seconds, the fractions
// weighted by seconds.
func meanWindow(ws []TuneWindow) TuneWindow {
	var m TuneWindow
	for _, w := range ws {
		m.Seconds += w.Seconds
		m.Samples += w.Samples
		m.FetchBusy += w.FetchBusy * w.Seconds
		m.DecodeBusy += w.DecodeBusy * w.Seconds
		m.Wait += w.Wait * w.Seconds
		m.CPU += w.CPU * w.Seconds
		m.ObjectBytes = max(m.ObjectBytes, w.ObjectBytes)
	}
	if m.Seconds > 0 {
		m.FetchBusy /= m.Seconds
		m.DecodeBusy /= m.Seconds
		m.Wait /= m.Seconds
		m.CPU /= m.Seconds
	}
	return m
}

// restore puts setting prev back (a change judged and refused).
func (t *Tuner) restore(prev TuneSetting, move moveFunc, why string) TuneDecision {
	var k knob
	for k = 0; k < numKnobs; k++ {
		if prev.get(k) != t.cur.get(k) {
			break
		}
	}
	d := move(k%numKnobs, prev.get(k%numKnobs), why, nil)
	t.cur = prev
	d.To = prev
	return d
}

type moveFunc func(k knob, to int, why string, trial *tuneChange) TuneDecision

// grow grows the stage that limits the consumer: the busiest of fetch
// and decode if it is saturated, else (or if it cannot grow) the slots,
// when some stage has slack they could fill. A grow that would pass
// the memory budget is cut to what fits, or makes room by giving up a
// slot. t.why says why nothing grew.
func (t *Tuner) grow(w TuneWindow, rate float64, move moveFunc) (TuneDecision, bool) {
	// The most the consumer could gain: it waits Wait of its time.
	room := 1/math.Max(1-w.Wait, 0.05) - 1
	type cand struct {
		k    knob
		busy float64
	}
	cands := []cand{{knobDecoders, w.DecodeBusy}, {knobFetchers, w.FetchBusy}}
	if cands[1].busy > cands[0].busy {
		cands[0], cands[1] = cands[1], cands[0]
	}
	busiest := cands[0].busy
	t.why = "nothing to grow"
	for i, c := range cands {
		if c.busy < busyHigh {
			break
		}
		other := cands[1-i].busy
		v := t.cur.get(c.k)
		to := v + max(1, v/2)
		if c.k == knobFetchers {
			// Little's law: while the limit binds, the rate follows it
			to = 2 * v
		}
		to = min(to, t.hi(c.k))
		if t.ceil[c.k] > 0 {
			to = min(to, t.ceil[c.k])
		}
		// the gain: the stage's capacity grows to/v, up to where the
		// other stage, or the consumer, limits
		expect := math.Min(float64(to)/float64(v)-1, room)
		if other > 0 {
			expect = math.Min(expect, 1/other-1)
		}
		switch {
		case to <= v && t.ceil[c.k] > 0 && v >= t.ceil[c.k]:
			t.why = fmt.Sprintf("%s busy %.0f%%: more did not help before (%d)", c.k, 100*c.busy, t.ceil[c.k])
			continue
		case to <= v:
			t.why = fmt.Sprintf("%s busy %.0f%% at the budget's most (%d%s)", c.k, 100*c.busy, v, t.budgetNote(c.k))
			continue
		case expect < minGain:
			t.why = fmt.Sprintf("%s busy %.0f%%: at most %.1f%% to gain", c.k, 100*c.busy, 100*expect)
			continue
		}
		next := t.cur
		for next.set(c.k, to); to > v && !t.fits(next, w.ObjectBytes); next.set(c.k, to) {
			to-- // the most that fits
		}
		if to <= v || float64(to)/float64(v)-1 < minGain {
			// Make room, while the stages are what limits: give up what
			// another knob holds (an idle decoder, else a slot) and grow
			// into it, as one change judged as one.
			if d2, ok := t.makeRoom(w, c.k, v, move); ok {
				return d2, true
			}
			t.why = fmt.Sprintf("%s busy %.0f%%: more would pass the memory budget (%s)", c.k, 100*c.busy, bytesHuman(t.b.Memory))
			continue
		}
		expect = math.Min(expect, float64(to)/float64(v)-1)
		return move(c.k, to, fmt.Sprintf("the consumer waited %.0f%% of the time and %s were busy %.0f%%: %s %d -> %d",
			100*w.Wait, c.k, 100*c.busy, c.k, v, to), &tuneChange{k: c.k, from: v, to: to, grow: true, expect: expect}), true
	}
	// Slack somewhere: work comes in bursts the slots do not absorb (a
	// stage waits for a free slot while the consumer waits for a batch).
	v := t.cur.Slots
	to := min(v+max(1, v/2), t.hi(knobSlots))
	if t.ceil[knobSlots] > 0 {
		to = min(to, t.ceil[knobSlots])
	}
	expect := math.Min(math.Min(room, 1/math.Max(busiest, 0.05)-1), slotsExpect)
	next := t.cur
	for next.Slots = to; to > v && !t.fits(next, w.ObjectBytes); next.Slots = to {
		to--
	}
	switch {
	case busiest > slotSlack || expect < minGain || to <= v:
		return TuneDecision{}, false
	}
	t.why = ""
	return move(knobSlots, to, fmt.Sprintf("the consumer waited %.0f%% of the time with slack in the stages (fetch %.0f%%, decode %.0f%% busy): slots %d -> %d",
		100*w.Wait, 100*w.FetchBusy, 100*w.DecodeBusy, v, to), &tuneChange{k: knobSlots, from: v, to: to, grow: true, expect: expect}), true
}

// makeRoom gives up a decoder (if the rest would stay under shrinkBusy)
// or a slot to let knob k grow past v within the memory budget: one
// change, judged as a grow of k.
func (t *Tuner) makeRoom(w TuneWindow, k knob, v int, move moveFunc) (TuneDecision, bool) {
	for _, give := range []knob{knobDecoders, knobSlots} {
		if give == k {
			continue
		}
		g := t.cur.get(give)
		if g <= max(t.lo(give), t.floor[give]) || give == knobDecoders && w.DecodeBusy*float64(g) > shrinkBusy*float64(g-1) {
			continue
		}
		next := t.cur
		next.set(give, g-1)
		to := min(v+max(1, v/2), t.hi(k))
		if t.ceil[k] > 0 {
			to = min(to, t.ceil[k])
		}
		for next.set(k, to); to > v && !t.fits(next, w.ObjectBytes); next.set(k, to) {
			to--
		}
		gain := float64(to)/float64(v) - 1
		if gain < minGain {
			continue
		}
		prev := t.cur
		d := move(k, to, fmt.Sprintf("%s busy %.0f%% at the memory budget (%s): %s %d -> %d, %s %d -> %d to make room",
			k, 100*w.FetchBusy, bytesHuman(t.b.Memory), k, v, to, give, g, g-1),
			&tuneChange{k: k, from: v, to: to, grow: true, expect: gain, prev: prev})
		t.cur = next
		d.To = next
		d.Memory = t.b.MemoryOf(next, w.ObjectBytes)
		return d, true
	}
	return TuneDecision{}, false
}

// shrinkIdle shrinks a stage that would stay under shrinkBusy with less.
func (t *Tuner) shrinkIdle(w TuneWindow, move moveFunc) (TuneDecision, bool) {
	lowest := func(k knob) int { return max(t.lo(k), t.floor[k]) }
	if v := t.cur.Decoders; v > lowest(knobDecoders) && w.DecodeBusy*float64(v) <= shrinkBusy*float64(v-1) {
		return move(knobDecoders, v-1, fmt.Sprintf("decoders busy %.0f%%: %d -> %d", 100*w.DecodeBusy, v, v-1),
			&tuneChange{k: knobDecoders, from: v, to: v - 1}), true
	}
	if v := t.cur.Fetchers; v > lowest(knobFetchers) {
		// Little's law: reads in flight used = busy × v; keep twice that.
		want := max(int(math.Ceil(fetchHeadroom*w.FetchBusy*float64(v))), lowest(knobFetchers))
		if want <= v*3/4 {
			return move(knobFetchers, want, fmt.Sprintf("reads in flight busy %.0f%%: %d -> %d", 100*w.FetchBusy, v, want),
				&tuneChange{k: knobFetchers, from: v, to: want}), true
		}
	}
	return TuneDecision{}, false
}

type learnKind int

const (
	knobCeil learnKind = iota
	knobFloor
)

func (t *Tuner) learn(kind learnKind, k knob, v int) {
	if kind == knobCeil {
		t.ceil[k] = v
	} else {
		t.floor[k] = v
	}
	t.learnedAt = t.rate
}

// budgetNote says which budget bounds knob k.
func (t *Tuner) budgetNote(k knob) string {
	switch {
	case k == knobDecoders && t.b.Cores > 0 && t.b.maxDecoders() == max(int(math.Floor(t.b.Cores+1e-9)), 1):
		return fmt.Sprintf(": the CPU budget of %.2f cores", t.b.Cores)
	case k == knobSlots:
		return ": the slots allocated"
	}
	return ""
}

func bytesHuman(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
