package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/observe"
	"github.com/longshore/longshore/observe/pipeline"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
)

// liveInterval is the interval of the live report the metrics (busy
// ratios, occupancies, the bottleneck) and the coordinator's status page
// show, or --report-every if that is shorter.
const liveInterval = 10 * time.Second

// observer is a node's live view: the bottleneck report in the log every
// --report-every (over that interval), the live one every liveInterval for
// the metrics at --metrics and the status page.
type observer struct {
	rep    *pipeline.Reporter // the live interval's
	log    *pipeline.Reporter // --report-every's; nil: none
	ranks  func() []pipeline.RankCounters
	waits  func() []pipeline.TrainerWait // nil: no feed
	srv    *observe.Server
	cancel context.CancelFunc
	done   chan struct{}

	mu struct { // nodeReport's last call
		sync.Mutex
		samples int64
		at      time.Time
		rate    float64
	}
}

// storeParts finds, under the dataset's store, what the metrics read:
// the request counts, the S3 client's counts and the packed store's.
func storeParts(s storage.Store) (counted *storage.CountingStore, s3s *s3.Store, packed *dataset.PackedStore) {
	for s != nil {
		switch x := s.(type) {
		case *storage.CountingStore:
			counted = x
		case *s3.Store:
			s3s = x
		case *dataset.PackedStore:
			packed = x
		}
		u, ok := s.(interface{ Unwrap() storage.Store })
		if !ok {
			break
		}
		s = u.Unwrap()
	}
	return counted, s3s, packed
}

// packedSource is a packed store of the dataset, and the mixture source
// it reads ("" for a dataset's own).
type packedSource struct {
	name string
	ps   *dataset.PackedStore
}

// packedSources are the packed stores under the dataset's store: a
// packed dataset's, or each packed source's of a mixture, in source
// order (dataset.PackedStores); none for a dataset that is not packed.
func packedSources(s storage.Store) []packedSource {
	c := dataset.MixtureOf(s)
	if c == nil {
		if _, _, ps := storeParts(s); ps != nil {
			return []packedSource{{ps: ps}}
		}
		return nil
	}
	var out []packedSource
	for _, src := range c.Sources() {
		for _, ps := range dataset.PackedStores(src.Store) {
			out = append(out, packedSource{name: src.Name, ps: ps})
		}
	}
	return out
}

// packStats reads the chunk caches' counters of the dataset's packed
// stores (packedSources) for the metrics and the summary: a mixture's
// packed sources' summed (the peak the sum of each one's peak, an upper
// bound of the memory they held at once); nil when none is packed.
func packStats(s storage.Store) func() dataset.PackedStats {
	srcs := packedSources(s)
	switch len(srcs) {
	case 0:
		return nil
	case 1:
		return srcs[0].ps.Stats
	}
	return func() dataset.PackedStats {
		var t dataset.PackedStats
		for _, src := range srcs {
			t = addPackedStats(t, src.ps.Stats())
		}
		return t
	}
}

// addPackedStats is a's and b's counters summed, field by field.
func addPackedStats(a, b dataset.PackedStats) dataset.PackedStats {
	a.Chunks += b.Chunks
	a.ChunkBytes += b.ChunkBytes
	a.Hits += b.Hits
	a.ReadAlone += b.ReadAlone
	a.Evictions += b.Evictions
	a.Overflows += b.Overflows
	a.Prefetches += b.Prefetches
	a.Reused += b.Reused
	a.CachedBytes += b.CachedBytes
	a.FreeBytes += b.FreeBytes
	a.PeakBytes += b.PeakBytes
	a.ChunkFailures += b.ChunkFailures
	a.ReleasedBytes += b.ReleasedBytes
	a.Spilled += b.Spilled
	a.SpillErrors += b.SpillErrors
	a.CacheBytes += b.CacheBytes
	a.SpillStaging += b.SpillStaging
	return a
}

// storeSources are the stores the dataset's store reads through: each
// source's of a mixture, in source order, else the store itself.
func storeSources(s storage.Store) []storage.Store {
	c := dataset.MixtureOf(s)
	if c == nil {
		return []storage.Store{s}
	}
	out := make([]storage.Store, 0, len(c.Sources()))
	for _, src := range c.Sources() {
		out = append(out, src.Store)
	}
	return out
}

// countedSum is several counting stores' counts summed: a mixture's
// sources'.
type countedSum []*storage.CountingStore

func (c countedSum) Stats() storage.RequestStats {
	var t storage.RequestStats
	for _, s := range c {
		t = t.Add(s.Stats())
	}
	return t
}

// requestCounter counts the requests of the dataset's store for the
// metrics (longshore_store_requests_total): its counting store's, a
// mixture's sources' summed; nil when nothing counts them.
func requestCounter(s storage.Store) pipeline.RequestCounter {
	var counted countedSum
	for _, st := range storeSources(s) {
		if c, _, _ := storeParts(st); c != nil {
			counted = append(counted, c)
		}
	}
	switch len(counted) {
	case 0:
		return nil
	case 1:
		return counted[0]
	}
	return counted
}

