package observe

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/longshore/longshore/cluster/gossip"
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

// NewGossipCollector exports what streams reports (zero until the
// member started), the table's rows of GroupGossip:
// longshore_gossip_streams_open and the streams refused over
// --gossip-max-streams and cut off at --gossip-max-stream-bytes.
func NewGossipCollector(streams func() gossip.StreamStats) prometheus.Collector {
	return Metrics.Collector(func() Snapshot { s := streams(); return Snapshot{Gossip: &s} }, []Group{GroupGossip})
}
