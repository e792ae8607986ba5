// Package gossip is longshore's membership shell: who is alive, and where
// each member's actor endpoint is. It wraps hashicorp/memberlist (SWIM
// gossip) and turns its callbacks into Events on a channel.
//
// memberlist calls its delegates while holding its node lock, so nothing
// here calls back into memberlist from a callback: events are appended to a
// queue owned by this package and delivered by one goroutine. The queue is
// unbounded on purpose: it grows only with membership changes (a handful per
// node joining or dying), and blocking memberlist's lock on a slow reader
// would stall failure detection for the whole cluster.
//
// Members carry a small Meta (≤ 512 bytes, memberlist's limit): the node id,
// the address of its protoactor remote endpoint, its role and its ranks.
// Control messages travel over protoactor remote, never over gossip.
//
// On sockets, inbound TCP streams are bounded in number and in bytes
// before memberlist reads them (Config.MaxInboundStreams,
// MaxStreamBytes; bound.go): memberlist reads a whole message before it
// can authenticate it.
//
// Config.Network puts members on an in-memory network instead of sockets
// (the seam's twin, for tests): no ports, no lost loopback packets, and
// members that shut down are gone at once.
package gossip

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Role says what a member does in the job.
type Role string

const (
	RoleCoordinator Role = "coordinator"
	RoleNode        Role = "node"
)

// Meta is what every member advertises about itself.
type Meta struct {
	ID        string   `json:"id"`
	Role      Role     `json:"role"`
	ActorAddr string   `json:"actor"`           // host:port of the protoactor remote endpoint
	Ranks     []string `json:"ranks,omitempty"` // rank names served by a node, e.g. "n1/0"
	// Incarnation numbers this life of the member: a process picks a
	// fresh one when it starts and a larger one when the coordinator
	// evicted it, so the coordinator can tell lives apart (cluster.Join).
	Incarnation uint64 `json:"inc,omitempty"`
	// Leaving is set just before a graceful leave. memberlist v0.7.0 does
	// not tell NotifyLeave whether a node left or died (it sets the state
	// on a shadowed field), so the leaver says so in its metadata first.
	Leaving bool `json:"leaving,omitempty"`
}

// maxMeta is memberlist's limit on node metadata.
const maxMeta = memberlist.MetaMaxSize

// metaWire is Meta as gossip carries it: a node's ranks named
// "<id>/0" … "<id>/<n-1>", as the node names them, travel as their count,
// so that a node of 64 ranks stays far under memberlist's 512-byte limit.
type metaWire struct {
	Meta
	NRanks int `json:"nranks,omitempty"`
}

// countedRanks reports n if ranks are exactly id/0 … id/n-1.
func countedRanks(id string, ranks []string) (int, bool) {
	for i, r := range ranks {
		if r != id+"/"+strconv.Itoa(i) {
			return 0, false
		}
	}
	return len(ranks), len(ranks) > 0
}

func (m Meta) encode() ([]byte, error) {
	w := metaWire{Meta: m}
	if n, ok := countedRanks(m.ID, m.Ranks); ok {
		w.Ranks, w.NRanks = nil, n
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, err
	}
	if len(b) > maxMeta {
		return nil, fmt.Errorf("gossip: metadata for %q is %d bytes, over memberlist's %d-byte limit (fewer or shorter rank names)", m.ID, len(b), maxMeta)
	}
	return b, nil
}

// EventKind says what happened to a member.
type EventKind int

const (
	Joined EventKind = iota + 1
	Updated
	Left   // left gracefully
	Failed // declared dead by failure detection
	// Suspected: this member's probe of the member got no ack, direct or
	// indirect, and memberlist now suspects it: it is declared dead
	// (Failed) unless it refutes within the suspicion timeout (seconds).
	// memberlist v0.7.0 has no callback for suspicion and does not set
	// Node.State, so this is read from the line memberlist logs as it
	// suspects (suspect.go); a suspicion that reaches this member only
	// by gossip from another is not reported until this member's own
	// probe fails too.
	Suspected
	// Recovered: a member this one suspected answered a direct probe
	// again.
	Recovered
)

