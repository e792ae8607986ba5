// Package coord is the coordinator's shell: one protoactor actor that owns
// a cluster.Coordinator and does its I/O. Per message it runs the Ready
// loop of package cluster: Step the event, then take Ready and Advance;
// at the end of the actor's turn it persists (one journal write for every
// Ready of the turn that said Persist — group commit), only then writes
// the commit log and sends the acks, each with its resume token, and the
// rest of the turn's mail.
//
// If a journal write fails the coordinator stops at once and sends
// nothing more: ErrSuperseded means another coordinator of the job wrote
// first (this one is stale); any other error leaves the write in doubt,
// and a restart restores whatever generation is newest. Fatal reports it.
// Every CheckEvery ticks the actor also asks the journal whether another
// coordinator has written since, so a stale coordinator steps down even
// when it has nothing to write.
//
// Events come from gossip (Membership: a node's join, update with a larger
// incarnation, leave, failure; a suspicion only marks the node suspect in
// Status) and from nodes (wire.NodeEvents over
// protoactor remote); a Tick comes from an injected clock every TickEvery.
// The mail to each node life and its events back ride a cluster.Link
// (numbered, acknowledged, sent again every two LinkEvery ticks until
// acknowledged), so nothing the transport drops is lost for good. A node
// life below one the coordinator knows is answered with an Eviction
// naming the known life, and rejoins above it.
// Messages a node sends from a fenced session are answered with a
// NodeMail listing the session as fenced, and with an Eviction if the
// coordinator does not know that life of the node, so a node that was
// declared dead while alive rolls back and rejoins.
//
// Concurrency: every method is safe for concurrent use; the state belongs
// to the actor.
package coord

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/journal"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/internal/clock"
)

// Config configures the coordinator shell.
type Config struct {
	// Cluster is the job for the state machine (Samples, Seed, Epochs, ...).
	Cluster cluster.Config
	// BatchSize and Digest complete the Job each node is welcomed with.
	BatchSize int
	Digest    string
	// TickEvery is one cluster.Tick (RevokeTimeout counts them). 0: 1 s.
	TickEvery time.Duration
	// LinkEvery is the tick of the links to the nodes (cluster.Link):
	// mail a node has not acknowledged for two of them is sent again,
	// and an acknowledgement no mail carried goes out alone. 0: 200 ms.
	LinkEvery time.Duration
	// LinkMaxPending bounds the mail kept for a node life's
	// acknowledgement (cluster.Link.MaxPending; 0: its default): over it
	// the life is failed as if gossip had declared it dead.
	LinkMaxPending int
	// Clock makes the ticker and reads the time for logs and figures;
	// nil: the system clock.
	Clock clock.Clock
	// CommitLog, if set, gets one line per acknowledged commit, written
	// before the ack is sent:
	//	ack\t<epoch>\t<rank>\t<session>\t<step>\t<offset>[\t<token>]
	// with the ack's resume token when there is a Journal.
	// Committed history is what the coordinator acknowledged, so a
	// checker reads commits here (a node killed between the ack and its
	// own log line never writes its line).
	CommitLog io.Writer
	// Logger receives the coordinator's logs; nil discards them.
	Logger *slog.Logger
	// Journal, if set, makes the state durable (package journal): the
	// initial state is written by Start, and every later Ready that says
	// Persist before its acks are sent. nil: nothing is durable (tests,
	// throwaway jobs), and acks carry no token.
	Journal Journal
	// Restore, if set, is the state to continue from (cluster.Restore),
	// read from the journal by the caller; Cluster.Incarnation must be
	// the journal's (Journal.Incarnation). nil: a fresh job.
	Restore *cluster.State
	// CheckEvery is how many ticks pass between journal checks for a
	// newer coordinator. 0: 10 (10 s at the default tick), so a stale
	// coordinator that has nothing to write stops within seconds.
	CheckEvery int
	// Peers, if set, returns the gossip addresses to record in the
	// journal for a restarted coordinator to rejoin (package gossip's
	// Members); nil: the node addresses gossip events carried.
	Peers func() []string
	// JobStoreRPS is the job-wide object-store request budget in requests
	// per second (0: none). The coordinator divides it among the live
	// nodes by their ranks (cluster.StoreShares) and mails each its share
	// (NodeMail.StoreBudget) as nodes join and leave, and again every
	// ShareResendTicks ticks in case a mail was lost.
	JobStoreRPS float64
}

