package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/delivery"
	"github.com/longshore/longshore/feed"
	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/internal/clock"
)

// ErrRunConfig: a RunConfig lacks what every run needs (an Assembly, a
// Source and a Sink of the kinds this package defines).
var ErrRunConfig = errors.New("node: a run needs an Assembly, a Source (*Standalone or *Cluster) and a Sink (*InProcess or *Feed)")

// RunConfig is one run of a node, in every mode: the assembled pipelines,
// where the ranks' work comes from (the Source) and where their batches
// go (the Sink). The four modes of the command (standalone or cluster ×
// an in-process sink or the feed) are the four pairs.
type RunConfig struct {
	// Assembly is the node's pipelines (Assemble). Run does not close it.
	Assembly *Assembly
	// Source is *Standalone or *Cluster.
	Source Source
	// Sink is *InProcess or *Feed.
	Sink Sink
	// Tune, if set, runs the node's tuner (actors.AutoTuner over the
	// ranks' pipelines, whichever the source opens and when) for the
	// whole run; nil: the setting stays the configured one.
	Tune *actors.AutoTuneConfig
	// Logger receives the run's lines; nil discards them.
	Logger *slog.Logger

	// OnStart, if set, is called once the ranks exist and before they
	// serve (start the metrics here); an error stops the run.
	OnStart func(*Running) error
	// OnServe, if set, is called once the ranks serve: at once for an
	// in-process sink, once the sockets are open for the feed.
	OnServe func(*Running)
	// OnFirstBatch, if set, is called each time a batch is handed on
	// (to the in-process sink, or, standalone, taken to send to a
	// trainer): the first call is the run's first batch. Must be cheap.
	OnFirstBatch func()
	// OnCommit, if set, is called for each commit the source made
	// durable: a standalone feed's token, the coordinator's ack.
	OnCommit func(rank string, epoch int, step int64)
}

// Source is where a run's ranks get their work: *Standalone (the epoch
// order over the catalog, split among the ranks) or *Cluster (the
// coordinator's leases).
type Source interface{ source() }

// Sink is where a run's batches go: *InProcess (a stand-in trainer per
// rank hands them to a BatchSink) or *Feed (trainers over Unix sockets).
type Sink interface{ sink() }

// Standalone is the source of a run without a coordinator: rank r of R
// takes positions r, r+R, ... of each epoch's order over Catalog.
type Standalone struct {
	Catalog dataset.Catalog
	Order   actors.OrderFunc
	// Committer makes and checks the feed's resume tokens
	// (delivery.LocalCommitter with the run's identity); nil: the
	// feed's default. The in-process sink commits nothing.
	Committer delivery.Committer
}

// Cluster is the source of a run in a coordinator's job: the node joins
// by gossip, and its ranks get sessions and leases from the coordinator.
type Cluster struct {
	// Config is the agent's (Node, Catalog, callbacks); Ranks, Pipeline
	// and Deps come from the assembly (Assembly.ClusterConfig), Rejoin
	// from Run.
	Config Config
	// OwnRequestCap is the node's own store request cap (StoreBudget);
	// Describe, if set, details the packed store's reading in the log.
	OwnRequestCap float64
	Describe      func() string
	// Listen and Advertise are the control plane's addresses
	// (wire.StartRemote), Remote its options (TLS).
	Listen, Advertise string
	Remote            []remote.ConfigOption
	// Gossip is the membership's config; Run sets its Meta (the node's
	// id, role, actor address, ranks and incarnation) and Join.
	Gossip gossip.Config
	// Join is the coordinator's (or any member's) gossip address,
	// host:port, comma-separated for several.
	Join string
	// JoinTimeout bounds joining the gossip; 0: a minute.
	JoinTimeout time.Duration
	// RejoinAfter: re-join Join when no coordinator was alive in gossip
	// this long (0: never). GiveUpAfter: stop the run with ErrGaveUp
	// when none was this long (0: wait forever).
	RejoinAfter, GiveUpAfter time.Duration
	// OnMembership, if set, is called once the node is in gossip; the
	// function it returns is called when the run ends (the command
	// reloads gossip keys on SIGHUP between the two).
	OnMembership func(*gossip.Membership) (stop func())
	// Clock ticks the watchers; nil: the system clock.
	Clock clock.Clock
}

