package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/node"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/delivery"
	"github.com/longshore/longshore/observe"
	"github.com/longshore/longshore/observe/pipeline"
)

// runModes is every mode of the node: the flags make the config (the
// pipelines' assembly, a source: the standalone order or the
// coordinator's leases, and a sink: an in-process one or the trainers'
// feed) and node.Run runs it; the summary is printed at the end.
func runModes(ctx context.Context, o options, stdout, stderr io.Writer) error {
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
	feed := o.sink == "feed"
	var snk sink = nullSink{}
	if !feed {
		if snk, err = parseSink(o.sink, o.logPixels); err != nil {
			return err
		}
	}
	sinkClosed := false
	defer func() {
		if !sinkClosed {
			snk.Close()
		}
	}()
	var clk startupClock
	data, err := openNodeData(ctx, o, logger)
	if err != nil {
		return err
	}
	defer data.close()
	clk.open()
	if data.ds != nil { // the lazy path has no list to check: Deliver checks each key
		if err := snk.Accept(data.ds); err != nil {
			return err
		}
	}
	var src node.Source
	var clusterSrc *node.Cluster
	if o.standalone {
		src = o.standaloneSource(data, ac)
	} else {
		if clusterSrc, err = o.clusterSource(data, snk, logger, stderr); err != nil {
			return err
		}
		src = clusterSrc
	}
	asm, err := o.assemble(ac, dc, data.store, logger)
	if err != nil {
		return err
	}
	asmClosed := false
	defer func() {
		if !asmClosed {
			asm.Close()
		}
	}()
	if s, ok := src.(*node.Standalone); ok && s.Committer != nil {
		// The tokens' batch size is the pipelines' (with the decoders'
		// defaults).
		lc := s.Committer.(delivery.LocalCommitter)
		lc.BatchSize = asm.Pipeline.WithDefaults().BatchSize
		s.Committer = lc
	}

	n := data.cat.Len()
	total := (n + int64(o.ranks) - 1) / int64(o.ranks) * int64(o.ranks) * int64(o.epochs)
	commits := newCommitBook()
	readiness := "starting the pipelines"
	switch {
	case !o.standalone:
		readiness = "not welcomed by a coordinator yet"
	case feed:
		readiness = "opening the trainers' sockets"
	}
	ready := observe.NewReadiness(readiness)
	var obs atomic.Pointer[observer]
	var bar *progress
	var sk node.Sink
	if feed {
		sk = &node.Feed{Config: delivery.Config{Dir: o.feedDir, Job: o.job, Peers: o.feedPeers, HandshakeTimeout: o.feedHello,
			RankDevice: o.gpu.rankDevice(), Logger: o.logs.New(stderr, "feed"), Fields: func(int) dataset.Catalog { return data.cat }}}
	} else {
		in := &node.InProcess{Sink: batchSink{snk: snk, bar: &bar}, CommitEvery: int64(o.commitEvery)}
		if o.stepTime > 0 {
			in.StepTime = func(r int) time.Duration {
				if slow[r] {
					return time.Duration(float64(o.stepTime) * o.slowFactor)
				}
				return o.stepTime
			}
		}
		sk = in
	}
	if clusterSrc != nil {
		onJob := clusterSrc.Config.OnJob
		clusterSrc.Config.OnJob = func(j node.Job) {
			onJob(j)
			if ready.Ready() {
				logger.Info("ready", "detail", "welcomed by the coordinator")
			}
		}
		clusterSrc.Config.Report = func() *wire.NodeReport {
			if ob := obs.Load(); ob != nil {
				return ob.nodeReport()
			}
			return nil
		}
	}
	rc := node.RunConfig{Assembly: asm, Source: src, Sink: sk, Tune: o.autotune.config(o), Logger: logger,
		OnFirstBatch: clk.noteFirst, OnCommit: commits.record}
	rc.OnStart = func(run *node.Running) error {
		o.autotune.use(run.Tuner)
		ranks := func() []pipeline.RankCounters {
			var out []pipeline.RankCounters
			for _, r := range run.Ranks() {
				out = append(out, pipeline.RankCounters{Name: r.Name, Counters: r.Counters})
			}
			return out
		}
		ns := pipeline.NodeSource{Ranks: ranks, Committed: commits.list}
		if o.standalone {
			ns.JobSamples, ns.JobEpochs = total, o.epochs
			ns.TrainerWait = pipeline.TrainerWaits(&run.Served, nil)
		} else {
			ns.Gossip = observe.GossipStreams(run.Gossip)
			ns.TrainerWait = pipeline.TrainerWaits(&run.Served, func(r int) string { return run.Node.Rank(r).Name() })
		}
		if o.standalone && !feed {
			o.describeStandalone(stderr, data)
		}
		ob, err := startObserver(o, ns, ready.Check, data.store, logger)
		if err != nil {
			return err
		}
		obs.Store(ob)
		return nil
	}
	rc.OnServe = func(run *node.Running) {
		if o.standalone {
			clk.serve()
			ready.Ready()
		}
		if !feed {
			if o.standalone {
				bar = newProgress(o.progress, total, o.mediaFlags.media, stderr)
			}
			return
		}
		s := run.Served.Load()
		if o.standalone {
			fmt.Fprintf(stderr, "longshore-node: %s: %d samples; serving %d rank(s) to trainers:\n", data.store, n, o.ranks)
			if data.mix != nil {
				describeMixture(stderr, data)
			}
			for r := 0; r < o.ranks; r++ {
				fmt.Fprintf(stderr, "  rank %d: %s\n", r, s.SocketPath(r))
			}
			fmt.Fprintf(stderr, "  (Python: LONGSHORE_FEED_DIR=%s, longshore.Loader(); exits once every epoch is delivered and the trainers have left, or on Ctrl-C)\n", feedDirOf(o))
			return
		}
		fmt.Fprintf(stderr, "longshore-node: serving %d rank(s) of the cluster's job to trainers:\n", o.ranks)
		for r := 0; r < o.ranks; r++ {
			fmt.Fprintf(stderr, "  rank %d (%s): %s\n", r, run.Node.Rank(r).Name(), s.SocketPath(r))
		}
		fmt.Fprintf(stderr, "  (Python: LONGSHORE_FEED_DIR=%s, longshore.Loader())\n", feedDirOf(o))
	}

	res, runErr := node.Run(ctx, rc)
	if bar != nil {
		bar.finish()
	}
	if !o.standalone {
		for _, src := range packedSources(data.store) { // a mixture's packed sources each
			st := src.ps.Stats()
			var args []any
			if src.name != "" {
				args = append(args, "source", src.name)
			}
			logger.Info("packed dataset: chunk cache", append(args, "chunks", st.Chunks, "chunk_bytes", st.ChunkBytes, "hits", st.Hits,
				"read_alone", st.ReadAlone, "evictions", st.Evictions, "peak_bytes", st.PeakBytes, "released_bytes", st.ReleasedBytes)...)
		}
	}
	ob := obs.Load()
	if ob == nil { // the run stopped before its ranks started
		return runErr
	}
	sinkClosed = true
	if err := snk.Close(); err != nil && runErr == nil && o.standalone {
		runErr = fmt.Errorf("sink: %w", err)
	}
	asmClosed = true
	if _, err := asm.Close(); err != nil && runErr == nil {
		runErr = err
	}
	f := runFacts{store: data.store, samples: n, classes: len(data.cat.Classes()), excluded: data.excluded(), epochs: o.epochs, batchSize: o.batchSize,
		counters: res.Counters, ranks: res.Ranks, report: res.Failures, seconds: res.Seconds, err: runErr, quarantine: asm.Quarantine,
		trainerWait: trainerWait(res.TrainerWait)}
	if o.standalone {
		f.firstBatch, f.startup = clk.firstBatch(), &clk
	} else {
		f.epochs, f.batchSize = 0, 0
		if j := res.Job; j != nil {
			f.epochs, f.batchSize = j.Epochs, j.BatchSize
		}
	}
	return finish(ctx, o, ob, f, stdout, stderr, logger)
}