// ShareResendTicks is how many ticks pass between resends of every
// node's store budget share (30 s at the default tick).
const ShareResendTicks = 30

// Journal is the coordinator's durable store; *journal.Journal
// implements it. Called only from the actor.
type Journal interface {
	// Write makes s durable and returns its generation.
	Write(ctx context.Context, s cluster.State, peers []string) (gen uint64, err error)
	// Check returns an error wrapping journal.ErrSuperseded if another
	// coordinator has written since.
	Check(ctx context.Context) error
	// Token returns the resume token of a commit made durable by gen.
	Token(gen uint64, epoch int, step int64) journal.Token
}

// ErrStopped is wrapped by what Fatal reports.
var ErrStopped = errors.New("coord: coordinator stopped")

// Coordinator is the running coordinator actor.
type Coordinator struct {
	sys *actor.ActorSystem
	pid *actor.PID
	// cancel ends base, the context of the actor's blocking I/O (journal
	// writes and checks): Shutdown calls it when its ctx ends first, so
	// a write stuck on a store that does not answer cannot outlive it.
	cancel context.CancelFunc
	done   chan struct{}
	stopCh chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
	fatal  chan error
}

// Start spawns the coordinator actor as wire.CoordinatorActor on sys.
// Without a Journal the coordinator cannot learn the incarnation of the
// life before it, so it takes a random one marked cluster.NoJournal
// (unless Cluster.Incarnation is one already): nodes that survived the
// last life take it for a new life, never for a duplicate of the old.
func Start(sys *actor.ActorSystem, cfg Config) (*Coordinator, error) {
	if cfg.Journal == nil && cfg.Restore == nil && cfg.Cluster.Incarnation&cluster.NoJournal == 0 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("coord: incarnation: %w", err)
		}
		cfg.Cluster.Incarnation = cluster.NoJournal | binary.LittleEndian.Uint64(b[:])&^cluster.NoJournal
	}
	var core *cluster.Coordinator
	var err error
	if cfg.Cluster.BatchSize == 0 {
		cfg.Cluster.BatchSize = int64(cfg.BatchSize) // the core trims its trails' commits with it
	}
	if cfg.Restore != nil {
		core, err = cluster.Restore(cfg.Cluster, *cfg.Restore)
	} else {
		core, err = cluster.NewCoordinator(cfg.Cluster)
	}
	if err != nil {
		return nil, err
	}
	if cfg.CheckEvery <= 0 {
		cfg.CheckEvery = 10
	}
	if cfg.BatchSize < 1 {
		return nil, fmt.Errorf("coord: BatchSize = %d, want >= 1", cfg.BatchSize)
	}
	if cfg.TickEvery <= 0 {
		cfg.TickEvery = time.Second
	}
	if cfg.LinkEvery <= 0 {
		cfg.LinkEvery = 200 * time.Millisecond
	}
	cfg.Clock = clock.Or(cfg.Clock)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Coordinator{sys: sys, done: make(chan struct{}), stopCh: make(chan struct{}), fatal: make(chan error, 1)}
	base, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	cc := cfg.Cluster
	a := &coordActor{
		base: base,
		cfg:  cfg, c: core, log: log, done: c.done,
		job: &wire.Job{
			Samples: cc.Samples, Seed: cc.Seed, Block: int64(cc.Block), Window: int64(cc.Window), Epochs: int64(cc.Epochs),
			ShardSize: int64(cc.ShardSize), BatchSize: int64(cfg.BatchSize), ManifestDigest: cfg.Digest,
			Balance: cc.Balance.String(),
		},
		nodes: map[string]*nodeInfo{}, rankNode: map[string]string{},
		epochStart: map[int]time.Time{}, fatal: c.fatal, startedAt: cfg.Clock.Now(),
	}
	// The incarnation (and a restored state) must be durable before any
	// fence carrying it is sent; a journal that refuses now is an error
	// for the caller, not a coordinator that starts and stops.
	if core.HasReady() {
		rd := core.Ready()
		if rd.Persist && cfg.Journal != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			gen, err := cfg.Journal.Write(ctx, core.Snapshot(), nil)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("coord: initial journal write: %w", err)
			}
			core.Persisted(gen)
			log.Info("journal written", "gen", gen, "incarnation", cc.Incarnation, "restored", cfg.Restore != nil)
		}
		core.Advance()
	}
	if core.Done() {
		a.finished = true
		close(c.done)
	}
	if cfg.CommitLog != nil {
		a.commitLog = bufio.NewWriter(cfg.CommitLog)
		if cfg.Restore != nil {
			// The restored state's commits are durable, but the life
			// that made them may have died before logging their acks:
			// log them now (again, usually; a reader keeps the largest).
			var acks []cluster.Ack
			for _, es := range cfg.Restore.Epochs {
				for _, rc := range es.Commits {
					acks = append(acks, cluster.Ack{Rank: rc.Rank, Session: rc.Session, Epoch: rc.Epoch, Offset: rc.Offset, Step: rc.Step, Token: a.token(rc)})
				}
			}
			if err := a.logAcks(acks); err != nil {
				return nil, fmt.Errorf("coord: commit log: %w", err)
			}
		}
	}
	pid, err := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return a }, actor.WithMailbox(wire.ReadyMailbox())), wire.CoordinatorActor)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("coord: spawn: %w", err)
	}
	c.pid = pid
	ticker, tick := cfg.Clock.NewTicker(cfg.TickEvery)
	lticker, ltick := cfg.Clock.NewTicker(cfg.LinkEvery)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer ticker.Stop()
		defer lticker.Stop()
		for {
			select {
			case <-tick:
				sys.Root.Send(pid, tickMsg{})
			case <-ltick:
				sys.Root.Send(pid, linkTickMsg{})
			case <-c.stopCh:
				return
			}
		}
	}()
	return c, nil
}

