package cluster

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
)

// Errors Step returns for messages it refuses. A refused message changes
// nothing; the shell may log it and, for ErrFenced, tell the sender.
var (
	// ErrFenced: the sender's session is not the rank's current one (its
	// node was declared dead, left, or rejoined since). The sender must
	// drop its leases and rejoin.
	ErrFenced = errors.New("cluster: fenced: the rank's session is over; rejoin")
	// ErrStale: the message is about a lease or epoch that is no longer
	// current (finished, handed back, re-issued). Harmless; drop it.
	ErrStale = errors.New("cluster: stale: lease or epoch no longer current")
	// ErrInvalid: the message contradicts the coordinator's state in a way
	// no reordering explains: a bug in the sender.
	ErrInvalid = errors.New("cluster: invalid message")
)

// Coordinator is the job's pure state machine: membership, epochs,
// leases, commits. See the package documentation for the contract.
// It is not safe for concurrent use: one goroutine (the actor) owns it.
type Coordinator struct {
	cfg Config
	seq uint64 // last Fence.Seq issued
	now int64  // Ticks seen

	nodes     map[string]*node
	ranks     map[string]*rank
	rankOrder []*rank // live ranks in join order, for deterministic iteration

	epochs    []*epoch // started epochs, by number
	completed int      // how many of them are complete
	firstOpen int      // every epoch below it is complete
	// lastClosed is the epoch that completed last (-1: none): it keeps
	// its ranks' last commits (epoch.commits) until another completes.
	lastClosed int
	// unpersisted are completed epochs other than lastClosed whose trails
	// no persisted Snapshot held yet: kept until Persisted, so that every
	// completed epoch's trails reach the journal once (it archives them).
	unpersisted []int

	ready Ready
	stats Stats
}

// Stats counts what the coordinator did, for metrics. Monotonic over the
// coordinator's life.
type Stats struct {
	Events         uint64 // Step calls
	Grants         uint64 // leases issued (padding included)
	Revokes        uint64 // revokes issued (lease splits asked for)
	Commits        uint64 // commits applied and acknowledged
	HeldCommits    uint64 // commits that waited for an in-flight LeaseDone
	Fenced         uint64 // messages refused with ErrFenced
	HeldRequests   uint64 // Requests held back until MinRanks ranks joined
	WelcomeResends uint64 // Welcomes sent again (none of their sessions had answered)
	Stale          uint64 // messages refused with ErrStale
	Invalid        uint64 // messages refused with ErrInvalid
	Evictions      uint64 // node lives ended (failures, leaves, revoke timeouts)
	// Returned counts real positions that departed ranks held beyond
	// their commits, put back in the pool to be issued again.
	Returned     uint64
	PadPositions uint64 // padding positions issued
}

// Stats returns the counters.
func (c *Coordinator) Stats() Stats { return c.stats }

type node struct {
	id          string
	incarnation uint64
	ranks       []*rank
	// unanswered are the ranks whose sessions the node's last Welcomes
	// started and that have all said nothing since, and welcomed the
	// tick a Welcome for them was last sent: a node without sessions
	// says nothing, so they are welcomed again until one of them talks.
	unanswered []*rank
	welcomed   int64
	resends    int // since the last new Welcome: each doubles the wait
}

type rank struct {
	id      string
	node    *node
	session Fence
	// requested is the newest epoch the rank asked for (or was told to
	// start with). Older epochs in which the rank still has a stream are
	// behind it: work that appears there (re-issued after a failure) is
	// granted without waiting for demand.
	requested int
	streams   map[int]*stream
	// closed holds the complete epochs the rank was sent a closing
	// StreamEnd for.
	closed     map[int]bool
	firstEpoch int // the session's FirstEpoch
}

// epoch is the coordinator's view of one started epoch.
type epoch struct {
	n    int
	pool rangeSet // positions not leased, not committed, not dropped
	// grid is how shardEnd cuts the epoch into shards; shortAt and
	// shortN place the order's short block for blockGrid, order is the
	// epoch's order for windowGrid.
	grid            shardGrid
	shortAt, shortN int64
	order           Order
	// quota (EqualSteps) is the stream length every member ends with.
	quota   int64
	padNext int64 // padding positions issued: the next is Samples+padNext
	dropped []Range
	dropN   int64
	// committedN counts committed real positions, departed ranks included.
	committedN int64
	// departed* hold what ranks that are gone committed: their streams
	// are forgotten, their commits are not.
	departedCommitted  []Range
	departedCommittedN int64
	// commits holds, by rank name, the last commit of a rank session that
	// is gone (departed, or of an earlier coordinator life), until a new
	// session of the rank commits in the epoch. Once the epoch is
	// complete it holds every rank's last commit (see lastClosed).
	commits map[string]RankCommit
	// trails are the trails (see Trail) of the rank sessions that are
	// gone, and once the epoch is complete of every session, kept as
	// commits are.
	trails  []Trail
	revokes []revokeRef // pending revokes, oldest first
	// noVictim records that a steal found nothing to split; only a new
	// grant can change that, so idle ranks do not rescan every stream.
	noVictim bool
	// endsStale (Dynamic) records that a stream changed since the
	// members were last told where their streams end.
	endsStale bool
	complete  bool
}

