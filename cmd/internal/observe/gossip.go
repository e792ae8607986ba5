package observe

import (
	"sync/atomic"

	"github.com/longshore/longshore/cluster/gossip"
	"github.com/prometheus/client_golang/prometheus"
)

// GossipStreams reads the stream counts of the member m holds once it
// started (zero before).
func GossipStreams(m *atomic.Pointer[gossip.Membership]) func() gossip.StreamStats {
	return func() gossip.StreamStats {
		if mb := m.Load(); mb != nil {
			return mb.StreamStats()
		}
		return gossip.StreamStats{}
	}
}

// gossipCollector exports a member's inbound gossip streams
// (gossip.StreamStats), read at scrape time.
type gossipCollector struct {
	streams                  func() gossip.StreamStats
	open, refused, truncated *prometheus.Desc
}

// NewGossipCollector exports what streams reports (zero until the
// member started): longshore_gossip_streams_open and the streams refused
// over --gossip-max-streams and cut off at --gossip-max-stream-bytes.
func NewGossipCollector(streams func() gossip.StreamStats) prometheus.Collector {
	return &gossipCollector{streams: streams,
		open: prometheus.NewDesc(Namespace+"_gossip_streams_open",
			"Inbound gossip streams held now (at most --gossip-max-streams).", nil, nil),
		refused: prometheus.NewDesc(Namespace+"_gossip_streams_refused_total",
			"Inbound gossip streams closed at once because --gossip-max-streams were open.", nil, nil),
		truncated: prometheus.NewDesc(Namespace+"_gossip_streams_truncated_total",
			"Inbound gossip streams cut off at --gossip-max-stream-bytes.", nil, nil),
	}
}

func (c *gossipCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.open
	ch <- c.refused
	ch <- c.truncated
}

func (c *gossipCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.streams()
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(s.Open))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.Refused))
	ch <- prometheus.MustNewConstMetric(c.truncated, prometheus.CounterValue, float64(s.Truncated))
}