// PID is the coordinator actor.
func (c *Coordinator) PID() *actor.PID { return c.pid }

// Membership hands the coordinator a gossip event.
func (c *Coordinator) Membership(ev gossip.Event) { c.sys.Root.Send(c.pid, ev) }

// SetNodePID names the actor of a node in the same process (tests); by
// default a node's actor is wire.NodeActor at its gossip ActorAddr.
func (c *Coordinator) SetNodePID(node string, pid *actor.PID) {
	c.sys.Root.Send(c.pid, nodePIDMsg{node: node, pid: pid})
}

type nodePIDMsg struct {
	node string
	pid  *actor.PID
}

// Fatal yields the error that stopped the coordinator (a journal write
// that failed, or another coordinator that took over); it yields at most
// once. The caller should exit: nothing this coordinator would send now
// could be trusted.
func (c *Coordinator) Fatal() <-chan error { return c.fatal }

// Done is closed once every epoch is committed.
func (c *Coordinator) Done() <-chan struct{} { return c.done }

// Status returns the state machine's view of the job.
func (c *Coordinator) Status(ctx context.Context) (Status, error) {
	f := c.sys.Root.RequestFuture(c.pid, statusReq{}, time.Minute)
	type result struct {
		v   any
		err error
	}
	ch := make(chan result, 1)
	go func() { v, err := f.Result(); ch <- result{v, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			return Status{}, r.err
		}
		return r.v.(Status), nil
	case <-ctx.Done():
		return Status{}, ctx.Err()
	}
}

// Status is a snapshot of the coordinator for tests and logs.
type Status struct {
	Stats  cluster.Stats
	Census cluster.Census
	Epochs []cluster.EpochStatus
	Ranks  []string
	Done   bool
	Err    error // what stopped the coordinator, if it stopped
	// Nodes are every node heard of, with its latest report.
	Nodes []NodeStatus
}

// Shutdown stops the actor and its clock. It returns ctx.Err() if that did
// not finish in time.
func (c *Coordinator) Shutdown(ctx context.Context) error {
	c.once.Do(func() {
		close(c.stopCh)
		c.wg.Add(1)
		go func() { // the actor may be in a journal write: ctx rules the wait
			defer c.wg.Done()
			_ = c.sys.Root.StopFuture(c.pid).Wait()
		}()
	})
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
		c.cancel()
		return nil
	case <-ctx.Done():
		c.cancel() // give up: abort the journal I/O still blocking the actor
		return ctx.Err()
	}
}

type tickMsg struct{}

// linkLostMsg says the link to node life inc declared its peer lost
// (cluster.Link.Lost).
type linkLostMsg struct {
	node string
	inc  uint64
}

// linkTickMsg is a tick of the links' clock (Config.LinkEvery).
type linkTickMsg struct{}

type statusReq struct{}