// standaloneSource is the source of a standalone run: the data's epoch
// order over its catalog, with the feed's resume tokens carrying the
// run's identity (another dataset or order is refused, another batch
// size resumes at the same sample: delivery.LocalCommitter.Resume).
func (o options) standaloneSource(data standaloneData, ac actors.Config) *node.Standalone {
	s := &node.Standalone{Catalog: data.cat, Order: data.orderFunc(o)}
	if o.sink != "feed" {
		return s
	}
	n := data.cat.Len()
	block := o.orderBlock(data.packed())
	ident := delivery.RunIdentity{Digest: data.cat.Digest(), Seed: o.seed, Block: block, Window: cluster.EffectiveWindow(block, o.window),
		Ranks: o.ranks, Epochs: o.epochs}
	s.Committer = delivery.LocalCommitter{Job: o.job, BatchSize: ac.WithDefaults().BatchSize, Ident: ident,
		StreamLen: (n + int64(o.ranks) - 1) / int64(o.ranks), Force: o.forceResume}
	return s
}

// clusterSource is the source of a cluster run: the node's id, its
// control plane and gossip addresses and keys, and the log sink's commit
// lines.
func (o options) clusterSource(data standaloneData, snk sink, logger *slog.Logger, stderr io.Writer) (*node.Cluster, error) {
	id := o.id
	if id == "" {
		host, _ := os.Hostname()
		_, port, _ := net.SplitHostPort(o.gossip)
		id = host + "-" + port
	}
	if data.indexed != nil {
		x := data.indexed.Index()
		logger.Info("reading the manifest through its index: pieces for the leases only", "manifest", x.Manifest, "samples", x.Samples,
			"layout", x.Layout(), "pieces", x.Pieces(), "every", x.Every, "manifest_cache", int64(o.manifestCache))
	}
	reload := o.sec.CatchReload(logger)
	keys, ropts, err := o.sec.Load(logger)
	if err != nil {
		return nil, err
	}
	c := &node.Cluster{
		Config: node.Config{Node: id, Dataset: data.ds, Catalog: data.cat, Logger: o.logs.New(stderr, "agent"),
			OnAck: func(rank string, _ cluster.Fence, a cluster.Ack) {
				if a.Completed {
					return // of an epoch already complete: the coordinator acknowledged no such commit
				}
				_ = snk.Line(fmt.Sprintf("commit\t%d\t%s\t%d", a.Epoch, rank, a.Step))
			},
			OnJob: func(node.Job) {}},
		OwnRequestCap: o.faults.maxRequestRate,
		Listen:        o.listen, Advertise: o.advertise, Remote: ropts,
		Gossip: gossip.Config{BindAddr: o.gossip, AdvertiseAddr: o.gossipAdvertise, Profile: o.gossipProfile, Keys: keys,
			MaxInboundStreams: o.gossipStreams, MaxStreamBytes: o.gossipBytes},
		Join: o.join, RejoinAfter: o.rejoinAfter, GiveUpAfter: o.giveUpAfter,
		OnMembership: reload.Go, // SIGHUP: reload --gossip-key-file
	}
	if data.clusterMix != nil {
		c.Config.Mixture = data.clusterMix.mixture
	}
	if ps, ok := data.store.(*dataset.PackedStore); ok {
		c.Describe = func() string { return packedLine(ps, dataset.PackedMean(data.ds, data.indexed), data.pack, o.ranks) }
	}
	return c, nil
}

