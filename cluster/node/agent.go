// Package node is the node side of the cluster: one protoactor actor per
// node process that holds a cluster.RankLeases per rank, feeds each rank's
// pipeline (it implements actors.Source) and gives trainers a Go API:
// Rank.Next for batches and Rank.Commit for "my model includes every batch
// through this step".
//
// The actor does what the simulated node in cluster/sim_test.go does: it
// takes positions from RankLeases only when the pipeline asks (so a revoke
// can still shorten what is not yet taken), maps them to samples with the
// epoch order, turns a trainer's step into a stream offset for
// RankLeases.Commit, asks for two shards ahead about every second, and
// sends what RankLeases queued. On an Eviction, a Fenced reply, or a
// Welcome from a new coordinator life it drops the rank's leases and
// pipeline; the trainer's next Next returns ErrRolledBack, and it must
// restore its last acknowledged checkpoint. After an eviction it rejoins
// with a larger incarnation (Config.Rejoin). Mail and events ride a
// cluster.Link to the coordinator life the node follows; a new life
// (cluster.NewerCoordinator) ends the old life's sessions at once.
//
// The pipeline gets the job's coordinates: Work.Epoch is the job's epoch
// (so a sample's crop and flip are seeded by (seed, epoch, index), on
// whichever node and in whichever session it is served), positions are
// the session's stream offsets, and each run of one epoch's stream handed
// to the pipeline (a segment) says the step its first batch has. A
// rank's stream can grow after it ended (a node died and the survivors
// take over its uncommitted work), and a rank may have to go back to an
// older epoch for it: that is a new segment, a new run for the pipeline,
// numbered on from the epoch's last step. Steps are the trainer's: a
// session numbers its batches of an epoch on from the last step of it
// acknowledged in this process life (0 if none), so after a rollback or a
// reset the trainer continues right after its checkpoint, and commits,
// acknowledgements and journal tokens all name those steps. A segment
// ends mid-batch only when membership changed.
//
// Run (run.go) is the node's one run in every mode: the assembly
// (Assemble), a Source (Standalone, or Cluster: this agent, its control
// plane and gossip) and a Sink (InProcess, or Feed: ClusterFeed in a
// cluster). The command fills its RunConfig from flags.
//
// Concurrency: Rank.Next and Rank.Commit are for the rank's trainer
// goroutine (one per rank); everything else is safe for concurrent use.
// The actor owns all lease state; Next only reads a per-rank table of
// segments under a mutex.
package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/internal/clock"
)

var (
	// ErrRolledBack: the rank's session ended (its node was evicted or the
	// coordinator restarted). Batches delivered after the rank's last
	// acknowledged commit will be delivered again, to it or another rank:
	// restore the model from that commit and call Next again.
	ErrRolledBack = errors.New("agent: session over; roll back to the last acknowledged commit")
	// ErrJobMismatch: the coordinator's job names a dataset other than the
	// node's (a different manifest). The node cannot serve it.
	ErrJobMismatch = errors.New("agent: the coordinator's dataset differs from this node's")
)

