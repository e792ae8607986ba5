package main

import (
	"context"
	"fmt"
	"io"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/feed"
	"github.com/longshore/longshore/actors/ffdecode"
	"github.com/longshore/longshore/decode"
)

// serveFeed is standalone mode with --sink feed: each rank's batches are
// served zero-copy to a trainer process over a Unix socket in the feed
// directory (see docs/feed-protocol.md), until SIGINT/SIGTERM. Trainers
// commit steps and get resume tokens; a trainer that reconnects resumes
// after its last commit (or after the token it presents).
func serveFeed(ctx context.Context, o options, ac actors.Config, dc decode.Config, stderr io.Writer) error {
	store, ds, err := openDataset(ctx, o)
	if err != nil {
		return err
	}
	deps := actors.Deps{Store: store, Order: clusterOrder}
	if err := ffdecode.Use(&ac, &deps, dc); err != nil {
		return err
	}
	open := feed.Standalone(ac, ds, o.ranks, deps)
	s, err := feed.NewServer(feed.Config{Dir: o.feedDir, Ranks: o.ranks, Job: o.job}, open)
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
