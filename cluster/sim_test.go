package cluster

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// The simulation drives one Coordinator and N simulated nodes, each with
// ranks that deliver samples and trainers that commit, through a network
// that delays, reorders and duplicates every message, under a seeded
// schedule of node crashes, false failure reports, joins mid-epoch, slow
// ranks and coordinator crashes. The coordinator persists to a model of
// the journal (cluster/journal: numbered generations, each written once,
// the generation number doubling as the next incarnation), and the
// schedule also loses journal writes (the coordinator stops; a write may
// have landed although it reported failure), races a stale coordinator
// against its replacement (the stale one keeps sending until its next
// journal write fails; or the replacement loses the race and stops), and
// restores older tokens: a generation other than the newest, whereupon
// committed history is what that generation held — the trainer loaded
// the model saved beside that token. Everything is a function of the
// seed: a failing seed prints itself and replays with -seed.
//
// Each node rank is the real node side, RankRuns, as the node's actor
// drives it: Welcomes start sessions (after their late acknowledgements),
// the coordinator's messages go to it, a model pipeline asks it for runs
// (Fill) and a model trainer commits steps through it (Commit). Only the
// node's process life is modelled: a crash starts a new RankRuns, an
// eviction keeps it.
//
// After each run it checks the promise:
//   - per epoch, the samples in acknowledged commits of every rank session
//     that ever lived are exactly the dataset (less what DropRemainder
//     dropped): none missing, none twice, padding excluded;
//   - with EqualSteps, every member of an epoch during which membership
//     did not change ends it with the same stream length (the same number
//     of batches), and delivers exactly that;
//   - no message from a fenced session is ever accepted, and no Ack goes
//     to one;
//   - every run the node side hands the pipeline continues its session's
//     stream of the job's epoch in order (each offset once), names the
//     sample the epoch's order puts there (so augmentations, seeded by
//     job epoch and sample index, are the same whatever the cluster did),
//     and numbers its steps on from the rank's last acknowledged step;
//   - the job finishes (liveness) once faults stop.
var (
	simSeed  = flag.Uint64("seed", 0, "run only this simulation seed (0: run -seeds seeds from 1)")
	simSeeds = flag.Int("seeds", 2000, "how many simulation seeds TestSimulation runs")
	simTrace = flag.Bool("simtrace", false, "log every simulation event (with -seed)")
)

var raceEnabled bool

func seedsFlagSet() (set bool) {
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "seeds" })
	return set
}

func TestSimulation(t *testing.T) {
	if *simSeed != 0 {
		var log func(string, ...any)
		if *simTrace {
			log = t.Logf
		}
		st, err := simulate(*simSeed, log)
		if err != nil {
			t.Fatalf("seed %d: %v", *simSeed, err)
		}
		t.Logf("seed %d: %+v", *simSeed, st)
		return
	}
	n := *simSeeds
	if testing.Short() || raceEnabled && !seedsFlagSet() {
		n = min(n, 200)
	}
	start := time.Now()
	var total simStats
	for seed := uint64(1); seed <= uint64(n); seed++ {
		st, err := simulate(seed, nil)
		if err != nil {
			t.Fatalf("seed %d: %v\nreproduce: go test ./cluster/ -run 'TestSimulation$' -seed %d -simtrace", seed, err, seed)
		}
		total.add(st)
	}
	t.Logf("%d seeds in %v: %+v", n, time.Since(start).Round(time.Millisecond), total)
}

type simStats struct {
	Steps, Delivered, Grants, Commits, Acks, Crashes, FalseFails, Joins, CoordCrashes,
	Fenced, FencedAnswers, Revokes, EqualEpochs, Held, HeldRequests, WelcomeResends, LostWrites, LandedLost, Races, StaleSteps, Rewinds, Resets int
	Lost, Cuts, Resent, LossySeeds, RecoverySteps, MaxRecovery int
	// LineageSteps are committed steps the journal's trails answered
	// and the check compared; UncertainSteps those they mark uncertain
	// (a stream end's commit that never reached the coordinator), which
	// only the seeds whose nodes do not tell their cuts (OldNodeSeeds)
	// may have; OldNodeSteps the steps of those seeds' trails.
	LineageSteps, UncertainSteps, UncertainLinked int
	OldNodeSeeds, OldNodeSteps                    int
}

func (s *simStats) add(o simStats) {
	s.Steps += o.Steps
	s.Delivered += o.Delivered
	s.Grants += o.Grants
	s.Commits += o.Commits
	s.Acks += o.Acks
	s.Crashes += o.Crashes
	s.FalseFails += o.FalseFails
	s.Joins += o.Joins
	s.CoordCrashes += o.CoordCrashes
	s.Fenced += o.Fenced
	s.FencedAnswers += o.FencedAnswers
	s.Revokes += o.Revokes
	s.EqualEpochs += o.EqualEpochs
	s.Held += o.Held
	s.HeldRequests += o.HeldRequests
	s.WelcomeResends += o.WelcomeResends
	s.LostWrites += o.LostWrites
	s.LandedLost += o.LandedLost
	s.Races += o.Races
	s.Resets += o.Resets
	s.StaleSteps += o.StaleSteps
	s.Rewinds += o.Rewinds
	s.Lost += o.Lost
	s.Cuts += o.Cuts
	s.Resent += o.Resent
	s.LossySeeds += o.LossySeeds
	s.RecoverySteps += o.RecoverySteps
	s.MaxRecovery = max(s.MaxRecovery, o.MaxRecovery)
	s.LineageSteps += o.LineageSteps
	s.UncertainSteps += o.UncertainSteps
	s.UncertainLinked += o.UncertainLinked
	s.OldNodeSeeds += o.OldNodeSeeds
	s.OldNodeSteps += o.OldNodeSteps
}

type simMsg struct {
	due  int64
	ev   Event       // to the coordinator, when non-nil
	from *simSession // its sender, nil for gossip
	node string      // else to this node life
	inc  uint64
	body any
	// frame, when the simulation runs links, says which link frame the
	// message is: traffic between the coordinator and a node life (not
	// gossip) goes through a Link at each end and may be lost.
	frame *simFrame
}

type simNode struct {
	id      string
	inc     uint64
	alive   bool
	speed   int  // samples per turn
	slow    bool // acts a fifth as often
	nRank   int
	rankIDs []string
	sess    map[string]*simSession // current session per rank
	runs    map[string]*RankRuns   // the node side of each rank, for this process life
	// The node life's link to the coordinator life it follows (the
	// newest it heard from), as the node's actor keeps it.
	coordInc uint64
	link     *Link[simBody, []any]
}

type simSession struct {
	rank      string
	node      *simNode
	inc       uint64
	fence     Fence
	welcome   RankSession
	rl        *RankLeases       // the node side's, once the session started there
	items     map[int][]simItem // delivered, per epoch, in stream order
	steps     map[int]int64     // per epoch: the step the pipeline's next batch is
	inBatch   map[int]int64     // per epoch: positions of that batch delivered
	batches   map[int]int64     // per epoch: batches completed in this session
	durable   map[int]int64     // committed prefix: acks made durable, less any rewind
	maxAck    map[int]int64     // largest Ack the coordinator sent
	lookahead int64
	dead      bool // its node life ended (crash, eviction, new coordinator)
	fenced    bool // the coordinator fenced it: nothing it sends may be accepted
}

type simItem struct {
	sample int64
	pad    bool
	lease  Fence
	pos    int64
	step   int64 // the trainer's step it was delivered in
}

