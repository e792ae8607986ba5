package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/node"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/delivery"
	"github.com/longshore/longshore/feed"
	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/observe"
	"github.com/longshore/longshore/observe/pipeline"
)

// serveFeed is standalone mode with --sink feed: each rank's batches are
// served zero-copy to a trainer process over a Unix socket in the feed
// directory (see docs/feed-protocol.md). Trainers commit steps and get
// resume tokens; a trainer that reconnects resumes after its last commit
// (or after the token it presents). It returns nil, printing the
// summary, once every epoch is delivered and every trainer has left (or
// feedGrace after the last rank's end), or when stopped (SIGINT,
// SIGTERM).
func serveFeed(ctx context.Context, o options, ac actors.Config, dc decode.Config, stdout, stderr io.Writer, logger *slog.Logger) error {
	var clk startupClock
	// One actor system for every rank and every stream a resume reopens,
	// shut down once serving has ended.
	data, asm, err := openStandaloneRun(ctx, o, ac, dc, &clk, logger)
	if err != nil {
		return err
	}
	defer data.close()
	defer asm.Close()
	store := data.store
	ac = asm.Pipeline
	// Each rank's streams (reopened when a trainer resumes from an older
	// commit) add up in a Tally: the summary's and the metrics' source.
	tallies := make([]*actors.Tally, o.ranks)
	for r := range tallies {
		tallies[r] = actors.NewTally(r)
	}
	base, epochSteps := asm.StandaloneFeed(data.cat, data.orderFunc(o))
	open := func(rank int, from feed.Cursor, alloc gpu.Allocator) (delivery.BatchSource, error) {
		st, err := base(rank, from, alloc)
		if err != nil {
			return nil, err
		}
		p, _ := st.(*actors.Pipeline)
		tallies[rank].Use(p)
		return firstBatchStream{BatchSource: st, clk: &clk}, nil
	}
	commits := newCommitBook()
	n := data.cat.Len()
	// Tokens carry the run's identity and the sample position they
	// resume at: another dataset or order is refused, another batch size
	// resumes at the same sample (delivery.LocalCommitter.Resume).
	block := o.orderBlock(data.packed())
	ident := delivery.RunIdentity{Digest: data.cat.Digest(), Seed: o.seed, Block: block, Window: cluster.EffectiveWindow(block, o.window),
		Ranks: o.ranks, Epochs: o.epochs}
	committer := recordingCommitter{c: delivery.LocalCommitter{Job: o.job, BatchSize: ac.WithDefaults().BatchSize, Ident: ident,
		StreamLen: (n + int64(o.ranks) - 1) / int64(o.ranks), Force: o.forceResume}, book: commits}
	ranks := func() []pipeline.RankCounters {
		out := make([]pipeline.RankCounters, len(tallies))
		for r, t := range tallies {
			out[r] = pipeline.RankCounters{Name: strconv.Itoa(r), Counters: t.Counters()}
		}
		return out
	}
	total := (n + int64(o.ranks) - 1) / int64(o.ranks) * int64(o.ranks) * int64(o.epochs)
	var served atomic.Pointer[delivery.Server]
	ready := observe.NewReadiness("opening the trainers' sockets")
	ob, err := startObserver(o, pipeline.NodeSource{Ranks: ranks, Committed: commits.list, JobSamples: total, JobEpochs: o.epochs,
		TrainerWait: pipeline.TrainerWaits(&served, nil)}, ready.Check, store, logger)
	if err != nil {
		return err
	}
	s, err := delivery.New(delivery.Config{Dir: o.feedDir, Ranks: o.ranks, Job: o.job, Peers: o.feedPeers, HandshakeTimeout: o.feedHello, RankDevice: o.gpu.rankDevice(), Committer: committer, Logger: o.logs.New(stderr, "feed"),
		EpochSteps: epochSteps, Fields: func(int) dataset.Catalog { return data.cat }}, open)
	if err != nil {
		ob.shutdown(ctx, 0)
		return err
	}
	served.Store(s)
	clk.serve()
	ready.Ready()
	fmt.Fprintf(stderr, "longshore-node: %s: %d samples; serving %d rank(s) to trainers:\n", store, n, o.ranks)
	if data.mix != nil {
		describeMixture(stderr, data)
	}
	for r := 0; r < o.ranks; r++ {
		fmt.Fprintf(stderr, "  rank %d: %s\n", r, s.SocketPath(r))
	}
	fmt.Fprintf(stderr, "  (Python: LONGSHORE_FEED_DIR=%s, longshore.Loader(); exits once every epoch is delivered and the trainers have left, or on Ctrl-C)\n", feedDirOf(o))
	// Stopped by a signal, a standalone feed has served what its
	// trainers asked for: not an error.
	_ = waitTrainers(ctx, s, logger, "every epoch delivered")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	runErr := s.Shutdown(sctx)
	var report actors.FailureReport
	for _, t := range tallies {
		report = actors.MergeReports(report, t.Failures())
	}
	c := mergeRanks(ranks())
	return finish(ctx, o, ob, runFacts{store: store, samples: n, classes: len(data.cat.Classes()), excluded: data.excluded(), epochs: o.epochs, batchSize: o.batchSize, counters: c,
		report: report, seconds: activeSeconds(c), firstBatch: clk.firstBatch(), startup: &clk, err: runErr, quarantine: asm.Quarantine,
		trainerWait: trainerWait(s.TrainerWait())}, stdout, stderr, logger)
}