type nodeInfo struct {
	addr   string
	gossip string // gossip address, recorded in the journal
	pid    *actor.PID
	inc    uint64  // the life the state machine knows; 0 once it is gone
	gone   uint64  // the largest life that left or failed
	ranks  int     // of the life inc, as it joined
	share  float64 // the store budget share last mailed to life inc; 0: none
	// link carries the mail to node life linkInc and its events back
	// (cluster.Link): a new life of the node gets a new one.
	link    *cluster.Link[*wire.NodeMail, *wire.NodeEvents]
	linkInc uint64
}

type coordActor struct {
	base      context.Context // canceled when Shutdown gives up
	cfg       Config
	c         *cluster.Coordinator
	log       *slog.Logger
	job       *wire.Job
	done      chan struct{}
	finished  bool
	nodes     map[string]*nodeInfo
	rankNode  map[string]string
	mail      map[string]*wire.NodeMail
	commitLog *bufio.Writer

	// Persistence: what the turn's Readies asked for, done in flush.
	dirty   bool
	pending []cluster.Ack // acks held back until the journal write returns
	// pendingTokens are Welcome commit records made durable by this
	// turn's journal write: their tokens are filled in after it.
	pendingTokens []*wire.Ack
	failed        error
	fatal         chan error
	ticks         int

	startedAt  time.Time
	firstLease bool

	epochStart   map[int]time.Time
	evictedAt    time.Time // the last eviction not yet followed by a grant
	evictedNode  string
	lastProgress time.Time

	book nodeBook // nodes' reports, for Status

	sharesDirty bool // membership changed since the shares were mailed

	linkNow int64  // link ticks seen
	hints   []hint // mail to node lives below a known one (behind)
}

func (a *coordActor) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*actor.Stopping); ok {
		for _, n := range a.nodes {
			if n.link != nil {
				n.link.Close() // off the process's link metrics
			}
		}
	}
	if a.failed != nil {
		if _, ok := ctx.Message().(statusReq); ok {
			ctx.Respond(a.status())
		}
		return // stopped: a stale or doubtful coordinator sends nothing
	}
	switch m := ctx.Message().(type) {
	case gossip.Event:
		a.membership(m)
	case *wire.NodeEvents:
		a.nodeEvents(m, ctx.Sender())
	case nodePIDMsg:
		a.node(m.node).pid = m.pid
	case linkLostMsg:
		// The link to the node life went over its bound (cluster.Link
		// Send): end the life as if gossip had declared it dead.
		if n := a.nodes[m.node]; n != nil && n.inc == m.inc {
			a.log.Warn("the control link to a node life kept too much unacknowledged; evicting the life", "node", m.node, "incarnation", m.inc)
			a.membership(gossip.Event{Kind: gossip.Failed, Name: m.node, Meta: gossip.Meta{ID: m.node, Role: gossip.RoleNode, Incarnation: m.inc}})
		}
	case linkTickMsg:
		a.linkNow++
		a.resend(ctx)
		return
	case tickMsg:
		a.step(cluster.Tick{})
		a.ticks++
		if a.ticks%ShareResendTicks == 0 {
			a.mailShares(true)
		}
		if j := a.cfg.Journal; j != nil && a.ticks%a.cfg.CheckEvery == 0 && !a.dirty {
			cctx, cancel := context.WithTimeout(a.base, 30*time.Second)
			err := j.Check(cctx)
			cancel()
			if err != nil {
				a.fail(err)
				return
			}
		}
		if a.finished {
			// Keep telling the nodes: one may have missed it.
			for id, n := range a.nodes {
				if n.inc != 0 {
					a.to(id).Done = true
				}
			}
		}
	case statusReq:
		ctx.Respond(a.status())
		return
	default:
		return
	}
	a.flush(ctx)
}

func (a *coordActor) status() Status {
	st := Status{Stats: a.c.Stats(), Census: a.c.Census(), Ranks: a.c.Ranks(), Done: a.c.Done(), Err: a.failed}
	for e := range a.cfg.Cluster.Epochs {
		st.Epochs = append(st.Epochs, a.c.Epoch(e))
	}
	alive := map[string]bool{}
	for _, r := range st.Census.Ranks {
		alive[r.Node] = true
	}
	st.Nodes = a.book.statuses(a.nodes, alive, a.cfg.Clock.Now())
	return st
}

