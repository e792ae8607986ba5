// Package coord is the coordinator's shell: one protoactor actor that owns
// a cluster.Coordinator and does its I/O. Per message it runs the Ready
// loop of package cluster: Step the event, then take Ready — persist (the
// commit log, and issue 4's journal), only then send the acks, send the
// rest to the nodes, and Advance.
//
// Events come from gossip (Membership: a node's join, update with a larger
// incarnation, leave, failure) and from nodes (wire.NodeEvents over
// protoactor remote); a Tick comes from an injected clock every TickEvery.
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
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/agent"
	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/wire"
)

// Config configures the coordinator shell.
type Config struct {
	// Cluster is the job for the state machine (Samples, Seed, Epochs, ...).
	Cluster cluster.Config
	// BatchSize and Digest complete the Job each node is welcomed with.
	BatchSize int
	Digest    string
	// MinRanks holds back the first epoch until this many ranks have
	// joined, so a job started with its nodes gets equal shares from the
	// first step (torchrun's --nnodes). Requests before then are dropped;
	// nodes re-ask every second. 0 or 1: start with the first request.
	MinRanks int
	// TickEvery is one cluster.Tick (RevokeTimeout counts them). 0: 1 s.
	TickEvery time.Duration
	// NewTicker makes the tick clock; nil: time.NewTicker.
	NewTicker func(time.Duration) (<-chan time.Time, func())
	// Now reads the clock for logs and figures; nil: time.Now.
	Now func() time.Time
	// CommitLog, if set, gets one line per acknowledged commit, written
	// before the ack is sent:
	//	ack\t<epoch>\t<rank>\t<session>\t<step>\t<offset>
	// Committed history is what the coordinator acknowledged, so a
	// checker reads commits here (a node killed between the ack and its
	// own log line never writes its line).
	CommitLog io.Writer
	// Logger receives the coordinator's logs; nil discards them.
	Logger *slog.Logger
}

// Coordinator is the running coordinator actor.
type Coordinator struct {
	sys    *actor.ActorSystem
	pid    *actor.PID
	done   chan struct{}
	stopCh chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

// Start spawns the coordinator actor as agent.CoordinatorActor on sys.
func Start(sys *actor.ActorSystem, cfg Config) (*Coordinator, error) {
	core, err := cluster.NewCoordinator(cfg.Cluster)
	if err != nil {
		return nil, err
	}
	if cfg.BatchSize < 1 {
		return nil, fmt.Errorf("coord: BatchSize = %d, want >= 1", cfg.BatchSize)
	}
	if cfg.TickEvery <= 0 {
		cfg.TickEvery = time.Second
	}
	if cfg.NewTicker == nil {
		cfg.NewTicker = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Coordinator{sys: sys, done: make(chan struct{}), stopCh: make(chan struct{})}
	cc := cfg.Cluster
	a := &coordActor{
		cfg: cfg, c: core, log: log, done: c.done,
		job: &wire.Job{
			Samples: cc.Samples, Seed: cc.Seed, Block: int64(cc.Block), Epochs: int64(cc.Epochs),
			ShardSize: int64(cc.ShardSize), BatchSize: int64(cfg.BatchSize), ManifestDigest: cfg.Digest,
			Balance: cc.Balance.String(),
		},
		nodes: map[string]*nodeInfo{}, rankNode: map[string]string{},
		epochStart: map[int]time.Time{},
	}
	if cfg.CommitLog != nil {
		a.commitLog = bufio.NewWriter(cfg.CommitLog)
	}
	pid, err := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return a }), agent.CoordinatorActor)
	if err != nil {
		return nil, fmt.Errorf("coord: spawn: %w", err)
	}
	c.pid = pid
	tick, stop := cfg.NewTicker(cfg.TickEvery)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer stop()
		for {
			select {
			case <-tick:
				sys.Root.Send(pid, tickMsg{})
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
// default a node's actor is agent.ActorName at its gossip ActorAddr.
func (c *Coordinator) SetNodePID(node string, pid *actor.PID) {
	c.sys.Root.Send(c.pid, nodePIDMsg{node: node, pid: pid})
}

type nodePIDMsg struct {
	node string
	pid  *actor.PID
}

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
	Epochs []cluster.EpochStatus
	Ranks  []string
	Done   bool
}

// Shutdown stops the actor and its clock. It returns ctx.Err() if that did
// not finish in time.
func (c *Coordinator) Shutdown(ctx context.Context) error {
	c.once.Do(func() {
		close(c.stopCh)
		_ = c.sys.Root.StopFuture(c.pid).Wait()
	})
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type tickMsg struct{}

type statusReq struct{}

type nodeInfo struct {
	addr string
	pid  *actor.PID
	inc  uint64 // the life the state machine knows; 0 once it is gone
	gone uint64 // the largest life that left or failed
}

type coordActor struct {
	cfg       Config
	c         *cluster.Coordinator
	log       *slog.Logger
	job       *wire.Job
	done      chan struct{}
	finished  bool
	started   bool // MinRanks was reached
	nodes     map[string]*nodeInfo
	rankNode  map[string]string
	mail      map[string]*wire.NodeMail
	commitLog *bufio.Writer

	epochStart   map[int]time.Time
	evictedAt    time.Time // the last eviction not yet followed by a grant
	evictedNode  string
	lastProgress time.Time
}

func (a *coordActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case gossip.Event:
		a.membership(m)
	case *wire.NodeEvents:
		a.nodeEvents(m)
	case nodePIDMsg:
		a.node(m.node).pid = m.pid
	case tickMsg:
		a.step(cluster.Tick{})
		if a.finished {
			// Keep telling the nodes: one may have missed it.
			for id, n := range a.nodes {
				if n.inc != 0 {
					a.to(id).Done = true
				}
			}
		}
	case statusReq:
		st := Status{Stats: a.c.Stats(), Ranks: a.c.Ranks(), Done: a.c.Done()}
		for e := range a.cfg.Cluster.Epochs {
			st.Epochs = append(st.Epochs, a.c.Epoch(e))
		}
		ctx.Respond(st)
		return
	default:
		return
	}
	a.flush(ctx)
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
		if ev.Meta.Leaving || inc <= n.gone || inc <= n.inc {
			return // leaving, a life already over, or nothing new
		}
		if ev.Meta.ActorAddr != "" {
			n.addr = ev.Meta.ActorAddr
			n.pid = actor.NewPID(n.addr, agent.ActorName)
		}
		a.log.Info("node joined", "node", id, "incarnation", inc, "ranks", ev.Meta.Ranks, "actor", n.addr)
		if err := a.step(cluster.Join{Node: id, Incarnation: inc, Ranks: ev.Meta.Ranks}); err == nil {
			n.inc = inc
		}
	case gossip.Left, gossip.Failed:
		if inc == 0 {
			inc = n.inc
		}
		n.gone = max(n.gone, inc)
		if inc != n.inc {
			return
		}
		n.inc = 0
		a.evictedAt, a.evictedNode = a.cfg.Now(), id
		if ev.Kind == gossip.Left {
			a.log.Info("node left", "node", id, "incarnation", inc)
			a.step(cluster.Leave{Node: id, Incarnation: inc})
		} else {
			a.log.Warn("node failed", "node", id, "incarnation", inc)
			a.step(cluster.Fail{Node: id, Incarnation: inc})
		}
	}
}

