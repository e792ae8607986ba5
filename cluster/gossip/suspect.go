package gossip

import (
	"bytes"
	"io"
	"log"
	"regexp"
	"time"

	"github.com/hashicorp/memberlist"
)

// suspectLine is what memberlist v0.7.0 logs just before it marks a
// member suspect after its own probe failed (state.go, probeNode). The
// test of this package fails if a memberlist upgrade changes it.
var suspectLine = regexp.MustCompile(`memberlist: Suspect (\S+) has failed, no acks received`)

// suspectLog reads memberlist's log lines for suspicions, then passes
// them on to next.
type suspectLog struct {
	m    *Membership
	next io.Writer
}

func (w suspectLog) Write(p []byte) (int, error) {
	for line := range bytes.SplitSeq(p, []byte{'\n'}) {
		if sm := suspectLine.FindSubmatch(line); sm != nil {
			w.m.push(Event{Kind: Suspected, Name: string(sm[1])})
		}
	}
	if _, err := w.next.Write(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// loggerWriter writes each line through a *log.Logger, with its prefix
// and flags.
type loggerWriter struct{ l *log.Logger }

func (w loggerWriter) Write(p []byte) (int, error) {
	if err := w.l.Output(3, string(bytes.TrimRight(p, "\n"))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// pingDelegate hears of every direct probe acked: the end of a
// suspicion. memberlist calls it from its probe loop, not under its node
// lock; push takes only m's.
type pingDelegate struct{ m *Membership }

func (d pingDelegate) AckPayload() []byte { return nil }

func (d pingDelegate) NotifyPingComplete(n *memberlist.Node, _ time.Duration, _ []byte) {
	d.m.mu.Lock()
	suspect := d.m.mu.suspect[n.Name]
	d.m.mu.Unlock()
	if suspect {
		d.m.push(Event{Kind: Recovered, Name: n.Name})
	}
}