// fail stops the coordinator: nothing queued is sent, nothing more is
// done, and Fatal reports why.
func (a *coordActor) fail(err error) {
	a.failed = fmt.Errorf("%w: %w", ErrStopped, err)
	a.mail, a.pending, a.pendingTokens = nil, nil, nil
	a.log.Error("coordinator stopping", "err", err)
	select {
	case a.fatal <- a.failed:
	default:
	}
}

func (a *coordActor) node(id string) *nodeInfo {
	n := a.nodes[id]
	if n == nil {
		n = &nodeInfo{}
		a.nodes[id] = n
	}
	return n
}

func (a *coordActor) membership(ev gossip.Event) {
	if ev.Meta.Role != gossip.RoleNode {
		return
	}
	id, inc := ev.Meta.ID, ev.Meta.Incarnation
	if id == "" {
		id = ev.Name
	}
	n := a.node(id)
	switch ev.Kind {
	case gossip.Joined, gossip.Updated:
		if known := max(n.gone, n.inc); !ev.Meta.Leaving && inc < known && ev.Meta.ActorAddr != "" {
			// A life below one already seen: a stale report, or a new
			// process whose incarnation came out lower (its clock stepped
			// back). Tell it the later life; a live process below it
			// joins above it.
			a.behind(actor.NewPID(ev.Meta.ActorAddr, wire.NodeActor), id, known)
		}
		if ev.Meta.Leaving || inc <= n.gone || inc <= n.inc {
			return // leaving, a life already over, or nothing new
		}
		if ev.Addr != "" {
			n.gossip = ev.Addr
		}
		if ev.Meta.ActorAddr != "" {
			n.addr = ev.Meta.ActorAddr
			n.pid = actor.NewPID(n.addr, wire.NodeActor)
		}
		a.log.Info("node joined", "node", id, "incarnation", inc, "ranks", ev.Meta.Ranks, "actor", n.addr)
		if err := a.step(cluster.Join{Node: id, Incarnation: inc, Ranks: ev.Meta.Ranks}); err == nil {
			n.inc, n.ranks, n.share = inc, len(ev.Meta.Ranks), 0
			a.sharesDirty = true
		}
	case gossip.Suspected, gossip.Recovered:
		if n.inc == 0 || (inc != 0 && inc != n.inc) {
			return // not a life the state machine counts
		}
		if ev.Kind == gossip.Suspected {
			a.log.Warn("node suspect", "node", id, "incarnation", n.inc)
		} else {
			a.log.Info("node answers again", "node", id, "incarnation", n.inc)
		}
		a.book.suspected(id, n.inc, ev.Kind == gossip.Suspected)
	case gossip.Left, gossip.Failed:
		if inc == 0 {
			inc = n.inc
		}
		n.gone = max(n.gone, inc)
		if inc != n.inc {
			return
		}
		n.inc, n.share = 0, 0
		a.sharesDirty = true
		a.evictedAt, a.evictedNode = a.cfg.Clock.Now(), id
		a.book.gone(id, ev.Kind == gossip.Left)
		if ev.Kind == gossip.Left {
			a.log.Info("node left", "node", id, "incarnation", inc)
			a.step(cluster.Leave{Node: id, Incarnation: inc})
		} else {
			a.log.Warn("node failed", "node", id, "incarnation", inc)
			a.step(cluster.Fail{Node: id, Incarnation: inc})
		}
	}
}

// nodeEvents steps a node's events. sender is the node actor when the
// node sent them as a request (the node's actor does): the way to answer
// a node that gossip has not introduced yet. The core answers messages of
// fenced sessions (Ready.Fenced, and an Eviction for a life it does not
// know).
func (a *coordActor) nodeEvents(m *wire.NodeEvents, sender *actor.PID) {
	n := a.node(m.Node)
	a.book.report(m.Node, m.Incarnation, m.Report, a.cfg.Clock.Now())
	if known := max(n.gone, n.inc); m.Incarnation < known && sender != nil {
		a.behind(sender, m.Node, known) // see membership
	}
	if n.pid == nil && sender != nil {
		// A node this life has not heard of in gossip, talking from a
		// session of an earlier life: a restarted coordinator whose
		// journal did not name it, and that it still sees as alive (the
		// new life answers its pings at the old address). The core
		// evicts it, so it rejoins with a new incarnation, which gossip
		// spreads here.
		n.pid = sender
	}
	if m.Coordinator != a.life() || m.Incarnation == 0 {
		// For another coordinator life (the core fences its sessions and
		// answers), or from a node before any link: step as it comes.
		a.nodeSteps(m)
		return
	}
	l := a.linkTo(n, m.Incarnation)
	if l == nil {
		return // from a life older than the one linked: it is over
	}
	l.Acked(m.Ack, a.linkNow)
	if m.Seq == 0 {
		a.nodeSteps(m) // unnumbered: a report, an ack, or best effort
		return
	}
	for _, e := range l.Accept(cluster.LinkFrame[*wire.NodeEvents]{Seq: m.Seq, Body: m}) {
		a.nodeSteps(e)
	}
}