// InProcess is the sink of a run without trainers: one stand-in trainer
// per rank hands each batch to Sink, "trains" for StepTime(rank), and
// (in a cluster) commits every CommitEvery steps and at the end of its
// epoch stream, after Sink.Flush, so a committed step's record survives
// a crash.
type InProcess struct {
	Sink BatchSink
	// CommitEvery is the stand-in trainer's commit interval in steps;
	// 0: 1.
	CommitEvery int64
	// StepTime, if set, is rank's simulated training time per batch.
	StepTime func(rank int) time.Duration
}

// BatchSink records what an in-process run delivers. Safe for
// concurrent use by the ranks.
type BatchSink interface {
	// Session says that rank's next batches belong to session (cluster
	// runs, each time it changes).
	Session(rank string, session cluster.Fence) error
	// Batch records one batch (valid only during the call).
	Batch(b *Batch) error
	// Flush makes what was recorded durable (before a commit is sent).
	Flush() error
}

// Feed is the sink of a run that serves trainers: each rank's batches go
// zero-copy over the rank's Unix socket (package delivery). Config's
// Ranks, Committer, EpochSteps and Allocator are Run's.
type Feed struct {
	Config delivery.Config
}

func (*Standalone) source() {}
func (*Cluster) source()    {}
func (*InProcess) sink()    {}
func (*Feed) sink()         {}

// FeedGrace is how long a run that served trainers waits, once every
// rank's stream has ended, for its trainers to commit their last steps
// and leave.
const FeedGrace = 30 * time.Second

// Running is a run as its hooks see it.
type Running struct {
	// Node is the cluster agent (cluster runs), else nil.
	Node *Node
	// Tuner is the node's tuner (RunConfig.Tune), else nil.
	Tuner *actors.AutoTuner
	// Served is the feed's server once it serves (a Feed sink).
	Served atomic.Pointer[delivery.Server]
	// Gossip is the node's membership once it joined (cluster runs),
	// else nil.
	Gossip *atomic.Pointer[gossip.Membership]

	ranks rankSet
	start time.Time
}

// RankCount is a rank's name and counters.
type RankCount struct {
	Name     string
	Counters actors.Counters
}

// Names are the ranks' names: "<i>" standalone, "<node>/<i>" in a
// cluster.
func (r *Running) Names() []string { return r.ranks.names() }

// Ranks returns each rank's counters now, over every pipeline it had.
// Safe for concurrent use.
func (r *Running) Ranks() []RankCount {
	names, cs := r.ranks.names(), r.ranks.counters()
	out := make([]RankCount, len(cs))
	for i, c := range cs {
		out[i] = RankCount{Name: names[i], Counters: c}
	}
	return out
}

// Result is what a run did.
type Result struct {
	// Ranks are the ranks' counters at the end; Counters their merge.
	Ranks    []RankCount
	Counters actors.Counters
	Failures actors.FailureReport
	// Seconds is the run's time: a standalone in-process run's from the
	// moment it served to its last batch; else the ranks' time up to
	// their last batch (the longest rank's), not the wait for the job's
	// end or the trainers after it.
	Seconds float64
	// TrainerWait is what the trainers reported (a Feed sink).
	TrainerWait []delivery.TrainerWait
	// Job is the coordinator's last job (cluster runs), or nil.
	Job *Job
}

// rankSet is what a source's ranks offer the run.
type rankSet interface {
	names() []string
	counters() []actors.Counters
	failures() actors.FailureReport
	// tallies are the ranks' pipelines as they come and go: the tuner's.
	tallies() []*actors.Tally
	// rank is rank i for an in-process sink.
	rank(i int) inRank
	// serve starts the feed over the ranks.
	serve(cfg delivery.Config) (*delivery.Server, error)
	// done names, in the log, what was served once the feed has ended.
	done() string
	shutdown(ctx context.Context) error
}

