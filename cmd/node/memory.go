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

// applyMemoryBudget applies --memory-budget to c (nothing without one;
// its shares are actors.PlanMemory's) and sets the Go runtime's memory limit; it returns the line the start
// prints ("" without a budget).
func (o options) applyMemoryBudget(c *actors.Config) (string, error) {
	if o.memoryBudget <= 0 {
		return "", nil
	}
	env := os.Getenv("GOMEMLIMIT")
	p, err := actors.PlanMemory(int64(o.memoryBudget), *c, o.ranks, o.slotsSet, env)
	if err != nil {
		return "", fmt.Errorf("--memory-budget %s: %w: raise the budget, or lower --batch-size, --size or --slots", o.memoryBudget, err)
	}
	p.Apply(c)
	limit := "GOMEMLIMIT " + env + " (from the environment)"
	if p.GoLimit > 0 {
		debug.SetMemoryLimit(p.GoLimit)
		limit = "Go heap limit " + byteSize(p.GoLimit).human()
	}
	return fmt.Sprintf("--memory-budget %s: %d slot(s) a rank (%s in all), fetched bytes %s a rank, %s",
		byteSize(o.memoryBudget).human(), p.Slots, byteSize(p.SlotBytes).human(), byteSize(p.FetchBytes).human(), limit), nil
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