// life is this coordinator's life: its incarnation, which every fence it
// issues carries.
func (a *coordActor) life() uint64 { return a.cfg.Cluster.Incarnation }

// linkTo returns the link to node life inc, replacing one to an older
// life; nil for a life older than the one linked.
func (a *coordActor) linkTo(n *nodeInfo, inc uint64) *cluster.Link[*wire.NodeMail, *wire.NodeEvents] {
	switch {
	case n.link == nil || inc > n.linkInc:
		if n.link != nil {
			n.link.Close()
		}
		n.link, n.linkInc = &cluster.Link[*wire.NodeMail, *wire.NodeEvents]{Resend: 2, MaxPending: a.cfg.LinkMaxPending, Meter: &cluster.Links, Size: mailSize}, inc
	case inc < n.linkInc:
		return nil
	}
	return n.link
}

// mailSize is a NodeMail's size, for the link's bound in bytes.
func mailSize(m *wire.NodeMail) int { return proto.Size(m) }

// nodeSteps steps the events of one NodeEvents, in order.
func (a *coordActor) nodeSteps(m *wire.NodeEvents) {
	for _, we := range m.Events {
		ev := we.Cluster()
		if ev == nil {
			continue
		}
		err := a.stepFrom(m.Node, m.Incarnation, ev)
		switch {
		case err == nil, errors.Is(err, cluster.ErrFenced):
		case errors.Is(err, cluster.ErrStale):
			a.log.Debug("stale message", "node", m.Node, "err", err)
		default:
			a.log.Error("refused message", "node", m.Node, "event", fmt.Sprintf("%T %+v", ev, ev), "err", err)
		}
	}
}

// behind queues, for flush, an Eviction naming node id's life known to
// the actor pid: a process of the node whose life is below known joins
// above it (the node's side), the life known itself takes it as its
// eviction. Unnumbered: the node says hello again until it is welcomed.
func (a *coordActor) behind(pid *actor.PID, id string, known uint64) {
	a.hints = append(a.hints, hint{pid, &wire.NodeMail{Evictions: []*wire.Eviction{wire.EvictionOf(cluster.Eviction{Node: id, Incarnation: known})}}})
}

type hint struct {
	pid  *actor.PID
	mail *wire.NodeMail
}

// step runs one event and then the Ready loop's first half: note what to
// persist, hold the acks back, and queue the rest of the mail per node.
func (a *coordActor) step(ev cluster.Event) error { return a.ready(a.c.Step(ev)) }

// stepFrom is step for an event a node's life sent (Coordinator.StepFrom).
func (a *coordActor) stepFrom(node string, incarnation uint64, ev cluster.Event) error {
	return a.ready(a.c.StepFrom(node, incarnation, ev))
}