type revokeRef struct {
	r     *rank
	lease Fence
	since int64
	thief *rank // the rank the split was for: served first with the tail
}

// stream is one rank's share of one epoch: its leases in grant order.
type stream struct {
	segs       []segment
	granted    int64 // sum of segment lengths
	padGranted int64
	committed  int64 // stream offset committed through
	// cseg is the first segment not wholly committed, csegOff the
	// stream offset of its Start: commits only move forward, and a
	// wholly committed segment never shrinks, so these never move back.
	cseg       int
	csegOff    int64
	committedN int64  // committed real positions
	step       int64  // the Step of the last commit applied
	gen        uint64 // the journal generation that made it durable; 0: not yet
	demand     int64  // largest Request.Through
	endSent    int64  // Length of the last StreamEnd sent; -1: none
	endLeases  int    // and its Leases
	held       *Commit
	revoking   int // segments with a pending revoke
	// commits are the commits applied, and older ones that arrived late,
	// in order: the stream's trail (Trail) with its segments; early are
	// commits a later one overtook while held, not yet committed past.
	commits []TrailCommit
	early   []TrailCommit
	ends    []int64 // the Lengths of the StreamEnds sent, ascending (Trail.Ends)
	// cuts are where the session's node says its runs were cut, from
	// its commits (Commit.Cuts), ascending; cutsTold: its commits say
	// (Trail.Cuts, Trail.CutsTold).
	cuts     []int64
	cutsTold bool
}

type segment struct {
	fence     Fence
	start     int64
	end       int64 // shrinks when the rank stops the lease early
	pad       bool
	delivered int64 // watermark: delivered through this position
	revoking  bool
}

// NewCoordinator returns a coordinator for a fresh job.
func NewCoordinator(cfg Config) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Coordinator{
		cfg:        cfg,
		nodes:      make(map[string]*node),
		ranks:      make(map[string]*rank),
		lastClosed: -1,
	}
	// The incarnation must be durable before any fence carrying it is
	// sent: a coordinator that crashed before persisting would otherwise
	// be restored into the same incarnation and reissue the same fences.
	c.ready.Persist = true
	return c, nil
}

// Config returns the configuration the coordinator runs with.
func (c *Coordinator) Config() Config { return c.cfg }

// Ready returns what the shell must do; see Ready. The slices stay valid
// until the next Advance.
func (c *Coordinator) Ready() Ready { return c.ready }

// HasReady reports whether Ready has anything to do.
func (c *Coordinator) HasReady() bool { return !c.ready.IsEmpty() }

// Advance tells the coordinator that everything in the last Ready was
// done (persisted and sent).
func (c *Coordinator) Advance() { c.ready = Ready{} }

// Done reports whether every epoch is complete.
func (c *Coordinator) Done() bool { return c.completed == c.cfg.Epochs }

// Step applies one event. Effects accumulate in Ready until Advance.
// A non-nil error (wrapping ErrFenced, ErrStale or ErrInvalid) means the
// event was refused and changed nothing.
func (c *Coordinator) Step(ev Event) error {
	c.stats.Events++
	err := c.step(ev)
	switch {
	case err == nil:
	case errors.Is(err, ErrFenced):
		c.stats.Fenced++
	case errors.Is(err, ErrStale):
		c.stats.Stale++
	default:
		c.stats.Invalid++
	}
	return err
}

// StepFrom is Step for an event that node's life incarnation sent. A
// message refused as fenced is answered in Ready: Fenced tells the node
// the session is over, and when the node's life is not one the
// coordinator knows (it was declared dead, or this coordinator life
// never heard of it), an Eviction tells it to rejoin with a new
// incarnation; until it does it has no session to talk from.
func (c *Coordinator) StepFrom(node string, incarnation uint64, ev Event) error {
	err := c.Step(ev)
	if !errors.Is(err, ErrFenced) {
		return err
	}
	if s, ok := sessionOf(ev); ok {
		f := Fenced{Node: node, Session: s}
		if !slices.Contains(c.ready.Fenced, f) {
			c.ready.Fenced = append(c.ready.Fenced, f)
		}
	}
	if n := c.nodes[node]; n == nil || n.incarnation != incarnation {
		e := Eviction{Node: node, Incarnation: incarnation}
		if !slices.Contains(c.ready.Evictions, e) {
			c.ready.Evictions = append(c.ready.Evictions, e)
		}
	}
	return err
}

// sessionOf is the session a rank's message names.
func sessionOf(ev Event) (Fence, bool) {
	switch e := ev.(type) {
	case Request:
		return e.Session, true
	case Progress:
		return e.Session, true
	case LeaseDone:
		return e.Session, true
	case Commit:
		return e.Session, true
	case Reset:
		return e.Session, true
	}
	return Fence{}, false
}

func (c *Coordinator) step(ev Event) error {
	switch ev := ev.(type) {
	case Join:
		return c.join(ev)
	case Leave:
		return c.leave(ev.Node, ev.Incarnation)
	case Fail:
		return c.leave(ev.Node, ev.Incarnation)
	case Request:
		return c.request(ev)
	case Progress:
		return c.progress(ev)
	case LeaseDone:
		return c.leaseDone(ev)
	case Commit:
		return c.commit(ev)
	case Reset:
		return c.reset(ev)
	case Tick:
		c.tick()
		return nil
	}
	return fmt.Errorf("%w: unknown event %T", ErrInvalid, ev)
}

