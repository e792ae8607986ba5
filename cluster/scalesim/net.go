package scalesim

import (
	"fmt"
	"slices"

	"github.com/longshore/longshore/cluster"
)

// The simulated network between the coordinator and the nodes. Without
// faults (Config.LossP, CutPerHour) it delivers everything, each tick,
// as the simulation always did. With them, frames are lost, and the
// control messages ride cluster.Links as cluster/coord and cluster/node
// carry them: one link per node life at each end, a frame per tick and
// direction holding what the tick produced, numbered, acknowledged
// cumulatively on every frame (or alone), sent again every two ticks
// while not acknowledged. A link over its bound (LinkMaxPending) declares
// its peer lost, and the simulation ends the life as the shells do: the
// coordinator fails the node life, a node rejoins as a new one. Gossip
// (joins, failures) is never lost.

// netFrame is one frame on the simulated network. Seq 0: unnumbered (an
// acknowledgement alone, or best effort on a link that lost its peer).
type netFrame struct {
	node     string
	inc      uint64 // the node life
	seq, ack uint64
	mail     []any           // to the node
	evs      []cluster.Event // to the coordinator
}

// clink is the coordinator's link to one node life.
type clink struct {
	inc  uint64
	link *cluster.Link[[]any, []cluster.Event]
}

type mailKey struct {
	node string
	inc  uint64
}

type net struct {
	linked        bool
	meter         *cluster.LinkMeter
	clinks        map[string]*clink
	known         map[string]uint64 // the node life the coordinator welcomed last
	outbox        map[mailKey][]any // the coordinator's mail of this tick
	toCoordFrames []netFrame        // the nodes' frames, for the next tick
	cutUntil      map[string]int64
	lastCommit    int64
}

func newNet(cfg Config) net {
	return net{linked: cfg.LossP > 0 || cfg.CutPerHour > 0, meter: &cluster.LinkMeter{},
		clinks: map[string]*clink{}, known: map[string]uint64{}, outbox: map[mailKey][]any{},
		cutUntil: map[string]int64{}}
}

// resendTicks is the links' Resend: a frame and its acknowledgement take
// a tick each way.
const resendTicks = 2

func (s *sim) faulting() bool { return s.cfg.FaultsUntil == 0 || s.now < s.cfg.FaultsUntil }

// lose reports whether a frame to or from node is lost: a cut connection
// loses everything until it ends, else each frame with LossP.
func (s *sim) lose(node string) bool {
	if !s.linked || !s.faulting() {
		return false
	}
	if s.cutUntil[node] > s.now || s.cfg.LossP > 0 && s.rng.Float64() < s.cfg.LossP {
		s.rep.FramesLost++
		return true
	}
	return false
}

// cut cuts the connections of nodes at CutPerHour, for CutSeconds.
func (s *sim) cut() {
	p := s.cfg.CutPerHour / 3600
	if !s.linked || p <= 0 || !s.faulting() {
		return
	}
	for _, n := range s.nodes {
		if n.alive && s.cutUntil[n.id] <= s.now && s.rng.Float64() < p {
			s.cutUntil[n.id] = s.now + max(s.cfg.CutSeconds, 1)
			s.rep.Cuts++
		}
	}
}

// liveness fails the run once faults stopped and no commit was
// acknowledged for RecoverySeconds.
func (s *sim) liveness() error {
	if s.cfg.RecoverySeconds <= 0 || s.cfg.FaultsUntil <= 0 || s.now <= s.cfg.FaultsUntil {
		return nil
	}
	stall := s.now - max(s.lastCommit, s.cfg.FaultsUntil)
	s.rep.MaxStallSeconds = max(s.rep.MaxStallSeconds, stall)
	if stall > s.cfg.RecoverySeconds {
		return fmt.Errorf("scalesim: no commit acknowledged for %d simulated seconds, %d s after faults stopped (liveness)", stall, s.now-s.cfg.FaultsUntil)
	}
	return nil
}

func (s *sim) newLink(n *node) {
	if !s.linked {
		return
	}
	if n.link != nil {
		n.link.Close()
	}
	n.link = &cluster.Link[[]cluster.Event, []any]{Resend: resendTicks, MaxPending: s.cfg.LinkMaxPending, Meter: s.meter}
	n.out = nil
}

// rejoin ends node n's life and joins as the next (an Eviction, or its
// link lost the coordinator).
func (s *sim) rejoin(n *node) {
	for _, r := range n.ranks {
		r.runs.EndSession()
	}
	n.inc++
	s.newLink(n)
	s.toCoord = append(s.toCoord, fromNode{ev: s.join(n)})
}

// fromNode queues ev, of node n's life, for the coordinator.
func (s *sim) fromNode(n *node, ev cluster.Event) {
	if s.linked {
		n.out = append(n.out, ev)
		return
	}
	s.toCoord = append(s.toCoord, fromNode{node: n.id, inc: n.inc, ev: ev})
}