func (a *coordActor) nodeEvents(m *wire.NodeEvents) {
	n := a.node(m.Node)
	var fenced []*wire.Fence
	for _, we := range m.Events {
		ev := we.Cluster()
		if ev == nil {
			continue
		}
		if _, ok := ev.(cluster.Request); ok && !a.started {
			if len(a.c.Ranks()) < a.cfg.MinRanks {
				continue // not enough ranks yet; the node asks again
			}
			a.started = true
		}
		err := a.step(ev)
		switch {
		case err == nil:
		case errors.Is(err, cluster.ErrFenced):
			fenced = append(fenced, sessionOf(ev))
		case errors.Is(err, cluster.ErrStale):
			a.log.Debug("stale message", "node", m.Node, "err", err)
		default:
			a.log.Error("refused message", "node", m.Node, "event", fmt.Sprintf("%T %+v", ev, ev), "err", err)
		}
	}
	if len(fenced) == 0 || n.pid == nil {
		return
	}
	mail := a.to(m.Node)
	mail.Fenced = append(mail.Fenced, fenced...)
	if n.inc != m.Incarnation {
		// The state machine does not know this life (it was declared
		// dead): tell it, so it rejoins with a new incarnation.
		mail.Evictions = append(mail.Evictions, &wire.Eviction{Node: m.Node, Incarnation: m.Incarnation})
	}
}

func sessionOf(ev cluster.Event) *wire.Fence {
	switch e := ev.(type) {
	case cluster.Request:
		return wire.FenceOf(e.Session)
	case cluster.Progress:
		return wire.FenceOf(e.Session)
	case cluster.LeaseDone:
		return wire.FenceOf(e.Session)
	case cluster.Commit:
		return wire.FenceOf(e.Session)
	}
	return &wire.Fence{}
}

// step runs one event and then the Ready loop's first half: persist, log
// commits, and queue mail per node.
func (a *coordActor) step(ev cluster.Event) error {
	err := a.c.Step(ev)
	if !a.c.HasReady() {
		return err
	}
	rd := a.c.Ready()
	now := a.cfg.Now()
	// 1. Persist. The journal is issue 4's; the commit log is durable
	// enough for a checker (the coordinator is not killed here).
	if len(rd.Acks) > 0 && a.commitLog != nil {
		for _, ack := range rd.Acks {
			fmt.Fprintf(a.commitLog, "ack\t%d\t%s\t%s\t%d\t%d\n", ack.Epoch, ack.Rank, ack.Session, ack.Step, ack.Offset)
		}
		if err := a.commitLog.Flush(); err != nil {
			a.log.Error("commit log", "err", err)
		}
	}
	// 2. Then send: acks only after the persist above.
	for _, w := range rd.Welcomes {
		for _, rs := range w.Ranks {
			a.rankNode[rs.Rank] = w.Node
		}
		m := a.to(w.Node)
		m.Welcomes = append(m.Welcomes, wire.WelcomeOf(w, a.job))
	}
	for _, e := range rd.Evictions {
		a.log.Info("evicted", "node", e.Node, "incarnation", e.Incarnation)
		m := a.to(e.Node)
		m.Evictions = append(m.Evictions, wire.EvictionOf(e))
	}
	for _, l := range rd.Grants {
		if _, ok := a.epochStart[l.Epoch]; !ok {
			a.epochStart[l.Epoch] = now
			a.log.Info("epoch started", "epoch", l.Epoch)
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
	for _, ack := range rd.Acks {
		m := a.to(a.rankNode[ack.Rank])
		m.Acks = append(m.Acks, wire.AckOf(ack))
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

// flush sends each node its mail: one message per node per actor turn,
// so a node applies a Ready's effects together and in order.
func (a *coordActor) flush(ctx actor.Context) {
	for id, m := range a.mail {
		if n := a.nodes[id]; n != nil && n.pid != nil && !m.IsEmpty() {
			ctx.Send(n.pid, m)
		}
	}
	a.mail = nil
}
