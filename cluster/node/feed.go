package node

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/journal"
	"github.com/longshore/longshore/delivery"
	"github.com/longshore/longshore/feed"
	"github.com/longshore/longshore/gpu"
)

// ClusterFeed serves a cluster node agent's ranks through a Server:
//
//	cf := node.NewClusterFeed(ranks)
//	nd, _ := node.Start(sys, node.Config{..., RankDeps: cf.RankDeps(deps), OnAck: cf.OnAck, OnJob: cf.OnJob})
//	srv, _ := delivery.NewSessions(delivery.Config{..., Ranks: ranks, Allocator: cf.Allocator}, cf.Open(nd, pipelineCfg))
//
// Steps are the agent's, which are the trainer's: continuous per epoch
// across the agent's sessions (a new session numbers on from the last
// acknowledged step), so after a rollback or a reset the trainer
// continues right after its checkpoint, and a commit's step, its
// acknowledgement and its journal token name the same step. Each
// rollback or reset starts a new era; commits name the era of their batch, so a commit of a batch
// of an era that ended can never be taken for a later batch with the
// same step.
//
// A trainer that reconnects with batches delivered after its last
// acknowledged commit makes the rank Reset: they are delivered again. A
// hello token other than the rank's last acknowledged commit is refused
// (ErrStaleToken: a running cluster cannot go back; restart the job with
// the coordinator's --resume TOKEN), except when this node process has
// acknowledged nothing for the rank yet (it restarted): then the
// coordinator's state is authoritative. A token of another job (its
// identity, journal.Identity, differs from the node's dataset or the
// job's parameters) is refused with ErrBadToken whenever it arrives: at
// hello when the node knows the job, else as soon as the welcome brings
// it (OnJob), before the trainer gets a batch.
type ClusterFeed struct {
	allocs []*delivery.ShmAllocator
	ranks  []*clusterRank
	mu     struct {
		sync.Mutex
		job *Job // the last welcome's (OnJob); nil: none yet
	}
}

// NewClusterFeed makes the feed side of a node with ranks ranks.
func NewClusterFeed(ranks int) *ClusterFeed {
	f := &ClusterFeed{}
	for i := range ranks {
		f.allocs = append(f.allocs, delivery.NewShmAllocator(fmt.Sprintf("rank%d", i)))
		cr := &clusterRank{index: i, feed: f}
		cr.mu.d = cluster.NewRankDelivery()
		cr.mu.waiters = map[uint64]chan delivery.CommitResult{}
		f.ranks = append(f.ranks, cr)
	}
	return f
}

// Allocator is rank's shared-memory allocator: set it as Config.Allocator.
func (f *ClusterFeed) Allocator(rank int) *delivery.ShmAllocator { return f.allocs[rank] }

// RankDeps gives rank's pipelines deps with rank's allocator: set it as
// Config.RankDeps.
func (f *ClusterFeed) RankDeps(deps actors.Deps) func(rank int) actors.Deps {
	return func(rank int) actors.Deps {
		d := deps
		d.Allocator = f.allocs[rank]
		return d
	}
}

// OnAck answers the commits an acknowledgement covers: set it as
// Config.OnAck (wrap it to log as well). What was acknowledged the feed
// reads from Rank.Acks, whose one owner is the node's actor.
func (f *ClusterFeed) OnAck(rank string, session cluster.Fence, a cluster.Ack) {
	if r := f.byName(rank); r != nil {
		r.onAck(session, a)
	}
}

// byName is the feed's rank named "<node>/<i>", or nil.
func (f *ClusterFeed) byName(rank string) *clusterRank {
	i := strings.LastIndexByte(rank, '/')
	n, err := strconv.Atoi(rank[i+1:])
	if err != nil || n < 0 || n >= len(f.ranks) {
		return nil
	}
	return f.ranks[n]
}

// Open returns the OpenFunc serving node's ranks; pipeline is the
// agent's Config.Pipeline (the job's batch size comes from the
// coordinator). The server must use the feed's allocators.
func (f *ClusterFeed) Open(node *Node, pipeline actors.Config) delivery.SessionFunc {
	return func(rank int, alloc gpu.Allocator) (delivery.SessionStream, error) {
		if rank < 0 || rank >= len(f.ranks) {
			return nil, fmt.Errorf("feed: cluster feed has %d ranks, asked for rank %d", len(f.ranks), rank)
		}
		if a, ok := alloc.(*delivery.ShmAllocator); !ok || a != f.allocs[rank] {
			return nil, errors.New("feed: cluster mode: set Config.Allocator to ClusterFeed.Allocator (the agent's pipelines allocate from it)")
		}
		cr := f.ranks[rank]
		cr.mu.Lock()
		cr.mu.r, cr.mu.cfg = node.Rank(rank), pipeline.WithDefaults()
		cr.mu.Unlock()
		return cr, nil
	}
}