type sim struct {
	seed    uint64
	rng     *rand.Rand
	log     func(string, ...any)
	cfg     Config
	granted bool // the first grants were seen
	batch   int64
	every   int64 // commit every this many batches
	c       *Coordinator
	now     int64
	net     []*simMsg
	nodes   map[string]*simNode
	order   []*simNode
	nextID  int

	sessions  []*simSession
	bySession map[Fence]*simSession

	// The journal model: how many generations were written, and the
	// newest few with the committed history each held.
	nGens int
	gens  []simGen
	// archive is the journal's lineage archive model: each completed
	// epoch's trails, as the last generation holding them had them.
	archive map[int][]Trail
	// stale is a replaced coordinator still running until its next
	// journal write fails or staleUntil.
	stale      *Coordinator
	staleUntil int64

	// Message loss (with links): each message between the coordinator
	// and a node is lost with lossP, and a cut (cutP) loses everything in
	// flight between the coordinator and one node and all it sends
	// until cutUntil.
	linked bool
	// oldNodes: the nodes' commits do not say where their runs were cut
	// (nodes from before Commit.Cuts; one seed in 8), so the trails'
	// steps may be uncertain.
	oldNodes                            bool
	lossP, cutP                         float64
	cutUntil                            map[string]int64
	clinks                              map[simLinkKey]*simCLink
	lastFault                           int64 // the step of the last fault injected
	dupP, crashP, falseP, joinP, coordP float64
	lostP, rewindP, raceP, resetP       float64
	maxDelay                            int64

	disturbed map[int]bool
	open      map[int]bool
	finalLen  map[int]map[*simSession]int64
	members   map[int]int
	stats     simStats
	err       error
	faulting  bool
	mail      map[simMailKey][]any // link frames a Ready queued, per node life
	mailOrder []simMailKey
}

type simGen struct {
	state   State
	durable map[*simSession]map[int]int64
}

// simKeep is how many generations the journal model keeps for rewinds.
const simKeep = 16

func (s *sim) logf(format string, args ...any) {
	if s.log != nil {
		s.log("t=%d "+format, append([]any{s.now}, args...)...)
	}
}

func (s *sim) fail(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("t=%d: "+format, append([]any{s.now}, args...)...)
	}
}

func simulate(seed uint64, log func(string, ...any)) (simStats, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	s := &sim{
		seed: seed, rng: rng, log: log,
		nodes: map[string]*simNode{}, bySession: map[Fence]*simSession{},
		disturbed: map[int]bool{}, open: map[int]bool{}, finalLen: map[int]map[*simSession]int64{}, members: map[int]int{},
	}
	cfg := DefaultConfig()
	switch p := rng.IntN(100); {
	case p < 2:
		cfg.Samples = 0
	case p < 5:
		cfg.Samples = 1
	case p < 30:
		cfg.Samples = 2 + rng.Int64N(19)
	default:
		cfg.Samples = 21 + rng.Int64N(380)
	}
	cfg.Seed = rng.Uint64()
	cfg.Epochs = 1 + rng.IntN(3)
	cfg.ShardSize = []int{1, 2, 3, 5, 8, 16, 32, 64}[rng.IntN(8)]
	if cfg.Samples/int64(cfg.ShardSize) > 100 {
		cfg.ShardSize = int(cfg.Samples/100) + 1
	}
	cfg.Block = []int{1, 2, 7, 64, int(cfg.Samples) + 1}[rng.IntN(5)]
	cfg.Window = []int{1, 1, 3, 128}[rng.IntN(4)]
	if rng.IntN(10) < 3 {
		cfg.Balance = Dynamic
	} else {
		cfg.DropRemainder = rng.IntN(10) < 3
	}
	cfg.StealMin = 1 + rng.IntN(4)
	if rng.IntN(3) == 0 {
		cfg.MinRanks = 2 + rng.IntN(5)
	}
	cfg.RevokeTimeout = 0
	if rng.IntN(2) == 0 {
		cfg.RevokeTimeout = 5 + rng.IntN(30)
	}
	s.batch = 1 + rng.Int64N(8)
	if seed%2 == 0 {
		cfg.BatchSize = s.batch // the core trims its trails' commits
	}
	s.cfg = cfg
	s.every = 1 + rng.Int64N(4)
	s.maxDelay = rng.Int64N(25)
	s.dupP = []float64{0, 0.02, 0.1}[rng.IntN(3)]
	faulty := rng.IntN(10) < 8
	if faulty {
		s.crashP = []float64{0, 0.002, 0.01}[rng.IntN(3)]
		s.falseP = []float64{0, 0.002, 0.01}[rng.IntN(3)]
		s.joinP = []float64{0, 0.002, 0.01}[rng.IntN(3)]
		if rng.IntN(5) == 0 {
			s.coordP = 0.002
		}
		if rng.IntN(4) == 0 {
			s.lostP = []float64{0.002, 0.01}[rng.IntN(2)]
		}
		if rng.IntN(4) == 0 {
			s.rewindP = 0.002
		}
		if rng.IntN(4) == 0 {
			s.raceP = 0.002
		}
		s.resetP = []float64{0, 0.002, 0.01}[rng.IntN(3)]
		if rng.IntN(2) == 0 {
			s.lossP = []float64{0.01, 0.05, 0.2}[rng.IntN(3)]
			s.cutP = []float64{0, 0.002, 0.01}[rng.IntN(3)]
		}
	}
	// Links carry the traffic between the coordinator and the nodes in
	// every seed that loses messages and in some that do not (the
	// others keep the network that reorders freely).
	s.linked = s.lossP > 0 || s.cutP > 0 || rng.IntN(4) == 0
	s.oldNodes = seed%8 == 0 // not drawn: the other seeds run as they did
	if s.oldNodes {
		s.stats.OldNodeSeeds++
	}
	s.cutUntil, s.clinks = map[string]int64{}, map[simLinkKey]*simCLink{}
	if s.lossP > 0 || s.cutP > 0 {
		s.stats.LossySeeds++
	}
	var err error
	if s.c, err = NewCoordinator(cfg); err != nil {
		return s.stats, err
	}
	s.logf("config %+v batch=%d every=%d delay=%d dup=%v crash=%v false=%v join=%v coord=%v lost=%v rewind=%v race=%v linked=%v loss=%v cut=%v old-nodes=%v",
		cfg, s.batch, s.every, s.maxDelay, s.dupP, s.crashP, s.falseP, s.joinP, s.coordP, s.lostP, s.rewindP, s.raceP, s.linked, s.lossP, s.cutP, s.oldNodes)
	s.handleReady() // the initial generation

	for range 1 + rng.IntN(4) {
		s.newNode()
	}
	for s.initialRanks() < cfg.MinRanks {
		s.newNode() // a job started with its nodes: enough of them come up
	}
	faultSteps := 2000 + rng.IntN(4000)
	// Liveness: once faults stop, the job must keep delivering and
	// finish. A slow node holding the rest of an epoch finishes it alone
	// (the other ranks moved on), so the bound is on steps without a
	// delivery, and a much larger one on the whole run.
	const maxSteps, maxIdle = 2_000_000, 200_000
	doneAt, lastDelivered, lastDelivery := -1, -1, 0
	faultEnd, doneNow, lastDeliveryNow := int64(-1), int64(-1), int64(0) // when faults stopped (messages stop being lost), when the job was done
	for step := 0; step < maxSteps && s.err == nil && step-lastDelivery < maxIdle; step++ {
		if s.stats.Delivered != lastDelivered {
			lastDelivered, lastDelivery = s.stats.Delivered, step
			lastDeliveryNow = s.now
		}
		if faultEnd >= 0 && doneNow < 0 {
			// Once faults stop, no stretch without a delivery may be
			// longer than the links take to repair what was lost.
			idle := int(s.now - max(lastDeliveryNow, faultEnd))
			s.stats.MaxRecovery = max(s.stats.MaxRecovery, idle)
			if s.linked && idle > simRecoveryBound {
				return s.stats, fmt.Errorf("%d steps without a delivery after the last fault, bound %d (liveness): %s", idle, simRecoveryBound, s.describe())
			}
		}
		s.now++
		s.stats.Steps++
		if s.log != nil && s.now%2000 == 0 {
			var acks, toC, toN, plain int
			for _, m := range s.net {
				switch {
				case m.frame == nil:
					plain++
				case m.frame.seq == 0:
					acks++
				case m.frame.toCoord:
					toC++
				default:
					toN++
				}
			}
			s.logf("net %d msgs, %d nodes: %d acks %d to coord %d to nodes %d plain; resent %d", len(s.net), len(s.order), acks, toC, toN, plain, s.stats.Resent)
		}
		if s.stale != nil && s.now > s.staleUntil {
			s.logf("stale coordinator's journal check fails; it stops")
			s.stale = nil
		}
		if s.c.Done() && doneAt < 0 {
			doneAt = step
		}
		if doneAt >= 0 && len(s.net) == 0 && s.linksIdle() {
			break
		}
		faults := step < faultSteps && doneAt < 0
		s.faulting = faults
		if !faults && faultEnd < 0 {
			faultEnd = s.now
			for _, u := range s.cutUntil {
				faultEnd = max(faultEnd, u)
			}
		}
		if doneAt >= 0 && doneNow < 0 {
			doneNow = s.now
		}
		switch p := rng.Float64(); {
		case p < 0.45:
			s.deliver()
		case p < 0.85:
			if doneAt < 0 || rng.IntN(2) == 0 {
				s.turn()
			} else {
				s.deliver()
			}
		case p < 0.88:
			s.step(Tick{}, nil)
			s.linkTick()
		default:
			if faults {
				s.fault()
			} else {
				s.recover()
			}
		}
	}
	if s.err != nil {
		return s.stats, s.err
	}
	if !s.c.Done() {
		return s.stats, fmt.Errorf("job not done after %d steps, %d of them without a delivery (liveness): %s", s.stats.Steps, s.stats.Steps-lastDelivery, s.describe())
	}
	if faultEnd >= 0 && doneNow > faultEnd {
		s.stats.RecoverySteps += int(doneNow - faultEnd)
	}
	// Let every live rank finish delivering what it holds (trailing
	// padding), then check.
	for range 10_000 {
		if !s.turnAll() {
			break
		}
	}
	s.check()
	s.stats.Held += int(s.c.Stats().HeldCommits)
	s.stats.HeldRequests += int(s.c.Stats().HeldRequests)
	return s.stats, s.err
}

