package actors

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/longshore/longshore/internal/clock"
)

// AutoTuneConfig configures an AutoTuner.
type AutoTuneConfig struct {
	// Cores is the CPU budget, in cores (TuneBudget.Cores); 0: the
	// host's.
	Cores float64
	// Memory is the memory budget for slots, fetched bytes and decode
	// scratch, in bytes (TuneBudget.Memory); 0: none (the slots
	// allocated bound the slots).
	Memory int64
	// Window is how often the tuner measures and decides. 0: 1 s.
	Window time.Duration
	// Clock ticks the windows; nil: the system clock.
	Clock clock.Clock
	// CPUTime, if set, returns the process's CPU time so far (user +
	// system): the CPU budget is then held against what the process
	// uses, not only against the decoders' count.
	CPUTime func() time.Duration
	// Logger gets every change (msg=autotune); nil: none.
	Logger *slog.Logger
}

// AutoTuner is the node's tuner at run time: every window it takes the
// difference of the ranks' counters, asks the Tuner, and applies a new
// setting to every rank (Pipeline.Retune), sharing the reads in flight
// and the decoders out among them.
//
// A rank's pipelines may come and go (NewTallyTuner): a feed's rank
// reopened where a trainer resumes, a cluster rank's sessions. The
// tuner then counts each rank over every pipeline it had (its Tally),
// gives a pipeline that appeared the setting at the next window, and
// takes its budget from the first pipeline it sees (a cluster's batch
// size, which sizes the slots, comes with the coordinator's job).
type AutoTuner struct {
	n     int                // ranks
	live  func() []*Pipeline // each rank's pipeline now; nil: none
	count func() Counters    // the ranks' counters, merged
	cfg   AutoTuneConfig
	clk   clock.Clock
	t     *Tuner // nil until the first pipeline is seen

	// given is the pipeline of each rank that was given the setting.
	given   []*Pipeline
	prev    Counters
	prevCPU time.Duration
	mu      struct {
		sync.Mutex
		st AutoTuneStats
	}
}

// AutoTuneStats is what the tuner did so far.
type AutoTuneStats struct {
	Setting TuneSetting `json:"setting"`
	Budget  TuneBudget  `json:"budget"`
	Windows int         `json:"windows"`
	// Changes counts the changes by knob (fetchers, decoders, slots);
	// Reverts those that put a change back.
	Changes map[string]int64 `json:"changes"`
	Reverts int64            `json:"reverts"`
	// Last is the last decision (a change or a hold).
	Last TuneDecision `json:"last"`
	// Memory is what the setting holds by the tuner's count
	// (TuneBudget.MemoryOf).
	Memory int64 `json:"memory_bytes"`
}

// NewAutoTuner makes the tuner of a node's ranks (all made with one
// Config) and applies its start: the ranks' setting now, brought within
// the budget.
func NewAutoTuner(ranks []*Pipeline, cfg AutoTuneConfig) *AutoTuner {
	a := newAutoTuner(len(ranks), cfg, func() []*Pipeline { return ranks }, func() Counters {
		cs := make([]Counters, len(ranks))
		for i, p := range ranks {
			cs[i] = p.Counters()
		}
		return MergeCounters(cs...)
	})
	a.start(ranks[0].Config())
	return a
}

// NewTallyTuner makes the tuner of a node's ranks whose pipelines come
// and go, each rank's in its Tally (all made with one Config): it starts
// (NewAutoTuner) once a rank has a pipeline, at construction or at a
// later window; until then its windows decide nothing.
func NewTallyTuner(tallies []*Tally, cfg AutoTuneConfig) *AutoTuner {
	a := newAutoTuner(len(tallies), cfg, func() []*Pipeline {
		out := make([]*Pipeline, len(tallies))
		for i, t := range tallies {
			out[i] = t.Live()
		}
		return out
	}, func() Counters {
		cs := make([]Counters, len(tallies))
		for i, t := range tallies {
			cs[i] = t.Counters()
		}
		return MergeCounters(cs...)
	})
	a.startIfLive()
	return a
}

func newAutoTuner(n int, cfg AutoTuneConfig, live func() []*Pipeline, count func() Counters) *AutoTuner {
	if cfg.Window <= 0 {
		cfg.Window = time.Second
	}
	a := &AutoTuner{n: n, live: live, count: count, cfg: cfg, clk: clock.Or(cfg.Clock), given: make([]*Pipeline, n)}
	a.mu.st = AutoTuneStats{Budget: TuneBudget{Cores: cfg.Cores, Memory: cfg.Memory, Ranks: n}, Changes: map[string]int64{}}
	if a.mu.st.Budget.Cores <= 0 {
		a.mu.st.Budget.Cores = float64(runtime.NumCPU())
	}
	return a
}

// startIfLive starts the tuner if a rank has a pipeline; it reports
// whether the tuner has started.
func (a *AutoTuner) startIfLive() bool {
	if a.t != nil {
		return true
	}
	for _, p := range a.live() {
		if p != nil {
			a.start(p.Config())
			return true
		}
	}
	return false
}