// Config configures a node agent. Node, Ranks, Dataset and Deps are
// required.
type Config struct {
	// Node is the node's id, unique in the cluster; rank i is "<Node>/<i>".
	Node string
	// Ranks is how many trainer ranks the node serves, >= 1.
	Ranks int
	// Incarnation is this process life's number; 0: a random one below
	// 2^31. A life below one the coordinator knows is told that one and
	// rejoins above it, so a restarted node is welcomed whatever its
	// clock says.
	Incarnation uint64
	// Dataset is the node's view of the manifest; Digest identifies it
	// (dataset.ManifestDigest) and must match the coordinator's.
	Dataset *dataset.Dataset
	Digest  string
	// Catalog, if set, serves the samples instead of Dataset (which may
	// then be nil): a dataset.IndexedManifest reads only the pieces of
	// the manifest the node's leases touch, so the node holds O(work
	// leased), not O(dataset). Its Digest is the default Digest. The
	// actor looks samples up when it hands a lease's positions to a
	// pipeline, and prefetches each lease's samples when it is granted,
	// so that lookup rarely waits for a read.
	Catalog dataset.Catalog
	// Pipeline configures each rank's pipeline. BatchSize, Seed and
	// Epochs come from the coordinator's job; DropLast is forced off (a
	// dropped batch could never be committed and the epoch would never
	// complete; the coordinator's DropRemainder drops instead). A zero
	// ReadAhead means max(the job's batch size, FetchConcurrency, or 16
	// with FetchAuto), not
	// the standalone Slots*BatchSize: what a rank has taken cannot be
	// given to an idle rank when it falls behind.
	Pipeline actors.Config
	// Deps are the pipelines' collaborators (Store, NewDecoder, ...).
	Deps actors.Deps
	// RankDeps, if set, gives rank i's pipelines their collaborators
	// instead of Deps (Deps is still validated): the feed uses it so each
	// rank's slots come from that rank's shared-memory allocator. Called
	// from the actor whenever a session of the rank starts; must not block.
	RankDeps func(rank int) actors.Deps
	// Rejoin is called (off the actor) after an eviction with the new
	// incarnation: it must re-advertise the node with it (gossip.UpdateMeta).
	Rejoin func(ctx context.Context, incarnation uint64) error
	// OnAck is called from the actor for every acknowledged commit of a
	// rank's current session; for a commit of its current or previous
	// session that a coordinator's Welcome reports durable although its
	// Ack never arrived (before the session's rollback shows in Next);
	// and for a commit of an epoch the coordinator completed (every real
	// sample committed), which it acknowledges no more: what the rank
	// still had of it was padding, and the commit carries the newest
	// generation's token, which holds the epoch complete. Rank.Acks shows
	// the ack before OnAck is called. It must not block for long.
	OnAck func(rank string, session cluster.Fence, a cluster.Ack)
	// OnStoreBudget, if set, is called from the actor with the node's
	// share of the job-wide store request budget, in requests per second
	// (0: none), each time the coordinator mails it (as nodes join and
	// leave, and now and then again). It must not block for long.
	OnStoreBudget func(rps float64)
	// OnJob, if set, is called from the actor with the job of every
	// coordinator Welcome the node accepts, before the sessions it brings
	// start: parts of the node that size themselves by the job learn it
	// here (the packed-sample store chunks by the order's Block). It must
	// not block.
	OnJob func(Job)
	// Report, if set, is called from the actor once every RequestEvery
	// for the node's report to the coordinator's status page, sent with
	// the node's events (wire.NodeReport.Bound applies). It must not
	// block.
	Report func() *wire.NodeReport
	// RequestEvery is how often each rank re-asks for work (a lost
	// message costs at most this). 0: 1 s.
	RequestEvery time.Duration
	// LinkEvery is the tick of the node's link to the coordinator
	// (cluster.Link): events the coordinator has not acknowledged for two
	// of them are sent again, and an acknowledgement no message carried
	// goes out alone. 0: 200 ms.
	LinkEvery time.Duration
	// LinkMaxPending bounds the events kept for the coordinator's
	// acknowledgement (cluster.Link.MaxPending; 0: its default): over it
	// the node ends its life and rejoins as a new one.
	LinkMaxPending int
	// Lookahead is how many shards ahead of what it took a rank asks
	// for. 0: 2.
	Lookahead int
	// Clock makes the request ticker; nil: the system clock.
	Clock clock.Clock
	// Logger receives the agent's logs; nil discards them.
	Logger *slog.Logger
}

// Job is what the coordinator's job tells a node beyond its ranks'
// sessions.
type Job struct {
	Samples   int64
	Seed      uint64
	Epochs    int
	BatchSize int
	// Block is the locality block of every epoch's order (cluster.Order).
	Block int
	// Window is how many blocks a window of the order interleaves: 1
	// with Block 1, or from a coordinator before windows.
	Window int
}

// Node is a running node agent.
type Node struct {
	cfg    Config
	sys    *actor.ActorSystem
	pid    *actor.PID
	ranks  []*Rank
	log    *slog.Logger
	stopCh chan struct{}
	// ctx ends when the node shuts down: the actor's catalog lookups
	// take it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // ticker and rejoin goroutines, pipeline shutdowns
	once   sync.Once
}

