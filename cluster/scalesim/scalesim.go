// Package scalesim runs a job at internet scale in one process: the real
// coordinator state machine (cluster.Coordinator), the real node side of
// every rank (cluster.RankRuns), and the real journal codec writing each
// generation to an in-memory store, driven by simulated time. Nodes die
// and come back at a given churn rate, some ranks are slow, the network
// may lose frames and cut connections (net.go), and every
// position a trainer commits is checked against the epoch's order: at the
// end, each sample is in committed history exactly once.
//
// It is what cluster's seeded simulation is for correctness under every
// fault, at the scale of a real fleet: 4,096 nodes of 8 ranks and a
// billion samples fit on one machine because the core is pure and its
// state is O(leases), not O(samples). cmd/longshore-simscale (make
// sim-scale) runs it and prints the report; docs/scale.md records the
// figures.
package scalesim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/journal"
	"github.com/longshore/longshore/storage"
)

// Config is one scale run.
type Config struct {
	Nodes        int
	RanksPerNode int
	Samples      int64
	Epochs       int
	ShardSize    int     // cluster.Config.ShardSize; 0: its default
	Batch        int64   // each trainer's batch size
	CommitEvery  int64   // a trainer commits every this many batches, and at a stream's end
	Rate         float64 // samples a rank consumes per simulated second
	SlowFraction float64 // of nodes whose ranks run SlowFactor times slower
	SlowFactor   float64
	// ChurnPerHour is the fraction of nodes killed per simulated hour
	// (0.01: 1%/hour). A killed node is declared failed DetectSeconds
	// later (gossip) and its process comes back RestartSeconds after
	// the kill, as a new life that joins again.
	ChurnPerHour   float64
	DetectSeconds  int64
	RestartSeconds int64
	Seed           uint64
	// Lookahead is how many shards a rank asks for beyond what it has
	// taken (the node's --lookahead).
	Lookahead int64
	// Progress, if set, is called every simulated minute with a line.
	Progress func(string)
	// LossP is the chance that a frame between the coordinator and a
	// node is lost. CutPerHour is the fraction of nodes whose control
	// connection is cut per simulated hour, for CutSeconds: everything
	// in flight and all that is sent meanwhile, both ways, is lost.
	// Faults stop at FaultsUntil (simulated seconds; 0: never). With
	// either fault, the control messages ride cluster.Links as the
	// shells carry them (net.go).
	LossP       float64
	CutPerHour  float64
	CutSeconds  int64
	FaultsUntil int64
	// RecoverySeconds, if positive, is liveness with a bound: once
	// faults stopped, a stretch this long without a commit acknowledged
	// fails the run.
	RecoverySeconds int64
	// LinkMaxPending is the links' cluster.Link.MaxPending (0: its
	// default): over it a link declares its peer lost.
	LinkMaxPending int
	// LiveEvery, if positive, forces a collection every that many
	// simulated seconds to measure the live heap (Report.PeakLiveHeapBytes).
	LiveEvery int
}

// DefaultConfig is issue 16's run: 4,096 nodes × 8 ranks, a billion
// samples, one epoch, 1%/hour churn.
func DefaultConfig() Config {
	return Config{
		Nodes: 4096, RanksPerNode: 8, Samples: 1_000_000_000, Epochs: 1,
		Batch: 256, CommitEvery: 4,
		// A large model's rate: 8 samples/s per GPU makes the epoch last
		// about an hour of simulated time, so 1%/hour churn kills ~40
		// nodes in it.
		Rate:         8,
		SlowFraction: 0.02, SlowFactor: 5,
		ChurnPerHour: 0.01, DetectSeconds: 5, RestartSeconds: 120,
		Seed: 1, Lookahead: 2,
	}
}