func (k EventKind) String() string {
	switch k {
	case Joined:
		return "joined"
	case Updated:
		return "updated"
	case Left:
		return "left"
	case Failed:
		return "failed"
	case Suspected:
		return "suspected"
	case Recovered:
		return "recovered"
	}
	return "unknown(" + strconv.Itoa(int(k)) + ")"
}

// Event is one membership change.
type Event struct {
	Kind EventKind
	Name string // memberlist node name (= Meta.ID)
	Addr string // gossip host:port
	Meta Meta   // zero if the metadata could not be decoded
}

// Member is a live member.
type Member struct {
	Name string
	Addr string
	Meta Meta
	// Suspect is true from a Suspected event of the member to its
	// Recovered (or a newer Joined or Updated).
	Suspect bool
}

// Config configures a Membership. The zero value is not valid: ID and
// BindAddr are required.
type Config struct {
	// Meta is what this member advertises; Meta.ID is also its gossip name
	// and must be unique in the cluster.
	Meta Meta
	// BindAddr is the host:port to listen on for gossip (TCP and UDP).
	// Port 0 picks a free port (see Membership.Addr).
	BindAddr string
	// AdvertiseAddr is the host:port other members should use to reach
	// this one, when it differs from BindAddr (containers, NAT). Empty
	// means BindAddr.
	AdvertiseAddr string
	// Join lists gossip addresses of existing members. Empty starts a new
	// cluster (the coordinator, usually).
	Join []string
	// Profile picks memberlist's timing: "lan" (default: a hard-killed node
	// is noticed in ~7 s on 3 nodes), "local" (loopback and small
	// private networks: 4-6 s measured on 3 nodes, which is memberlist's
	// 1 s probe interval plus its minimum 3-interval suspicion timeout),
	// or "large" (hundreds to thousands of nodes; see Start).
	Profile string
	// Logger receives memberlist's log lines; nil discards them.
	Logger *log.Logger
	// Network, if set, is the in-memory network to gossip on instead of
	// sockets (tests): BindAddr's host must be an IP; port 0 picks a
	// fresh address, another port takes that one. nil: UDP and TCP.
	Network *Network

	// Keys, if any, encrypt and authenticate all gossip with memberlist's
	// keyring (AES-GCM; each key 16, 24 or 32 bytes). Keys[0] is the
	// primary, the one that encrypts; the others are still accepted, for
	// a rotation in progress (Membership.SetKeys changes them while
	// running; keyring.go). Empty: plaintext gossip, which anyone who can
	// reach BindAddr can read and join.
	Keys [][]byte

	// MaxInboundStreams caps the TCP streams (push-pull syncs, joins,
	// fallback probes) this member holds open at once; one over it is
	// closed at once and counted (Membership.StreamStats). memberlist
	// reads a stream's whole message, up to 20 MiB, before it can
	// decrypt and authenticate it, and sets no cap of its own (bound.go).
	// 0: DefaultMaxInboundStreams. Sockets only: an in-memory Network's
	// streams are not bounded.
	MaxInboundStreams int
	// MaxStreamBytes caps the bytes read from one inbound stream (one
	// message); a stream over it is cut off and counted. It must hold
	// the largest push-pull sync, which grows with the members. 0:
	// DefaultMaxStreamBytes.
	MaxStreamBytes int64

	// slow, above 1, stretches every memberlist interval and timeout by
	// that factor. BenchmarkScale sets it to run a thousand members on a
	// few cores: each round comes slow times later, so each member gets
	// the CPU time a host of its own would give it within a round, and
	// the benchmark divides the times it measures by slow. Rounds, not
	// seconds, are what the protocol counts, so the figures carry over;
	// the benchmark checks that at 256 members, where it can run both.
	slow int
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Meta.ID == "" {
		errs = append(errs, errors.New("gossip: Meta.ID is required"))
	}
	if host, _, err := net.SplitHostPort(c.BindAddr); err != nil {
		errs = append(errs, fmt.Errorf("gossip: BindAddr %q: %w", c.BindAddr, err))
	} else if c.Network != nil && net.ParseIP(host) == nil {
		errs = append(errs, fmt.Errorf("gossip: BindAddr %q: on an in-memory Network the host must be an IP address", c.BindAddr))
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := net.SplitHostPort(c.AdvertiseAddr); err != nil {
			errs = append(errs, fmt.Errorf("gossip: AdvertiseAddr %q: %w", c.AdvertiseAddr, err))
		}
	}
	switch c.Profile {
	case "", "lan", "local", "large":
	default:
		errs = append(errs, fmt.Errorf("gossip: Profile %q: want lan, local or large", c.Profile))
	}
	if _, err := c.Meta.encode(); err != nil {
		errs = append(errs, err)
	}
	if err := validateKeys(c.Keys); err != nil {
		errs = append(errs, err)
	}
	if c.MaxInboundStreams < 0 {
		errs = append(errs, fmt.Errorf("gossip: MaxInboundStreams %d: need 0 (the default) or more", c.MaxInboundStreams))
	}
	if c.MaxStreamBytes < 0 {
		errs = append(errs, fmt.Errorf("gossip: MaxStreamBytes %d: need 0 (the default) or more", c.MaxStreamBytes))
	}
	return errors.Join(errs...)
}