// Start spawns the node actor as wire.NodeActor on sys (which must have its
// remote started, so the coordinator can reach it).
func Start(sys *actor.ActorSystem, cfg Config) (*Node, error) {
	var errs []error
	if cfg.Node == "" {
		errs = append(errs, errors.New("agent: Node is required"))
	}
	if cfg.Ranks < 1 {
		errs = append(errs, fmt.Errorf("agent: Ranks = %d, want >= 1", cfg.Ranks))
	}
	if cfg.Dataset == nil && cfg.Catalog == nil {
		errs = append(errs, errors.New("agent: Dataset or Catalog is required"))
	}
	if cfg.Deps.Store == nil || cfg.Deps.NewDecoder == nil || cfg.Deps.SampleSeed == nil {
		errs = append(errs, errors.New("agent: Deps.Store, Deps.NewDecoder and Deps.SampleSeed are required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Incarnation == 0 {
		// Random, so that a restarted process differs from the life
		// before it; a coordinator that knows a later life answers
		// with it and this one joins above it (nodeActor.mail), so
		// lives advance whatever the clock does.
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("agent: incarnation: %w", err)
		}
		cfg.Incarnation = 1 + uint64(binary.LittleEndian.Uint32(b[:])>>1)
	}
	if cfg.Catalog == nil {
		cfg.Catalog = dataset.DatasetCatalog(cfg.Dataset)
	}
	if cfg.Digest == "" {
		cfg.Digest = cfg.Catalog.Digest()
	}
	if cfg.RequestEvery <= 0 {
		cfg.RequestEvery = time.Second
	}
	if cfg.Lookahead <= 0 {
		cfg.Lookahead = 2
	}
	if cfg.LinkEvery <= 0 {
		cfg.LinkEvery = 200 * time.Millisecond
	}
	cfg.Clock = clock.Or(cfg.Clock)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := &Node{cfg: cfg, sys: sys, log: log, stopCh: make(chan struct{})}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	for i := range cfg.Ranks {
		r := &Rank{name: fmt.Sprintf("%s/%d", cfg.Node, i), index: i, node: n, tally: actors.NewTally(i), deliv: cluster.NewRankDelivery()}
		r.mu.changed = make(chan struct{})
		n.ranks = append(n.ranks, r)
	}
	a := &nodeActor{n: n, inc: cfg.Incarnation, byName: map[string]*rankState{}}
	for _, r := range n.ranks {
		rs := &rankState{r: r, runs: cluster.NewRankRuns(r.name)}
		rs.runs.CompletedToken = completedToken
		a.ranks = append(a.ranks, rs)
		a.byName[r.name] = rs
	}
	pid, err := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return a }, actor.WithMailbox(wire.ReadyMailbox())), wire.NodeActor)
	if err != nil {
		return nil, fmt.Errorf("agent: spawn %s: %w", wire.NodeActor, err)
	}
	n.pid = pid
	ticker, tick := cfg.Clock.NewTicker(cfg.RequestEvery)
	lticker, ltick := cfg.Clock.NewTicker(cfg.LinkEvery)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer ticker.Stop()
		defer lticker.Stop()
		for {
			select {
			case <-tick:
				sys.Root.Send(pid, tickMsg{})
			case <-ltick:
				sys.Root.Send(pid, linkTickMsg{})
			case <-n.stopCh:
				return
			}
		}
	}()
	return n, nil
}

// Incarnation is the node's first incarnation (what to advertise at start).
func (n *Node) Incarnation() uint64 { return n.cfg.Incarnation }

// RankNames lists the ranks' names, "<node>/<i>".
func (n *Node) RankNames() []string {
	out := make([]string, len(n.ranks))
	for i, r := range n.ranks {
		out[i] = r.name
	}
	return out
}

// Name is the node's id.
func (n *Node) Name() string { return n.cfg.Node }

// Catalog is the catalog the node serves samples from (Config.Catalog,
// or Config.Dataset's): a batch's Indices are its indices, and its
// samples' fields (dataset.CatalogFields) ride with them to trainers.
func (n *Node) Catalog() dataset.Catalog { return n.cfg.Catalog }