// inRank is a rank as an in-process trainer sees it.
type inRank interface {
	Next(ctx context.Context) (*Batch, error)
	Commit(epoch int, step int64) error
}

// Run runs the node until its work is done (standalone: every epoch;
// cluster: the coordinator's job), the trainers have left (a Feed sink),
// a rank fails (RunRanks: one failing rank stops the node), or ctx
// ends. Whatever it started is shut down before it returns, within
// shutdownGrace; the Assembly stays open.
func Run(ctx context.Context, c RunConfig) (Result, error) {
	if c.Assembly == nil || c.Source == nil || c.Sink == nil {
		return Result{}, ErrRunConfig
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	_, feedSink := c.Sink.(*Feed)
	run := &Running{}
	var cl *clusterRun
	switch s := c.Source.(type) {
	case *Standalone:
		set, err := standaloneRanks(c, s, feedSink)
		if err != nil {
			return Result{}, err
		}
		run.ranks = set
	case *Cluster:
		var err error
		if cl, err = startCluster(ctx, c, s, feedSink); err != nil {
			return Result{}, err
		}
		run.Node, run.ranks, run.Gossip = cl.nd, cl, &cl.mem
		ctx = cl.ctx
	default:
		return Result{}, ErrRunConfig
	}
	if c.Tune != nil {
		tc := *c.Tune
		if tc.Logger == nil {
			tc.Logger = c.Logger
		}
		// Over the ranks' tallies: a feed's pipelines open when a
		// trainer connects, a cluster's with each session.
		run.Tuner = actors.NewTallyTuner(run.ranks.tallies(), tc)
	}
	res, err := serve(ctx, c, run, cl)
	if run.Tuner != nil {
		st := run.Tuner.Stats()
		c.Logger.Info("autotune end", "setting", st.Setting.String(), "windows", st.Windows, "changes", st.Changes, "reverts", st.Reverts)
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if serr := run.ranks.shutdown(sctx); serr != nil && err == nil {
		err = fmt.Errorf("shutdown: %w", serr)
	}
	if cl != nil {
		cl.leave()
		res.Job = cl.job.Load()
	}
	return res, err
}

// shutdownGrace is how long a stopped run gives its pipelines to drain.
const shutdownGrace = 10 * time.Second

// serve runs the sink over the ranks, with the tuner and the hooks.
func serve(ctx context.Context, c RunConfig, run *Running, cl *clusterRun) (Result, error) {
	if c.OnStart != nil {
		if err := c.OnStart(run); err != nil {
			return Result{}, err
		}
	}
	if cl != nil {
		if err := cl.join(); err != nil {
			return Result{}, err
		}
	}
	stopTune := func() {}
	if run.Tuner != nil {
		st := run.Tuner.Stats()
		c.Logger.Info("autotune on", "start", st.Setting.String(), "cpu_budget_cores", st.Budget.Cores,
			"memory_budget", st.Budget.Memory, "window", c.Tune.Window)
		tctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); run.Tuner.Run(tctx) }()
		stopTune = func() { cancel(); <-done }
	}
	var runErr error
	switch s := c.Sink.(type) {
	case *InProcess:
		run.start = time.Now()
		if c.OnServe != nil {
			c.OnServe(run)
		}
		runErr = runInProcess(ctx, c, s, run.ranks)
	case *Feed:
		runErr = runFeed(ctx, c, s, run, cl != nil)
	}
	stopTune()
	res := Result{Ranks: run.Ranks(), Failures: run.ranks.failures()}
	cs := make([]actors.Counters, len(res.Ranks))
	for i, r := range res.Ranks {
		cs[i] = r.Counters
	}
	res.Counters = actors.MergeCounters(cs...)
	res.Seconds = activeSeconds(res.Counters)
	if _, ok := c.Source.(*Standalone); ok && !run.start.IsZero() {
		res.Seconds = time.Since(run.start).Seconds()
	}
	if s := run.Served.Load(); s != nil {
		res.TrainerWait = s.TrainerWait()
	}
	return res, runErr
}

