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
//	srv, _ := delivery.New(delivery.Config{..., Ranks: ranks, Allocator: cf.Allocator}, cf.Open(nd, pipelineCfg))
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
		cr.mu.era = 1
		cr.mu.sent = map[sessEpoch]sentSteps{}
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
func (f *ClusterFeed) Open(node *Node, pipeline actors.Config) delivery.OpenFunc {
	return func(rank int, _ feed.Cursor, alloc gpu.Allocator) (delivery.Stream, error) {
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

type sessEpoch struct {
	session cluster.Fence
	epoch   int
}

// sentSteps are the first and last steps of an epoch a session returned.
type sentSteps struct{ first, last int64 }

type batchAt struct {
	sessEpoch
	step int64
}

// clusterRank is one rank of a ClusterFeed: a SessionStream over an
// Rank.
type clusterRank struct {
	index int
	feed  *ClusterFeed
	mu    struct {
		sync.Mutex
		r        *Rank
		cfg      actors.Config
		era      uint64
		cur      cluster.Fence           // session of this era's batches; zero: none yet
		sent     map[sessEpoch]sentSteps // steps returned per session and epoch
		lastSent *batchAt                // the last batch returned this era
		waiters  map[*commitWaiter]struct{}
		// unchecked is the token of the connected trainer that the node
		// could not check against the job yet (no welcome); tokenErr
		// what OnJob found wrong with it: the session's next delivery
		// fails with it.
		unchecked *journal.Token
		tokenErr  error
	}
}

type commitWaiter struct {
	at batchAt
	ch chan delivery.CommitResult
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

func (c *clusterRank) NextDelivery(ctx context.Context) (delivery.Delivery, error) {
	b, err := c.rank().Next(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if terr := c.mu.tokenErr; terr != nil && err == nil {
		// The trainer's token is another job's (OnJob): it gets no batch.
		// b counts as sent, so the next trainer's Attach resets the rank
		// and it is delivered again.
		c.recordSentLocked(b)
		b.Release()
		c.mu.tokenErr = nil
		return delivery.Delivery{}, terr
	}
	if errors.Is(err, ErrRolledBack) {
		c.mu.era++
		c.mu.cur = cluster.Fence{}
		c.mu.lastSent = nil
		c.failWaitersLocked(nil)
		rb := feed.Rollback{Era: c.mu.era}
		if last := c.lastLocked(); last != nil {
			rb = *last
			rb.Era = c.mu.era
		}
		return delivery.Delivery{}, &feed.RollbackError{Rollback: rb}
	}
	if err != nil {
		return delivery.Delivery{}, err
	}
	c.recordSentLocked(b)
	return delivery.Delivery{Batch: b.Batch, Era: c.mu.era, EndOfStream: b.EndOfStream}, nil
}

// recordSentLocked records that b was returned to be sent.
func (c *clusterRank) recordSentLocked(b *Batch) {
	if b.Session != c.mu.cur {
		c.mu.cur = b.Session
		c.failWaitersLocked(&b.Session)
	}
	key := sessEpoch{b.Session, b.Epoch}
	if st, ok := c.mu.sent[key]; ok {
		c.mu.sent[key] = sentSteps{first: st.first, last: max(st.last, b.Step)}
	} else {
		c.mu.sent[key] = sentSteps{first: b.Step, last: b.Step}
	}
	c.mu.lastSent = &batchAt{key, b.Step}
}

// failWaitersLocked answers rolled_back to every commit waiting on a
// session other than keep (nil: all).
func (c *clusterRank) failWaitersLocked(keep *cluster.Fence) {
	for w := range c.mu.waiters {
		if keep == nil || w.at.session != *keep {
			w.ch <- delivery.CommitResult{Err: fmt.Errorf("%w: the rank's session ended before the commit of epoch %d step %d was acknowledged", feed.ErrRolledBack, w.at.epoch, w.at.step)}
			delete(c.mu.waiters, w)
		}
	}
}

// lastLocked is the rank's last acknowledged commit (Rank.Acks), as the
// trainer restores it; nil: none in this node process.
func (c *clusterRank) lastLocked() *feed.Rollback {
	t := c.mu.r.Acks()
	if t == nil || t.Last == nil {
		return nil
	}
	return &feed.Rollback{Epoch: t.Last.Epoch, Step: t.Last.Step, Token: []byte(t.Last.Token), Committed: true}
}

// lastAckLocked is the batch of the rank's last acknowledged commit.
func (c *clusterRank) lastAckLocked() (batchAt, bool) {
	t := c.mu.r.Acks()
	if t == nil || t.Last == nil {
		return batchAt{}, false
	}
	return batchAt{sessEpoch{t.Last.Session, t.Last.Epoch}, t.Last.Step}, true
}

// onAck answers the commits waiting on a's session and epoch that a
// covers.
func (c *clusterRank) onAck(session cluster.Fence, a cluster.Ack) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := sessEpoch{session, a.Epoch}
	for w := range c.mu.waiters {
		if w.at.sessEpoch == key && w.at.step <= a.Step {
			w.ch <- delivery.CommitResult{Token: []byte(a.Token)}
			delete(c.mu.waiters, w)
		}
	}
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

func (c *clusterRank) Attach(token []byte) (delivery.Attachment, error) {
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
		switch last := c.lastLocked(); {
		case last == nil:
			// This node process acknowledged nothing for the rank (it
			// restarted): the coordinator's state is the authority.
		case string(token) == string(last.Token):
		default:
			return delivery.Attachment{}, fmt.Errorf("%w: rank %d's last acknowledged commit is epoch %d step %d (token %s), and a running cluster cannot go back: to resume from this token, restart the job with the coordinator's --resume %s",
				feed.ErrStaleToken, c.index, last.Epoch, last.Step, last.Token, token)
		}
	}
	at := delivery.Attachment{}
	lastAck, acked := c.lastAckLocked()
	if ls := c.mu.lastSent; ls != nil && (!acked || *ls != lastAck) {
		// The last trainer got batches after its last acknowledged
		// commit: they are delivered again, from a new session.
		c.mu.r.Reset()
		c.mu.era++
		c.mu.cur = cluster.Fence{}
		c.mu.lastSent = nil
		c.failWaitersLocked(nil)
		at.Reset = true
	}
	at.Era = c.mu.era
	if l := c.lastLocked(); l != nil {
		at.Committed = l
		at.Resume = feed.After(l.Epoch, l.Step)
	}
	return at, nil
}

func (c *clusterRank) Commit(era uint64, epoch int, step int64) (<-chan delivery.CommitResult, error) {
	c.mu.Lock()
	if (era != 0 && era != c.mu.era) || c.mu.cur.IsZero() {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: the commit of epoch %d step %d names a batch of an era that ended (rollback); restore the last acknowledged commit", feed.ErrRolledBack, epoch, step)
	}
	key := sessEpoch{c.mu.cur, epoch}
	sent, ok := c.mu.sent[key]
	if !ok || step > sent.last {
		c.mu.Unlock()
		return nil, fmt.Errorf("feed: commit of epoch %d step %d, which was not delivered", epoch, step)
	}
	if step < sent.first {
		c.mu.Unlock()
		return nil, fmt.Errorf("feed: commit of epoch %d step %d goes back before the last acknowledged commit (step %d)", epoch, step, sent.first-1)
	}
	ch := make(chan delivery.CommitResult, 1)
	if rec, ok := c.mu.r.Acks().Acked(c.mu.cur, epoch); ok && step <= rec.Step {
		c.mu.Unlock()
		if step < rec.Step {
			return nil, fmt.Errorf("feed: commit of epoch %d step %d goes back before the last acknowledged commit (step %d)", epoch, step, rec.Step)
		}
		ch <- delivery.CommitResult{Token: []byte(rec.Token)}
		return ch, nil
	}
	// The actor answers through OnAck; a commit of an epoch the
	// coordinator completed at once (RankRuns.Commit).
	w := &commitWaiter{at: batchAt{key, step}, ch: ch}
	if c.mu.waiters == nil {
		c.mu.waiters = map[*commitWaiter]struct{}{}
	}
	c.mu.waiters[w] = struct{}{}
	r, sess := c.mu.r, c.mu.cur
	c.mu.Unlock()
	if err := r.CommitAt(sess, epoch, step); err != nil {
		c.mu.Lock()
		delete(c.mu.waiters, w)
		c.mu.Unlock()
		return nil, err
	}
	return ch, nil
}