// PID is the node actor.
func (n *Node) PID() *actor.PID { return n.pid }

// SetCoordinatorPID is SetCoordinator for a coordinator in the same
// process (tests).
func (n *Node) SetCoordinatorPID(pid *actor.PID) { n.sys.Root.Send(n.pid, coordMsg{pid: pid}) }

// Rank returns rank i's trainer handle.
func (n *Node) Rank(i int) *Rank { return n.ranks[i] }

// SetCoordinator tells the node where the coordinator's remote endpoint
// is (from gossip: the coordinator member's ActorAddr).
func (n *Node) SetCoordinator(addr string) { n.sys.Root.Send(n.pid, coordMsg{addr: addr}) }

// Shutdown stops the actor and every pipeline. It returns ctx.Err() if
// that did not finish in time.
func (n *Node) Shutdown(ctx context.Context) error {
	n.once.Do(func() {
		close(n.stopCh)
		n.cancel() // a catalog lookup in the actor returns
		_ = n.sys.Root.StopFuture(n.pid).Wait()
	})
	done := make(chan struct{})
	go func() { n.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closePipeline shuts p down off the actor.
func (n *Node) closePipeline(p *actors.Pipeline) {
	if p == nil {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	}()
}

// --- the trainer's side ---

// Rank is one rank's trainer handle.
type Rank struct {
	name  string
	index int
	node  *Node
	tally *actors.Tally // its pipelines' counters, across sessions

	mu struct {
		sync.Mutex
		session  cluster.Fence
		pipe     *actors.Pipeline
		batch    int64
		finished bool          // the job is done and this rank has no stream
		err      error         // fatal: the node cannot serve the job
		changed  chan struct{} // closed and replaced on every change
		acks     *cluster.TrainerAcks
	}

	// The trainer goroutine's own state: the delivery decisions
	// (cluster.RankDelivery) and the batch a rollback held back.
	deliv *cluster.RankDelivery
	held  *Batch
}

// Batch is a delivered batch and the session it belongs to. Its
// EndOfStream says this is the last batch of the rank's stream for Epoch
// as the coordinator plans it now: commit here. More batches of the epoch
// may still follow if membership changes.
type Batch struct {
	*actors.Batch
	// RankName is "<node>/<i>".
	RankName string
	// Session is the rank session the batch belongs to; a commit counts
	// only within it.
	Session cluster.Fence
}

// Name returns "<node>/<i>".
func (r *Rank) Name() string { return r.name }

// Acks is what the trainer may be told of the rank's acknowledged
// commits (cluster.TrainerAcks), as the actor last published it; nil
// before the first. The actor's RankRuns is its one owner; this is a
// copy.
func (r *Rank) Acks() *cluster.TrainerAcks {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.acks
}

func (r *Rank) setAcks(t *cluster.TrainerAcks) {
	r.mu.Lock()
	r.mu.acks = t
	r.mu.Unlock()
}

func (r *Rank) changedLocked() {
	close(r.mu.changed)
	r.mu.changed = make(chan struct{})
}

// Next returns the rank's next batch. It blocks until one is ready, the
// job is over for this rank (io.EOF), the session ended (ErrRolledBack,
// once per session change; then call Next again), or ctx is done. What
// to deliver is cluster.RankDelivery's decision.
func (r *Rank) Next(ctx context.Context) (*Batch, error) {
	for {
		b := r.held
		r.held = nil
		if b == nil {
			var err error
			if b, err = r.pull(ctx); err != nil {
				return nil, err
			}
		}
		switch r.deliv.Arrive(b.at(), r.Acks()).Verdict {
		case cluster.Drop:
			b.Release()
			continue
		case cluster.Hold:
			r.held = b
			return nil, ErrRolledBack
		}
		return b, nil
	}
}

// at is the batch's place, as cluster.RankDelivery knows it.
func (b *Batch) at() cluster.BatchAt {
	return cluster.BatchAt{Session: b.Session, Epoch: b.Epoch, Step: b.Step}
}

// pull returns the next batch of the rank's live pipeline and session,
// whatever the trainer was given before (Next and the feed decide): it
// blocks until one is ready, the job is over for this rank (io.EOF), the
// node cannot serve the job, or ctx is done. A batch of a pipeline or
// session replaced meanwhile is void: it is released, never returned.
func (r *Rank) pull(ctx context.Context) (*Batch, error) {
	for {
		r.mu.Lock()
		p, sess, finished, ferr, ch := r.mu.pipe, r.mu.session, r.mu.finished, r.mu.err, r.mu.changed
		r.mu.Unlock()
		if ferr != nil {
			return nil, ferr
		}
		if p == nil {
			if finished {
				return nil, io.EOF
			}
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		b, err := p.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			r.mu.Lock()
			moved := r.mu.session != sess || r.mu.pipe != p
			r.mu.Unlock()
			if moved {
				continue
			}
			return nil, err
		}
		if !r.current(p, sess) {
			b.Release()
			continue
		}
		return &Batch{Batch: b, RankName: r.name, Session: sess}, nil
	}
}

// current reports whether p and sess are still the rank's pipeline and
// session: a batch of a replaced one is void.
func (r *Rank) current(p *actors.Pipeline, sess cluster.Fence) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.pipe == p && r.mu.session == sess
}

// Commit tells the coordinator that the trainer's model includes every
// batch of epoch through step, as numbered by the batches Next returned.
// It returns at once; the coordinator's acknowledgement arrives through
// Config.OnAck. A commit about an earlier session is dropped (Next
// reports ErrRolledBack).
func (r *Rank) Commit(epoch int, step int64) error {
	return r.CommitAt(r.deliv.Session(), epoch, step)
}

// CommitAt is Commit for a batch of session (Batch.Session) and is safe
// to call from any goroutine (a feed server reads commits on another
// goroutine than the one calling Next). A commit naming a session that
// is over is dropped by the actor. It returns ErrRolledBack for a zero
// session.
func (r *Rank) CommitAt(session cluster.Fence, epoch int, step int64) error {
	if session.IsZero() {
		return ErrRolledBack
	}
	r.node.sys.Root.Send(r.node.pid, commitMsg{rank: r.index, session: session, epoch: epoch, step: step})
	return nil
}

// BatchSize is the job's batch size once the coordinator's job is known
// (a session started), else 0. Safe for concurrent use.
func (r *Rank) BatchSize() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.batch
}