// activeSeconds is how long the ranks took to deliver what they did:
// their pipelines' time up to the last batch (the longest rank's).
func activeSeconds(c actors.Counters) float64 {
	if d := c.Delivered(); d.LastAt > 0 {
		return d.LastAt.Seconds()
	}
	return c.Elapsed().Seconds()
}

// runInProcess runs one stand-in trainer per rank; a rank that stops on
// an error stops the node (RunRanks).
func runInProcess(ctx context.Context, c RunConfig, s *InProcess, set rankSet) error {
	every := max(s.CommitEvery, 1)
	names := set.names()
	_, standalone := c.Source.(*Standalone)
	err := RunRanks(ctx, names, func(rctx context.Context, i int) error {
		t := standIn{rank: set.rank(i), sink: s.Sink, every: every, first: c.OnFirstBatch, commits: !standalone}
		if s.StepTime != nil {
			t.step = s.StepTime(i)
		}
		return t.run(rctx)
	}, c.Logger)
	if err != nil {
		return err
	}
	if !standalone {
		c.Logger.Info("job done; leaving")
	}
	return s.Sink.Flush()
}

// standIn stands in for a rank's trainer: it records each batch, "trains"
// for step, and (commits) commits every `every` steps and at the end of
// its epoch stream, after flushing the sink.
type standIn struct {
	rank    inRank
	sink    BatchSink
	every   int64
	step    time.Duration
	first   func()
	commits bool
}

func (t standIn) run(ctx context.Context) error {
	var session cluster.Fence
	for {
		b, err := t.rank.Next(ctx)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.Is(err, ErrRolledBack):
			continue // the sink's next session line starts over
		case err != nil:
			return err
		}
		if t.first != nil {
			t.first()
		}
		if b.Session != session {
			session = b.Session
			if err := t.sink.Session(b.RankName, session); err != nil {
				b.Release()
				return err
			}
		}
		if err := t.sink.Batch(b); err != nil {
			b.Release()
			return err
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
		if t.commits && ((step+1)%t.every == 0 || end) {
			if err := t.sink.Flush(); err != nil {
				return err
			}
			_ = t.rank.Commit(epoch, step) // ErrRolledBack: Next says so next
		}
	}
}