// openEpochs returns the started epochs from the oldest incomplete one
// on: epochs complete roughly in order, so this skips the finished past.
func (c *Coordinator) openEpochs() []*epoch { return c.epochs[c.firstOpen:] }

func (c *Coordinator) nextFence() Fence {
	c.seq++
	return Fence{Incarnation: c.cfg.Incarnation, Seq: c.seq}
}

// --- membership ---

func (c *Coordinator) join(ev Join) error {
	old := c.nodes[ev.Node]
	if old != nil && ev.Incarnation <= old.incarnation {
		return nil // duplicate or stale gossip
	}
	seen := make(map[string]bool, len(ev.Ranks))
	for _, id := range ev.Ranks {
		if r := c.ranks[id]; r != nil && r.node != old || seen[id] || id == "" {
			return fmt.Errorf("%w: node %s joins with rank %q, which is empty, repeated, or held by another node", ErrInvalid, ev.Node, id)
		}
		seen[id] = true
	}
	if old != nil {
		c.depart(old) // a new life replaces the old one
	}
	n := &node{id: ev.Node, incarnation: ev.Incarnation}
	c.nodes[n.id] = n
	w := Welcome{Node: n.id, Incarnation: n.incarnation}
	for _, id := range ev.Ranks {
		r := &rank{id: id, node: n}
		n.ranks = append(n.ranks, r)
		c.ranks[id] = r
		c.rankOrder = append(c.rankOrder, r)
		w.Ranks = append(w.Ranks, c.startSession(r))
	}
	c.ready.Welcomes = append(c.ready.Welcomes, w)
	c.replanAll()
	return nil
}

// startSession gives rank r a new session and makes it a member of the
// open epochs it may join.
func (c *Coordinator) startSession(r *rank) RankSession {
	r.session = c.nextFence()
	r.streams = make(map[int]*stream)
	r.closed = make(map[int]bool)
	first := len(c.epochs) // the next epoch to start, unless it joins one below
	for _, ep := range c.openEpochs() {
		if ep.complete {
			continue
		}
		// Dynamic: everyone shares every epoch. EqualSteps: a rank
		// joins a running epoch only while it has unleased work;
		// otherwise it would need a full quota of padding to keep
		// steps equal, so it starts with the next epoch instead.
		if c.cfg.Balance == Dynamic || ep.pool.len() > 0 || c.members(ep) == 0 {
			r.streams[ep.n] = newStream()
			first = min(first, ep.n)
		}
	}
	r.requested = first
	r.firstEpoch = first
	n := r.node
	if !slices.Contains(n.unanswered, r) {
		n.unanswered = append(n.unanswered, r)
	}
	n.welcomed, n.resends = c.now, 0
	return RankSession{Rank: r.id, Session: r.session, FirstEpoch: first, Committed: c.pastCommits(r.id)}
}

// resendWelcomes sends the Welcome again to every node none of whose
// welcomed sessions has said anything for WelcomeResend ticks since it
// was (last) sent. Its Committed records are the current ones: a commit
// that was not durable at the first sending may be now.
func (c *Coordinator) resendWelcomes() {
	if c.cfg.WelcomeResend == 0 {
		return
	}
	for _, r := range c.rankOrder { // nodes in a deterministic order
		n := r.node
		// The wait doubles with every resend (up to 32 times the first):
		// a session with nothing to ask for (its job is over) stays
		// silent, and need not hear it every few ticks.
		wait := int64(c.cfg.WelcomeResend) << min(n.resends, 5)
		if n.ranks[0] != r || len(n.unanswered) == 0 || c.now-n.welcomed < wait {
			continue
		}
		n.welcomed = c.now
		n.resends++
		w := Welcome{Node: n.id, Incarnation: n.incarnation}
		for _, u := range n.unanswered {
			w.Ranks = append(w.Ranks, RankSession{Rank: u.id, Session: u.session, FirstEpoch: u.firstEpoch, Committed: c.pastCommits(u.id)})
		}
		c.ready.Welcomes = append(c.ready.Welcomes, w)
		c.stats.WelcomeResends++
	}
}

// reset ends a rank's session and starts a new one on the same node.
func (c *Coordinator) reset(ev Reset) error {
	r, err := c.session(ev.Rank, ev.Session)
	if err != nil {
		return err
	}
	c.release(r)
	rs := c.startSession(r)
	c.ready.Welcomes = append(c.ready.Welcomes, Welcome{Node: r.node.id, Incarnation: r.node.incarnation, Ranks: []RankSession{rs}})
	c.afterDeparture()
	c.replanAll()
	return nil
}

func (c *Coordinator) leave(id string, incarnation uint64) error {
	n := c.nodes[id]
	if n == nil || (incarnation != 0 && incarnation != n.incarnation) {
		return nil // already gone, or about a life already replaced
	}
	c.depart(n)
	c.replanAll()
	return nil
}