// Reset says the rank's trainer went back to its last acknowledged commit
// (it restarted and reconnected, or gave up on what it was given since):
// the rank's session ends, what it delivered after that commit is issued
// again (to it or another rank), and Next waits for the new session's
// batches. Unlike a rollback the coordinator causes, Next does not report
// ErrRolledBack for it. Call it from the trainer goroutine.
func (r *Rank) Reset() {
	if b := r.held; b != nil {
		b.Release()
		r.held = nil
	}
	live := r.live()
	r.deliv.Reset(live)
	r.reset(live)
}

// live is the rank's live session (zero between sessions).
func (r *Rank) live() cluster.Fence {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.session
}

// reset tells the actor to end session, the trainer having gone back to
// its last acknowledged commit.
func (r *Rank) reset(session cluster.Fence) {
	r.node.sys.Root.Send(r.node.pid, resetMsg{rank: r.index, session: session})
}

// --- the pipeline's side ---

// source is one session's actors.Source: it forwards Want to the actor.
type source struct {
	n       *Node
	rank    int
	session cluster.Fence
}

func (s source) Want(n int, give func(actors.Work)) {
	s.n.sys.Root.Send(s.n.pid, wantMsg{rank: s.rank, session: s.session, n: n, give: give})
}

// --- messages to the actor ---

type tickMsg struct{}

// linkTickMsg is a tick of the link's clock (Config.LinkEvery).
type linkTickMsg struct{}

type coordMsg struct {
	addr string
	pid  *actor.PID
}

type wantMsg struct {
	rank    int
	session cluster.Fence
	n       int
	give    func(actors.Work)
}

type commitMsg struct {
	rank    int
	session cluster.Fence
	epoch   int
	step    int64
}

type resetMsg struct {
	rank    int
	session cluster.Fence
}

type rejoinedMsg struct {
	inc uint64
	err error
}