// runFeed serves the ranks to trainers until every epoch (standalone) or
// the job (cluster) is done and the trainers have left, or ctx ends.
func runFeed(ctx context.Context, c RunConfig, f *Feed, run *Running, clustered bool) error {
	s, err := run.ranks.serve(f.Config)
	if err != nil {
		return err
	}
	run.Served.Store(s)
	if c.OnServe != nil {
		c.OnServe(run)
	}
	waitErr := WaitTrainers(ctx, s, c.Logger, run.ranks.done())
	if !clustered {
		// Stopped by a signal, a standalone feed has served what its
		// trainers asked for: not an error.
		waitErr = nil
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil && waitErr == nil {
		waitErr = err
	}
	return waitErr
}

// WaitTrainers waits until s has served everything and its trainers
// have left (or FeedGrace after the end, if a trainer stays connected),
// or ctx ends: then it returns ctx's cause. done says, in the log, what
// was served ("every epoch delivered", "job done").
func WaitTrainers(ctx context.Context, s *delivery.Server, logger *slog.Logger, done string) error {
	select {
	case <-s.Finished():
	case <-s.Ended():
		select {
		case <-s.Finished():
		case <-time.After(FeedGrace):
			logger.Warn(done+"; trainers still connected after the grace period, leaving", "grace", FeedGrace)
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

// --- the standalone source ---

// standaloneRanks opens a standalone run's ranks: for an in-process sink
// every rank's pipeline at once, with one failure budget for the node
// (actors.Node); for the feed, a rank's pipeline each time a trainer
// starts or resumes (delivery.StandaloneCatalog).
func standaloneRanks(c RunConfig, s *Standalone, feedSink bool) (rankSet, error) {
	if s.Catalog == nil {
		return nil, errors.New("node: a standalone run needs a Catalog")
	}
	ranks := c.Assembly.ranks
	set := &standaloneSet{c: c, s: s, n: ranks}
	for r := range ranks {
		set.tally = append(set.tally, actors.NewTally(r))
	}
	if feedSink {
		return set, nil
	}
	nd, err := c.Assembly.StandaloneNode(s.Catalog, s.Order)
	if err != nil {
		return nil, err
	}
	set.node = nd
	for r, t := range set.tally {
		t.Use(nd.Rank(r))
	}
	return set, nil
}

// standaloneSet is a standalone run's ranks.
type standaloneSet struct {
	c     RunConfig
	s     *Standalone
	n     int
	tally []*actors.Tally
	node  *actors.Node // an in-process sink's; nil with the feed
}

func (s *standaloneSet) names() []string {
	out := make([]string, s.n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

func (s *standaloneSet) counters() []actors.Counters {
	out := make([]actors.Counters, s.n)
	for i, t := range s.tally {
		out[i] = t.Counters()
	}
	return out
}

func (s *standaloneSet) failures() actors.FailureReport {
	if s.node != nil {
		return s.node.Failures() // one book for the node
	}
	var out actors.FailureReport
	for _, t := range s.tally {
		out = actors.MergeReports(out, t.Failures())
	}
	return out
}

func (s *standaloneSet) tallies() []*actors.Tally { return s.tally }

func (s *standaloneSet) rank(i int) inRank {
	return standaloneRank{p: s.node.Rank(i), name: strconv.Itoa(i)}
}

func (s *standaloneSet) done() string { return "every epoch delivered" }

func (s *standaloneSet) serve(cfg delivery.Config) (*delivery.Server, error) {
	base, epochSteps := s.c.Assembly.StandaloneFeed(s.s.Catalog, s.s.Order)
	first := s.c.OnFirstBatch
	open := func(rank int, from feed.Cursor, alloc gpu.Allocator) (delivery.BatchSource, error) {
		st, err := base(rank, from, alloc)
		if err != nil {
			return nil, err
		}
		p, _ := st.(*actors.Pipeline)
		s.tally[rank].Use(p)
		return firstBatchStream{BatchSource: st, first: first}, nil
	}
	cfg.Ranks = s.n
	cfg.EpochSteps = epochSteps
	cfg.Committer = s.s.Committer
	if cfg.Committer != nil && s.c.OnCommit != nil {
		cfg.Committer = notifyingCommitter{c: cfg.Committer, on: s.c.OnCommit}
	}
	return delivery.New(cfg, open)
}

func (s *standaloneSet) shutdown(ctx context.Context) error {
	if s.node == nil {
		return nil // the feed's server shut its streams down
	}
	return s.node.Shutdown(ctx)
}

// standaloneRank is a standalone pipeline as an in-process trainer sees
// it: one session that never ends, nothing to commit.
type standaloneRank struct {
	p    *actors.Pipeline
	name string
}

func (r standaloneRank) Next(ctx context.Context) (*Batch, error) {
	b, err := r.p.Next(ctx)
	if err != nil {
		return nil, err
	}
	return &Batch{Batch: b, RankName: r.name}, nil
}

func (standaloneRank) Commit(int, int64) error { return nil }

// firstBatchStream is a rank's stream that calls first when a session
// takes a batch from it to send.
type firstBatchStream struct {
	delivery.BatchSource
	first func()
}

func (s firstBatchStream) Next(ctx context.Context) (*actors.Batch, error) {
	b, err := s.BatchSource.Next(ctx)
	if err == nil && s.first != nil {
		s.first()
	}
	return b, err
}

// notifyingCommitter is a Committer that tells on of each commit it made
// a token for.
type notifyingCommitter struct {
	c  delivery.Committer
	on func(rank string, epoch int, step int64)
}

func (n notifyingCommitter) Commit(ctx context.Context, rank int, epoch int, step int64) ([]byte, error) {
	tok, err := n.c.Commit(ctx, rank, epoch, step)
	if err == nil {
		n.on(strconv.Itoa(rank), epoch, step)
	}
	return tok, err
}

func (n notifyingCommitter) Resume(ctx context.Context, rank int, token []byte) (int, int64, error) {
	return n.c.Resume(ctx, rank, token)
}

// --- the cluster source ---

// clusterRun is a cluster run's ranks and what it started to get them:
// the control plane, the agent, the gossip membership and its watchers.
type clusterRun struct {
	c   RunConfig
	s   *Cluster
	nd  *Node
	cf  *ClusterFeed // a Feed sink's
	sys *actor.ActorSystem
	rem *remote.Remote
	job atomic.Pointer[Job]
	mem atomic.Pointer[gossip.Membership]

	actorAddr string
	// ctx is the run's: it ends with ErrGaveUp when the coordinator was
	// gone too long.
	ctx      context.Context
	giveUp   context.CancelCauseFunc
	stopWait context.CancelFunc
	wg       sync.WaitGroup
	stopMem  func()
}

// startCluster starts the control plane and the agent; join, later,
// joins the gossip.
func startCluster(ctx context.Context, c RunConfig, s *Cluster, feedSink bool) (_ *clusterRun, err error) {
	cl := &clusterRun{c: c, s: s}
	cl.ctx, cl.giveUp = context.WithCancelCause(ctx)
	cl.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer func() {
		if err != nil {
			cl.leave()
		}
	}()
	if cl.rem, cl.actorAddr, err = wire.StartRemote(cl.sys, s.Listen, s.Advertise, s.Remote...); err != nil {
		return nil, err
	}
	acfg := s.Config
	acfg.Rejoin = cl.rejoin
	onAck, onCommit := acfg.OnAck, c.OnCommit
	acfg.OnAck = func(rank string, session cluster.Fence, a cluster.Ack) {
		if !a.Completed && onCommit != nil {
			onCommit(rank, a.Epoch, a.Step)
		}
		if onAck != nil {
			onAck(rank, session, a)
		}
	}
	onJob := acfg.OnJob
	acfg.OnJob = func(j Job) {
		cl.job.Store(&j)
		if onJob != nil {
			onJob(j)
		}
	}
	if feedSink {
		cl.cf = NewClusterFeed(c.Assembly.ranks)
		acfg.RankDeps = cl.cf.RankDeps(c.Assembly.Deps)
		ack := acfg.OnAck
		acfg.OnAck = func(rank string, session cluster.Fence, a cluster.Ack) {
			ack(rank, session, a)
			cl.cf.OnAck(rank, session, a)
		}
		job := acfg.OnJob
		acfg.OnJob = func(j Job) {
			cl.cf.OnJob(j) // checks the tokens trainers presented before the welcome
			job(j)
		}
	}
	// The job's order and store budget reach the store before the
	// callbacks above.
	acfg = c.Assembly.ClusterConfig(acfg, s.OwnRequestCap, s.Describe)
	if cl.nd, err = Start(cl.sys, acfg); err != nil {
		return nil, err
	}
	return cl, nil
}

// rejoin re-advertises the node with a new incarnation after an eviction.
func (cl *clusterRun) rejoin(ctx context.Context, inc uint64) error {
	m := cl.mem.Load()
	if m == nil {
		return errors.New("not in gossip yet")
	}
	if err := m.UpdateMeta(ctx, func(meta *gossip.Meta) { meta.Incarnation = inc }); err != nil {
		return err
	}
	// An eviction usually means the others declared this node dead (a
	// partition, a stall): they no longer gossip to it, so its new life
	// reaches them only at memberlist's next push/pull (up to 15-30 s).
	// Join Join to push it now.
	if err := m.Join(ctx, JoinAddrs(cl.s.Join)); err != nil {
		cl.c.Logger.Warn("re-join after eviction failed; gossip will carry the new incarnation", "join", cl.s.Join, "err", err)
	}
	return nil
}

// join joins the gossip and starts the watchers: the coordinator's
// address from gossip events, re-joining, giving up.
func (cl *clusterRun) join() error {
	s, nd, logger := cl.s, cl.nd, cl.c.Logger
	gc := s.Gossip
	gc.Meta = gossip.Meta{ID: nd.Name(), Role: gossip.RoleNode, ActorAddr: cl.actorAddr, Ranks: nd.RankNames(), Incarnation: nd.Incarnation()}
	gc.Join = JoinAddrs(s.Join)
	timeout := s.JoinTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	jctx, cancel := context.WithTimeout(cl.ctx, timeout)
	m, err := gossip.Start(jctx, gc)
	cancel()
	if err != nil {
		return err
	}
	cl.mem.Store(m)
	if s.OnMembership != nil {
		cl.stopMem = s.OnMembership(m)
	}
	logger.Info("joined", "node", nd.Name(), "gossip", m.Addr(), "actor", cl.actorAddr, "ranks", nd.RankNames())
	clk := clock.Or(s.Clock)
	wctx, stop := context.WithCancel(cl.ctx)
	cl.stopWait = stop
	cl.wg.Add(1)
	go func() {
		defer cl.wg.Done()
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
	if s.RejoinAfter > 0 {
		cl.wg.Add(1)
		go func() {
			defer cl.wg.Done()
			w := NewCoordWatch(clk.Now(), s.RejoinAfter, max(s.RejoinAfter, time.Second))
			WatchCoordinator(wctx, clk, min(s.RejoinAfter/2, 500*time.Millisecond), m, JoinAddrs(s.Join), w, logger)
		}()
	}
	if s.GiveUpAfter > 0 {
		cl.wg.Add(1)
		go func() {
			defer cl.wg.Done()
			WatchGiveUp(wctx, clk, m, s.GiveUpAfter, cl.giveUp)
		}()
	}
	return nil
}

// leave leaves the gossip and stops what startCluster and join started
// (the agent itself is shut down by shutdown, before).
func (cl *clusterRun) leave() {
	if m := cl.mem.Load(); m != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = m.Shutdown(sctx)
		cancel()
	}
	if cl.stopWait != nil {
		cl.stopWait()
	}
	cl.wg.Wait()
	if cl.stopMem != nil {
		cl.stopMem()
	}
	cl.giveUp(nil)
	if cl.rem != nil {
		cl.rem.Shutdown(false)
	}
	cl.sys.Shutdown()
}

func (cl *clusterRun) names() []string             { return cl.nd.RankNames() }
func (cl *clusterRun) counters() []actors.Counters { return cl.nd.RankCounters() }
func (cl *clusterRun) failures() actors.FailureReport {
	return cl.nd.Failures()
}

func (cl *clusterRun) tallies() []*actors.Tally {
	out := make([]*actors.Tally, len(cl.nd.ranks))
	for i, r := range cl.nd.ranks {
		out[i] = r.tally
	}
	return out
}

func (cl *clusterRun) rank(i int) inRank { return cl.nd.Rank(i) }
func (cl *clusterRun) done() string      { return "job done" }

func (cl *clusterRun) serve(cfg delivery.Config) (*delivery.Server, error) {
	cfg.Ranks = len(cl.nd.ranks)
	cfg.Allocator = cl.cf.Allocator
	return delivery.NewSessions(cfg, cl.cf.Open(cl.nd, cl.c.Assembly.clusterPipeline()))
}

func (cl *clusterRun) shutdown(ctx context.Context) error {
	if err := cl.nd.Shutdown(ctx); err != nil {
		cl.c.Logger.Warn("node shutdown", "err", err)
	}
	return nil
}