// depart removes node n: its ranks' sessions are fenced, what they
// committed stays committed, and the rest of their leases returns to the
// pool to be issued again.
func (c *Coordinator) depart(n *node) {
	for _, r := range n.ranks {
		c.release(r)
		delete(c.ranks, r.id)
	}
	c.rankOrder = removeRanks(c.rankOrder, n)
	delete(c.nodes, n.id)
	c.ready.Evictions = append(c.ready.Evictions, Eviction{Node: n.id, Incarnation: n.incarnation})
	c.stats.Evictions++
	c.afterDeparture()
}

// release ends rank r's session in every open epoch: what it committed
// stays committed, the rest of its leases returns to the pool.
func (c *Coordinator) release(r *rank) {
	for _, ep := range c.openEpochs() {
		st := r.streams[ep.n]
		if st == nil {
			continue
		}
		ep.departedCommitted = append(ep.departedCommitted, st.committedRanges()...)
		ep.departedCommitted = mergeRanges(ep.departedCommitted)
		ep.departedCommittedN += st.committedN
		ep.keepCommit(r, st)
		ep.keepTrail(r, st)
		for i := st.cseg; i < len(st.segs); i++ {
			seg := &st.segs[i]
			from := seg.start
			if i == st.cseg {
				from += st.committed - st.csegOff
			}
			if !seg.pad {
				ep.pool.add(Range{from, seg.end})
				c.stats.Returned += uint64(max(seg.end-from, 0))
			}
		}
		if st.revoking > 0 {
			ep.dropRevokes(r)
		}
		delete(r.streams, ep.n)
	}
}

// afterDeparture runs once ranks' sessions ended: an EqualSteps epoch
// whose members are all gone but which still has work takes every live
// rank on, even those that had moved past it.
func (c *Coordinator) afterDeparture() {
	for _, ep := range c.openEpochs() {
		if !ep.complete && ep.pool.len() > 0 && c.members(ep) == 0 {
			for _, r := range c.rankOrder {
				r.streams[ep.n] = newStream()
			}
		}
	}
}

func removeRanks(rs []*rank, n *node) []*rank {
	out := rs[:0]
	for _, r := range rs {
		if r.node != n {
			out = append(out, r)
		}
	}
	clear(rs[len(out):])
	return out
}

func (ep *epoch) dropRevokes(r *rank) {
	out := ep.revokes[:0]
	for _, rv := range ep.revokes {
		if rv.r != r {
			out = append(out, rv)
		}
	}
	ep.revokes = out
}

func (c *Coordinator) members(ep *epoch) int {
	k := 0
	for _, r := range c.rankOrder {
		if r.streams[ep.n] != nil {
			k++
		}
	}
	return k
}

func newStream() *stream { return &stream{endSent: -1} }

// --- planning ---

// replanAll recomputes every open epoch's quota and grants what that
// allows. It runs after membership changes: O(ranks × open epochs).
func (c *Coordinator) replanAll() {
	for _, ep := range c.openEpochs() {
		ep.noVictim = false // members changed
		ep.endsStale = true
		if !ep.complete {
			c.replan(ep)
		}
	}
	c.serveAll()
}

// replan sets an EqualSteps epoch's quota: the remaining real positions
// plus the padding already leased, shared equally among the members,
// but never below what a member already holds (leases are not taken
// back to even out steps: that would cost re-fetches for no gain).
// With DropRemainder the share rounds down and the pool's tail is
// dropped to fit; otherwise it rounds up and the shortfall is padded.
func (c *Coordinator) replan(ep *epoch) {
	if c.cfg.Balance != EqualSteps {
		return
	}
	var w, maxGranted, pads, granted int64
	for _, r := range c.rankOrder {
		if st := r.streams[ep.n]; st != nil {
			w++
			maxGranted = max(maxGranted, st.granted)
			pads += st.padGranted
			granted += st.granted
		}
	}
	if w == 0 {
		return
	}
	total := c.cfg.Samples - ep.dropN - ep.departedCommittedN + pads
	share := (total + w - 1) / w
	if c.cfg.DropRemainder {
		share = total / w
	}
	if a := int64(c.cfg.Align); a > 1 {
		share = (share + a - 1) / a * a // whole units, padded
		if c.cfg.DropRemainder {
			share = total / w / a * a
		}
	}
	ep.quota = max(share, maxGranted)
	if room := ep.quota*w - granted; c.cfg.DropRemainder && ep.pool.len() > room {
		for _, r := range ep.pool.takeBack(ep.pool.len() - room) {
			ep.dropped = append(ep.dropped, r)
			ep.dropN += r.Len()
		}
		ep.dropped = mergeRanges(ep.dropped)
		c.ready.Persist = true
		c.checkComplete(ep)
	}
}

func (c *Coordinator) serveAll() {
	for _, r := range c.rankOrder {
		c.serveEpochs(r)
	}
	c.endStreams()
}

// serve grants rank r what its demand and the plan allow, in every open
// epoch it is a member of, oldest first.
func (c *Coordinator) serve(r *rank) {
	c.serveEpochs(r)
	c.endStreams()
}

func (c *Coordinator) serveEpochs(r *rank) {
	for _, ep := range c.openEpochs() {
		if st := r.streams[ep.n]; st != nil && !ep.complete {
			c.serveStream(r, ep, st)
		}
	}
}