// Membership is this process's view of the cluster.
type Membership struct {
	ml     *memberlist.Memberlist
	events chan Event
	cfg    Config

	mu struct {
		sync.Mutex
		queue  []Event
		closed bool
		// members is the live view built from the events. memberlist's
		// own Members returns pointers into its state that it goes on
		// mutating under its lock (a data race to read), so Members
		// answers from this copy, taken inside the callbacks.
		members map[string]Member
		// suspect names the members suspected and not yet recovered.
		suspect map[string]bool
	}
	wake chan struct{}
	done chan struct{}
	wg   sync.WaitGroup

	keys keyState // the gossip keyring, if Config.Keys

	bounded *boundedTransport // on sockets; nil on an in-memory Network
}

// Start joins (or starts) the cluster. It returns once this member is
// listening and, if Join is non-empty, has contacted at least one member.
func Start(ctx context.Context, c Config) (*Membership, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	mc := memberlist.DefaultLANConfig()
	switch c.Profile {
	case "local":
		mc = memberlist.DefaultLocalConfig()
	case "large":
		// Clusters of hundreds to thousands of nodes on a LAN: the LAN
		// timings, one more gossip target per round so news reaches
		// everyone in fewer rounds, one more suspicion interval before
		// a member is declared dead (a thousand members make a false
		// suspicion somewhere likelier), and full state syncs half as
		// often (their size grows with the members; memberlist already
		// spaces them further as the cluster grows). BenchmarkScale
		// measures it; docs/scale.md ("Gossip at scale") has what ran.
		mc.GossipNodes = 4
		mc.SuspicionMult = 5
		mc.PushPullInterval = 60 * time.Second
	}
	if k := time.Duration(c.slow); k > 1 {
		for _, d := range []*time.Duration{&mc.TCPTimeout, &mc.PushPullInterval, &mc.ProbeInterval, &mc.ProbeTimeout,
			&mc.GossipInterval, &mc.GossipToTheDeadTime, &mc.DeadNodeReclaimTime, &mc.QueueCheckInterval} {
			*d *= k
		}
	}
	mc.Name = c.Meta.ID
	host, port, _ := net.SplitHostPort(c.BindAddr)
	mc.BindAddr = host
	mc.BindPort, _ = strconv.Atoi(port)
	mc.AdvertisePort = mc.BindPort
	if c.AdvertiseAddr != "" {
		ah, ap, _ := net.SplitHostPort(c.AdvertiseAddr)
		mc.AdvertiseAddr = ah
		mc.AdvertisePort, _ = strconv.Atoi(ap)
	}
	m := &Membership{
		events: make(chan Event),
		cfg:    c,
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	// memberlist's log is where it says it suspects a member: every line
	// passes through suspectLog on its way to c.Logger.
	var next io.Writer = io.Discard
	if c.Logger != nil {
		next = loggerWriter{c.Logger}
	}
	mc.Logger = log.New(suspectLog{m: m, next: next}, "", 0)
	mc.Delegate = delegate{m}
	mc.Events = eventDelegate{m}
	mc.Ping = pingDelegate{m}
	if c.Network != nil {
		tr, err := c.Network.listen(host, mc.BindPort)
		if err != nil {
			return nil, err
		}
		mc.Transport = tr
	} else {
		nt, err := netTransport(host, mc.BindPort, mc.Logger)
		if err != nil {
			return nil, err
		}
		if mc.BindPort == 0 {
			mc.BindPort = nt.GetAutoBindPort()
			if c.AdvertiseAddr == "" {
				mc.AdvertisePort = mc.BindPort
			}
		}
		streams, bytes := c.MaxInboundStreams, c.MaxStreamBytes
		if streams == 0 {
			streams = DefaultMaxInboundStreams
		}
		if bytes == 0 {
			bytes = DefaultMaxStreamBytes
		}
		m.bounded = newBoundedTransport(nt, streams, bytes, mc.Logger)
		mc.Transport = m.bounded
	}

	ring, err := newKeyring(c.Keys)
	if err != nil {
		return nil, fmt.Errorf("gossip: keyring: %w", err)
	}
	if ring != nil {
		mc.Keyring = ring
		mc.GossipVerifyIncoming = true // drop what is not encrypted with a key we hold
		mc.GossipVerifyOutgoing = true
		m.keys.ring = ring
	}

	ml, err := memberlist.Create(mc)
	if err != nil {
		if mc.Transport != nil {
			mc.Transport.Shutdown()
		}
		return nil, fmt.Errorf("gossip: listen on %s: %w", c.BindAddr, err)
	}
	m.ml = ml
	m.wg.Add(1)
	go m.deliver()
	if len(c.Join) > 0 {
		if err := m.join(ctx, c.Join); err != nil {
			m.Shutdown(context.Background())
			return nil, err
		}
	}
	return m, nil
}

// join retries until one member answers or ctx is done: the member we were
// pointed at may still be starting.
func (m *Membership) join(ctx context.Context, addrs []string) error {
	backoff := 100 * time.Millisecond
	for {
		n, err := m.ml.Join(addrs)
		if n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gossip: join %v: %w (last error: %v)", addrs, ctx.Err(), err)
		case <-time.After(backoff):
		}
		if backoff < 2*time.Second {
			backoff *= 2
		}
	}
}

