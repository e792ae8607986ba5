package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/node"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/delivery"
	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/observe"
	"github.com/longshore/longshore/observe/pipeline"
	"github.com/longshore/longshore/storage"
)

// clusterNode runs the node in a cluster: it joins by gossip, gets its
// ranks' sessions and leases from the coordinator, and runs one stand-in
// trainer per rank that logs what it is given to the sink and commits
// every --commit-every steps and at the end of each epoch stream. It
// returns nil once the coordinator said the job is done and every rank
// has delivered what it holds.
func clusterNode(ctx context.Context, o options, stdout, stderr io.Writer) error {
	logger := newLogger(o, stderr)
	dc, err := o.decodeConfig()
	if err != nil {
		return err
	}
	ac, err := o.actorsConfig(dc)
	if err != nil {
		return err
	}
	slow, err := parseSlowRanks(o.slowRanks, o.ranks)
	if err != nil {
		return err
	}
	id := o.id
	if id == "" {
		host, _ := os.Hostname()
		_, port, _ := net.SplitHostPort(o.gossip)
		id = host + "-" + port
	}
	var cf *node.ClusterFeed // --sink feed: real trainers over the feed
	var snk sink = nullSink{}
	if o.sink == "feed" {
		cf = node.NewClusterFeed(o.ranks)
	} else if snk, err = parseSink(o.sink, o.logPixels); err != nil {
		return err
	}
	defer snk.Close()
	// The order's block and window come with the coordinator's job
	// (OnJob below); until then a packed dataset's samples are read one
	// by one.
	store, ds, indexed, plan, mix, err := openClusterData(ctx, o, logger)
	if err != nil {
		return err
	}
	var catalog dataset.Catalog
	if mix != nil {
		catalog = mix.cat
	} else if indexed != nil {
		defer indexed.Close()
		catalog = indexed
		x := indexed.Index()
		logger.Info("reading the manifest through its index: pieces for the leases only", "manifest", x.Manifest, "samples", x.Samples,
			"layout", x.Layout(), "pieces", x.Pieces(), "every", x.Every, "manifest_cache", int64(o.manifestCache))
	} else {
		catalog = dataset.DatasetCatalog(ds)
		if err := snk.Accept(ds); err != nil {
			storage.Close(store)
			return err
		}
	}
	defer storage.Close(store)

	reload := o.sec.CatchReload(logger)
	keys, ropts, err := o.sec.Load(logger)
	if err != nil {
		return err
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()
	rem, actorAddr, err := wire.StartRemote(sys, o.listen, o.advertise, ropts...)
	if err != nil {
		return err
	}
	defer rem.Shutdown(false)

	// The pipelines' one actor system, apart from the remote's; shut
	// down after the node has closed them.
	asm, err := o.assemble(ac, dc, store, logger)
	if err != nil {
		return err
	}
	defer asm.Close()
	var mem atomic.Pointer[gossip.Membership]
	var job atomic.Pointer[node.Job] // the coordinator's, once welcomed
	commits := newCommitBook()
	acfg := node.Config{
		Node:    id,
		Dataset: ds,
		Catalog: catalog,
		Rejoin: func(ctx context.Context, inc uint64) error {
			m := mem.Load()
			if m == nil {
				return errors.New("not in gossip yet")
			}
			if err := m.UpdateMeta(ctx, func(meta *gossip.Meta) { meta.Incarnation = inc }); err != nil {
				return err
			}
			// An eviction usually means the others declared this node
			// dead (a partition, a stall): they no longer gossip to it,
			// so its new life reaches them only at memberlist's next
			// push/pull (up to 15-30 s). Join --join to push it now.
			if err := m.Join(ctx, node.JoinAddrs(o.join)); err != nil {
				logger.Warn("re-join after eviction failed; gossip will carry the new incarnation", "join", o.join, "err", err)
			}
			return nil
		},
		OnAck: func(rank string, _ cluster.Fence, a cluster.Ack) {
			if a.Completed {
				return // of an epoch already complete: the coordinator acknowledged no such commit
			}
			_ = snk.Line(fmt.Sprintf("commit\t%d\t%s\t%d", a.Epoch, rank, a.Step))
		},
		Logger: o.logs.New(stderr, "agent"),
	}
	acfg.OnJob = func(j node.Job) { job.Store(&j) }
	if mix != nil {
		acfg.Mixture = mix.mixture
	}
	var describe func() string // the packed store's reading, for the log once the job's order is adopted
	if ps, ok := store.(*dataset.PackedStore); ok {
		describe = func() string { return packedLine(ps, dataset.PackedMean(ds, indexed), plan, o.ranks) }
		defer func() {
			st := ps.Stats()
			logger.Info("packed dataset: chunk cache", "chunks", st.Chunks, "chunk_bytes", st.ChunkBytes, "hits", st.Hits,
				"read_alone", st.ReadAlone, "evictions", st.Evictions, "peak_bytes", st.PeakBytes, "released_bytes", st.ReleasedBytes)
		}()
	}
	if cf != nil {
		acfg.RankDeps = cf.RankDeps(asm.Deps)
		acfg.OnAck = cf.OnAck
		onJob := acfg.OnJob
		acfg.OnJob = func(j node.Job) {
			onJob(j)
			cf.OnJob(j) // checks the tokens trainers presented before the welcome
		}
	}
	// Dataset open: ready once a coordinator welcomes the node (/readyz).
	ready := observe.NewReadiness("not welcomed by a coordinator yet")
	onJob := acfg.OnJob
	acfg.OnJob = func(j node.Job) {
		onJob(j)
		if ready.Ready() {
			logger.Info("ready", "detail", "welcomed by the coordinator")
		}
	}
	onAck := acfg.OnAck
	acfg.OnAck = func(rank string, session cluster.Fence, a cluster.Ack) {
		if !a.Completed {
			commits.record(rank, a.Epoch, a.Step)
		}
		onAck(rank, session, a)
	}
	var obs atomic.Pointer[observer] // started once the node is
	acfg.Report = func() *wire.NodeReport {
		if ob := obs.Load(); ob != nil {
			return ob.nodeReport()
		}
		return nil
	}
	// The job's order and store budget reach the store (the assembly's
	// ClusterConfig) before the callbacks above.
	acfg = asm.ClusterConfig(acfg, o.faults.maxRequestRate, describe)
	nd, err := node.Start(sys, acfg)
	if err != nil {
		return err
	}
	ranks := func() []pipeline.RankCounters {
		cs := nd.RankCounters()
		out := make([]pipeline.RankCounters, len(cs))
		for i, c := range cs {
			out[i] = pipeline.RankCounters{Name: nd.Rank(i).Name(), Counters: c}
		}
		return out
	}
	var served atomic.Pointer[delivery.Server] // the feed sink's, once it serves
	waits := pipeline.TrainerWaits(&served, func(r int) string { return nd.Rank(r).Name() })
	ob, err := startObserver(o, pipeline.NodeSource{Ranks: ranks, Committed: commits.list, Gossip: observe.GossipStreams(&mem), TrainerWait: waits}, ready.Check, store, logger)
	if err != nil {
		nd.Shutdown(context.Background())
		return err
	}
	obs.Store(ob)
	// The summary, once the job is done (or the node stopped): the same
	// fields as standalone, from the ranks' counters over every session.
	summary := func(runErr error) error {
		c := mergeRanks(ranks())
		f := runFacts{store: store, samples: catalog.Len(), classes: len(catalog.Classes()), excluded: excludedOf(ds), counters: c, report: nd.Failures(), seconds: activeSeconds(c), err: runErr, quarantine: asm.Quarantine}
		if s := served.Load(); s != nil {
			f.trainerWait = trainerWait(s.TrainerWait())
		}
		if j := job.Load(); j != nil {
			f.epochs, f.batchSize = j.Epochs, j.BatchSize
		}
		return finish(ctx, o, ob, f, stdout, stderr, logger)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if err := nd.Shutdown(sctx); err != nil {
			logger.Warn("node shutdown", "err", err)
		}
	}()

	jctx, cancel := context.WithTimeout(ctx, time.Minute)
	m, err := gossip.Start(jctx, gossip.Config{
		Meta: gossip.Meta{ID: id, Role: gossip.RoleNode, ActorAddr: actorAddr, Ranks: nd.RankNames(),
			Incarnation: nd.Incarnation()},
		BindAddr:      o.gossip,
		AdvertiseAddr: o.gossipAdvertise,
		Join:          node.JoinAddrs(o.join),
		Profile:       o.gossipProfile,
		Keys:          keys,

		MaxInboundStreams: o.gossipStreams,
		MaxStreamBytes:    o.gossipBytes,
	})
	cancel()
	if err != nil {
		return err
	}
	mem.Store(m)
	defer reload.Go(m)() // SIGHUP: reload --gossip-key-file
	logger.Info("joined", "node", id, "gossip", m.Addr(), "actor", actorAddr, "ranks", nd.RankNames())
	var gwg sync.WaitGroup
	clk := clock.Real{} // the watchers' clock; their tests inject a fake
	wctx, stopWatch := context.WithCancel(ctx)
	gwg.Add(1)
	go func() {
		defer gwg.Done()
		for ev := range m.Events() {
			if ev.Meta.Role != gossip.RoleCoordinator {
				continue
			}
			switch ev.Kind {
			case gossip.Joined, gossip.Updated:
				nd.SetCoordinator(ev.Meta.ActorAddr)
			case gossip.Failed, gossip.Left:
				logger.Warn("coordinator gone from gossip", "event", ev.Kind.String(), "gossip", ev.Addr)
			}
		}
	}()
	if o.rejoinAfter > 0 {
		gwg.Add(1)
		go func() {
			defer gwg.Done()
			w := node.NewCoordWatch(clk.Now(), o.rejoinAfter, max(o.rejoinAfter, time.Second))
			node.WatchCoordinator(wctx, clk, min(o.rejoinAfter/2, 500*time.Millisecond), m, node.JoinAddrs(o.join), w, logger)
		}()
	}
	defer gwg.Wait()
	defer stopWatch() // runs before gwg.Wait
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Shutdown(sctx)
	}()

	ctx, giveUp := context.WithCancelCause(ctx)
	defer giveUp(nil)
	if o.giveUpAfter > 0 {
		gwg.Add(1)
		go func() {
			defer gwg.Done()
			node.WatchGiveUp(wctx, clk, m, o.giveUpAfter, giveUp)
		}()
	}
	if cf != nil {
		return summary(serveClusterFeed(ctx, o, nd, cf, acfg.Pipeline, logger, stderr, &served))
	}
	// One stand-in trainer per rank; a rank that stops on an error stops
	// the node (node.RunRanks).
	if err := node.RunRanks(ctx, nd.RankNames(), func(rctx context.Context, i int) error {
		t := trainer{rank: nd.Rank(i), sink: snk, every: int64(o.commitEvery), step: o.stepTime}
		if slow[i] {
			t.step = time.Duration(float64(o.stepTime) * o.slowFactor)
		}
		return t.run(rctx)
	}, logger); err != nil {
		return summary(err)
	}
	logger.Info("job done; leaving")
	return summary(snk.Flush())
}

