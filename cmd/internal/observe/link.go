package observe

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/longshore/longshore/cluster"
)

// linkCollector exports what the process's control links did
// (cluster.Links: the coordinator's links to node lives, a node's link to
// the coordinator life it follows), read at scrape time. Every daemon has
// it; a standalone node reads zero.
type linkCollector struct {
	sent, resends, applied, duplicates, held, heldDropped, lost, unacked metric
}

func newLinkCollector() *linkCollector {
	return &linkCollector{
		sent: newMetric("control_link_sent_total", counter,
			"Numbered control frames sent on the links (each once; resends are counted apart)."),
		resends: newMetric("control_link_resends_total", counter,
			"Control frames sent again because the peer had not acknowledged them in time (a loss, or a slow peer)."),
		applied: newMetric("control_link_applied_total", counter,
			"Control frames received and applied, each once, in order."),
		duplicates: newMetric("control_link_duplicates_total", counter,
			"Control frames received again after they were applied, and dropped."),
		held: newMetric("control_link_held_total", counter,
			"Control frames received ahead of a gap (one before them lost or late) and held until it was filled."),
		heldDropped: newMetric("control_link_held_dropped_total", counter,
			"Control frames received ahead of a gap when 1024 were held already, dropped (the peer sends them again)."),
		lost: newMetric("control_link_peers_lost_total", counter,
			"Links whose unacknowledged frames reached the bound: the peer life was declared lost (the coordinator evicts the node life; a node rejoins as a new life)."),
		unacked: newMetric("control_link_unacknowledged", gauge,
			"Control frames sent and not acknowledged yet, on every link of the process."),
	}
}

func (c *linkCollector) all() []metric {
	return []metric{c.sent, c.resends, c.applied, c.duplicates, c.held, c.heldDropped, c.lost, c.unacked}
}

func (c *linkCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.all() {
		ch <- m.desc
	}
}

func (c *linkCollector) Collect(ch chan<- prometheus.Metric) {
	n := cluster.Links.Totals()
	c.sent.emit(ch, float64(n.Sent))
	c.resends.emit(ch, float64(n.Resent))
	c.applied.emit(ch, float64(n.Applied))
	c.duplicates.emit(ch, float64(n.Duplicates))
	c.held.emit(ch, float64(n.Held))
	c.heldDropped.emit(ch, float64(n.DroppedHeld))
	c.lost.emit(ch, float64(n.Lost))
	c.unacked.emit(ch, float64(n.Pending))
}
