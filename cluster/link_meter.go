package cluster

import "sync/atomic"

// LinkMeter totals what the links of a process did, across every life
// they joined, for the daemons' metrics (longshore_control_link_*). A
// Link updates the meter its shell gives it (Link.Meter) as it counts
// its own Stats, so the totals need no reading of links that a new life
// replaced. Safe for concurrent use; the zero value is ready.
type LinkMeter struct {
	sent, resent, applied, duplicates, held, droppedHeld, lost atomic.Uint64
	pending                                                    atomic.Int64
}

// Links is the process's meter: the coordinator's and the node's shells
// hand it to their links, and the metrics read it.
var Links LinkMeter

// LinkTotals is a reading of a LinkMeter.
type LinkTotals struct {
	// Sent, Resent, Applied, Duplicates and Held (frames kept ahead of a
	// gap) and DroppedHeld (frames ahead of a gap dropped over the bound;
	// sent again) are the totals of LinkStats' counters.
	Sent, Resent, Applied, Duplicates, Held, DroppedHeld uint64
	// Lost counts links that declared their peer lost: their
	// unacknowledged frames reached the bound (Link.MaxPending).
	Lost uint64
	// Pending is the frames waiting for an acknowledgement now, on every
	// link of the process that is not Closed.
	Pending int64
}

// Totals reads the meter.
func (m *LinkMeter) Totals() LinkTotals {
	return LinkTotals{
		Sent: m.sent.Load(), Resent: m.resent.Load(), Applied: m.applied.Load(),
		Duplicates: m.duplicates.Load(), Held: m.held.Load(), DroppedHeld: m.droppedHeld.Load(),
		Lost: m.lost.Load(), Pending: m.pending.Load(),
	}
}