func (c *Coordinator) serveStream(r *rank, ep *epoch, st *stream) {
	eq := c.cfg.Balance == EqualSteps
	shard := int64(c.cfg.ShardSize)
	limit := st.demand
	if ep.n < r.requested || st.endSent >= 0 {
		// Catch-up: the rank was told its stream ended or has moved on to
		// a later epoch, so no demand for this one will come; work
		// re-issued here is pushed to it.
		// EqualSteps pushes the quota; Dynamic a shard at a time, so the
		// re-issued work spreads over the ranks served.
		limit = math.MaxInt64
		if !eq {
			// A shard at a time, and only to a rank that is nearly idle:
			// pushing work to a rank with a backlog would make it the
			// next steal victim, and the work would cycle.
			limit = st.demand
			if st.undelivered() < 2*int64(c.cfg.StealMin) {
				limit = max(limit, st.granted+shard)
			}
		}
	}
	if eq {
		limit = min(limit, ep.quota)
	}
	for st.granted < limit && st.revoking == 0 {
		if ep.pool.len() > 0 {
			f := ep.pool.front()
			end := min(f.End, c.shardEnd(ep, f.Start))
			if eq {
				end = min(end, f.Start+ep.quota-st.granted)
			}
			c.grant(r, ep, st, ep.pool.takeFront(end), false)
			continue
		}
		if !eq {
			break
		}
		// Every real position is leased: the rest of the quota is
		// padding, so this rank's steps match the others'.
		k := min(ep.quota-st.granted, shard)
		p := c.cfg.Samples + ep.padNext
		ep.padNext += k
		c.grant(r, ep, st, Range{p, p + k}, true)
	}
	if eq {
		if st.granted == ep.quota {
			c.sendEnd(r, ep, st, false)
		}
		return
	}
	if st.revoking > 0 || ep.pool.len() > 0 {
		return
	}
	if st.granted < limit {
		c.steal(ep, r)
	}
}

// shardGrid says how an epoch's positions are cut into shards.
type shardGrid int8

const (
	// plainGrid: runs of ShardSize positions from 0.
	plainGrid shardGrid = iota
	// blockGrid (Window 1, Block > 1 dividing ShardSize): the same runs
	// laid over the order's blocks, the short block a shard of its own.
	blockGrid
	// windowGrid (Window > 1, Block > 1): runs of ShardSize from the
	// start of each window of the order, never crossing a window.
	windowGrid
)

// shardEnd returns the end of the shard that holds position pos of ep.
// Shards are runs of ShardSize positions that follow the order's
// locality, so that a node reading a packed dataset does not fetch
// chunks another node fetches too. With windows (Block > 1, Window > 1),
// every position of a window may draw from any of its blocks: a shard
// never crosses a window, and a lease holds whole windows' blocks only
// when ShardSize is at least the window (cmd/coordinator's default for a
// packed dataset). Without, when the order's Block > 1 divides ShardSize
// shards follow the order's blocks, so that a lease never holds part of a
// block another lease holds the rest of; the only irregular block, the
// short one, is a shard of its own and shifts the grid after it.
func (c *Coordinator) shardEnd(ep *epoch, pos int64) int64 {
	s := int64(c.cfg.ShardSize)
	if ep.grid == windowGrid {
		w := ep.order.WindowAt(pos)
		return min(w.Start+((pos-w.Start)/s+1)*s, w.End)
	}
	a, n := ep.shortAt, ep.shortN
	switch {
	case n == 0:
		return (pos/s + 1) * s
	case pos < a:
		return min((pos/s+1)*s, a)
	case pos < a+n:
		return a + n
	default:
		return a + n + ((pos-a-n)/s+1)*s
	}
}

// placeGrid sets ep's shard grid for shardEnd.
func (c *Coordinator) placeGrid(ep *epoch) {
	b := c.cfg.Block
	switch {
	case c.cfg.Align > 1: // a mixture's positions: the plain grid
	case b > 1 && EffectiveWindow(b, c.cfg.Window) > 1:
		ep.grid, ep.order = windowGrid, c.cfg.Order(ep.n)
	case b > 1 && c.cfg.ShardSize%b == 0:
		ep.grid = blockGrid
		ep.shortAt, ep.shortN = c.cfg.Order(ep.n).ShortBlock()
	}
}

// endStreams (Dynamic) tells every member of an epoch with nothing left
// to lease or split off that its stream is complete as things stand —
// including a rank that asks for nothing more: it may have moved on and
// just been pushed re-issued work.
func (c *Coordinator) endStreams() {
	if c.cfg.Balance != Dynamic {
		return
	}
	for _, ep := range c.openEpochs() {
		if !ep.endsStale || ep.complete || ep.pool.len() > 0 || len(ep.revokes) > 0 {
			continue
		}
		ep.endsStale = false
		for _, r := range c.rankOrder {
			if st := r.streams[ep.n]; st != nil {
				c.sendEnd(r, ep, st, false)
			}
		}
	}
}

func (c *Coordinator) sendEnd(r *rank, ep *epoch, st *stream, complete bool) {
	if st.endSent == st.granted && st.endLeases == len(st.segs) && !complete {
		return
	}
	st.endSent, st.endLeases = st.granted, len(st.segs)
	if i, found := slices.BinarySearch(st.ends, st.granted); !found && st.granted > 0 {
		st.ends = slices.Insert(st.ends, i, st.granted)
	}
	c.ready.Ends = append(c.ready.Ends, StreamEnd{
		Rank: r.id, Session: r.session, Epoch: ep.n, Length: st.granted, Leases: len(st.segs),
		Fence: c.nextFence(), EpochComplete: complete,
	})
}

