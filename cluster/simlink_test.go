package cluster

import (
	"cmp"
	"maps"
	"slices"
	"strings"
)

// The simulation's links: with s.linked, what the coordinator and a node
// life send each other goes through a Link at each end, as the shells
// (cluster/coord, cluster/node) carry it, and may be lost (s.lossP, cuts).

// simBody is what a node sends: a rank's event and the session it is of.
type simBody struct {
	evs  []Event
	from *simSession
}

// simFrame is a link frame on the simulated network.
type simFrame struct {
	toCoord bool
	cinc    uint64 // the coordinator life
	node    string // the node life
	ninc    uint64
	seq     uint64 // 0: ack-only
	ack     uint64
}

type simLinkKey struct {
	cinc uint64
	node string
}

// simCLink is the coordinator's link to one node life.
type simCLink struct {
	peer uint64 // the node life
	link *Link[[]any, simBody]
}

// simResend is how many simulated steps a frame waits for its ack before
// it is sent again: messages take up to maxDelay steps each way, and an
// ack that no frame carries waits for a link tick (about 33 steps).
func (s *sim) simResend() int64 { return 2*s.maxDelay + 100 }

// simRecoveryBound is the longest stretch of simulated steps without a
// delivery allowed once faults stop (liveness with a bound: the links
// repair what was lost within a few resends; without them a lost grant
// stalls the job for good). A slow node finishing an epoch alone still
// delivers, so the bound is on silence, not on the time to the end.
const simRecoveryBound = 30_000

// lose reports whether message m, between the coordinator and a node
// (gossip is never lost here), is lost.
func (s *sim) lose(m *simMsg) bool {
	var node string
	switch {
	case m.frame != nil:
		node = m.frame.node
	case m.node != "":
		node = m.node
	case m.from != nil:
		node = m.from.node.id
	default:
		return false
	}
	if !s.faulting {
		return false
	}
	if s.cutUntil[node] > s.now || s.lossP > 0 && s.rng.Float64() < s.lossP {
		s.stats.Lost++
		return true
	}
	return false
}

// clink returns coordinator c's link to node life (id, inc), replacing a
// link to an older life; nil for a life older than the one it links.
func (s *sim) clink(c *Coordinator, id string, inc uint64) *simCLink {
	k := simLinkKey{c.Config().Incarnation, id}
	l := s.clinks[k]
	switch {
	case l == nil || l.peer < inc:
		l = &simCLink{peer: inc, link: &Link[[]any, simBody]{Resend: s.simResend()}}
		s.clinks[k] = l
	case l.peer > inc:
		return nil
	}
	return l
}

// linkToNode queues body for node life (n, inc); flushMail sends what a
// Ready queued for each node life as one frame, as the coordinator's
// shell sends one NodeMail per node per turn.
func (s *sim) linkToNode(c *Coordinator, n *simNode, inc uint64, body any) {
	k := simMailKey{c.Config().Incarnation, n.id, inc}
	if s.mail[k] == nil {
		s.mailOrder = append(s.mailOrder, k)
	}
	if s.mail == nil {
		s.mail = map[simMailKey][]any{}
	}
	s.mail[k] = append(s.mail[k], body)
}

type simMailKey struct {
	cinc uint64
	node string
	ninc uint64
}

func (s *sim) flushMail(c *Coordinator) {
	for _, k := range s.mailOrder {
		bodies := s.mail[k]
		l := s.clink(c, k.node, k.ninc)
		if l == nil {
			continue // for a life before the one the coordinator links: gone
		}
		f := l.link.Send(bodies, s.now)
		s.send(&simMsg{node: k.node, inc: k.ninc, body: bodies, frame: &simFrame{cinc: k.cinc, node: k.node, ninc: k.ninc, seq: f.Seq, ack: l.link.Ack()}})
	}
	s.mail, s.mailOrder = nil, nil
}

// linkToCoord sends a session's events as one frame, as the node's
// actor sends one NodeEvents per turn.
func (s *sim) linkToCoord(evs []Event, from *simSession) {
	n := from.node
	if n.link == nil || from.inc != n.inc || len(evs) == 0 {
		return // no coordinator heard of yet, or an old life's session
	}
	f := n.link.Send(simBody{evs, from}, s.now)
	s.send(&simMsg{from: from, body: evs, frame: &simFrame{toCoord: true, cinc: n.coordInc, node: n.id, ninc: n.inc, seq: f.Seq, ack: n.link.Ack()}})
}

// coordOf returns the running coordinator of life cinc, nil if none.
func (s *sim) coordOf(cinc uint64) *Coordinator {
	switch {
	case s.c.Config().Incarnation == cinc:
		return s.c
	case s.stale != nil && s.stale.Config().Incarnation == cinc:
		return s.stale
	}
	return nil
}

