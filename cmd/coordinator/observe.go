package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/observe"
)

// observer is the coordinator's live view: the progress line every
// --report-every, the metrics at --metrics and the status page at --http.
type observer struct {
	srv, page  *observe.Server
	reg        *prometheus.Registry
	statusPage atomic.Pointer[observe.StatusPage] // nil until attach
	// Set by attach; nil before.
	cancel   context.CancelFunc
	done     chan struct{} // the progress line
	pageDone chan struct{} // the page's sampler
}

func checkMetricsFlags(o options) []error {
	errs := observe.CheckMetricsFlags(o.metrics, o.metricsToken, o.metricsLinger, o.reportEvery)
	if o.http == "" {
		if o.httpToken != "" {
			errs = append(errs, errors.New("--http-token-file needs --http HOST:PORT"))
		}
	} else if err := observe.CheckListen("--http", o.http, o.httpToken); err != nil {
		errs = append(errs, err)
	}
	for _, c := range []struct {
		flag string
		n    int
	}{{"--metrics-max-conns", o.metricsConns}, {"--http-max-conns", o.httpConns}} {
		if err := observe.CheckMaxConns(c.flag, c.n); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// startObserver starts the servers of --http and --metrics before the
// coordinator reads its dataset and its journal, which can take minutes
// (a big manifest without an index, a journal on a slow store): /healthz
// answers from the start, so a liveness probe never kills a coordinator
// for loading, and /readyz (ready: observe.Readyz) says what it waits
// for. The job's series, the status page and the progress line come with
// attach, once the coordinator runs; until then /metrics holds the
// process's series and the page answers 503 with the reason.
func startObserver(o options, ready func() error, logger *slog.Logger) (*observer, error) {
	ob := &observer{reg: observe.Registry()}
	starting := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := ob.statusPage.Load(); p != nil {
			p.ServeHTTP(w, r)
			return
		}
		why := "starting"
		if err := ready(); err != nil {
			why = err.Error()
		}
		w.Header().Set("Retry-After", "5")
		http.Error(w, "longshore-coordinator is starting: "+why, http.StatusServiceUnavailable)
	})
	if o.http != "" {
		srv, err := observe.Listen(observe.ServerConfig{Addr: o.http, TokenFile: o.httpToken, Flag: "--http", Logger: logger,
			Limits: observe.Limits{MaxConns: o.httpConns}, Registry: ob.reg},
			observe.Handler(ob.reg, map[string]http.Handler{"/": starting, observe.ReadyPath: observe.Readyz(ready)}))
		if err != nil {
			return nil, err
		}
		ob.page = srv
		logger.Info("serving the status page", "addr", "http://"+srv.Addr()+"/")
	}
	if o.metrics != "" && o.metrics != o.http {
		srv, err := observe.Listen(observe.ServerConfig{Addr: o.metrics, TokenFile: o.metricsToken, Flag: "--metrics", Logger: logger,
			Limits: observe.Limits{MaxConns: o.metricsConns}, Registry: ob.reg},
			observe.Handler(ob.reg, map[string]http.Handler{observe.ReadyPath: observe.Readyz(ready)}))
		if err != nil {
			if ob.page != nil {
				ob.page.Shutdown(context.Background())
			}
			return nil, err
		}
		ob.srv = srv
		logger.Info("serving metrics", "addr", "http://"+srv.Addr()+"/metrics")
	}
	return ob, nil
}

// attach adds the running coordinator's series and status page to the
// servers and starts the progress line every --report-every.
func (ob *observer) attach(o options, src observe.CoordSource, job observe.JobInfo, logger *slog.Logger) {
	ob.reg.MustRegister(observe.NewCoordCollector(src))
	if src.Gossip != nil {
		ob.reg.MustRegister(observe.NewGossipCollector(src.Gossip))
	}
	ctx, cancel := context.WithCancel(context.Background())
	ob.cancel = cancel
	if ob.page != nil {
		page := &observe.StatusPage{Status: src.Status, Job: job, Journal: src.Journal}
		ob.pageDone = make(chan struct{})
		go func() { defer close(ob.pageDone); page.Run(ctx) }()
		ob.statusPage.Store(page)
	}
	ob.done = make(chan struct{})
	tick, stop := observe.Ticker(clock.Real{}, o.reportEvery)
	go func() {
		defer close(ob.done)
		defer stop()
		var last observe.JobProgress // a restored job's commits are not this life's rate
		if st, err := src.Status(ctx); err == nil {
			last = observe.Progress(st)
		}
		lastAt := time.Now()
		for {
			select {
			case <-tick:
			case <-ctx.Done():
				return
			}
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			st, err := src.Status(sctx)
			cancel()
			if err != nil {
				continue
			}
			p, now := observe.Progress(st), time.Now()
			rate := float64(p.Committed-last.Committed) / now.Sub(lastAt).Seconds()
			last, lastAt = p, now
			job := src.Samples * int64(src.Epochs)
			pct := 100.0
			if job > 0 {
				pct = 100 * float64(p.Committed) / float64(job)
			}
			logger.Info("progress", "epoch", p.Epoch, "epochs", src.Epochs, "percent", fmt.Sprintf("%.1f", pct),
				"committed_per_second", fmt.Sprintf("%.0f", rate), "bottleneck", observe.ClusterBottleneck(st),
				"ranks", len(st.Census.Ranks), "nodes", st.Census.Nodes,
				"leases", st.Census.Leases.Active+st.Census.Leases.Delivered+st.Census.Leases.Revoking)
		}
	}()
}

// linger keeps serving for --metrics-linger after the job, so a scraper
// collects the final values; the coordinator is still up meanwhile.
func (ob *observer) linger(ctx context.Context, d time.Duration) {
	if d > 0 && (ob.srv != nil || ob.page != nil) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
}

// shutdown stops the servers, the page's sampler and the progress line.
func (ob *observer) shutdown() error {
	if ob.done != nil {
		ob.cancel()
		<-ob.done
		if ob.pageDone != nil {
			<-ob.pageDone
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	for _, s := range []*observe.Server{ob.srv, ob.page} {
		if s != nil {
			errs = append(errs, s.Shutdown(sctx))
		}
	}
	return errors.Join(errs...)
}