func (s *sim) describe() string {
	var b strings.Builder
	for e := range s.cfg.Epochs {
		fmt.Fprintf(&b, "\n epoch %d: %+v", e, s.c.Epoch(e))
	}
	for _, n := range s.order {
		fmt.Fprintf(&b, "\n node %s inc %d alive %v", n.id, n.inc, n.alive)
		for _, id := range n.rankIDs {
			fmt.Fprintf(&b, "\n  runs %s", n.runs[id])
		}
		for _, ss := range n.sess {
			if ss.rl == nil {
				fmt.Fprintf(&b, "\n  %s %v not started dead=%v fenced=%v", ss.rank, ss.fence, ss.dead, ss.fenced)
				continue
			}
			fmt.Fprintf(&b, "\n  %s %v epoch=%d dead=%v fenced=%v", ss.rank, ss.fence, ss.rl.Epoch(), ss.dead, ss.fenced)
			for e, st := range ss.rl.streams {
				fmt.Fprintf(&b, " [e%d held=%d next=%d taken=%d end=%+v complete=%v committed=%d req=%d]",
					e, len(st.leases), st.next, st.taken, st.end, st.complete, ss.durable[e], st.requested)
			}
		}
	}
	fmt.Fprintf(&b, "\n net %d msgs", len(s.net))
	return b.String()
}

// --- network ---

func (s *sim) send(m *simMsg) {
	if s.lose(m) {
		return
	}
	m.due = s.now + s.rng.Int64N(s.maxDelay+1)
	s.net = append(s.net, m)
	if s.rng.Float64() < s.dupP {
		d := *m
		d.due = s.now + s.rng.Int64N(3*s.maxDelay+1)
		s.net = append(s.net, &d)
	}
}

func (s *sim) toCoord(ev Event, from *simSession) {
	if s.linked && from != nil {
		s.linkToCoord([]Event{ev}, from)
		return
	}
	s.send(&simMsg{ev: ev, from: from})
}

func (s *sim) toNode(c *Coordinator, n *simNode, inc uint64, body any) {
	if s.linked {
		s.linkToNode(c, n, inc, body)
		return
	}
	s.send(&simMsg{node: n.id, inc: inc, body: body})
}

// deliver hands one due message, picked at random, to its receiver.
func (s *sim) deliver() {
	n := 1
	if s.linked {
		// Links add acknowledgements and resends: a network that carries
		// one message per step would drown in them once it backs up, as
		// no real one does. Carry more when many are due.
		due := 0
		for _, m := range s.net {
			if m.due <= s.now {
				due++
			}
		}
		n = 1 + due/8
	}
	for range n {
		s.deliverOne()
	}
}

func (s *sim) deliverOne() {
	// Pick uniformly among the due messages (reservoir sampling).
	i, k := -1, 0
	for j, m := range s.net {
		if m.due <= s.now {
			k++
			if s.rng.IntN(k) == 0 {
				i = j
			}
		}
	}
	if i < 0 {
		return
	}
	m := s.net[i]
	s.net = slices.Delete(s.net, i, i+1)
	if m.frame != nil {
		s.deliverFrame(m)
		return
	}
	if m.ev != nil {
		if s.stale != nil {
			// Gossip reaches both coordinators; a rank's message goes to
			// the coordinator life that gave it its session, which may be
			// the stale one.
			if m.from == nil || m.from.fence.Incarnation == s.stale.Config().Incarnation {
				s.stats.StaleSteps++
				s.stepOn(s.stale, m.ev, m.from)
				if m.from != nil {
					return
				}
			}
		}
		s.step(m.ev, m.from)
		return
	}
	n := s.nodes[m.node]
	if n == nil || !n.alive || n.inc != m.inc {
		return // that process is gone
	}
	s.nodeReceive(n, m.body)
}

// --- coordinator side ---

func (s *sim) step(ev Event, from *simSession) { s.stepOn(s.c, ev, from) }

func (s *sim) stepOn(c *Coordinator, ev Event, from *simSession) {
	if c == nil {
		return
	}
	var err error
	if from != nil {
		err = c.StepFrom(from.node.id, from.inc, ev)
	} else {
		err = c.Step(ev)
	}
	if from != nil && from.fenced && c == s.c {
		if err == nil {
			s.fail("coordinator accepted %T %+v from fenced session %s %v", ev, ev, from.rank, from.fence)
		}
		s.stats.Fenced++
	}
	if err != nil && errors.Is(err, ErrInvalid) {
		s.fail("%T %+v: %v", ev, ev, err)
	}
	if err != nil {
		s.logf("refused %T %+v: %v", ev, ev, err)
	} else if _, tick := ev.(Tick); !tick {
		s.logf("step %T %+v (stale=%v)", ev, ev, c != s.c)
	}
	s.handleReadyOf(c)
}