func (c *Coordinator) grant(r *rank, ep *epoch, st *stream, rg Range, pad bool) {
	f := c.nextFence()
	ep.noVictim = false
	ep.endsStale = true
	st.segs = append(st.segs, segment{fence: f, start: rg.Start, end: rg.End, pad: pad, delivered: rg.Start})
	st.granted += rg.Len()
	c.stats.Grants++
	if pad {
		st.padGranted += rg.Len()
		c.stats.PadPositions += uint64(rg.Len())
	}
	c.ready.Grants = append(c.ready.Grants, Lease{
		Rank: r.id, Session: r.session, Fence: f, Epoch: ep.n, Index: len(st.segs) - 1,
		Start: rg.Start, End: rg.End, Pad: pad,
	})
}

// steal (Dynamic) asks the rank with the most undelivered positions in ep
// to give up the later half of them, for thief. One steal per epoch is in
// flight at a time, so a burst of idle ranks does not shred one lease.
func (c *Coordinator) steal(ep *epoch, thief *rank) {
	if len(ep.revokes) > 0 || ep.noVictim {
		return
	}
	var victim *rank
	var most int64
	for _, r := range c.rankOrder {
		if st := r.streams[ep.n]; r != thief && st != nil && st.revoking == 0 {
			if u := st.undelivered(); u > most {
				victim, most = r, u
			}
		}
	}
	if victim == nil || most < 2*int64(c.cfg.StealMin) {
		// With at most one rank holding StealMin or more undelivered
		// (the thief's own), nothing can be split until the next grant.
		ep.noVictim = victim == nil || most < 2*int64(c.cfg.StealMin) && thief.streams[ep.n].undelivered() < 2*int64(c.cfg.StealMin)
		return
	}
	st := victim.streams[ep.n]
	take := most / 2
	for i := len(st.segs) - 1; i >= st.cseg && take > 0; i-- {
		seg := &st.segs[i]
		lo := st.undeliveredFrom(i)
		if seg.end <= lo {
			continue
		}
		from := max(lo, seg.end-take)
		if a := int64(c.cfg.Align); a > 1 {
			// Whole units: the victim keeps the unit it is in (the rank
			// rounds its stop up as well, RankLeases.SetAlign); less than
			// a unit left to take is not split.
			if from = (from + a - 1) / a * a; from >= seg.end {
				break
			}
		}
		take -= seg.end - from
		seg.revoking = true
		st.revoking++
		ep.revokes = append(ep.revokes, revokeRef{r: victim, lease: seg.fence, since: c.now, thief: thief})
		c.stats.Revokes++
		c.ready.Revokes = append(c.ready.Revokes, Revoke{Rank: victim.id, Session: victim.session, Lease: seg.fence, From: from})
	}
}

// undeliveredFrom returns the first position of segment i not known to be
// delivered or committed.
func (st *stream) undeliveredFrom(i int) int64 {
	seg := &st.segs[i]
	lo := max(seg.start, seg.delivered)
	if i == st.cseg {
		lo = max(lo, seg.start+st.committed-st.csegOff)
	}
	return min(lo, seg.end)
}

func (st *stream) undelivered() int64 {
	var u int64
	for i := st.cseg; i < len(st.segs); i++ {
		u += st.segs[i].end - st.undeliveredFrom(i)
	}
	return u
}

// committedRanges returns the real positions in the committed prefix.
func (st *stream) committedRanges() []Range {
	var out []Range
	for i := 0; i <= st.cseg && i < len(st.segs); i++ {
		seg := st.segs[i]
		end := seg.end
		if i == st.cseg {
			end = seg.start + st.committed - st.csegOff
		}
		if !seg.pad && end > seg.start {
			out = append(out, Range{seg.start, end})
		}
	}
	return out
}

// --- rank messages ---

func (c *Coordinator) session(id string, s Fence) (*rank, error) {
	r := c.ranks[id]
	if r == nil || r.session != s {
		return nil, fmt.Errorf("%w: rank %q session %v", ErrFenced, id, s)
	}
	if len(r.node.unanswered) > 0 && slices.Contains(r.node.unanswered, r) {
		r.node.unanswered = nil // heard from a welcomed session: the Welcome arrived
	}
	return r, nil
}

// lease finds the segment a rank's lease fence names.
func (c *Coordinator) lease(r *rank, f Fence) (*epoch, *stream, int, error) {
	for n, st := range r.streams { // at most a few; the fence is in one
		ep := c.epochs[n]
		i := sort.Search(len(st.segs), func(i int) bool { return !st.segs[i].fence.Less(f) })
		if i < len(st.segs) && st.segs[i].fence == f {
			return ep, st, i, nil
		}
	}
	return nil, nil, 0, fmt.Errorf("%w: rank %q lease %v", ErrStale, r.id, f)
}