// Result is what a run measured.
type Result struct {
	Config
	SimSeconds int64 // simulated time until the job was done
	WallTime   time.Duration
	// CoordTime is the wall time spent in the coordinator (Step and its
	// Ready): one core's worth, as the coordinator actor is single
	// threaded.
	CoordTime time.Duration
	Events    uint64 // events stepped
	// LeaseOps counts what operates on leases: the ranks' requests,
	// progress reports, lease-dones and commits, and the grants and
	// revokes the coordinator issued.
	LeaseOps uint64
	// PeakHeapBytes is the whole simulation's heap at its peak, sampled
	// every simulated minute: the coordinator, every rank's node side,
	// the messages in flight and the exactly-once bitset. It bounds the
	// coordinator's heap from above.
	PeakHeapBytes uint64
	// PeakLiveHeapBytes is the heap live after a collection, forced
	// every LiveEvery simulated seconds (0: never): the whole
	// simulation's live state, without the garbage PeakHeapBytes counts.
	PeakLiveHeapBytes uint64
	Generations       int
	MaxGenBytes       int
	MeanGenBytes      float64
	Kills             int
	Joins             int
	// MaxReissueSeconds and MeanReissueSeconds: per kill, simulated
	// seconds from the kill (detection included) until its epoch's pool
	// held no more than just before the failure was reported: the work
	// the dead node held beyond its commits was leased again.
	MaxReissueSeconds  int64
	MeanReissueSeconds float64
	Returned           uint64 // positions dead ranks held beyond their commits
	Committed          int64  // positions committed, all epochs
	Duplicates         int64  // samples committed twice (must be 0)
	Missing            int64  // samples never committed (must be 0)
	Stats              cluster.Stats
	// FramesLost and Cuts count the network's faults; Links totals what
	// the links did; MaxStallSeconds is the longest stretch without a
	// commit acknowledged once faults stopped (with FaultsUntil).
	FramesLost      uint64
	Cuts            int
	Links           cluster.LinkTotals
	MaxStallSeconds int64
}

// LeaseOpsPerSecond is lease operations per second of coordinator time.
func (r Result) LeaseOpsPerSecond() float64 { return float64(r.LeaseOps) / r.CoordTime.Seconds() }

// EventsPerSecond is events per second of coordinator time.
func (r Result) EventsPerSecond() float64 { return float64(r.Events) / r.CoordTime.Seconds() }

// GenerationsPerMinute is journal writes per simulated minute.
func (r Result) GenerationsPerMinute() float64 {
	return float64(r.Generations) / (float64(r.SimSeconds) / 60)
}

type node struct {
	id      string
	inc     uint64
	alive   bool
	slow    bool
	ranks   []*rank
	inbox   []any // from the coordinator, applied at the next tick in order
	killed  int64 // when the current death happened
	restart int64 // when the process comes back; 0: alive
	// With links (net.go): the link to the coordinator, the events of
	// this tick, and the frames that arrived.
	link   *cluster.Link[[]cluster.Event, []any]
	out    []cluster.Event
	frames []netFrame
}

type rank struct {
	id     string
	node   *node
	runs   *cluster.RankRuns
	budget float64
	// The model pipeline and trainer, per epoch of the current session.
	steps   map[int]int64
	inBatch map[int]int64
	batches map[int]int64
}

// epochLog is what one session delivered of one epoch past its last
// acknowledged commit: committed history is marked when the coordinator
// acknowledges (the Ack is sent only once the journal holds it).
type epochLog struct {
	acked int64
	items []int64 // sample index by offset acked+i; -1: padding
}

type sim struct {
	cfg      Config
	ccfg     cluster.Config
	rng      *rand.Rand
	c        *cluster.Coordinator
	j        *journal.Journal
	store    *storage.MemStore
	now      int64
	nodes    []*node
	byID     map[string]*node
	rankOf   map[string]*rank
	toCoord  []fromNode
	logs     map[cluster.Fence]map[int]*epochLog
	seen     [][]uint64 // per epoch: bitset of committed samples
	orders   map[int]cluster.Order
	pending  []cluster.Ack // acks waiting for the tick's journal write
	dirty    bool
	rep      Result
	kills    map[string]*kill
	reissues int
	timers   []timer
	net      // net.go
}

type timer struct {
	at int64
	fn func()
}

// later runs fn after d simulated seconds, at the start of that tick.
func (s *sim) later(d int64, fn func()) { s.timers = append(s.timers, timer{at: s.now + d, fn: fn}) }

type fromNode struct {
	node string
	inc  uint64
	ev   cluster.Event
}

type kill struct {
	at       int64
	unleased int64 // the pool just before the eviction
	evicted  bool
	epoch    int
}