func (s *sim) handleReady() { s.handleReadyOf(s.c) }

// persist writes c's state as the next generation, with the committed
// history it makes durable.
func (s *sim) persist(c *Coordinator, rd Ready) {
	for _, a := range rd.Acks {
		if ss := s.bySession[a.Session]; ss != nil {
			ss.durable[a.Epoch] = max(ss.durable[a.Epoch], a.Offset)
		}
	}
	s.nGens++
	g := simGen{state: c.Snapshot()}
	for e, es := range g.state.Epochs {
		if es.Complete && len(es.Trails) > 0 {
			if s.archive == nil {
				s.archive = map[int][]Trail{}
			}
			s.archive[e] = es.Trails
		}
	}
	c.Persisted(uint64(s.nGens))
	if s.rewindP > 0 {
		g.durable = map[*simSession]map[int]int64{}
		for _, ss := range s.sessions {
			if len(ss.durable) > 0 {
				g.durable[ss] = maps.Clone(ss.durable)
			}
		}
	}
	s.gens = append(s.gens, g)
	if len(s.gens) > simKeep {
		s.gens = slices.Delete(s.gens, 0, len(s.gens)-simKeep)
	}
}

func (s *sim) handleReadyOf(c *Coordinator) {
	if !c.HasReady() {
		return
	}
	rd := c.Ready()
	stale := c != s.c
	if rd.Persist {
		switch {
		case stale:
			// The replacement has written since: the stale one's write
			// fails its condition and it stops, sending nothing of rd.
			s.logf("stale coordinator's journal write loses; it steps down")
			s.stale = nil
			return
		case len(s.gens) > 0 && s.rng.Float64() < s.lostP:
			landed := s.rng.IntN(2) == 0
			s.stats.LostWrites++
			if landed {
				s.stats.LandedLost++
				s.persist(c, rd)
			}
			s.logf("journal write lost (landed=%v); the coordinator stops and is restarted", landed)
			s.restore(len(s.gens) - 1)
			return
		}
		s.persist(c, rd)
	}
	if stale {
		s.disturbAll()
	}
	for _, w := range rd.Welcomes {
		n := s.nodes[w.Node]
		for _, rs := range w.Ranks {
			if old := s.bySession[rs.Session]; old != nil {
				// A resend (WelcomeResend): the session exists; its node
				// may not have heard of it yet.
				s.stats.WelcomeResends++
				if !stale {
					s.checkWelcomeCommits(c, rs)
				}
				if old.rank != rs.Rank || old.node != n || old.inc != w.Incarnation {
					s.fail("a Welcome names session %v of %s on %s/%d, first welcomed as %s on %s/%d", rs.Session, rs.Rank, w.Node, w.Incarnation, old.rank, old.node.id, old.inc)
				}
				continue
			}
			if !stale {
				s.checkWelcomeCommits(c, rs)
				for _, old := range s.sessions {
					if old.rank == rs.Rank && old.fence.Less(rs.Session) {
						old.fenced = true // a rank's new session fences its older ones
					}
				}
			}
			ss := &simSession{
				rank: rs.Rank, node: n, inc: w.Incarnation, fence: rs.Session, welcome: rs,
				items: map[int][]simItem{}, durable: map[int]int64{}, maxAck: map[int]int64{},
				steps: map[int]int64{}, inBatch: map[int]int64{}, batches: map[int]int64{},
				lookahead: int64(1+s.rng.IntN(3)) * int64(s.cfg.ShardSize),
				fenced:    stale, // the current coordinator never heard of it
			}
			s.sessions = append(s.sessions, ss)
			s.bySession[ss.fence] = ss
			for e := range s.cfg.Epochs {
				if !stale && e >= rs.FirstEpoch && s.isOpen(e, rd) {
					s.disturbed[e] = true
				}
			}
		}
		s.toNode(c, n, w.Incarnation, w)
	}
	for _, ev := range rd.Evictions {
		for _, ss := range s.sessions {
			if !stale && ss.node.id == ev.Node && ss.inc == ev.Incarnation {
				ss.fenced = true
			}
		}
		for e := range s.cfg.Epochs {
			if !stale && s.isOpen(e, rd) {
				s.disturbed[e] = true
			}
		}
		if n := s.nodes[ev.Node]; n != nil {
			s.toNode(c, n, ev.Incarnation, ev)
		}
	}
	for _, f := range rd.Fenced {
		ss := s.bySession[f.Session]
		switch {
		case ss == nil || ss.node.id != f.Node:
			s.fail("fenced answer %+v names no session of that node", f)
			continue
		case !ss.fenced && !stale:
			s.fail("fenced answer %+v to a session the coordinator holds live", f)
		}
		s.stats.FencedAnswers++
		s.toNode(c, ss.node, ss.inc, f)
	}
	for _, a := range rd.Acks {
		ss := s.bySession[a.Session]
		if ss == nil || ss.fenced || stale {
			s.fail("ack %+v to fenced or unknown session (stale coordinator: %v)", a, stale)
			continue
		}
		s.stats.Acks++
		// Committed history is what the coordinator made durable and
		// acknowledged, whether or not the Ack reaches a node that may
		// have crashed since sending the commit.
		if k := int64(len(ss.items[a.Epoch])); a.Offset > k {
			s.fail("ack %+v beyond the %d positions the rank delivered", a, k)
		}
		ss.maxAck[a.Epoch] = max(ss.maxAck[a.Epoch], a.Offset)
		s.toNode(c, ss.node, ss.inc, a)
	}
	if s.log != nil {
		for _, l := range rd.Grants {
			s.logf("grant %s e%d #%d %v [%d,%d) pad=%v", l.Rank, l.Epoch, l.Index, l.Fence, l.Start, l.End, l.Pad)
		}
		for _, e := range rd.Ends {
			s.logf("end %+v", e)
		}
		for _, a := range rd.Acks {
			s.logf("ack %+v", a)
		}
		for _, r := range rd.Revokes {
			s.logf("revoke %+v", r)
		}
		if len(rd.Evictions) > 0 {
			s.logf("evict %+v", rd.Evictions)
		}
	}
	if (len(rd.Grants) > 0 || len(rd.Ends) > 0) && !s.granted {
		// MinRanks: the first epoch starts only once that many ranks
		// have joined (grants, or stream ends when the epoch holds
		// nothing for them, follow in the Ready of the Request that
		// started it).
		s.granted = true
		if n := len(c.Ranks()); n < s.cfg.MinRanks {
			s.fail("first grants with %d ranks joined, MinRanks %d", n, s.cfg.MinRanks)
		}
	}
	for _, l := range rd.Grants {
		s.stats.Grants++
		ss := s.bySession[l.Session]
		s.toNode(c, ss.node, ss.inc, l)
	}
	for _, r := range rd.Revokes {
		s.stats.Revokes++
		ss := s.bySession[r.Session]
		s.toNode(c, ss.node, ss.inc, r)
	}
	for _, e := range rd.Ends {
		ss := s.bySession[e.Session]
		if !stale && e.EpochComplete && slices.Contains(rd.EpochsCompleted, e.Epoch) {
			if s.finalLen[e.Epoch] == nil {
				s.finalLen[e.Epoch] = map[*simSession]int64{}
			}
			s.finalLen[e.Epoch][ss] = e.Length
		}
		s.toNode(c, ss.node, ss.inc, e)
	}
	c.Advance()
	s.flushMail(c)
	if stale {
		return
	}
	for _, e := range rd.EpochsCompleted {
		s.members[e] = s.c.Epoch(e).Members
		s.logf("epoch %d complete", e)
	}
	for e := range s.cfg.Epochs {
		st := s.c.Epoch(e)
		s.open[e] = st.Started && !st.Complete
	}
}