func (c *Coordinator) request(ev Request) error {
	r, err := c.session(ev.Rank, ev.Session)
	if err != nil {
		return err
	}
	if ev.Epoch < 0 || ev.Epoch >= c.cfg.Epochs || ev.Epoch > len(c.epochs) {
		return fmt.Errorf("%w: rank %q requests epoch %d; %d of %d started", ErrInvalid, r.id, ev.Epoch, len(c.epochs), c.cfg.Epochs)
	}
	if len(c.epochs) == 0 && len(c.ranks) < c.cfg.MinRanks {
		c.stats.HeldRequests++ // not enough ranks yet; the rank asks again
		return nil
	}
	if ev.Epoch == len(c.epochs) {
		c.startEpoch()
	}
	ep := c.epochs[ev.Epoch]
	r.requested = max(r.requested, ev.Epoch)
	if ep.complete {
		// A member got its closing StreamEnd when the epoch completed; a
		// rank that was not one has an empty stream, and must be told so
		// or it would wait for one.
		if !r.closed[ev.Epoch] {
			r.closed[ev.Epoch] = true
			c.ready.Ends = append(c.ready.Ends, StreamEnd{Rank: r.id, Session: r.session, Epoch: ev.Epoch, Fence: c.nextFence(), EpochComplete: true})
		}
		return nil
	}
	st := r.streams[ev.Epoch]
	if st == nil {
		// Not a member: it joined after all of this epoch's work was
		// leased. Its stream is empty; it moves on to the next epoch.
		c.ready.Ends = append(c.ready.Ends, StreamEnd{Rank: r.id, Session: r.session, Epoch: ev.Epoch, Fence: c.nextFence()})
		return nil
	}
	st.demand = max(st.demand, ev.Through)
	c.serve(r)
	return nil
}

func (c *Coordinator) startEpoch() {
	ep := &epoch{n: len(c.epochs), endsStale: true}
	c.placeGrid(ep)
	ep.pool.add(Range{0, c.cfg.Samples})
	c.epochs = append(c.epochs, ep)
	for _, r := range c.rankOrder {
		r.streams[ep.n] = newStream()
	}
	c.replan(ep)
	c.checkComplete(ep) // an empty dataset's epoch is complete at once
}

func (c *Coordinator) progress(ev Progress) error {
	r, err := c.session(ev.Rank, ev.Session)
	if err != nil {
		return err
	}
	_, st, i, err := c.lease(r, ev.Lease)
	if err != nil {
		return err
	}
	seg := &st.segs[i]
	if ev.Through < seg.start || ev.Through > seg.end {
		return fmt.Errorf("%w: progress %d outside lease %v [%d, %d)", ErrStale, ev.Through, ev.Lease, seg.start, seg.end)
	}
	seg.delivered = max(seg.delivered, ev.Through)
	return nil
}

func (c *Coordinator) leaseDone(ev LeaseDone) error {
	r, err := c.session(ev.Rank, ev.Session)
	if err != nil {
		return err
	}
	ep, st, i, err := c.lease(r, ev.Lease)
	if err != nil {
		return err
	}
	seg := &st.segs[i]
	floor := seg.start // the rank cannot stop before what it committed
	switch {
	case i < st.cseg:
		floor = seg.end
	case i == st.cseg:
		floor = seg.start + st.committed - st.csegOff
	}
	if ev.Through < floor || ev.Through > seg.end {
		return fmt.Errorf("%w: lease %v done at %d, outside [%d, %d]", ErrInvalid, ev.Lease, ev.Through, floor, seg.end)
	}
	seg.delivered = max(seg.delivered, ev.Through)
	returned := false // whether other ranks must be served again
	if ev.Through < seg.end {
		ep.endsStale = true
		tail := Range{ev.Through, seg.end}
		seg.end = ev.Through
		st.granted -= tail.Len()
		if seg.pad {
			st.padGranted -= tail.Len()
		} else {
			ep.pool.add(tail)
			returned = true
		}
	}
	var thief *rank
	if seg.revoking {
		returned = true // the epoch's other ranks may now be ended or served
		seg.revoking = false
		st.revoking--
		for k, rv := range ep.revokes {
			if rv.lease == seg.fence {
				thief = rv.thief
				ep.revokes = append(ep.revokes[:k], ep.revokes[k+1:]...)
				break
			}
		}
	}
	if h := st.held; h != nil {
		// Retry a commit that waited for this LeaseDone. An error
		// means the rank's commit was bad, not this LeaseDone: drop it.
		st.held = nil
		_ = c.commit(*h)
	}
	if returned {
		if thief != nil && c.ranks[thief.id] == thief {
			c.serveEpochs(thief) // the split was for it
		}
		c.serveAll()
	} else {
		c.serve(r)
	}
	return nil
}