// Join contacts the members at addrs, retrying until one answers or ctx
// is done. A member that lost sight of the cluster's other side (the
// coordinator restarted somewhere that does not know this member) calls
// it to find its way back; memberlist merges the two views.
func (m *Membership) Join(ctx context.Context, addrs []string) error {
	m.mu.Lock()
	closed := m.mu.closed
	m.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return m.join(ctx, addrs)
}

// Addr is the gossip address this member advertises.
func (m *Membership) Addr() string {
	n := m.ml.LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// StreamStats counts this member's inbound streams (zero on an
// in-memory Network).
func (m *Membership) StreamStats() StreamStats {
	if m.bounded == nil {
		return StreamStats{}
	}
	return m.bounded.stats()
}

// Events delivers membership changes in the order memberlist reported
// them, including one Joined event for this member itself. The channel is
// closed by Shutdown.
func (m *Membership) Events() <-chan Event { return m.events }

// Members lists the members memberlist currently believes alive, this
// one included, in name order.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	out := make([]Member, 0, len(m.mu.members))
	for _, mb := range m.mu.members {
		mb.Meta.Ranks = append([]string(nil), mb.Meta.Ranks...)
		mb.Suspect = m.mu.suspect[mb.Name]
		out = append(out, mb)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// UpdateMeta changes what this member advertises (under m's lock, so it
// never races NodeMeta) and gossips the change; others see Updated. It
// returns ctx.Err() if the update did not spread before ctx was done.
func (m *Membership) UpdateMeta(ctx context.Context, update func(*Meta)) error {
	m.mu.Lock()
	if m.mu.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	next := m.cfg.Meta
	next.Ranks = append([]string(nil), next.Ranks...)
	update(&next)
	if _, err := next.encode(); err != nil {
		m.mu.Unlock()
		return err
	}
	m.cfg.Meta = next
	m.mu.Unlock()
	timeout := 2 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if err := m.ml.UpdateNode(timeout); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("gossip: update metadata: %w", err)
	}
	return nil
}

// ErrClosed is returned by calls on a Membership after Shutdown.
var ErrClosed = errors.New("gossip: membership is shut down")

// Shutdown leaves the cluster gracefully (others see Left, not Failed) and
// stops. It is idempotent. It returns ctx.Err() if leaving did not finish
// in time.
func (m *Membership) Shutdown(ctx context.Context) error {
	if !m.markClosed() {
		return nil
	}
	timeout := 2 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	m.mu.Lock()
	m.cfg.Meta.Leaving = true
	m.mu.Unlock()
	// Best effort: if the update does not spread in time, others will see
	// Failed instead of Left, which is the safe reading.
	_ = m.ml.UpdateNode(timeout / 2)
	leaveErr := m.ml.Leave(timeout / 2)
	shutErr := m.ml.Shutdown()
	close(m.done)
	m.wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(leaveErr, shutErr)
}

// halt stops without leaving, as a crash would: others see Failed.
func (m *Membership) halt() {
	if !m.markClosed() {
		return
	}
	m.ml.Shutdown()
	close(m.done)
	m.wg.Wait()
}

// markClosed reports whether this call is the one that closed m.
func (m *Membership) markClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return false
	}
	m.mu.closed = true
	return true
}

