package coord

import (
	"sort"
	"time"

	"github.com/longshore/longshore/cluster/wire"
)

// NodeState is a node's standing in the coordinator's eyes.
type NodeState string

// Node states on the status page.
const (
	NodeAlive NodeState = "alive" // the state machine counts its life
	// NodeSuspect: alive in the state machine, but gossip's failure
	// detector got no ack from it (gossip.Suspected): it is evicted in
	// seconds unless it answers again.
	NodeSuspect NodeState = "suspect"
	NodeSilent  NodeState = "silent"  // alive, but no report for SilentAfter
	NodeEvicted NodeState = "evicted" // declared dead (gossip failure, revoke timeout, fenced)
	NodeLeft    NodeState = "left"    // left the cluster
	NodeJoining NodeState = "joining" // heard of, not (yet) in the state machine
)

// NodeStates lists every NodeState, in the order the page explains them.
var NodeStates = []NodeState{NodeAlive, NodeSuspect, NodeSilent, NodeEvicted, NodeLeft, NodeJoining}

// SilentAfter is how long an alive node may go without a report before
// the status page calls it silent (nodes report about once a second).
const SilentAfter = 5 * time.Second

// NodeStatus is what the coordinator knows of one node: its life, its
// standing, and its latest report (nil before the first).
type NodeStatus struct {
	Node        string
	Incarnation uint64
	State       NodeState
	// ReportAt is when Report arrived.
	ReportAt time.Time
	Report   *wire.NodeReport
	// StoreRPS is the node's share of the job's store request budget
	// last mailed to it (Config.JobStoreRPS; 0: none).
	StoreRPS float64
}

// nodeBook keeps each node's latest report and how its last life ended,
// for Status. Owned by the actor.
type nodeBook struct {
	by map[string]*NodeStatus
	// suspect is the life of each node gossip suspects now.
	suspect map[string]uint64
}

// Live reports whether a node in state s is counted alive by the state
// machine (its ranks hold leases): alive, suspect or silent.
func (s NodeState) Live() bool {
	return s == NodeAlive || s == NodeSuspect || s == NodeSilent
}

// suspected records that gossip suspects (or no longer suspects) life
// inc of node.
func (b *nodeBook) suspected(node string, inc uint64, on bool) {
	if b.suspect == nil {
		b.suspect = map[string]uint64{}
	}
	if on {
		b.suspect[node] = inc
	} else if b.suspect[node] == inc {
		delete(b.suspect, node)
	}
}

func (b *nodeBook) get(node string) *NodeStatus {
	if b.by == nil {
		b.by = map[string]*NodeStatus{}
	}
	s := b.by[node]
	if s == nil {
		s = &NodeStatus{Node: node}
		b.by[node] = s
	}
	return s
}

// report records a node's report of life inc.
func (b *nodeBook) report(node string, inc uint64, r *wire.NodeReport, now time.Time) {
	if r == nil {
		return
	}
	s := b.get(node)
	if inc < s.Incarnation {
		return // from a life already replaced
	}
	s.Incarnation, s.ReportAt, s.Report = inc, now, r
}

// gone records how a node's life ended.
func (b *nodeBook) gone(node string, left bool) {
	s := b.get(node)
	s.State = NodeEvicted
	if left {
		s.State = NodeLeft
	}
}

// statuses lists every node heard of, by name, with its state now:
// alive (or suspect, or silent) if the state machine counts one of its
// ranks (alive), else how its last life ended. Suspect wins over
// silent: a node gossip cannot reach is also one that cannot report. Reports are shared, not
// copied: nothing changes one once received.
func (b *nodeBook) statuses(nodes map[string]*nodeInfo, alive map[string]bool, now time.Time) []NodeStatus {
	var out []NodeStatus
	for id, n := range nodes {
		s := *b.get(id)
		switch {
		case alive[id]:
			s.Incarnation = max(s.Incarnation, n.inc)
			s.StoreRPS = n.share
			s.State = NodeAlive
			if inc, ok := b.suspect[id]; ok && inc == n.inc {
				s.State = NodeSuspect
			} else if s.ReportAt.IsZero() || now.Sub(s.ReportAt) > SilentAfter {
				s.State = NodeSilent
			}
		case s.State == "" && n.gone == 0:
			s.State = NodeJoining
		case s.State == "" || s.State == NodeAlive:
			s.State = NodeEvicted
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}