// isOpen reports whether epoch e was open before the step that produced
// rd, or is open after it.
// checkWelcomeCommits checks that a Welcome hands rank rs.Rank exactly the
// durable last commit of each of its earlier sessions' that the
// coordinator keeps: for every open epoch, the newest session that made a
// commit durable there, at the offset it made durable.
func (s *sim) checkWelcomeCommits(c *Coordinator, rs RankSession) {
	got := map[int]RankCommit{}
	for _, rc := range rs.Committed {
		ss := s.bySession[rc.Session]
		switch {
		case ss == nil || ss.rank != rs.Rank:
			s.fail("welcome of %s carries %+v, not one of its sessions", rs.Rank, rc)
		case ss.durable[rc.Epoch] != rc.Offset:
			s.fail("welcome of %s carries %+v; that session's durable commit is %d", rs.Rank, rc, ss.durable[rc.Epoch])
		case rc.Gen == 0:
			s.fail("welcome of %s carries %+v, not yet durable", rs.Rank, rc)
		}
		if _, dup := got[rc.Epoch]; dup {
			s.fail("welcome of %s carries two records for epoch %d", rs.Rank, rc.Epoch)
		}
		got[rc.Epoch] = rc
	}
	newest := map[int]*simSession{}
	for _, ss := range s.sessions {
		if ss.rank != rs.Rank {
			continue
		}
		for e, off := range ss.durable {
			if off > 0 && (newest[e] == nil || newest[e].fence.Less(ss.fence)) {
				newest[e] = ss
			}
		}
	}
	for e, ss := range newest {
		if st := c.Epoch(e); !st.Started || st.Complete {
			continue // kept only for the epoch that completed last
		}
		if rc, ok := got[e]; !ok || rc.Session != ss.fence {
			s.fail("welcome of %s: epoch %d's newest durable commit is session %v at %d; the welcome says %+v",
				rs.Rank, e, ss.fence, ss.durable[e], got[e])
		}
	}
}

func (s *sim) isOpen(e int, rd Ready) bool {
	st := s.c.Epoch(e)
	return s.open[e] || (st.Started && !st.Complete) || slices.Contains(rd.EpochsCompleted, e)
}

func (s *sim) disturbAll() {
	for e := range s.cfg.Epochs {
		if st := s.c.Epoch(e); st.Started && !st.Complete {
			s.disturbed[e] = true
		}
	}
}

// --- faults ---

func (s *sim) newNode() {
	s.nextID++
	n := &simNode{
		id: fmt.Sprintf("n%d", s.nextID), inc: 1, alive: true,
		speed: 1 + s.rng.IntN(4), slow: s.rng.IntN(6) == 0, nRank: 1 + s.rng.IntN(3),
		sess: map[string]*simSession{},
	}
	for i := range n.nRank {
		n.rankIDs = append(n.rankIDs, fmt.Sprintf("%s/%d", n.id, i))
	}
	s.newProcess(n)
	s.nodes[n.id] = n
	s.order = append(s.order, n)
	s.stats.Joins++
	s.gossipJoin(n)
}

func (s *sim) initialRanks() int {
	n := 0
	for _, nd := range s.nodes {
		n += nd.nRank
	}
	return n
}

func (s *sim) gossipJoin(n *simNode) {
	s.toCoord(Join{Node: n.id, Incarnation: n.inc, Ranks: n.rankIDs}, nil)
}

// newProcess gives a node (new, or restarted after a crash) the node side
// of a new process: no steps acknowledged, no earlier session.
func (s *sim) newProcess(n *simNode) {
	n.link, n.coordInc = nil, 0
	n.runs = map[string]*RankRuns{}
	for _, id := range n.rankIDs {
		n.runs[id] = NewRankRuns(id)
	}
}

// endLife ends a node's current life: its sessions can do nothing more.
// An evicted node's process lives on (its node side ends the sessions and
// keeps its steps); a crashed one's does not.
func (s *sim) endLife(n *simNode) {
	for _, ss := range n.sess {
		ss.dead = true
	}
	n.sess = map[string]*simSession{}
	for _, r := range n.runs {
		r.EndSession()
	}
}

func (s *sim) fault() {
	p := s.rng.Float64()
	alive := s.aliveNodes()
	switch {
	case p < s.crashP*10 && len(alive) > 0:
		n := alive[s.rng.IntN(len(alive))]
		s.logf("crash %s inc %d", n.id, n.inc)
		s.stats.Crashes++
		n.alive = false
		s.endLife(n)
		// Gossip notices after a while.
		s.send(&simMsg{ev: Fail{Node: n.id, Incarnation: n.inc}, due: 0})
		s.net[len(s.net)-1].due = s.now + 5 + s.rng.Int64N(30)
	case p < (s.crashP+s.falseP)*10 && len(alive) > 0:
		n := alive[s.rng.IntN(len(alive))]
		s.logf("false failure report for %s inc %d", n.id, n.inc)
		s.stats.FalseFails++
		s.toCoord(Fail{Node: n.id, Incarnation: n.inc}, nil)
	case p < (s.crashP+s.falseP+s.joinP)*10:
		s.newNode()
	case p < (s.crashP+s.falseP+s.joinP+s.coordP)*10:
		s.crashCoordinator()
	case p < (s.crashP+s.falseP+s.joinP+s.coordP+s.rewindP)*10 && len(s.gens) > 1:
		// Restore an older token: any kept generation.
		s.stats.Rewinds++
		s.restore(s.rng.IntN(len(s.gens)))
	case p < (s.crashP+s.falseP+s.joinP+s.coordP+s.rewindP+s.raceP)*10 && s.stale == nil:
		s.race()
	case p < (s.crashP+s.falseP+s.joinP+s.coordP+s.rewindP+s.raceP+s.cutP)*10 && len(alive) > 0 && s.cutP > 0:
		// The connection between the coordinator and a node breaks:
		// everything in flight between them is lost, and so is all
		// either sends until it is back.
		n := alive[s.rng.IntN(len(alive))]
		s.stats.Cuts++
		s.cutUntil[n.id] = s.now + 20 + s.rng.Int64N(200)
		s.logf("connection to %s cut until t=%d", n.id, s.cutUntil[n.id])
		s.net = slices.DeleteFunc(s.net, func(m *simMsg) bool {
			if m.frame != nil && m.frame.node == n.id || m.node == n.id || m.from != nil && m.from.node == n {
				s.stats.Lost++
				return true
			}
			return false
		})
	case p < (s.crashP+s.falseP+s.joinP+s.coordP+s.rewindP+s.raceP+s.cutP+s.resetP)*10 && len(alive) > 0:
		// A trainer restarts and reconnects to its node: the rank
		// drops what it delivered past its last ack and asks for a new
		// session.
		n := alive[s.rng.IntN(len(alive))]
		for _, id := range n.rankIDs {
			if ss := n.sess[id]; ss != nil && !ss.dead {
				s.logf("trainer of %s restarts; reset", ss.rank)
				s.stats.Resets++
				ss.dead = true
				if r := n.runs[ss.rank]; r.Session() == ss.fence {
					r.EndSession() // the node's actor ends the session on a reset
				}
				s.toCoord(Reset{Rank: ss.rank, Session: ss.fence}, ss)
				// Steps stay equal only while membership does not change:
				// a restarted trainer is a change.
				s.disturbAll()
				break
			}
		}
	default:
		s.recover()
	}
}