func (m *Membership) push(e Event) {
	m.mu.Lock()
	if m.mu.members == nil {
		m.mu.members = map[string]Member{}
	}
	if m.mu.suspect == nil {
		m.mu.suspect = map[string]bool{}
	}
	switch e.Kind {
	case Joined, Updated:
		m.mu.members[e.Name] = Member{Name: e.Name, Addr: e.Addr, Meta: e.Meta}
		delete(m.mu.suspect, e.Name)
	case Left, Failed:
		delete(m.mu.members, e.Name)
		delete(m.mu.suspect, e.Name)
	case Suspected, Recovered:
		mb, ok := m.mu.members[e.Name]
		if !ok || m.mu.suspect[e.Name] == (e.Kind == Suspected) {
			m.mu.Unlock()
			return // not a member, or no change
		}
		m.mu.suspect[e.Name] = e.Kind == Suspected
		if e.Kind == Recovered {
			delete(m.mu.suspect, e.Name)
		}
		e.Addr, e.Meta = mb.Addr, mb.Meta
	}
	if !m.mu.closed {
		m.mu.queue = append(m.mu.queue, e)
	}
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// deliver moves queued events to the channel, off memberlist's lock.
func (m *Membership) deliver() {
	defer m.wg.Done()
	defer close(m.events)
	for {
		m.mu.Lock()
		q := m.mu.queue
		m.mu.queue = nil
		m.mu.Unlock()
		for _, e := range q {
			select {
			case m.events <- e:
			case <-m.done:
				return
			}
		}
		select {
		case <-m.wake:
		case <-m.done:
			return
		}
	}
}

func toMember(n *memberlist.Node) Member {
	return Member{Name: n.Name, Addr: n.Address(), Meta: decodeMeta(n.Meta)}
}

// decodeMeta is encode's inverse; metadata that does not parse is empty.
func decodeMeta(b []byte) Meta {
	var w metaWire
	if json.Unmarshal(b, &w) != nil {
		return Meta{}
	}
	m := w.Meta
	if len(m.Ranks) == 0 && w.NRanks > 0 && w.NRanks <= maxMeta {
		m.Ranks = make([]string, w.NRanks)
		for i := range m.Ranks {
			m.Ranks[i] = m.ID + "/" + strconv.Itoa(i)
		}
	}
	return m
}

type delegate struct{ m *Membership }

func (d delegate) NodeMeta(limit int) []byte {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	b, _ := d.m.cfg.Meta.encode() // size checked by Validate
	return b
}
func (d delegate) NotifyMsg([]byte)                           {}
func (d delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d delegate) LocalState(join bool) []byte                { return nil }
func (d delegate) MergeRemoteState(buf []byte, join bool)     {}

type eventDelegate struct{ m *Membership }

func (d eventDelegate) event(kind EventKind, n *memberlist.Node) {
	mem := toMember(n)
	d.m.push(Event{Kind: kind, Name: mem.Name, Addr: mem.Addr, Meta: mem.Meta})
}

func (d eventDelegate) NotifyJoin(n *memberlist.Node)   { d.event(Joined, n) }
func (d eventDelegate) NotifyUpdate(n *memberlist.Node) { d.event(Updated, n) }
func (d eventDelegate) NotifyLeave(n *memberlist.Node) {
	if toMember(n).Meta.Leaving {
		d.event(Left, n)
	} else {
		d.event(Failed, n)
	}
}