// Run runs cfg and reports; err is non-nil if the job did not finish or
// exactly once did not hold.
func Run(cfg Config) (Result, error) {
	s := &sim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5ca1e)),
		byID: map[string]*node{}, rankOf: map[string]*rank{},
		net:  newNet(cfg),
		logs: map[cluster.Fence]map[int]*epochLog{}, orders: map[int]cluster.Order{}, kills: map[string]*kill{}}
	s.rep.Config = cfg
	ccfg := cluster.DefaultConfig()
	ccfg.Samples, ccfg.Seed, ccfg.Epochs = cfg.Samples, cfg.Seed, cfg.Epochs
	if cfg.ShardSize > 0 {
		ccfg.ShardSize = cfg.ShardSize
	}
	s.ccfg = ccfg
	var err error
	if s.c, err = cluster.NewCoordinator(ccfg); err != nil {
		return s.rep, err
	}
	s.store = storage.NewMemStore("scalesim")
	ctx := context.Background()
	if s.j, err = journal.Open(ctx, journal.Config{Store: s.store, Keep: 2}); err != nil {
		return s.rep, err
	}
	if _, err := s.j.Start(ctx, journal.StartOptions{Fresh: true}); err != nil {
		return s.rep, err
	}
	for e := 0; e < cfg.Epochs; e++ {
		s.seen = append(s.seen, make([]uint64, (cfg.Samples+63)/64))
	}
	// The simulation runs on this goroutine alone: lock it to its thread,
	// so the thread's CPU time is the coordinator's when it steps.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	s.coord(func() error { return nil }) // the initial Ready
	for i := range cfg.Nodes {
		n := &node{id: fmt.Sprintf("n%d", i), inc: 1, alive: true, slow: s.rng.Float64() < cfg.SlowFraction}
		for k := range cfg.RanksPerNode {
			r := &rank{id: fmt.Sprintf("%s/%d", n.id, k), node: n}
			n.ranks = append(n.ranks, r)
			s.rankOf[r.id] = r
		}
		s.newProcess(n)
		s.nodes = append(s.nodes, n)
		s.byID[n.id] = n
		s.toCoord = append(s.toCoord, fromNode{ev: s.join(n)})
	}
	const maxSeconds = 30 * 24 * 3600
	var peak, live uint64
	for ; !s.c.Done(); s.now++ {
		if s.now > maxSeconds {
			return s.finish(start, peak), fmt.Errorf("scalesim: job not done after %d simulated seconds", s.now)
		}
		s.tick()
		if err := s.liveness(); err != nil {
			return s.finish(start, peak), err
		}
		if cfg.LiveEvery > 0 && s.now%int64(cfg.LiveEvery) == 0 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			live = max(live, ms.HeapAlloc)
			s.rep.PeakLiveHeapBytes = live
		}
		if s.now%60 == 0 {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			if cfg.Progress != nil {
				var committed int64
				for e := range cfg.Epochs {
					committed += s.c.Epoch(e).Committed
				}
				cfg.Progress(fmt.Sprintf("t=%ds committed %d/%d heap %d MiB kills %d gens %d coord %v",
					s.now, committed, cfg.Samples*int64(cfg.Epochs), ms.HeapAlloc>>20, s.rep.Kills, s.rep.Generations, s.rep.CoordTime.Round(time.Millisecond)))
			}
		}
	}
	rep := s.finish(start, peak)
	if rep.Duplicates != 0 || rep.Missing != 0 {
		return rep, fmt.Errorf("scalesim: exactly once broken: %d samples committed twice, %d never", rep.Duplicates, rep.Missing)
	}
	return rep, nil
}

func (s *sim) finish(start time.Time, peak uint64) Result {
	s.rep.SimSeconds = s.now
	s.rep.WallTime = time.Since(start)
	s.rep.PeakHeapBytes = peak
	s.rep.Stats = s.c.Stats()
	s.rep.Links = s.meter.Totals()
	s.rep.Returned = s.rep.Stats.Returned
	for e, bits := range s.seen {
		st := s.c.Epoch(e)
		s.rep.Committed += st.Committed
		dropped := map[int64]bool{}
		o := s.order(e)
		for _, r := range st.Dropped {
			for p := r.Start; p < r.End; p++ {
				dropped[o.At(p)] = true
			}
		}
		for i := int64(0); i < s.cfg.Samples; i++ {
			if bits[i/64]&(1<<(i%64)) == 0 && !dropped[i] {
				s.rep.Missing++
			}
		}
	}
	if s.rep.Generations > 0 {
		s.rep.MeanGenBytes /= float64(s.rep.Generations)
	}
	if s.reissues > 0 {
		s.rep.MeanReissueSeconds /= float64(s.reissues)
	}
	return s.rep
}