// firstBatchStream is a rank's stream that notes when a session first takes
// a batch from it to send.
type firstBatchStream struct {
	delivery.BatchSource
	clk *startupClock
}

func (s firstBatchStream) Next(ctx context.Context) (*actors.Batch, error) {
	b, err := s.BatchSource.Next(ctx)
	if err == nil {
		s.clk.noteFirst()
	}
	return b, err
}

// waitTrainers waits until s has served everything and its trainers
// have left (or feedGrace after the end, if a trainer stays connected),
// or ctx ends: then it returns ctx's cause. done says, in the log, what
// was served ("every epoch delivered", "job done").
func waitTrainers(ctx context.Context, s *delivery.Server, logger *slog.Logger, done string) error {
	select {
	case <-s.Finished():
	case <-s.Ended():
		select {
		case <-s.Finished():
		case <-time.After(feedGrace):
			logger.Warn(done+"; trainers still connected after the grace period, leaving", "grace", feedGrace)
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	logger.Info(done + "; every trainer has left")
	return nil
}

// recordingCommitter is a Committer that records each commit it made a
// token for, for the metrics.
type recordingCommitter struct {
	c    delivery.Committer
	book *commitBook
}

func (r recordingCommitter) Commit(ctx context.Context, rank int, epoch int, step int64) ([]byte, error) {
	tok, err := r.c.Commit(ctx, rank, epoch, step)
	if err == nil {
		r.book.record(strconv.Itoa(rank), epoch, step)
	}
	return tok, err
}

func (r recordingCommitter) Resume(ctx context.Context, rank int, token []byte) (int, int64, error) {
	return r.c.Resume(ctx, rank, token)
}

func feedDirOf(o options) string {
	if o.feedDir != "" {
		return o.feedDir
	}
	return feed.DefaultDir()
}

// feedGrace is how long a cluster node waits, once every rank's stream
// has ended, for its trainers to commit their last steps and leave.
const feedGrace = 30 * time.Second

// serveClusterFeed is cluster mode with --sink feed: each rank's batches,
// as the coordinator assigns them, are served zero-copy to a trainer
// process over the rank's Unix socket; commits block until the
// coordinator acknowledges them and return its journal token; rollbacks
// reach the trainer as rollback messages; a trainer that reconnects after
// uncommitted batches resets its rank (node.ClusterFeed). It returns nil
// once the job is done and every trainer has left (or feedGrace after the
// last rank's end), ctx.Err() if stopped before.
func serveClusterFeed(ctx context.Context, o options, nd *node.Node, cf *node.ClusterFeed, pipeline actors.Config, logger *slog.Logger, stderr io.Writer, served *atomic.Pointer[delivery.Server]) error {
	s, err := delivery.NewSessions(delivery.Config{Dir: o.feedDir, Ranks: o.ranks, Job: o.job, HandshakeTimeout: o.feedHello, Allocator: cf.Allocator, Logger: o.logs.New(stderr, "feed"), Peers: o.feedPeers,
		RankDevice: o.gpu.rankDevice(), Fields: func(int) dataset.Catalog { return nd.Catalog() }},
		cf.Open(nd, pipeline))
	if err != nil {
		return err
	}
	served.Store(s)
	fmt.Fprintf(stderr, "longshore-node: serving %d rank(s) of the cluster's job to trainers:\n", o.ranks)
	for r := 0; r < o.ranks; r++ {
		fmt.Fprintf(stderr, "  rank %d (%s): %s\n", r, nd.Rank(r).Name(), s.SocketPath(r))
	}
	fmt.Fprintf(stderr, "  (Python: LONGSHORE_FEED_DIR=%s, longshore.Loader())\n", feedDirOf(o))
	runErr := waitTrainers(ctx, s, logger, "job done")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}