// ready handles the Ready that the step returning err left.
func (a *coordActor) ready(err error) error {
	if !a.c.HasReady() {
		return err
	}
	rd := a.c.Ready()
	now := a.cfg.Clock.Now()
	// 1. Persist: in flush, once per turn, before any mail goes out; the
	// acks wait for it there.
	a.dirty = a.dirty || rd.Persist
	a.pending = append(a.pending, rd.Acks...)
	// 2. Queue the rest.
	for _, w := range rd.Welcomes {
		for _, rs := range w.Ranks {
			a.rankNode[rs.Rank] = w.Node
		}
		m := a.to(w.Node)
		ww := wire.WelcomeOf(w, a.job, a.token)
		for i, rs := range w.Ranks {
			for k, rc := range rs.Committed {
				if rc.Gen == 0 && a.cfg.Journal != nil {
					// Durable with this turn's journal write: flush
					// fills the token in.
					a.pendingTokens = append(a.pendingTokens, ww.Ranks[i].Committed[k])
				}
			}
		}
		m.Welcomes = append(m.Welcomes, ww)
	}
	for _, e := range rd.Evictions {
		a.log.Info("evicted", "node", e.Node, "incarnation", e.Incarnation)
		m := a.to(e.Node)
		m.Evictions = append(m.Evictions, wire.EvictionOf(e))
	}
	for _, f := range rd.Fenced {
		m := a.to(f.Node)
		m.Fenced = append(m.Fenced, wire.FenceOf(f.Session))
	}
	for _, l := range rd.Grants {
		if _, ok := a.epochStart[l.Epoch]; !ok {
			a.epochStart[l.Epoch] = now
			a.log.Info("epoch started", "epoch", l.Epoch)
		}
		if !a.firstLease {
			a.firstLease = true
			a.log.Info("first lease", "seconds_since_start", now.Sub(a.startedAt).Seconds(), "rank", l.Rank, "epoch", l.Epoch)
		}
		if !a.evictedAt.IsZero() {
			a.log.Info("reassigned", "after_node", a.evictedNode, "rank", l.Rank, "epoch", l.Epoch,
				"seconds", now.Sub(a.evictedAt).Seconds())
			a.evictedAt = time.Time{}
		}
		m := a.to(a.rankNode[l.Rank])
		m.Grants = append(m.Grants, wire.LeaseOf(l))
	}
	for _, r := range rd.Revokes {
		m := a.to(a.rankNode[r.Rank])
		m.Revokes = append(m.Revokes, wire.RevokeOf(r))
	}
	for _, e := range rd.Ends {
		m := a.to(a.rankNode[e.Rank])
		m.Ends = append(m.Ends, wire.StreamEndOf(e))
	}
	for _, e := range rd.EpochsCompleted {
		st := a.c.Epoch(e)
		a.log.Info("epoch complete", "epoch", e, "seconds", now.Sub(a.epochStart[e]).Seconds(),
			"members", st.Members, "padding", st.Padding, "committed", st.Committed)
	}
	if rd.Done && !a.finished {
		a.finished = true
		s := a.c.Stats()
		a.log.Info("job done", "grants", s.Grants, "revokes", s.Revokes, "commits", s.Commits, "evictions", s.Evictions)
		for id, n := range a.nodes {
			if n.inc != 0 {
				a.to(id).Done = true
			}
		}
		close(a.done)
	}
	a.c.Advance()
	return err
}

// token returns the resume token of a commit record ("" without a
// journal, or before the record is durable).
func (a *coordActor) token(rc cluster.RankCommit) string {
	if a.cfg.Journal == nil || rc.Gen == 0 {
		return ""
	}
	return a.cfg.Journal.Token(rc.Gen, rc.Epoch, rc.Step).String()
}

// logAcks appends acks to the commit log, if there is one.
func (a *coordActor) logAcks(acks []cluster.Ack) error {
	if len(acks) == 0 || a.commitLog == nil {
		return nil
	}
	for _, ack := range acks {
		fmt.Fprintf(a.commitLog, "ack\t%d\t%s\t%s\t%d\t%d", ack.Epoch, ack.Rank, ack.Session, ack.Step, ack.Offset)
		if ack.Token != "" {
			fmt.Fprintf(a.commitLog, "\t%s", ack.Token)
		}
		a.commitLog.WriteByte('\n')
	}
	return a.commitLog.Flush()
}

// mailShares divides the job's store budget among the live nodes and
// mails each node whose share changed (all of them if all) its share.
func (a *coordActor) mailShares(all bool) {
	a.sharesDirty = false
	if a.cfg.JobStoreRPS <= 0 || a.finished {
		return // no budget, or the job is done: the nodes only leave now
	}
	ranks := map[string]int{}
	for id, n := range a.nodes {
		if n.inc != 0 {
			ranks[id] = n.ranks
		}
	}
	shares := cluster.StoreShares(a.cfg.JobStoreRPS, ranks)
	changed := 0
	for id := range ranks {
		n, s := a.nodes[id], shares[id]
		if !all && !cluster.ShareChanged(n.share, s) {
			continue
		}
		if s != n.share {
			changed++
		}
		n.share = s
		a.to(id).StoreBudget = &wire.StoreBudget{Rps: s}
	}
	if changed > 0 {
		a.log.Info("store budget divided", "job_store_rps", a.cfg.JobStoreRPS, "nodes", len(ranks), "changed", changed)
	}
}