// recover restarts a crashed node now and then, and makes sure some node
// is alive.
func (s *sim) recover() {
	alive := 0
	for _, n := range s.order {
		if n.alive {
			alive++
		}
	}
	if alive < len(s.order) && (s.rng.IntN(20) == 0 || alive == 0) {
		var n *simNode
		for k := 0; n == nil || n.alive; k++ {
			n = s.order[s.rng.IntN(len(s.order))]
		}
		n.alive = true
		n.inc++
		s.newProcess(n)
		s.logf("restart %s inc %d", n.id, n.inc)
		s.gossipJoin(n)
	}
}

func (s *sim) aliveNodes() []*simNode {
	var out []*simNode
	for _, n := range s.order {
		if n.alive {
			out = append(out, n)
		}
	}
	return out
}

// crashCoordinator replaces the coordinator with one restored from the
// newest generation; gossip tells it who is alive.
func (s *sim) crashCoordinator() {
	s.stats.CoordCrashes++
	s.restore(len(s.gens) - 1)
}

// restore starts a coordinator from kept generation i, as the journal
// does: its incarnation is the generation it will write first. Restoring
// an older generation than the newest rewinds committed history to it.
func (s *sim) restore(i int) {
	g := s.gens[i]
	s.logf("coordinator restored from generation %d of %d (%d epochs)", s.nGens-len(s.gens)+i+1, s.nGens, len(g.state.Epochs))
	if i != len(s.gens)-1 {
		for _, ss := range s.sessions {
			ss.durable = maps.Clone(g.durable[ss])
			if ss.durable == nil {
				ss.durable = map[int]int64{}
			}
		}
		s.gens = s.gens[:i+1] // the abandoned future is never restored here
		// Epochs the rewind reopens run again with other sessions: their
		// equal-steps check would mix two runs.
		for e := range s.cfg.Epochs {
			if e >= len(g.state.Epochs) || !g.state.Epochs[e].Complete {
				s.disturbed[e] = true
			}
		}
	}
	s.disturbAll()
	cfg := s.cfg
	cfg.Incarnation = uint64(s.nGens) + 1
	c, err := Restore(cfg, g.state)
	if err != nil {
		s.fail("restore: %v", err)
		return
	}
	s.cfg.Incarnation = c.Config().Incarnation
	s.c = c
	for _, ss := range s.sessions {
		ss.fenced = true
	}
	s.disturbAll()
	for _, n := range s.aliveNodes() {
		s.gossipJoin(n)
	}
	s.handleReady()
}

// race starts a replacement coordinator while the current one still
// runs. Whichever writes the next generation first wins: the replacement
// (the old one turns stale and keeps sending until its next write fails)
// or the old one (the replacement's first write fails; it sent nothing).
func (s *sim) race() {
	s.stats.Races++
	if s.rng.IntN(3) == 0 {
		s.logf("replacement coordinator loses the journal race; it stops having sent nothing")
		return
	}
	old := s.c
	s.restore(len(s.gens) - 1)
	if s.c != old {
		s.stale = old
		s.staleUntil = s.now + 20 + s.rng.Int64N(200)
		s.logf("old coordinator is stale until t=%d", s.staleUntil)
	}
}

// --- node side ---

func (s *sim) nodeReceive(n *simNode, body any) {
	switch m := body.(type) {
	case Welcome:
		for _, rs := range m.Ranks {
			ss := s.bySession[rs.Session]
			s.lateAcks(n, rs)
			if old := n.sess[rs.Rank]; old != nil && old != ss {
				if !rs.Session.Less(old.fence) {
					old.dead = true // a new coordinator life took over
				} else {
					continue // a late Welcome from an older life
				}
			}
			n.sess[rs.Rank] = ss
			s.start(n, ss)
		}
	case Fenced:
		// As the node's actor: end the session if it is still the rank's.
		for id, r := range n.runs {
			if r.Active() && r.Session() == m.Session {
				s.logf("%s: session %v fenced; rolling back", id, m.Session)
				r.EndSession()
				if ss := n.sess[id]; ss != nil && ss.fence == m.Session {
					ss.dead = true
				}
			}
		}
	case Eviction:
		s.logf("%s inc %d evicted; rejoining", n.id, n.inc)
		s.endLife(n)
		n.inc++
		n.link, n.coordInc = nil, 0 // a new life: a new link
		s.gossipJoin(n)
	default:
		ss := s.sessionFor(n, body)
		if ss == nil {
			return
		}
		r := n.runs[ss.rank]
		switch m := body.(type) {
		case Lease:
			r.Grant(m)
		case Revoke:
			r.Revoke(m)
			s.logf("node %s got %+v", ss.rank, m)
		case StreamEnd:
			r.End(m)
			s.takeAcks(r)
			if s.log != nil {
				st := ss.rl.streams[m.Epoch]
				s.logf("node %s got %+v: taken %d end %+v", ss.rank, m, st.taken, st.end)
			}
		case Ack:
			if r.Ack(m) {
				if k := r.Acked(m.Epoch); k > int64(len(ss.items[m.Epoch])) {
					s.fail("ack %+v beyond %d delivered", m, len(ss.items[m.Epoch]))
				}
				if k := ss.rl.streams[m.Epoch].acked; k != r.Acked(m.Epoch) {
					s.fail("ack %+v: the rank's leases hold %d acknowledged, its runs %d", m, k, r.Acked(m.Epoch))
				}
			}
			s.takeAcks(r)
		}
		s.flush(ss)
	}
}

// lateAcks hands the node side the commits a Welcome says are durable,
// as the node's actor does for every rank of every Welcome, and checks
// the ones it takes as acknowledged late.
func (s *sim) lateAcks(n *simNode, rs RankSession) {
	r := n.runs[rs.Rank]
	if r == nil {
		return
	}
	acks := make([]Ack, len(rs.Committed))
	for i, rc := range rs.Committed {
		acks[i] = Ack{Rank: rc.Rank, Session: rc.Session, Epoch: rc.Epoch, Offset: rc.Offset, Step: rc.Step}
	}
	for _, a := range r.LateAcks(acks) {
		ss := s.bySession[a.Session]
		if ss == nil || ss.node != n || ss.inc > n.inc {
			s.fail("late ack %+v for a session not of this node's process (%s inc %d)", a, n.id, n.inc)
			continue
		}
		if k := int64(len(ss.items[a.Epoch])); a.Offset > k {
			s.fail("late ack %+v beyond the %d positions the session delivered", a, k)
		}
		s.logf("late ack %+v", a)
	}
	s.takeAcks(r)
}

