package observe

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/longshore/longshore/cluster/wire"
)

// controlCollector exports what the process's protoactor control port
// refused or recovered from (wire.ControlPortCounts). Every daemon has
// it; a node without a control port (standalone) reads zero.
type controlCollector struct {
	calls, messages, malformed, panics metric
}

func newControlCollector() *controlCollector {
	return &controlCollector{
		calls: newMetric("control_refused_calls_total", counter,
			"Calls to the control port of methods other than the message stream, refused (by method of protoactor's Remoting service).", "method"),
		messages: newMetric("control_refused_messages_total", counter,
			"Messages dropped at the control port as outside the protocol: system messages (stop, watch, ...), other types, other encodings, other processes' addresses."),
		malformed: newMetric("control_malformed_batches_total", counter,
			"Message batches refused as malformed (indices out of range, unknown protocol types): each ended its stream, nothing delivered."),
		panics: newMetric("control_panics_total", counter,
			"Panics of the control port's handlers, recovered into an error."),
	}
}

func (c *controlCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range []metric{c.calls, c.messages, c.malformed, c.panics} {
		ch <- m.desc
	}
}

func (c *controlCollector) Collect(ch chan<- prometheus.Metric) {
	n := wire.ControlPortCounts()
	methods := make([]string, 0, len(n.RefusedCalls))
	for m := range n.RefusedCalls {
		methods = append(methods, m)
	}
	sort.Strings(methods)
	for _, m := range methods {
		c.calls.emit(ch, float64(n.RefusedCalls[m]), m)
	}
	c.messages.emit(ch, float64(n.RefusedMessages))
	c.malformed.emit(ch, float64(n.MalformedBatches))
	c.panics.emit(ch, float64(n.Panics))
}