// start makes the Tuner of ranks made with pc and applies its start:
// the ranks' setting now (a rank without a pipeline counted as pc
// makes one), brought within the budget.
func (a *AutoTuner) start(pc Config) {
	r := a.n
	b := a.mu.st.Budget
	b.SlotBytes, b.DecodeQueue = int64(pc.SlotBytes()), pc.DecodeQueue
	b.MinSlots, b.MaxSlots = min(2, pc.Slots), pc.Slots
	b.MaxFetchers, b.MaxDecoders = r*pc.FetchConcurrency, r*maxRankDecoders(pc.Decoders)
	if pc.DecodeDeadline >= 0 {
		b.DecoderBytes = int64(pc.Sample.SampleBytes()) // the worker's scratch
	}
	var start TuneSetting
	for _, p := range a.live() {
		if p == nil {
			start.Fetchers += pc.FetchConcurrency
			start.Decoders += pc.Decoders
			continue
		}
		f, d, _ := p.Tuning()
		start.Fetchers += f
		start.Decoders += d
	}
	start.Slots = pc.Slots
	a.t = NewTuner(b, start)
	a.t.Fit(a.objectBytes())
	a.prev = a.count()
	if a.cfg.CPUTime != nil {
		a.prevCPU = a.cfg.CPUTime()
	}
	a.mu.Lock()
	a.mu.st.Setting, a.mu.st.Budget, a.mu.st.Memory = a.t.Setting(), b, b.MemoryOf(a.t.Setting(), a.objectBytes())
	a.mu.Unlock()
	// Applied even when unchanged: from now on the tuner owns the ranks'
	// fetch limit (their own fetch tuners would move it under it).
	a.apply(a.t.Setting(), true)
}

// objectBytes is the mean fetch buffer now (0 before any was read).
func (a *AutoTuner) objectBytes() int64 {
	var bytes, bufs int64
	for _, p := range a.live() {
		if p == nil {
			continue
		}
		now, _ := p.FetchBufferBytes()
		bytes += now
		bufs += p.bufsMade.Load()
	}
	if bufs == 0 {
		return 0
	}
	return bytes / bufs
}

// apply shares s out among the ranks: rank i gets the node's reads in
// flight and decoders divided, the first ones one more of a remainder.
// all false gives it only to the pipelines that appeared since the last
// apply.
func (a *AutoTuner) apply(s TuneSetting, all bool) {
	r := a.n
	for i, p := range a.live() {
		if p == nil || (!all && a.given[i] == p) {
			continue
		}
		share := func(n int) int {
			q := n / r
			if i < n%r {
				q++
			}
			return max(q, 1)
		}
		p.Retune(share(s.Fetchers), share(s.Decoders), s.Slots)
		a.given[i] = p
	}
}

// Step measures the window since the last step, decides and applies.
// Before the tuner has started (NewTallyTuner, no pipeline yet) it
// decides nothing; a pipeline that appeared gets the setting first.
func (a *AutoTuner) Step() TuneDecision {
	if a.t == nil {
		a.startIfLive() // measured from the next window on
		return TuneDecision{}
	}
	a.apply(a.t.Setting(), false)
	now := a.count()
	iv := now.Since(a.prev)
	a.prev = now
	st := iv.Stats()
	w := TuneWindow{
		Seconds: iv.Elapsed().Seconds(), Samples: st.Samples,
		FetchBusy: st.Stage(StageFetch).Busy, DecodeBusy: st.Stage(StageDecode).Busy,
		Wait: st.Stage(StageFeed).Busy, ObjectBytes: a.objectBytes(),
	}
	if a.cfg.CPUTime != nil {
		cpu := a.cfg.CPUTime()
		if w.Seconds > 0 {
			w.CPU = (cpu - a.prevCPU).Seconds() / w.Seconds
		}
		a.prevCPU = cpu
	}
	d := a.t.Decide(w)
	if d.Changed {
		a.apply(d.To, true)
		if a.cfg.Logger != nil {
			a.cfg.Logger.Info("autotune", "from", d.From.String(), "to", d.To.String(), "knob", d.Knob,
				"reverted", d.Reverted, "samples_per_second", int64(d.Rate), "memory", bytesHuman(d.Memory), "reason", d.Reason)
		}
	}
	a.mu.Lock()
	s := &a.mu.st
	s.Windows++
	s.Setting, s.Last, s.Memory = a.t.Setting(), d, d.Memory
	if d.Changed {
		s.Changes[d.Knob]++
		if d.Reverted {
			s.Reverts++
		}
	}
	a.mu.Unlock()
	return d
}

// Run steps every Window on the clock until ctx ends.
func (a *AutoTuner) Run(ctx context.Context) {
	t, tick := a.clk.NewTicker(a.cfg.Window)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			a.Step()
		}
	}
}

// Stats returns what the tuner did so far.
func (a *AutoTuner) Stats() AutoTuneStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.mu.st
	st.Changes = make(map[string]int64, len(a.mu.st.Changes))
	for k, v := range a.mu.st.Changes {
		st.Changes[k] = v
	}
	return st
}

// AutoTune makes the tuner of the node's ranks (NewAutoTuner).
func (n *Node) AutoTune(cfg AutoTuneConfig) *AutoTuner { return NewAutoTuner(n.ranks, cfg) }
