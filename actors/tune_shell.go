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
type AutoTuner struct {
	ranks []*Pipeline
	cfg   AutoTuneConfig
	clk   clock.Clock
	t     *Tuner

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
	if cfg.Window <= 0 {
		cfg.Window = time.Second
	}
	pc := ranks[0].Config()
	r := len(ranks)
	b := TuneBudget{
		Cores: cfg.Cores, Memory: cfg.Memory, Ranks: r,
		SlotBytes: int64(pc.SlotBytes()), DecodeQueue: pc.DecodeQueue,
		MinSlots: min(2, pc.Slots), MaxSlots: pc.Slots,
		MaxFetchers: r * pc.FetchConcurrency, MaxDecoders: r * maxRankDecoders(pc.Decoders),
	}
	if b.Cores <= 0 {
		b.Cores = float64(runtime.NumCPU())
	}
	if pc.DecodeDeadline >= 0 {
		b.DecoderBytes = int64(pc.Sample.SampleBytes()) // the worker's scratch
	}
	a := &AutoTuner{ranks: ranks, cfg: cfg, clk: clock.Or(cfg.Clock)}
	var start TuneSetting
	for _, p := range ranks {
		f, d, _ := p.Tuning()
		start.Fetchers += f
		start.Decoders += d
	}
	start.Slots = pc.Slots
	a.t = NewTuner(b, start)
	a.t.Fit(a.objectBytes())
	a.prev = a.counters()
	if cfg.CPUTime != nil {
		a.prevCPU = cfg.CPUTime()
	}
	a.mu.st = AutoTuneStats{Setting: a.t.Setting(), Budget: b, Changes: map[string]int64{}, Memory: b.MemoryOf(a.t.Setting(), a.objectBytes())}
	// Applied even when unchanged: from now on the tuner owns the ranks'
	// fetch limit (their own fetch tuners would move it under it).
	a.apply(a.t.Setting())
	return a
}

func (a *AutoTuner) counters() Counters {
	cs := make([]Counters, len(a.ranks))
	for i, p := range a.ranks {
		cs[i] = p.Counters()
	}
	return MergeCounters(cs...)
}

// objectBytes is the mean fetch buffer now (0 before any was read).
func (a *AutoTuner) objectBytes() int64 {
	var bytes, bufs int64
	for _, p := range a.ranks {
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
func (a *AutoTuner) apply(s TuneSetting) {
	r := len(a.ranks)
	for i, p := range a.ranks {
		share := func(n int) int {
			q := n / r
			if i < n%r {
				q++
			}
			return max(q, 1)
		}
		p.Retune(share(s.Fetchers), share(s.Decoders), s.Slots)
	}
}

// Step measures the window since the last step, decides and applies.
func (a *AutoTuner) Step() TuneDecision {
	now := a.counters()
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
		a.apply(d.To)
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