// s3StatsOf reads the S3 client's counters under the dataset's store,
// for the metrics and the summary: a mixture's S3 sources' summed
// (s3.Stats.Add); nil when no store is S3.
func s3StatsOf(s storage.Store) func() s3.Stats {
	var stores []*s3.Store
	for _, st := range storeSources(s) {
		if _, s3s, _ := storeParts(st); s3s != nil {
			stores = append(stores, s3s)
		}
	}
	switch len(stores) {
	case 0:
		return nil
	case 1:
		return stores[0].Stats
	}
	return func() s3.Stats {
		var t s3.Stats
		for i, st := range stores {
			if i == 0 {
				t = st.Stats()
				continue
			}
			t = t.Add(st.Stats())
		}
		return t
	}
}

// startObserver starts the report (logged every --report-every, to
// logger) and, with --metrics, the metrics server reading src (whose
// Report it sets), with ready answering /readyz. Stop it with shutdown.
func startObserver(o options, src pipeline.NodeSource, ready func() error, store storage.Store, logger *slog.Logger) (*observer, error) {
	src.Store = requestCounter(store)
	src.Mixture = mixtureCounts(store)
	src.S3 = s3StatsOf(store)
	src.Pack = packStats(store)
	reporter := func() *pipeline.Reporter {
		r := &pipeline.Reporter{Ranks: src.Ranks}
		if s3 := src.S3; s3 != nil {
			r.Throttled = func() int64 { return s3().Throttled }
		}
		return r
	}
	ob := &observer{rep: reporter(), ranks: src.Ranks, waits: src.TrainerWait, done: make(chan struct{})}
	src.Report = ob.rep
	live := liveInterval
	if o.reportEvery > 0 {
		ob.log = reporter()
		ob.log.Logger = logger
		live = min(live, o.reportEvery)
	}
	if o.metrics != "" {
		reg := observe.Registry(pipeline.NewNodeCollector(src))
		if src.Gossip != nil {
			reg.MustRegister(observe.NewGossipCollector(src.Gossip))
		}
		if src.TrainerWait != nil {
			reg.MustRegister(pipeline.NewTrainerWaitCollector(src.TrainerWait))
		}
		o.autotune.register(reg)
		srv, err := observe.Listen(observe.ServerConfig{Addr: o.metrics, TokenFile: o.metricsToken, Flag: "--metrics", Logger: logger,
			Limits: observe.Limits{MaxConns: o.metricsConns}, Registry: reg},
			observe.Handler(reg, map[string]http.Handler{observe.ReadyPath: observe.Readyz(ready)}))
		if err != nil {
			return nil, err
		}
		ob.srv = srv
		logger.Info("serving metrics", "addr", "http://"+srv.Addr()+"/metrics")
	}
	ctx, cancel := context.WithCancel(context.Background())
	ob.cancel = cancel
	var wg sync.WaitGroup
	for _, r := range []struct {
		rep   *pipeline.Reporter
		every time.Duration
	}{{ob.rep, live}, {ob.log, o.reportEvery}} {
		if r.rep == nil {
			continue
		}
		tick, stop := observe.Ticker(clock.Real{}, r.every)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer stop()
			r.rep.Run(ctx, tick)
		}()
	}
	go func() { wg.Wait(); close(ob.done) }()
	return ob, nil
}

// shutdown stops the report and the metrics server: after a linger of
// --metrics-linger, so a scraper collects the final values of a job
// that just ended (ctx ends the linger early).
func (ob *observer) shutdown(ctx context.Context, linger time.Duration) error {
	if ob == nil {
		return nil
	}
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
	if err := ob.srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// nodeReport is the node's report for the coordinator's status page:
// its ranks' counters now, its throughput since the last call (about a
// second: the agent asks once a tick), and the live report's bottleneck.
func (ob *observer) nodeReport() *wire.NodeReport {
	var waits []pipeline.TrainerWait
	if ob.waits != nil {
		waits = ob.waits()
	}
	r := pipeline.NodeReport(ob.ranks(), waits, ob.rep)
	now := time.Now()
	ob.mu.Lock()
	if !ob.mu.at.IsZero() {
		if dt := now.Sub(ob.mu.at).Seconds(); dt >= 0.5 {
			ob.mu.rate = float64(r.Samples-ob.mu.samples) / dt
			ob.mu.samples, ob.mu.at = r.Samples, now
		}
	} else {
		ob.mu.samples, ob.mu.at = r.Samples, now
	}
	r.SamplesPerSecond = ob.mu.rate
	ob.mu.Unlock()
	return r
}

// commitBook keeps each rank's last acknowledged commit, for the
// metrics.
type commitBook struct {
	mu struct {
		sync.Mutex
		last map[string]observe.Commit
	}
}

func newCommitBook() *commitBook {
	b := &commitBook{}
	b.mu.last = map[string]observe.Commit{}
	return b
}

func (b *commitBook) record(rank string, epoch int, step int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.mu.last[rank]; ok && (c.Epoch > epoch || c.Epoch == epoch && c.Step > step) {
		return // a late ack of an older commit
	}
	b.mu.last[rank] = observe.Commit{Rank: rank, Epoch: epoch, Step: step}
}

func (b *commitBook) list() []observe.Commit {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]observe.Commit, 0, len(b.mu.last))
	for _, c := range b.mu.last {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out
}