// takeAcks takes what the node side would tell the trainer of its
// acknowledgements, as the node's actor does after every change, and
// checks it: a trainer is told of each session's epoch's commits in
// step order, and the newest is what it restores.
func (s *sim) takeAcks(r *RankRuns) {
	news, view := r.TakeAcks()
	if view == nil {
		return
	}
	for i, a := range news {
		if a.Rank != r.Rank() {
			s.fail("rank %s told of an ack of %s: %+v", r.Rank(), a.Rank, a)
		}
		if got, ok := view.Acked(a.Session, a.Epoch); i == len(news)-1 && (!ok || got.Step < a.Step) {
			s.fail("rank %s: ack %+v not in the published view (%+v)", r.Rank(), a, got)
		}
	}
	if l := news[len(news)-1]; view.Last == nil || *view.Last != l {
		s.fail("rank %s: the newest ack is %+v, the view's last %+v", r.Rank(), l, view.Last)
	}
}

// start starts session ss on its node's rank, as a Welcome does (a grant
// that overtook its Welcome starts it too: a real node gets them in one
// mail, Welcome first).
func (s *sim) start(n *simNode, ss *simSession) {
	r := n.runs[ss.rank]
	if r.Session() == ss.fence {
		return
	}
	r.StartSession(ss.welcome, s.cfg.Epochs, s.batch)
	ss.rl = r.Leases()
}

// flush sends what the session's RankLeases queued.
func (s *sim) flush(ss *simSession) {
	if ss.rl == nil {
		return
	}
	evs := ss.rl.Messages()
	if s.oldNodes {
		for i, ev := range evs {
			if c, ok := ev.(Commit); ok {
				// A node from before commits told their cuts: the wire
				// message lacks the fields.
				c.Cuts, c.CutsTold = nil, false
				evs[i] = c
			}
		}
	}
	if s.linked {
		s.linkToCoord(evs, ss)
		return
	}
	for _, ev := range evs {
		s.toCoord(ev, ss)
	}
}

// sessionFor returns the live session a coordinator message is for, or
// nil if that session is over (the real node would drop the message).
func (s *sim) sessionFor(n *simNode, body any) *simSession {
	var f Fence
	var rank string
	switch m := body.(type) {
	case Lease:
		f, rank = m.Session, m.Rank
	case Revoke:
		f, rank = m.Session, m.Rank
	case StreamEnd:
		f, rank = m.Session, m.Rank
	case Ack:
		f, rank = m.Session, m.Rank
	}
	ss := s.bySession[f]
	if ss == nil || ss.dead || ss.node != n || ss.rank != rank {
		return nil
	}
	if cur := n.sess[rank]; cur != ss {
		if cur != nil && ss.fence.Less(cur.fence) {
			return nil
		}
		// The Welcome is still in flight; a real node gets it first.
		if cur != nil {
			cur.dead = true
		}
		n.sess[rank] = ss
		s.lateAcks(n, ss.welcome)
		s.start(n, ss)
	}
	if n.runs[rank].Session() != ss.fence {
		return nil // ended at the node (a trainer reset)
	}
	return ss
}

// turn lets one random live session deliver and commit.
func (s *sim) turn() {
	n := s.order[s.rng.IntN(len(s.order))]
	if !n.alive || n.slow && s.rng.IntN(5) != 0 {
		return
	}
	if ss := n.sess[n.rankIDs[s.rng.IntN(n.nRank)]]; ss != nil {
		s.rankTurn(ss, n.speed)
	}
}

// turnAll runs every live session once; it reports whether any delivered.
func (s *sim) turnAll() bool {
	any := false
	for _, n := range s.aliveNodes() {
		for _, k := range n.rankIDs {
			if ss := n.sess[k]; ss != nil {
				before := s.stats.Delivered
				s.rankTurn(ss, 1000)
				any = any || s.stats.Delivered > before
			}
		}
	}
	for len(s.net) > 0 || !s.linksIdle() {
		s.now += s.maxDelay + 1
		if len(s.net) == 0 {
			s.now += s.simResend()
			s.linkTick()
		}
		s.deliver()
	}
	return any
}

// rankTurn lets the model pipeline ask the rank's node side for runs of
// up to budget positions in all, checks each run, delivers its
// positions in batches, commits as a trainer that commits every s.every
// batches and at the end of its epoch stream, and asks for work ahead.
func (s *sim) rankTurn(ss *simSession, budget int) {
	r := ss.node.runs[ss.rank]
	if ss.dead || r.Session() != ss.fence {
		return
	}
	for budget > 0 {
		run, ok := r.Fill(budget, false)
		if !ok {
			break
		}
		budget -= max(len(run.Positions), 1)
		s.deliverRun(ss, r, run)
		for _, ev := range r.Progress(run) {
			if s.rng.IntN(4) == 0 {
				s.toCoord(ev, ss)
			}
		}
	}
	ss.rl.Request(ss.lookahead, s.rng.IntN(10) == 0)
	s.flush(ss)
}

// deliverRun is the model pipeline and trainer for one run: it checks
// what actors.Intake and the seed promise require of it, then delivers.
func (s *sim) deliverRun(ss *simSession, r *RankRuns, run Run) {
	e := run.Epoch
	if run.Start != int64(len(ss.items[e])) {
		s.fail("rank %s: run %+v starts at offset %d of epoch %d, %d delivered", ss.rank, run, run.Start, e, len(ss.items[e]))
		return
	}
	if run.Start == run.Base {
		// A run's first batch is its session's next step of the epoch:
		// after the last one acknowledged in this process life, or after
		// the session's last run of the epoch.
		want := ss.steps[e]
		if len(ss.items[e]) == 0 {
			want = 0
			if st, ok := r.Steps().LastAcked(e); ok {
				want = st + 1
			}
		}
		if run.Step != want {
			s.fail("rank %s: run %+v of epoch %d starts at step %d, want %d", ss.rank, run, e, run.Step, want)
		}
		ss.steps[e], ss.inBatch[e] = run.Step, 0
	}
	for i, p := range run.Positions {
		if p.Epoch != e || p.Offset != run.Start+int64(i) {
			s.fail("rank %s: run %+v holds position %+v at %d", ss.rank, run, p, i)
			return
		}
		sample, pad := s.cfg.Order(e).Sample(p.Pos)
		if pad != p.Pad || pad != (p.Pos >= s.cfg.Samples) {
			s.fail("position %+v: pad %v", p, pad)
		}
		ss.items[e] = append(ss.items[e], simItem{sample: sample, pad: pad, lease: p.Lease, pos: p.Pos, step: ss.steps[e]})
		s.stats.Delivered++
		if ss.inBatch[e]++; ss.inBatch[e] == s.batch {
			s.batchDone(ss, r, e)
		}
	}
	if run.RunEnd && ss.inBatch[e] > 0 {
		s.batchDone(ss, r, e) // the run's short last batch ships
	}
	if run.StreamEnd {
		s.commit(ss, r, e, ss.steps[e]-1)
	}
}

// batchDone ships the epoch's open batch; the trainer commits every
// s.every batches.
func (s *sim) batchDone(ss *simSession, r *RankRuns, e int) {
	step := ss.steps[e]
	ss.steps[e]++
	ss.inBatch[e] = 0
	if ss.batches[e]++; ss.batches[e]%s.every == 0 {
		s.commit(ss, r, e, step)
	}
}

func (s *sim) commit(ss *simSession, r *RankRuns, e int, step int64) {
	if step < 0 {
		return
	}
	before := len(ss.rl.out)
	if err := r.Commit(e, step); err != nil {
		s.fail("rank %s: commit of epoch %d step %d: %v", ss.rank, e, step, err)
	}
	s.takeAcks(r)
	if len(ss.rl.out) > before {
		s.stats.Commits++
		if c := ss.rl.out[len(ss.rl.out)-1].(Commit); c.Step != step || c.Offset > int64(len(ss.items[e])) {
			s.fail("rank %s: commit of step %d became %+v with %d delivered", ss.rank, step, c, len(ss.items[e]))
		}
	}
	s.flush(ss)
}

