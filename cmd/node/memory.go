package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	httppprof "net/http/pprof"
	"os"
	"runtime/debug"
	"time"

	"github.com/longshore/longshore/actors"
)

// startPprof serves Go's profiles (net/http/pprof: heap, allocs,
// goroutine, profile, trace) at http://ADDR/debug/pprof/ for --pprof, on
// loopback only: a profile shows keys and paths, and the endpoint has no
// token. It returns a function that stops the server.
func startPprof(addr string, logger *slog.Logger) (func(), error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof %q: want HOST:PORT on loopback, like 127.0.0.1:6060", addr)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--pprof %q: only a loopback address (127.0.0.1, ::1, localhost): the profiles have no access control", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", httppprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", httppprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", httppprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", httppprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", httppprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("pprof server", "err", err)
		}
	}()
	logger.Info("serving Go profiles", "addr", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() { srv.Close() }, nil
}

// The shares of --memory-budget: the batch slots (shared memory the
// trainers map: what the trainer holds and what is being assembled) take
// at most half, the fetched bytes of every rank a quarter, a packed
// dataset's chunk cache in memory (--pack-cache auto) at most a quarter.
// The Go runtime's soft limit (GOMEMLIMIT) is the budget less the slots,
// which live outside the Go heap: the garbage collector works harder as
// the heap nears it instead of letting garbage double the heap.
const (
	budgetSlotShare  = 0.5
	budgetFetchShare = 0.25
	budgetPackShare  = 0.25
	budgetMinSlots   = 2 // one the trainer holds, one being assembled
)

// memoryPlan is what --memory-budget sets.
type memoryPlan struct {
	slots      int   // per rank
	fetchBytes int64 // per rank (actors.Config.FetchBytes)
	goLimit    int64 // for debug.SetMemoryLimit; 0: leave the runtime's
}

// planMemory fits c (one rank's configuration, ranks of them) into
// budget bytes: the slots (unless --slots was given: slotsSet) as many as
// half the budget holds, up to the default, at least 2; a quarter of the
// budget for the ranks' fetched bytes; the rest of the budget, less the
// slots, as the Go heap's soft limit unless GOMEMLIMIT is set (envLimit).
// An error says when the budget cannot hold the slots the batches need.
func planMemory(budget int64, c actors.Config, ranks int, slotsSet bool, envLimit string) (memoryPlan, error) {
	slotBytes := int64(c.BatchSize) * int64(c.Sample.SampleBytes())
	per := slotBytes * int64(ranks)
	p := memoryPlan{slots: c.Slots}
	if !slotsSet {
		p.slots = min(c.Slots, max(budgetMinSlots, int(float64(budget)*budgetSlotShare/float64(max(per, 1)))))
	}
	slots := per * int64(p.slots)
	if slots > budget*3/4 {
		return p, fmt.Errorf("--memory-budget %s: the batch slots alone take %s (%d rank(s) x %d slot(s) x %s a batch): raise the budget, or lower --batch-size, --size or --slots",
			byteSize(budget), byteSize(slots).human(), ranks, p.slots, byteSize(slotBytes).human())
	}
	p.fetchBytes = max(1, int64(float64(budget)*budgetFetchShare)/int64(ranks))
	if envLimit == "" {
		p.goLimit = budget - slots
	}
	return p, nil
}

// applyMemoryBudget applies --memory-budget to c (nothing without one)
// and sets the Go runtime's memory limit; it returns the line the start
// prints ("" without a budget).
func (o options) applyMemoryBudget(c *actors.Config) (string, error) {
	if o.memoryBudget <= 0 {
		return "", nil
	}
	env := os.Getenv("GOMEMLIMIT")
	p, err := planMemory(int64(o.memoryBudget), *c, o.ranks, o.slotsSet, env)
	if err != nil {
		return "", err
	}
	c.Slots, c.FetchBytes = p.slots, p.fetchBytes
	limit := "GOMEMLIMIT " + env + " (from the environment)"
	if p.goLimit > 0 {
		debug.SetMemoryLimit(p.goLimit)
		limit = "Go heap limit " + byteSize(p.goLimit).human()
	}
	return fmt.Sprintf("--memory-budget %s: %d slot(s) a rank (%s in all), fetched bytes %s a rank, %s",
		byteSize(o.memoryBudget).human(), p.slots,
		byteSize(int64(p.slots)*int64(o.ranks)*int64(c.BatchSize)*int64(c.Sample.SampleBytes())).human(),
		byteSize(p.fetchBytes).human(), limit), nil
}

// memoryBudgetLine applies --memory-budget once the ranks are known and
// returns what it set, for the start ("" without a budget).
func (o options) memoryBudgetLine() (string, error) {
	if o.memoryBudget <= 0 {
		return "", nil
	}
	dc, err := o.decodeConfig()
	if err != nil {
		return "", nil // the run reports it
	}
	c := actors.DefaultConfig()
	c.BatchSize, c.Slots, c.Sample = o.batchSize, o.slots, dc.Spec()
	c = c.WithDefaults()
	return o.applyMemoryBudget(&c)
}