func (s *sim) order(e int) cluster.Order {
	o, ok := s.orders[e]
	if !ok {
		o = s.ccfg.Order(e)
		s.orders[e] = o
	}
	return o
}

func (s *sim) newProcess(n *node) {
	s.newLink(n)
	for _, r := range n.ranks {
		r.runs = cluster.NewRankRuns(r.id)
		r.budget = 0
		r.steps, r.inBatch, r.batches = map[int]int64{}, map[int]int64{}, map[int]int64{}
	}
}

func (s *sim) join(n *node) cluster.Join {
	ids := make([]string, len(n.ranks))
	for i, r := range n.ranks {
		ids[i] = r.id
	}
	s.rep.Joins++
	return cluster.Join{Node: n.id, Incarnation: n.inc, Ranks: ids}
}

// tick is one simulated second: the coordinator takes what nodes sent
// last second and ticks; the nodes apply what it sent, deliver, commit and
// ask for work; then churn.
func (s *sim) tick() {
	due := s.timers[:0:0]
	rest := s.timers[:0]
	for _, t := range s.timers {
		if t.at <= s.now {
			due = append(due, t)
		} else {
			rest = append(rest, t)
		}
	}
	s.timers = rest
	for _, t := range due {
		t.fn()
	}
	in := s.toCoord
	s.toCoord = nil
	frames := s.toCoordFrames
	s.toCoordFrames = nil
	s.coord(func() error {
		for _, m := range in {
			var err error
			if m.node == "" {
				err = s.c.Step(m.ev)
			} else {
				err = s.c.StepFrom(m.node, m.inc, m.ev)
			}
			s.count(m.ev)
			if err != nil && !isRefusal(err) {
				return err
			}
			s.drain()
		}
		if err := s.coordFrames(frames); err != nil {
			return err
		}
		s.c.Step(cluster.Tick{})
		s.drain()
		return nil
	})
	s.reissued() // once a second: Epoch's status is O(ranks)
	for _, n := range s.nodes {
		if !n.alive {
			if n.restart != 0 && s.now >= n.restart {
				n.alive, n.restart = true, 0
				n.inc++
				s.newProcess(n)
				s.toCoord = append(s.toCoord, fromNode{ev: s.join(n)})
			}
			continue
		}
		s.receive(n)
		for _, r := range n.ranks {
			s.turn(n, r)
		}
		s.sendNode(n)
	}
	s.churn()
	s.cut()
}

func isRefusal(err error) bool {
	return err != nil && (errors.Is(err, cluster.ErrFenced) || errors.Is(err, cluster.ErrStale))
}

// coord runs fn (steps) with the coordinator's time counted, then the
// tick's journal write and the acks behind it.
func (s *sim) coord(fn func() error) {
	t0 := threadCPU()
	if err := fn(); err != nil {
		panic(fmt.Sprintf("scalesim: coordinator refused a message as invalid: %v", err))
	}
	s.drain()
	if s.dirty {
		ctx := context.Background()
		g, err := s.j.Write(ctx, s.c.Snapshot(), nil)
		if err != nil {
			panic(fmt.Sprintf("scalesim: journal write: %v", err))
		}
		s.c.Persisted(g)
		oi, err := s.store.Stat(ctx, fmt.Sprintf("gen/%020d", g))
		if err != nil {
			panic(fmt.Sprintf("scalesim: journal generation %d: %v", g, err))
		}
		s.rep.Generations++
		s.rep.MaxGenBytes = max(s.rep.MaxGenBytes, int(oi.Size))
		s.rep.MeanGenBytes += float64(oi.Size)
		s.dirty = false
	}
	s.rep.CoordTime += threadCPU() - t0
	for _, a := range s.pending {
		s.committed(a)
		s.toRank(a.Rank, a)
	}
	s.pending = s.pending[:0]
	s.sendMail()
}

func (s *sim) count(ev cluster.Event) {
	s.rep.Events++
	switch ev.(type) {
	case cluster.Request, cluster.Progress, cluster.LeaseDone, cluster.Commit:
		s.rep.LeaseOps++
	}
}

