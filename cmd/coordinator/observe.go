package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/longshore/longshore/cmd/internal/observe"
	"github.com/longshore/longshore/internal/clock"
)

// observer is the coordinator's live view: the progress line every
// --report-every and the metrics at --metrics.
type observer struct {
	srv    *observe.Server
	cancel context.CancelFunc
	done   chan struct{}
}

func checkMetricsFlags(o options) []error {
	var errs []error
	if o.metrics == "" {
		if o.metricsToken != "" || o.metricsLinger != 0 {
			errs = append(errs, errors.New("--metrics-token-file and --metrics-linger need --metrics HOST:PORT"))
		}
	} else if host, _, err := net.SplitHostPort(o.metrics); err != nil {
		errs = append(errs, fmt.Errorf("--metrics %q: want HOST:PORT: %w", o.metrics, err))
	} else if o.metricsToken == "" && !observe.IsLoopback(host) {
		errs = append(errs, fmt.Errorf("--metrics %s is not a loopback address: pass --metrics-token-file FILE (scrapers then send its bearer token), or use 127.0.0.1", o.metrics))
	}
	if o.reportEvery < 0 || o.metricsLinger < 0 {
		errs = append(errs, errors.New("--report-every and --metrics-linger: need 0 or more"))
	}
	return errs
}

func startObserver(o options, src observe.CoordSource, logger *slog.Logger) (*observer, error) {
	ob := &observer{done: make(chan struct{})}
	if o.metrics != "" {
		reg := observe.Registry(observe.NewCoordCollector(src))
		srv, err := observe.Listen(observe.ServerConfig{Addr: o.metrics, TokenFile: o.metricsToken, Flag: "--metrics", Logger: logger},
			observe.Handler(reg, nil))
		if err != nil {
			return nil, err
		}
		ob.srv = srv
		logger.Info("serving metrics", "addr", "http://"+srv.Addr()+"/metrics")
	}
	ctx, cancel := context.WithCancel(context.Background())
	ob.cancel = cancel
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
				"committed_per_second", fmt.Sprintf("%.0f", rate), "ranks", len(st.Census.Ranks), "nodes", st.Census.Nodes,
				"leases", st.Census.Leases.Active+st.Census.Leases.Delivered+st.Census.Leases.Revoking)
		}
	}()
	return ob, nil
}

func (ob *observer) shutdown(ctx context.Context, linger time.Duration) error {
	ob.cancel()
	<-ob.done
	if ob.srv == nil {
		return nil
	}
	if linger > 0 {
		select {
		case <-time.After(linger):
		case <-ctx.Done():
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return ob.srv.Shutdown(sctx)
}
