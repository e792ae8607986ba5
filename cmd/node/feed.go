package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/feed"
	"github.com/longshore/longshore/actors/feedserver"
	"github.com/longshore/longshore/actors/ffdecode"
	"github.com/longshore/longshore/cluster/agent"
	"github.com/longshore/longshore/decode"
)

// serveFeed is standalone mode with --sink feed: each rank's batches are
// served zero-copy to a trainer process over a Unix socket in the feed
// directory (see docs/feed-protocol.md), until SIGINT/SIGTERM. Trainers
// commit steps and get resume tokens; a trainer that reconnects resumes
// after its last commit (or after the token it presents).
func serveFeed(ctx context.Context, o options, ac actors.Config, dc decode.Config, stderr io.Writer) error {
	store, ds, err := openStandalone(ctx, o)
	if err != nil {
		return err
	}
	deps := actors.Deps{Store: store, Order: o.orderFunc(ds), NewUploader: o.gpu.newUploader()}
	if err := ffdecode.Use(&ac, &deps, dc); err != nil {
		return err
	}
	open := feedserver.Standalone(ac, ds, o.ranks, deps)
	s, err := feedserver.New(feedserver.Config{Dir: o.feedDir, Ranks: o.ranks, Job: o.job, Peers: o.feedPeers, RankDevice: o.gpu.rankDevice()}, open)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "longshore-node: %s: %d samples; serving %d rank(s) to trainers:\n", store, len(ds.Samples), o.ranks)
	for r := 0; r < o.ranks; r++ {
		fmt.Fprintf(stderr, "  rank %d: %s\n", r, s.SocketPath(r))
	}
	fmt.Fprintf(stderr, "  (Python: LONGSHORE_FEED_DIR=%s, longshore.Loader(); stop with Ctrl-C)\n", feedDirOf(o))
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	return s.Shutdown(sctx)
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
// uncommitted batches resets its rank (agent.ClusterFeed). It returns nil
// once the job is done and every trainer has left (or feedGrace after the
// last rank's end), ctx.Err() if stopped before.
func serveClusterFeed(ctx context.Context, o options, node *agent.Node, cf *agent.ClusterFeed, pipeline actors.Config, logger *slog.Logger, stderr io.Writer) error {
	s, err := feedserver.New(feedserver.Config{Dir: o.feedDir, Ranks: o.ranks, Job: o.job, Allocator: cf.Allocator, Logger: logger, Peers: o.feedPeers,
		RankDevice: o.gpu.rankDevice()},
		cf.Open(node, pipeline))
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "longshore-node: serving %d rank(s) of the cluster's job to trainers:\n", o.ranks)
	for r := 0; r < o.ranks; r++ {
		fmt.Fprintf(stderr, "  rank %d (%s): %s\n", r, node.Rank(r).Name(), s.SocketPath(r))
	}
	fmt.Fprintf(stderr, "  (Python: LONGSHORE_FEED_DIR=%s, longshore.Loader())\n", feedDirOf(o))
	var runErr error
	select {
	case <-s.Finished():
		logger.Info("job done; every trainer has left")
	case <-s.Ended():
		select {
		case <-s.Finished():
			logger.Info("job done; every trainer has left")
		case <-time.After(feedGrace):
			logger.Warn("job done; trainers still connected after the grace period, leaving", "grace", feedGrace)
		case <-ctx.Done():
			runErr = context.Cause(ctx)
		}
	case <-ctx.Done():
		runErr = context.Cause(ctx)
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}