func (c *Coordinator) commit(ev Commit) error {
	r, err := c.session(ev.Rank, ev.Session)
	if err != nil {
		return err
	}
	if ev.Epoch < 0 || ev.Epoch >= len(c.epochs) {
		return fmt.Errorf("%w: commit for epoch %d, %d started", ErrInvalid, ev.Epoch, len(c.epochs))
	}
	ep := c.epochs[ev.Epoch]
	st := r.streams[ev.Epoch]
	if ep.complete || st == nil {
		return fmt.Errorf("%w: commit for epoch %d", ErrStale, ev.Epoch)
	}
	i := sort.Search(len(st.segs), func(i int) bool { return !st.segs[i].fence.Less(ev.Lease) })
	if i == len(st.segs) || st.segs[i].fence != ev.Lease {
		return fmt.Errorf("%w: commit names lease %v, not in rank %q's epoch %d", ErrInvalid, ev.Lease, r.id, ev.Epoch)
	}
	seg := &st.segs[i]
	if ev.Through <= seg.start || ev.Through > seg.end {
		return fmt.Errorf("%w: commit at %d outside lease %v (%d, %d]", ErrInvalid, ev.Through, ev.Lease, seg.start, seg.end)
	}
	st.noteCuts(ev)
	if i < st.cseg {
		// An older commit than one applied (reordered): its step still
		// tells the trail where a batch ended.
		off := ev.Through - seg.start
		for k := range i {
			off += st.segs[k].end - st.segs[k].start
		}
		st.noteCommit(TrailCommit{Step: ev.Step, Offset: off}, c.cfg.BatchSize)
		return nil
	}
	off := st.csegOff
	for k := st.cseg; k < i; k++ {
		off += st.segs[k].end - st.segs[k].start
	}
	off += ev.Through - seg.start
	switch {
	case off <= st.committed:
		st.noteCommit(TrailCommit{Step: ev.Step, Offset: off}, c.cfg.BatchSize) // duplicate or reordered older commit
		return nil
	case off > ev.Offset:
		// The rank stopped an earlier lease short and we have not seen
		// its LeaseDone yet: apply once we have.
		if st.held == nil || st.held.Offset < ev.Offset {
			if st.held != nil {
				// Its step ended a batch: the trail takes it once the
				// stream is committed past it.
				st.early = append(st.early, TrailCommit{Step: st.held.Step, Offset: st.held.Offset})
			}
			h := ev
			st.held = &h
			c.stats.HeldCommits++
		}
		return nil
	case off < ev.Offset:
		return fmt.Errorf("%w: rank %q commits offset %d at lease %v position %d, which is offset %d here", ErrInvalid, r.id, ev.Offset, ev.Lease, ev.Through, off)
	}
	seg.delivered = max(seg.delivered, ev.Through)
	for st.committed < off {
		s := &st.segs[st.cseg]
		segEnd := st.csegOff + s.end - s.start
		k := min(off, segEnd) - st.committed
		if !s.pad {
			st.committedN += k
			ep.committedN += k
		}
		st.committed += k
		if st.committed == segEnd {
			st.cseg++
			st.csegOff = segEnd
		}
	}
	st.step, st.gen = ev.Step, 0
	st.noteCommit(TrailCommit{Step: ev.Step, Offset: off}, c.cfg.BatchSize)
	c.stats.Commits++
	c.ready.Acks = append(c.ready.Acks, Ack{Rank: r.id, Session: r.session, Epoch: ep.n, Offset: off, Step: ev.Step})
	c.ready.Persist = true
	c.checkComplete(ep)
	return nil
}

// checkComplete closes ep once every real position is committed or
// dropped: members get their final padding and a closing StreamEnd, and
// the epoch's per-rank state is freed.
func (c *Coordinator) checkComplete(ep *epoch) {
	if ep.complete || ep.committedN+ep.dropN < c.cfg.Samples {
		return
	}
	ep.complete = true
	for _, r := range c.rankOrder {
		st := r.streams[ep.n]
		if st == nil {
			continue
		}
		if c.cfg.Balance == EqualSteps {
			// Trainers still have padding ahead of them to keep steps
			// equal: lease it all now, since the epoch is closing.
			for st.granted < ep.quota {
				k := min(ep.quota-st.granted, int64(c.cfg.ShardSize))
				p := c.cfg.Samples + ep.padNext
				ep.padNext += k
				c.grant(r, ep, st, Range{p, p + k}, true)
			}
		}
		c.sendEnd(r, ep, st, true)
		ep.keepCommit(r, st)
		ep.keepTrail(r, st)
		delete(r.streams, ep.n)
		r.closed[ep.n] = true
	}
	ep.pool = rangeSet{}
	ep.revokes = nil
	ep.departedCommitted = nil
	if c.lastClosed >= 0 {
		c.epochs[c.lastClosed].commits = nil
		c.unpersisted = append(c.unpersisted, c.lastClosed)
	}
	c.lastClosed = ep.n
	c.completed++
	for c.firstOpen < len(c.epochs) && c.epochs[c.firstOpen].complete {
		c.firstOpen++
	}
	c.ready.EpochsCompleted = append(c.ready.EpochsCompleted, ep.n)
	if c.Done() {
		c.ready.Done = true
	}
}

func (c *Coordinator) tick() {
	c.now++
	c.resendWelcomes()
	if c.cfg.RevokeTimeout == 0 {
		return
	}
	var late []*node
	for _, ep := range c.openEpochs() {
		for _, rv := range ep.revokes {
			if c.now-rv.since >= int64(c.cfg.RevokeTimeout) {
				late = append(late, rv.r.node)
			}
		}
	}
	for _, n := range late {
		if c.nodes[n.id] == n {
			c.depart(n)
		}
	}
	if len(late) > 0 {
		c.replanAll()
	}
}