func (s *sim) deliverFrame(m *simMsg) {
	fr := m.frame
	if fr.toCoord {
		c := s.coordOf(fr.cinc)
		if c == nil {
			return // that coordinator life is over
		}
		l := s.clink(c, fr.node, fr.ninc)
		if l == nil {
			return
		}
		l.link.Acked(fr.ack, s.now)
		var body simBody
		if fr.seq != 0 {
			body = simBody{m.body.([]Event), m.from}
		}
	apply:
		for _, b := range l.link.Accept(LinkFrame[simBody]{Seq: fr.seq, Body: body}) {
			for _, ev := range b.evs {
				if s.coordOf(fr.cinc) != c {
					break apply // it stopped (a lost journal write) or was replaced
				}
				s.stepOn(c, ev, b.from)
			}
		}
		return
	}
	n := s.nodes[fr.node]
	if n == nil || !n.alive || n.inc != fr.ninc {
		return // that process life is gone
	}
	if fr.cinc != n.coordInc {
		if fr.cinc < n.coordInc {
			return // an older coordinator life than the one the node follows
		}
		// A new coordinator life: as the node's actor, follow it with a
		// new link and end the sessions of the old one (the new life
		// fences them).
		s.logf("%s inc %d follows coordinator life %d", n.id, n.inc, fr.cinc)
		for _, ss := range n.sess {
			ss.dead = true
		}
		n.sess = map[string]*simSession{}
		for _, r := range n.runs {
			r.EndSession()
		}
		n.coordInc, n.link = fr.cinc, &Link[simBody, []any]{Resend: s.simResend()}
	}
	n.link.Acked(fr.ack, s.now)
	var body []any
	if fr.seq != 0 {
		body = m.body.([]any)
	}
deliver:
	for _, bs := range n.link.Accept(LinkFrame[[]any]{Seq: fr.seq, Body: body}) {
		for _, b := range bs {
			if !n.alive || n.inc != fr.ninc || n.coordInc != fr.cinc {
				break deliver // evicted by what it just applied: a new life, a new link
			}
			s.nodeReceive(n, b)
		}
	}
}

// linkTick sends again what every link has waited long enough for.
func (s *sim) linkTick() {
	if !s.linked {
		return
	}
	keys := slices.SortedFunc(maps.Keys(s.clinks), func(a, b simLinkKey) int {
		if a.cinc != b.cinc {
			return cmp.Compare(a.cinc, b.cinc)
		}
		return strings.Compare(a.node, b.node)
	})
	for _, k := range keys { // in a fixed order: the run is the seed's
		l := s.clinks[k]
		c := s.coordOf(k.cinc)
		if c == nil {
			delete(s.clinks, k)
			continue
		}
		for _, f := range l.link.Due(s.now) {
			s.stats.Resent++
			s.send(&simMsg{node: k.node, inc: l.peer, body: f.Body, frame: &simFrame{cinc: k.cinc, node: k.node, ninc: l.peer, seq: f.Seq, ack: l.link.Ack()}})
		}
		if l.link.AckDue() { // nothing carried the ack since: an ack-only frame
			s.send(&simMsg{node: k.node, inc: l.peer, frame: &simFrame{cinc: k.cinc, node: k.node, ninc: l.peer, ack: l.link.Ack()}})
		}
	}
	for _, n := range s.order {
		if !n.alive || n.link == nil {
			continue
		}
		for _, f := range n.link.Due(s.now) {
			s.stats.Resent++
			s.send(&simMsg{body: f.Body.evs, from: f.Body.from, frame: &simFrame{toCoord: true, cinc: n.coordInc, node: n.id, ninc: n.inc, seq: f.Seq, ack: n.link.Ack()}})
		}
		if n.link.AckDue() {
			s.send(&simMsg{frame: &simFrame{toCoord: true, cinc: n.coordInc, node: n.id, ninc: n.inc, ack: n.link.Ack()}})
		}
	}
}

// linksIdle reports whether no link of a running coordinator or a live
// node life waits for an acknowledgement.
func (s *sim) linksIdle() bool {
	for k, l := range s.clinks {
		if n := s.nodes[k.node]; s.coordOf(k.cinc) != nil && l.link.Pending() > 0 && n != nil && n.alive && n.inc == l.peer {
			return false
		}
	}
	for _, n := range s.order {
		if n.alive && n.link != nil && n.link.Pending() > 0 && s.coordOf(n.coordInc) != nil {
			return false
		}
	}
	return true
}