// --- the checks ---

func (s *sim) check() {
	s.checkLineage()
	for e := range s.cfg.Epochs {
		seen := make([]int, s.cfg.Samples)
		for _, ss := range s.sessions {
			if ss.rl == nil {
				continue // never started at its node
			}
			if st := ss.rl.streams[e]; st != nil && st.acked > ss.maxAck[e] {
				s.fail("rank %s received ack %d, coordinator sent %d", ss.rank, st.acked, ss.maxAck[e])
			}
			for _, it := range ss.items[e][:ss.durable[e]] {
				if !it.pad {
					seen[it.sample]++
				}
			}
		}
		dropped := map[int64]bool{}
		order := s.cfg.Order(e)
		for _, r := range s.c.Epoch(e).Dropped {
			for p := r.Start; p < r.End; p++ {
				dropped[order.At(p)] = true
			}
		}
		for i, k := range seen {
			want := 1
			if dropped[int64(i)] {
				want = 0
			}
			if k != want {
				var where []string
				for _, ss := range s.sessions {
					for j, it := range ss.items[e] {
						if it.sample == int64(i) && !it.pad {
							where = append(where, fmt.Sprintf("%s %v offset %d (committed %d) lease %v pos %d", ss.rank, ss.fence, j, ss.durable[e], it.lease, it.pos))
						}
					}
				}
				s.fail("epoch %d: sample %d consumed %d times in committed steps, want %d; delivered at: %s",
					e, i, k, want, strings.Join(where, "; "))
				return
			}
		}
		if s.cfg.Balance != EqualSteps || s.disturbed[e] {
			continue
		}
		s.stats.EqualEpochs++
		w := int64(len(s.finalLen[e]))
		var want int64
		if w > 0 {
			want = (s.cfg.Samples + w - 1) / w
			if s.cfg.DropRemainder {
				want = s.cfg.Samples / w
			}
		}
		for ss, l := range s.finalLen[e] {
			if l != want {
				s.fail("epoch %d (membership stable, %d ranks): rank %s stream %d long, want %d", e, w, ss.rank, l, want)
				return
			}
			if ss.dead || ss.fenced || !ss.node.alive || ss.node.sess[ss.rank] != ss {
				continue
			}
			if got := int64(len(ss.items[e])); got != l {
				s.fail("epoch %d: rank %s delivered %d positions, its stream is %d", e, ss.rank, got, l)
			}
		}
		if s.cfg.DropRemainder && s.cfg.Samples > 0 && w > 0 {
			var nd int64
			for _, r := range s.c.Epoch(e).Dropped {
				nd += r.Len()
			}
			if nd != s.cfg.Samples%w {
				s.fail("epoch %d: dropped %d, want %d mod %d", e, nd, s.cfg.Samples, w)
			}
		}
	}
}

// checkLineage checks the journal's trails against what each session
// delivered: every committed step of every rank session, as TrailSteps
// and TrailPosition read it from the newest generation (or the archive,
// for an epoch that completed earlier), holds the positions, samples and
// step numbers the session's trainer got, no step of a rank is committed
// by two sessions, the trails reach exactly the committed prefix of
// every session, and they hold exactly the epoch's committed positions.
func (s *sim) checkLineage() {
	if len(s.gens) == 0 {
		return
	}
	st := s.gens[len(s.gens)-1].state
	for e := range st.Epochs {
		es := st.Epochs[e]
		trails := es.Trails
		if es.Complete && len(trails) == 0 {
			trails = s.archive[e]
		}
		// Every committed position of the epoch is in a trail, and no
		// other (lineage names an epoch where they are not).
		if cv := CoverTrails(EpochCommitted(es, s.cfg.Samples), s.cfg.Samples, trails); cv.Untraced != 0 || cv.Stray != 0 {
			s.fail("epoch %d (complete %v): the trails do not cover its committed positions: %+v", e, es.Complete, cv)
			return
		}
		reached := map[*simSession]int64{}
		order := s.cfg.Order(e)
		stepOf := map[string]map[int64]Fence{} // rank: step: the session that committed it
		for _, t := range trails {
			ss := s.bySession[t.Session]
			if ss == nil || ss.rank != t.Rank {
				s.fail("epoch %d: trail of %s session %v: no such session", e, t.Rank, t.Session)
				return
			}
			steps, err := TrailSteps(t, s.batch)
			if err != nil {
				s.fail("epoch %d: %v (commits %v)", e, err, t.Commits)
				return
			}
			// The journal writes the trail with the commits the others
			// imply left out: the answer must not change.
			tt := t
			tt.Commits = TrimCommits(t, s.batch)
			if trimmed, err := TrailSteps(tt, s.batch); err != nil || !slices.Equal(trimmed, steps) {
				s.fail("epoch %d: trail of %s session %v: its trimmed commits %v answer %v, %v; all of them %v", e, t.Rank, t.Session, tt.Commits, trimmed, err, steps)
				return
			}
			reached[ss] = t.Committed()
			if t.CutsTold == s.oldNodes {
				s.fail("epoch %d: trail of %s session %v: cuts told %v, by old nodes %v", e, t.Rank, t.Session, t.CutsTold, s.oldNodes)
				return
			}
			if s.oldNodes {
				s.stats.OldNodeSteps += len(steps)
			}
			if stepOf[t.Rank] == nil {
				stepOf[t.Rank] = map[int64]Fence{}
			}
			for _, ts := range steps {
				// A trainer's steps of an epoch go on across sessions, a
				// restarted node's included: no step is committed twice.
				if f, ok := stepOf[t.Rank][ts.Step]; ok {
					s.fail("epoch %d: %s committed step %d in session %v and again in %v", e, t.Rank, ts.Step, f, t.Session)
					return
				}
				stepOf[t.Rank][ts.Step] = t.Session
				if ts.Uncertain {
					s.stats.UncertainSteps++
					if s.linked {
						s.stats.UncertainLinked++
					}
					if t.CutsTold {
						s.fail("epoch %d: %s session %v: step %d (offsets %d-%d) is uncertain, though its node told where its runs were cut (commits %v, ends %v, cuts %v)",
							e, t.Rank, t.Session, ts.Step, ts.Offset, ts.Offset+ts.Len, t.Commits, t.Ends, t.Cuts)
						return
					}
					continue
				}
				s.stats.LineageSteps++
				for k := int64(0); k < ts.Len; k++ {
					off := ts.Offset + k
					p, err := TrailPosition(t, off)
					if err != nil || off >= int64(len(ss.items[e])) {
						s.fail("epoch %d: trail of %s session %v: offset %d: %v (%d delivered)", e, t.Rank, t.Session, off, err, len(ss.items[e]))
						return
					}
					it := ss.items[e][off]
					sample, pad := order.Sample(p)
					if it.pos != p || it.sample != sample || it.pad != pad || it.step != ts.Step {
						s.fail("epoch %d: %s session %v offset %d: the trail says step %d position %d, the trainer got step %d position %d",
							e, t.Rank, t.Session, off, ts.Step, p, it.step, it.pos)
						return
					}
				}
			}
		}
		for _, ss := range s.sessions {
			if d := ss.durable[e]; d != reached[ss] {
				s.fail("epoch %d: %s session %v committed through offset %d, its trail reaches %d", e, ss.rank, ss.fence, d, reached[ss])
				return
			}
		}
	}
}