// clusterRank is one rank of a ClusterFeed: a SessionStream over a Rank.
// What it delivers and how it answers commits is its
// cluster.RankDelivery's decision; it carries the decisions out.
type clusterRank struct {
	index int
	feed  *ClusterFeed
	mu    struct {
		sync.Mutex
		r       *Rank
		cfg     actors.Config
		d       *cluster.RankDelivery
		held    *Batch                                // held back while the trainer hears of a rollback (cluster.Hold)
		waiters map[uint64]chan delivery.CommitResult // by RankDelivery's commit id
		// unchecked is the token of the connected trainer that the node
		// could not check against the job yet (no welcome); tokenErr
		// what OnJob found wrong with it: the session's next delivery
		// fails with it.
		unchecked *journal.Token
		tokenErr  error
	}
}

var _ delivery.SessionStream = (*clusterRank)(nil)

func (c *clusterRank) rank() *Rank {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.r
}

func (c *clusterRank) Config() actors.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg := c.mu.cfg
	if b := c.mu.r.BatchSize(); b > 0 {
		cfg.BatchSize = int(b)
	}
	cfg.DropLast = false
	return cfg
}

// Shutdown does nothing: the agent's node owns the pipelines.
func (c *clusterRank) Shutdown(ctx context.Context) error { return nil }

func (c *clusterRank) Next(ctx context.Context) (*actors.Batch, error) {
	d, err := c.NextDelivery(ctx)
	return d.Batch, err
}

func (c *clusterRank) NextDelivery(ctx context.Context) (delivery.Batch, error) {
	for {
		c.mu.Lock()
		b, r := c.mu.held, c.mu.r
		c.mu.held = nil
		c.mu.Unlock()
		if b == nil {
			var err error
			if b, err = r.pull(ctx); err != nil {
				return delivery.Batch{}, err
			}
		}
		c.mu.Lock()
		a := c.mu.d.Arrive(b.at(), r.Acks())
		switch a.Verdict {
		case cluster.Drop:
			c.mu.Unlock()
			b.Release()
			continue
		case cluster.Hold:
			c.mu.held = b
			c.answerLocked(a.Answers)
			c.mu.Unlock()
			rb := feed.Rollback{Era: a.Rollback.Era}
			if l := rollbackOf(a.Rollback.Last); l != nil {
				rb = *l
				rb.Era = a.Rollback.Era
			}
			return delivery.Batch{}, &feed.RollbackError{Rollback: rb}
		}
		if terr := c.mu.tokenErr; terr != nil {
			// The trainer's token is another job's (OnJob): it gets no
			// batch. b counts as delivered, so the next trainer's Attach
			// resets the rank and it is delivered again.
			c.mu.tokenErr = nil
			c.mu.Unlock()
			b.Release()
			return delivery.Batch{}, terr
		}
		c.mu.Unlock()
		return delivery.Batch{Batch: b.Batch, Era: a.Era, EndOfStream: b.EndOfStream}, nil
	}
}

// Sent does nothing: a batch counts as delivered once RankDelivery let
// it through (a batch the server kept for the next trainer makes that
// trainer's Attach reset the rank).
func (c *clusterRank) Sent(delivery.Batch) {}

// answerLocked answers the commits RankDelivery answered.
func (c *clusterRank) answerLocked(answers []cluster.CommitAnswer) {
	for _, a := range answers {
		ch, ok := c.mu.waiters[a.ID]
		if !ok {
			continue
		}
		delete(c.mu.waiters, a.ID)
		if a.RolledBack {
			ch <- delivery.CommitResult{Err: fmt.Errorf("%w: the rank's session ended before the commit of epoch %d step %d was acknowledged", feed.ErrRolledBack, a.Epoch, a.Step)}
		} else {
			ch <- delivery.CommitResult{Token: []byte(a.Token)}
		}
	}
}

// rollbackOf is the rank's acknowledged commit last as the trainer
// restores it; nil: none in this node process.
func rollbackOf(last *cluster.Ack) *feed.Rollback {
	if last == nil {
		return nil
	}
	return &feed.Rollback{Epoch: last.Epoch, Step: last.Step, Token: []byte(last.Token), Committed: true}
}

// onAck answers the commits waiting on a's session and epoch that a
// covers.
func (c *clusterRank) onAck(session cluster.Fence, a cluster.Ack) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.answerLocked(c.mu.d.Ack(session, a))
}

