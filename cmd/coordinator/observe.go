package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/observe"
)

// observer is the coordinator's live view: the progress line every
// --report-every and the metrics at --metrics.
type observer struct {
	srv, page *observe.Server
	cancel    context.CancelFunc
	done      chan struct{}
	pageDone  chan struct{} // the page's sampler
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

// ready answers /readyz on both servers (observe.Readyz).
func startObserver(o options, src observe.CoordSource, job observe.JobInfo, ready func() error, logger *slog.Logger) (*observer, error) {
	ob := &observer{done: make(chan struct{})}
	reg := observe.Registry(observe.NewCoordCollector(src))
	if src.Gossip != nil {
		reg.MustRegister(observe.NewGossipCollector(src.Gossip))
	}
	var page *observe.StatusPage
	if o.http != "" {
		page = &observe.StatusPage{Status: src.Status, Job: job, Journal: src.Journal}
		srv, err := observe.Listen(observe.ServerConfig{Addr: o.http, TokenFile: o.httpToken, Flag: "--http", Logger: logger,
			Limits: observe.Limits{MaxConns: o.httpConns}, Registry: reg},
			observe.Handler(reg, map[string]http.Handler{"/": page, observe.ReadyPath: observe.Readyz(ready)}))
		if err != nil {
			return nil, err
		}
		ob.page = srv
		logger.Info("serving the status page", "addr", "http://"+srv.Addr()+"/")
	}
	if o.metrics != "" && o.metrics != o.http {
		srv, err := observe.Listen(observe.ServerConfig{Addr: o.metrics, TokenFile: o.metricsToken, Flag: "--metrics", Logger: logger,
			Limits: observe.Limits{MaxConns: o.metricsConns}, Registry: reg},
			observe.Handler(reg, map[string]http.Handler{observe.ReadyPath: observe.Readyz(ready)}))
		if err != nil {
			if ob.page != nil {
				ob.page.Shutdown(context.Background())
			}
			return nil, err
		}
		ob.srv = srv
		logger.Info("serving metrics", "addr", "http://"+srv.Addr()+"/metrics")
	}
	ctx, cancel := context.WithCancel(context.Background())
	ob.cancel = cancel
	if page != nil {
		ob.pageDone = make(chan struct{})
		go func() { defer close(ob.pageDone); page.Run(ctx) }()
	}
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
	return ob, nil
}

func (ob *observer) shutdown(ctx context.Context, linger time.Duration) error {
	if linger > 0 && (ob.srv != nil || ob.page != nil) {
		select {
		case <-time.After(linger):
		case <-ctx.Done():
		}
	}
	ob.cancel()
	<-ob.done
	if ob.pageDone != nil {
		<-ob.pageDone
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
