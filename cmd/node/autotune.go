package main

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cmd/internal/procmem"
)

// autotune is --autotune and --cpu-budget: the node's tuner
// (actors.AutoTuner), which moves the reads in flight, the decoders and
// the slots at run time within a CPU and a memory budget
// (docs/performance.md, "Tuning itself"). It is a pointer in options, so
// the metrics read the tuner the run starts.
type autotune struct {
	on     bool
	cores  float64
	window time.Duration
	mu     sync.Mutex
	tuner  *actors.AutoTuner
}

func registerAutotune(fs *flag.FlagSet) *autotune {
	a := &autotune{window: time.Second}
	fs.BoolVar(&a.on, "autotune", false, "tune the reads in flight, the decoders and the slots at run time, every --autotune-window, within --cpu-budget and --memory-budget; every change is logged (msg=autotune) and exported (longshore_autotune_*). --decoders, --fetch-concurrency and --slots are where it starts, --slots the most slots (docs/performance.md, Tuning itself)")
	fs.Var((*coresFlag)(&a.cores), "cpu-budget", "with --autotune: the cores the loader may use (decoders never outnumber them; a window whose process used more sheds a decoder), like 6 or 3.5; default (empty): the host's cores")
	fs.DurationVar(&a.window, "autotune-window", time.Second, "with --autotune: how often the tuner measures and decides (it judges a change over 4 windows)")
	return a
}

// coresFlag is --cpu-budget: a number of cores above 0, or empty (0)
// for the host's. Its String is the value, so --print-config shows it
// and its output loads back.
type coresFlag float64

func (c *coresFlag) String() string {
	if c == nil || *c == 0 {
		return ""
	}
	return strconv.FormatFloat(float64(*c), 'g', -1, 64)
}

func (c *coresFlag) Set(s string) error {
	if s == "" {
		*c = 0
		return nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return fmt.Errorf("want a number of cores above 0, like 6 or 3.5")
	}
	*c = coresFlag(v)
	return nil
}

// check reports what is wrong with the flags in o's mode.
func (a *autotune) check(o options) []error {
	if a == nil || !a.on {
		return nil
	}
	var errs []error
	if a.window <= 0 {
		errs = append(errs, fmt.Errorf("--autotune-window %v: need more than 0", a.window))
	}
	return errs
}

// config is the tuner's config for node.Run (nil without --autotune):
// the tuner counts the slots and the fetched bytes, the shares of
// --memory-budget they have (actors.PlanMemory).
func (a *autotune) config(o options) *actors.AutoTuneConfig {
	if a == nil || !a.on {
		return nil
	}
	mem := actors.MemoryShare(int64(o.memoryBudget), actors.MemorySlotShare+actors.MemoryFetchShare)
	return &actors.AutoTuneConfig{Cores: a.cores, Memory: mem, Window: a.window, CPUTime: procmem.CPU}
}

// use makes t (nil: none) the tuner the metrics read.
func (a *autotune) use(t *actors.AutoTuner) {
	if a == nil {
		return
	}
	a.mu.Lock()
	a.tuner = t
	a.mu.Unlock()
}

// register adds the tuner's metrics to reg (with --autotune).
func (a *autotune) register(reg *prometheus.Registry) {
	if a != nil && a.on {
		reg.MustRegister(autotuneCollector{a})
	}
}

var (
	autotuneSetting = prometheus.NewDesc("longshore_autotune_setting", "the tuner's setting now: fetchers (reads in flight) and decoders over the node, slots a rank", []string{"knob"}, nil)
	autotuneChanges = prometheus.NewDesc("longshore_autotune_changes_total", "changes the tuner made, by knob (put-backs included)", []string{"knob"}, nil)
	autotuneReverts = prometheus.NewDesc("longshore_autotune_reverts_total", "changes that put a change back (it did not gain, or it lost)", nil, nil)
	autotuneWindows = prometheus.NewDesc("longshore_autotune_windows_total", "windows the tuner measured", nil, nil)
	autotuneMemory  = prometheus.NewDesc("longshore_autotune_memory_bytes", "what the setting holds by the tuner's count (slots, fetch buffers, decode scratch)", nil, nil)
	autotuneBudget  = prometheus.NewDesc("longshore_autotune_budget", "the tuner's budgets: cpu_cores, memory_bytes (0: none)", []string{"resource"}, nil)
)

type autotuneCollector struct{ a *autotune }

func (c autotuneCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{autotuneSetting, autotuneChanges, autotuneReverts, autotuneWindows, autotuneMemory, autotuneBudget} {
		ch <- d
	}
}

func (c autotuneCollector) Collect(ch chan<- prometheus.Metric) {
	c.a.mu.Lock()
	t := c.a.tuner
	c.a.mu.Unlock()
	if t == nil {
		return
	}
	st := t.Stats()
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	gauge(autotuneSetting, float64(st.Setting.Fetchers), "fetchers")
	gauge(autotuneSetting, float64(st.Setting.Decoders), "decoders")
	gauge(autotuneSetting, float64(st.Setting.Slots), "slots")
	for _, k := range []string{"fetchers", "decoders", "slots"} {
		counter(autotuneChanges, float64(st.Changes[k]), k)
	}
	counter(autotuneReverts, float64(st.Reverts))
	counter(autotuneWindows, float64(st.Windows))
	gauge(autotuneMemory, float64(st.Memory))
	gauge(autotuneBudget, st.Budget.Cores, "cpu_cores")
	gauge(autotuneBudget, float64(st.Budget.Memory), "memory_bytes")
}