// drain takes the coordinator's Ready: persist is noted for the end of
// the tick, acks wait for it, the rest goes to the nodes.
func (s *sim) drain() {
	if !s.c.HasReady() {
		return
	}
	rd := s.c.Ready()
	s.dirty = s.dirty || rd.Persist
	s.pending = append(s.pending, rd.Acks...)
	s.rep.LeaseOps += uint64(len(rd.Grants) + len(rd.Revokes))
	for _, w := range rd.Welcomes {
		s.known[w.Node] = max(s.known[w.Node], w.Incarnation)
		s.toNode(w.Node, w.Incarnation, w)
	}
	for _, e := range rd.Evictions {
		s.evicted(e)
		s.toNode(e.Node, e.Incarnation, e)
	}
	for _, f := range rd.Fenced {
		s.toNode(f.Node, s.known[f.Node], f)
	}
	for _, l := range rd.Grants {
		s.toRank(l.Rank, l)
	}
	for _, r := range rd.Revokes {
		s.toRank(r.Rank, r)
	}
	for _, e := range rd.Ends {
		s.toRank(e.Rank, e)
	}
	s.c.Advance()
}

func (s *sim) toRank(id string, m any) {
	if r := s.rankOf[id]; r != nil {
		s.toNode(r.node.id, s.known[r.node.id], m)
	}
}

// evicted notes when a kill's eviction came, and the pool before the
// work its ranks held returns to it.
func (s *sim) evicted(e cluster.Eviction) {
	k := s.kills[e.Node]
	if k == nil || k.evicted {
		return
	}
	k.evicted = true
}

// reissued closes kills whose returned work was leased again: the pool of
// their epoch is back at most where it was before the eviction.
func (s *sim) reissued() {
	for id, k := range s.kills {
		if !k.evicted {
			continue
		}
		if s.c.Epoch(k.epoch).Unleased <= k.unleased || s.c.Epoch(k.epoch).Complete {
			d := s.now - k.at
			s.rep.MaxReissueSeconds = max(s.rep.MaxReissueSeconds, d)
			s.rep.MeanReissueSeconds += float64(d)
			s.reissues++
			delete(s.kills, id)
		}
	}
}

// committed marks what an Ack makes committed history.
func (s *sim) committed(a cluster.Ack) {
	l := s.logs[a.Session][a.Epoch]
	if l == nil || a.Offset <= l.acked {
		return
	}
	n := a.Offset - l.acked
	if n > int64(len(l.items)) {
		panic(fmt.Sprintf("scalesim: ack %+v beyond the %d positions delivered", a, l.acked+int64(len(l.items))))
	}
	bits := s.seen[a.Epoch]
	for _, idx := range l.items[:n] {
		if idx < 0 {
			continue
		}
		w, b := idx/64, uint64(1)<<(idx%64)
		if bits[w]&b != 0 {
			s.rep.Duplicates++
		}
		bits[w] |= b
	}
	l.items = slices.Delete(l.items, 0, int(n))
	l.acked = a.Offset
	s.lastCommit = s.now
}

// receive applies a node's mail in the order the node's actor does.
func (s *sim) receive(n *node) {
	s.receiveFrames(n)
	mail := n.inbox
	n.inbox = nil
	for _, m := range mail {
		switch m := m.(type) {
		case cluster.Welcome:
			if m.Incarnation != n.inc {
				continue
			}
			for _, rs := range m.Ranks {
				r := s.rankOf[rs.Rank]
				acks := make([]cluster.Ack, len(rs.Committed))
				for i, rc := range rs.Committed {
					acks[i] = cluster.Ack{Rank: rc.Rank, Session: rc.Session, Epoch: rc.Epoch, Offset: rc.Offset, Step: rc.Step}
				}
				r.runs.LateAcks(acks)
				if r.runs.Active() {
					if cur := r.runs.Session(); cur == rs.Session || rs.Session.Less(cur) {
						continue
					}
				}
				r.runs.StartSession(rs, s.cfg.Epochs, s.cfg.Batch)
				r.steps, r.inBatch, r.batches = map[int]int64{}, map[int]int64{}, map[int]int64{}
				r.runs.Leases().Request(s.cfg.Lookahead*int64(s.ccfg.ShardSize), false)
			}
		case cluster.Eviction:
			if m.Incarnation != n.inc {
				continue
			}
			s.rejoin(n)
		case cluster.Fenced:
			for _, r := range n.ranks {
				if r.runs.Active() && r.runs.Session() == m.Session {
					r.runs.EndSession()
				}
			}
		case cluster.Lease:
			s.rankOf[m.Rank].runs.Grant(m)
		case cluster.Revoke:
			s.rankOf[m.Rank].runs.Revoke(m)
		case cluster.StreamEnd:
			s.rankOf[m.Rank].runs.End(m)
		case cluster.Ack:
			s.rankOf[m.Rank].runs.Ack(m)
		}
	}
	for _, r := range n.ranks {
		s.flush(n, r)
	}
}