// trainer stands in for a rank's trainer: it logs each batch's samples,
// "trains" for step, and commits every `every` steps and at the end of
// its epoch stream, after flushing the log so a committed step's lines
// survive a crash.
type trainer struct {
	rank  *node.Rank
	sink  sink
	every int64
	step  time.Duration
}

func (t trainer) run(ctx context.Context) error {
	var session cluster.Fence
	for {
		b, err := t.rank.Next(ctx)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.Is(err, node.ErrRolledBack):
			continue // the log's next session line starts over
		case err != nil:
			return err
		}
		if b.Session != session {
			session = b.Session
			if err := t.sink.Line(fmt.Sprintf("session\t%s\t%s", b.RankName, session)); err != nil {
				b.Release()
				return err
			}
		}
		sb := len(b.Images) / max(b.Len(), 1)
		for i, key := range b.Keys {
			if b.Filled[i] {
				continue // a copy in a failed sample's place, not a sample
			}
			if err := t.sink.Deliver(b.Epoch, b.RankName, b.Step, key, b.Short != nil && b.Short[i], b.Pads[i], b.Images[i*sb:(i+1)*sb]); err != nil {
				b.Release()
				return err
			}
		}
		epoch, step, end := b.Epoch, b.Step, b.EndOfStream
		b.Release()
		if t.step > 0 {
			select {
			case <-time.After(t.step):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if (step+1)%t.every == 0 || end {
			if err := t.sink.Flush(); err != nil {
				return err
			}
			_ = t.rank.Commit(epoch, step) // ErrRolledBack: Next says so next
		}
	}
}

func parseSlowRanks(spec string, ranks int) (map[int]bool, error) {
	out := map[int]bool{}
	if spec == "" {
		return out, nil
	}
	for _, f := range strings.Split(spec, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || i < 0 || i >= ranks {
			return nil, fmt.Errorf("--slow-ranks %q: want rank indices in [0, %d)", spec, ranks)
		}
		out[i] = true
	}
	return out, nil
}

// excludedOf is how many samples --exclude left out of ds (none on the
// lazy path, which --exclude turns off).
func excludedOf(ds *dataset.Dataset) int {
	if ds == nil {
		return 0
	}
	return ds.Excluded
}