// sendNode sends, at the end of node n's tick, what its link resends,
// the tick's events, and an acknowledgement no frame carried.
func (s *sim) sendNode(n *node) {
	if !s.linked {
		return
	}
	l := n.link
	send := func(f netFrame) {
		f.node, f.inc, f.ack = n.id, n.inc, l.Ack()
		s.toCoordFrames = append(s.toCoordFrames, f)
	}
	for _, f := range l.Due(s.now) {
		send(netFrame{seq: f.Seq, evs: f.Body})
	}
	lost := false
	if len(n.out) > 0 {
		was := l.Lost()
		f := l.Send(n.out, s.now)
		lost = !was && l.Lost()
		send(netFrame{seq: f.Seq, evs: f.Body})
		n.out = nil
	} else if l.AckDue() {
		send(netFrame{})
	}
	if lost {
		s.rejoin(n) // as cluster/node: end this life, join as a new one
	}
}

// receiveFrames takes the frames that reached node n off its link, in the
// coordinator's order, into its inbox.
func (s *sim) receiveFrames(n *node) {
	frames := n.frames
	n.frames = nil
	for _, f := range frames {
		if s.lose(n.id) || f.inc != n.inc {
			continue // lost, or for another life of this node
		}
		n.link.Acked(f.ack, s.now)
		if f.seq == 0 {
			n.inbox = append(n.inbox, f.mail...)
			continue
		}
		for _, b := range n.link.Accept(cluster.LinkFrame[[]any]{Seq: f.seq, Body: f.mail}) {
			n.inbox = append(n.inbox, b...)
		}
	}
}

// clinkTo is the coordinator's link to node life (id, inc), replacing
// one to an older life; nil for a life older than the one linked.
func (s *sim) clinkTo(id string, inc uint64) *clink {
	cl := s.clinks[id]
	switch {
	case cl == nil || inc > cl.inc:
		if cl != nil {
			cl.link.Close()
		}
		cl = &clink{inc: inc, link: &cluster.Link[[]any, []cluster.Event]{Resend: resendTicks, MaxPending: s.cfg.LinkMaxPending, Meter: s.meter}}
		s.clinks[id] = cl
	case inc < cl.inc:
		return nil
	}
	return cl
}

// coordFrames steps the events of the frames that reached the
// coordinator, each once, in each node life's order.
func (s *sim) coordFrames(frames []netFrame) error {
	for _, f := range frames {
		if s.lose(f.node) {
			continue
		}
		cl := s.clinkTo(f.node, f.inc)
		if cl == nil {
			continue // from a life older than the one linked: it is over
		}
		cl.link.Acked(f.ack, s.now)
		bodies := [][]cluster.Event{f.evs}
		if f.seq != 0 {
			bodies = cl.link.Accept(cluster.LinkFrame[[]cluster.Event]{Seq: f.seq, Body: f.evs})
		}
		for _, evs := range bodies {
			for _, ev := range evs {
				err := s.c.StepFrom(f.node, f.inc, ev)
				s.count(ev)
				if err != nil && !isRefusal(err) {
					return err
				}
				s.drain()
			}
		}
	}
	return nil
}

// toNode queues m for node id's life inc: straight into its inbox
// without links, else in the tick's mail.
func (s *sim) toNode(id string, inc uint64, m any) {
	n := s.byID[id]
	if n == nil {
		return
	}
	if !s.linked {
		n.inbox = append(n.inbox, m)
		return
	}
	k := mailKey{id, inc}
	s.outbox[k] = append(s.outbox[k], m)
}

// sendMail sends, at the end of the coordinator's turn, the tick's mail
// on the link to each node life, what the links resend, and the
// acknowledgements no frame carried. A frame to a dead process is lost
// with it.
func (s *sim) sendMail() {
	if !s.linked {
		return
	}
	put := func(f netFrame) {
		if n := s.byID[f.node]; n != nil && n.alive {
			n.frames = append(n.frames, f)
		}
	}
	keys := make([]mailKey, 0, len(s.outbox))
	for k := range s.outbox {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b mailKey) int {
		if a.node != b.node {
			if a.node < b.node {
				return -1
			}
			return 1
		}
		return int(a.inc) - int(b.inc)
	})
	for _, k := range keys {
		mail := s.outbox[k]
		delete(s.outbox, k)
		cl := s.clinkTo(k.node, k.inc)
		if cl == nil {
			put(netFrame{node: k.node, inc: k.inc, mail: mail}) // best effort
			continue
		}
		was := cl.link.Lost()
		f := cl.link.Send(mail, s.now)
		if !was && cl.link.Lost() {
			// As cluster/coord: the life is failed, as gossip would.
			s.toCoord = append(s.toCoord, fromNode{ev: cluster.Fail{Node: k.node, Incarnation: k.inc}})
		}
		put(netFrame{node: k.node, inc: k.inc, seq: f.Seq, ack: cl.link.Ack(), mail: f.Body})
	}
	ids := make([]string, 0, len(s.clinks))
	for id := range s.clinks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		cl := s.clinks[id]
		for _, f := range cl.link.Due(s.now) {
			put(netFrame{node: id, inc: cl.inc, seq: f.Seq, ack: cl.link.Ack(), mail: f.Body})
		}
		if cl.link.AckDue() {
			put(netFrame{node: id, inc: cl.inc, ack: cl.link.Ack()})
		}
	}
}