// openNodeData opens the run's dataset: a standalone run's
// (openStandalone) or, in a cluster, the dataset whose order's block and
// window come with the coordinator's job (until then a packed dataset's
// samples are read one by one).
func openNodeData(ctx context.Context, o options, logger *slog.Logger) (standaloneData, error) {
	if o.standalone {
		return openStandalone(ctx, o, logger)
	}
	store, ds, indexed, plan, mix, err := openClusterData(ctx, o, logger)
	if err != nil {
		return standaloneData{}, err
	}
	if mix != nil {
		return standaloneData{store: store, cat: mix.cat, clusterMix: mix}, nil
	}
	if indexed != nil {
		return standaloneData{store: store, cat: indexed, indexed: indexed, pack: plan}, nil
	}
	return standaloneData{store: store, cat: dataset.DatasetCatalog(ds), ds: ds, pack: plan}, nil
}

// describeStandalone prints a standalone run's start lines: the dataset,
// the run's shape, and how its samples are read.
func (o options) describeStandalone(stderr io.Writer, data standaloneData) {
	fmt.Fprintf(stderr, "longshore-node: %s: %d samples in %d classes; %d epoch(s), %d rank(s), batch %d, %s\n",
		data.store, data.cat.Len(), len(data.cat.Classes()), o.epochs, o.ranks, o.batchSize, o.describeSample())
	if data.mix != nil {
		describeMixture(stderr, data)
	}
	if data.indexed != nil {
		x := data.indexed.Index()
		fmt.Fprintf(stderr, "longshore-node: reading the manifest through its index: %s in %d pieces of %d samples, --manifest-cache %s\n",
			x.Manifest, x.Pieces(), x.Every, o.manifestCache)
	}
	if ps, ok := data.store.(*dataset.PackedStore); ok {
		fmt.Fprintf(stderr, "longshore-node: %s\n", packedLine(ps, dataset.PackedMean(data.ds, data.indexed), data.pack, 1))
	}
	if ex := data.excluded(); ex > 0 {
		fmt.Fprintf(stderr, "longshore-node: --exclude %s left out %d samples\n", o.faults.exclude, ex)
	}
}

// batchSink records an in-process run's batches in the --sink: a line
// per sample (the filled copies of failed samples left out), a session
// line as a cluster rank's session changes; bar, once set, counts the
// samples.
type batchSink struct {
	snk sink
	bar **progress
}

func (s batchSink) Session(rank string, session cluster.Fence) error {
	return s.snk.Line(fmt.Sprintf("session\t%s\t%s", rank, session))
}

func (s batchSink) Batch(b *node.Batch) error {
	sb := len(b.Images) / max(b.Len(), 1)
	for i, key := range b.Keys {
		if b.Filled[i] {
			continue // a copy in a failed sample's place, not a sample
		}
		if err := s.snk.Deliver(b.Epoch, b.RankName, b.Step, key, b.Short != nil && b.Short[i], b.Pads[i], b.Images[i*sb:(i+1)*sb]); err != nil {
			return err
		}
	}
	if bar := *s.bar; bar != nil {
		bar.add(b.Len() - filled(b.Batch))
	}
	return nil
}

func (s batchSink) Flush() error { return s.snk.Flush() }