func (a *coordActor) to(node string) *wire.NodeMail {
	if a.mail == nil {
		a.mail = map[string]*wire.NodeMail{}
	}
	m := a.mail[node]
	if m == nil {
		m = &wire.NodeMail{}
		a.mail[node] = m
	}
	return m
}

// flush persists what the turn's Readies asked for, then logs and queues
// the acks with their tokens, then sends each node its mail: one message
// per node per actor turn, so a node applies a Ready's effects together
// and in order.
func (a *coordActor) flush(ctx actor.Context) {
	if a.failed != nil {
		return
	}
	var gen uint64
	if a.dirty && a.cfg.Journal != nil {
		var peers []string
		if a.cfg.Peers != nil {
			peers = a.cfg.Peers()
		} else {
			for _, n := range a.nodes {
				if n.inc != 0 && n.gossip != "" {
					peers = append(peers, n.gossip)
				}
			}
			sort.Strings(peers)
		}
		wctx, cancel := context.WithTimeout(a.base, time.Minute)
		g, err := a.cfg.Journal.Write(wctx, a.c.Snapshot(), peers)
		cancel()
		if err != nil {
			a.fail(err)
			return
		}
		gen = g
		a.c.Persisted(gen)
	}
	a.dirty = false
	if gen != 0 {
		for i := range a.pending {
			ack := &a.pending[i]
			ack.Token = a.cfg.Journal.Token(gen, ack.Epoch, ack.Step).String()
		}
		for _, wa := range a.pendingTokens {
			wa.Token = a.cfg.Journal.Token(gen, int(wa.Epoch), wa.Step).String()
		}
	}
	a.pendingTokens = nil
	if err := a.logAcks(a.pending); err != nil {
		a.log.Error("commit log", "err", err)
	}
	for _, ack := range a.pending {
		m := a.to(a.rankNode[ack.Rank])
		m.Acks = append(m.Acks, wire.AckOf(ack))
	}
	a.pending = nil
	if a.sharesDirty {
		a.mailShares(false)
	}
	for id, m := range a.mail {
		if n := a.nodes[id]; n != nil && n.pid != nil && !m.IsEmpty() {
			a.sendMail(ctx, id, n, m)
		}
	}
	a.mail = nil
	for _, h := range a.hints {
		ctx.Send(h.pid, h.mail)
	}
	a.hints = nil
	for _, n := range a.nodes {
		if n.link != nil && n.link.AckDue() && n.pid != nil {
			ctx.Send(n.pid, &wire.NodeMail{Coordinator: a.life(), Node: n.linkInc, Ack: n.link.Ack()})
		}
	}
}

// sendMail sends m to node n on the link to the node's life: numbered,
// and kept until the node acknowledges it. Mail for a node whose life
// the coordinator does not know yet goes unnumbered (best effort).
func (a *coordActor) sendMail(ctx actor.Context, id string, n *nodeInfo, m *wire.NodeMail) {
	inc := n.inc
	if inc == 0 {
		inc = n.linkInc // gone: an Eviction still goes to the life linked
	}
	m.Coordinator, m.Node = a.life(), inc
	l := (*cluster.Link[*wire.NodeMail, *wire.NodeEvents])(nil)
	if inc != 0 {
		l = a.linkTo(n, inc)
	}
	if l == nil {
		ctx.Send(n.pid, m)
		return
	}
	lost := l.Lost()
	f := l.Send(m, a.linkNow) // Seq 0 once the link lost its peer
	if !lost && l.Lost() {
		ctx.Send(ctx.Self(), linkLostMsg{id, inc}) // after this flush
	}
	out := proto.Clone(m).(*wire.NodeMail)
	out.Seq, out.Ack = f.Seq, l.Ack()
	ctx.Send(n.pid, out)
}

// resend sends again, on every link, the mail its node has not
// acknowledged for long enough, and acknowledgements no mail carried.
func (a *coordActor) resend(ctx actor.Context) {
	if a.failed != nil {
		return
	}
	for _, n := range a.nodes {
		if n.link == nil || n.pid == nil {
			continue
		}
		for _, f := range n.link.Due(a.linkNow) {
			out := proto.Clone(f.Body).(*wire.NodeMail)
			out.Seq, out.Ack = f.Seq, n.link.Ack()
			ctx.Send(n.pid, out)
		}
		if n.link.AckDue() {
			ctx.Send(n.pid, &wire.NodeMail{Coordinator: a.life(), Node: n.linkInc, Ack: n.link.Ack()})
		}
	}
}