// OnJob tells the feed the job of every welcome the node accepts: set it
// as Config.OnJob (chain it with others). A token a trainer presented
// before the node knew the job is checked now: one of another job ends
// that trainer's session with bad_token (its next batch is never sent).
func (f *ClusterFeed) OnJob(j Job) {
	f.mu.Lock()
	f.mu.job = &j
	f.mu.Unlock()
	for _, cr := range f.ranks {
		cr.mu.Lock()
		if t := cr.mu.unchecked; t != nil {
			cr.mu.unchecked = nil
			cr.mu.tokenErr = f.checkToken(cr.mu.r, *t, &j)
		}
		cr.mu.Unlock()
	}
}

func (f *ClusterFeed) job() *Job {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.job
}

// checkToken checks a trainer's token against the job: its dataset
// against the node's (the coordinator's, once welcomed), the rest
// against job if known (nil: not yet). A version 1 token carries none of
// it: the coordinator checks its job id when it is given as --resume.
func (f *ClusterFeed) checkToken(r *Rank, t journal.Token, job *Job) error {
	if !t.Ident.Known() || r == nil {
		return nil
	}
	want := t.Ident // what is not known yet cannot differ
	want.Digest = r.node.cfg.Digest
	if job != nil {
		want = journal.Identity{Digest: r.node.cfg.Digest, Seed: job.Seed, Block: job.Block, Window: job.Window, BatchSize: job.BatchSize, Epochs: job.Epochs}
	}
	if err := journal.CheckToken(t, want); err != nil {
		return fmt.Errorf("%w: rank %d: %v", feed.ErrBadToken, r.index, err)
	}
	return nil
}

func (c *clusterRank) Attach(_ context.Context, token []byte) (delivery.Attachment, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.unchecked, c.mu.tokenErr = nil, nil
	if len(token) > 0 {
		t, err := journal.ParseToken(string(token))
		if err != nil {
			return delivery.Attachment{}, fmt.Errorf("%w: %v", feed.ErrBadToken, err)
		}
		job := c.feed.job()
		if err := c.feed.checkToken(c.mu.r, t, job); err != nil {
			return delivery.Attachment{}, err
		}
		if job == nil && t.Ident.Known() {
			c.mu.unchecked = &t // checked when the welcome brings the job (OnJob)
		}
	}
	r := c.mu.r
	at := c.mu.d.Attach(string(token), r.Acks(), r.live())
	if at.Stale {
		return delivery.Attachment{}, fmt.Errorf("%w: rank %d's last acknowledged commit is epoch %d step %d (token %s), and a running cluster cannot go back: to resume from this token, restart the job with the coordinator's --resume %s",
			feed.ErrStaleToken, c.index, at.Last.Epoch, at.Last.Step, at.Last.Token, token)
	}
	out := delivery.Attachment{Era: at.Era, Reset: at.Reset}
	if at.Reset {
		// The last trainer got batches after its last acknowledged
		// commit: they are delivered again, from a new session.
		if b := c.mu.held; b != nil {
			b.Release()
			c.mu.held = nil
		}
		r.reset(at.ResetSession)
		c.answerLocked(at.Answers)
	}
	if l := rollbackOf(at.Last); l != nil {
		out.Committed = l
		out.Resume = feed.After(l.Epoch, l.Step)
	}
	return out, nil
}

func (c *clusterRank) Commit(_ context.Context, era uint64, epoch int, step int64) (<-chan delivery.CommitResult, error) {
	c.mu.Lock()
	r := c.mu.r
	dec := c.mu.d.Commit(era, epoch, step, r.Acks())
	ch := make(chan delivery.CommitResult, 1)
	switch dec.Verdict {
	case cluster.CommitRolledBack:
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: the commit of epoch %d step %d names a batch of an era that ended (rollback); restore the last acknowledged commit", feed.ErrRolledBack, epoch, step)
	case cluster.CommitNotDelivered:
		c.mu.Unlock()
		return nil, fmt.Errorf("feed: commit of epoch %d step %d, which was not delivered", epoch, step)
	case cluster.CommitGoesBack:
		c.mu.Unlock()
		return nil, fmt.Errorf("feed: commit of epoch %d step %d goes back before the last acknowledged commit (epoch %d step %d)", epoch, step, dec.LastEpoch, dec.Last)
	case cluster.CommitAnswered:
		c.mu.Unlock()
		ch <- delivery.CommitResult{Token: []byte(dec.Token)}
		return ch, nil
	}
	// The actor answers through OnAck; a commit of an epoch the
	// coordinator completed at once (RankRuns.Commit).
	c.mu.waiters[dec.ID] = ch
	c.mu.Unlock()
	if err := r.CommitAt(dec.Session, epoch, step); err != nil {
		c.mu.Lock()
		c.mu.d.Cancel(dec.ID)
		delete(c.mu.waiters, dec.ID)
		c.mu.Unlock()
		return nil, err
	}
	return ch, nil
}