// turn is one simulated second of a rank: its pipeline asks for runs as
// its trainer consumes, delivers them, and the trainer commits.
func (s *sim) turn(n *node, r *rank) {
	if !r.runs.Active() {
		return
	}
	rate := s.cfg.Rate
	if n.slow {
		rate /= s.cfg.SlowFactor
	}
	r.budget += rate
	for r.budget >= 1 {
		run, ok := r.runs.Fill(int(r.budget), false)
		if !ok {
			r.budget = min(r.budget, rate) // idle: what it could not use is lost
			break
		}
		r.budget -= float64(len(run.Positions))
		s.deliver(r, run)
		for _, ev := range r.runs.Progress(run) {
			s.fromNode(n, ev)
		}
	}
	r.runs.Leases().Request(s.cfg.Lookahead*int64(s.ccfg.ShardSize), s.now%5 == 0)
	s.flush(n, r)
}

func (s *sim) deliver(r *rank, run cluster.Run) {
	e := run.Epoch
	sess := r.runs.Session()
	logs := s.logs[sess]
	if logs == nil {
		logs = map[int]*epochLog{}
		s.logs[sess] = logs
	}
	l := logs[e]
	if l == nil {
		l = &epochLog{}
		logs[e] = l
	}
	if run.Start == run.Base {
		r.steps[e], r.inBatch[e] = run.Step, 0
	}
	o := s.order(e)
	for _, p := range run.Positions {
		idx, pad := o.Sample(p.Pos)
		if pad || p.Pad {
			idx = -1
		}
		l.items = append(l.items, idx)
		if r.inBatch[e]++; r.inBatch[e] == s.cfg.Batch {
			s.batchDone(r, e)
		}
	}
	if run.RunEnd && r.inBatch[e] > 0 {
		s.batchDone(r, e)
	}
	if run.StreamEnd && r.steps[e] > 0 {
		s.commit(r, e, r.steps[e]-1)
	}
}

func (s *sim) batchDone(r *rank, e int) {
	step := r.steps[e]
	r.steps[e]++
	r.inBatch[e] = 0
	if r.batches[e]++; r.batches[e]%s.cfg.CommitEvery == 0 {
		s.commit(r, e, step)
	}
}

func (s *sim) commit(r *rank, e int, step int64) {
	if err := r.runs.Commit(e, step); err != nil {
		panic(fmt.Sprintf("scalesim: rank %s: commit of epoch %d step %d: %v", r.id, e, step, err))
	}
}

func (s *sim) flush(n *node, r *rank) {
	if rl := r.runs.Leases(); rl != nil {
		for _, ev := range rl.Messages() {
			s.fromNode(n, ev)
		}
	}
}

// churn kills nodes at the configured rate; gossip reports each failure
// DetectSeconds later.
func (s *sim) churn() {
	p := s.cfg.ChurnPerHour / 3600
	if p <= 0 {
		return
	}
	for _, n := range s.nodes {
		if !n.alive || s.rng.Float64() >= p {
			continue
		}
		n.alive = false
		n.killed = s.now
		n.restart = s.now + s.cfg.RestartSeconds
		n.inbox, n.out, n.frames = nil, nil, nil
		s.rep.Kills++
		epoch := 0
		for e := range s.cfg.Epochs {
			if st := s.c.Epoch(e); st.Started && !st.Complete {
				epoch = e
				break
			}
		}
		inc := n.inc
		s.later(s.cfg.DetectSeconds, func() {
			s.kills[n.id] = &kill{at: n.killed, epoch: epoch, unleased: s.c.Epoch(epoch).Unleased}
			s.toCoord = append(s.toCoord, fromNode{ev: cluster.Fail{Node: n.id, Incarnation: inc}})
		})
	}
}

// rusageThread is Linux's RUSAGE_THREAD: the calling thread's usage.
const rusageThread = 1

// threadCPU is the calling thread's CPU time (user and system).
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		panic(fmt.Sprintf("scalesim: getrusage: %v", err))
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
