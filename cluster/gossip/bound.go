package gossip

import (
	"errors"
	"fmt"
	"log"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/memberlist"
)

// memberlist reads an inbound stream's whole message before it can
// decrypt it, and so before it knows the sender holds a key: up to 20
// MiB a stream (its maxPushStateBytes), on as many streams as anyone who
// can reach the gossip port opens. boundedTransport wraps the transport
// memberlist is given so that an unauthenticated peer can make a member
// hold at most MaxInboundStreams streams of MaxStreamBytes each.

// Defaults of Config's stream bounds.
const (
	// DefaultMaxInboundStreams: a member gets about one push-pull sync
	// a push-pull interval from the others (each syncs with one member
	// at random), a join each, and a TCP probe now and then: a few at
	// once. 32 leaves room for a wave of nodes joining the coordinator
	// (each refused one retries, Start's join backs off) and bounds a
	// flood at 32 × DefaultMaxStreamBytes = 128 MiB.
	DefaultMaxInboundStreams = 32
	// DefaultMaxStreamBytes: the largest stream a member receives is a
	// push-pull sync, every member's state (its name, address,
	// incarnation and Meta: a few hundred bytes, compressed), so 4 MiB
	// is above 10,000 members.
	DefaultMaxStreamBytes = 4 << 20
)

// StreamStats counts a member's inbound gossip streams.
type StreamStats struct {
	Open      int64 // held now (at most Config.MaxInboundStreams)
	Peak      int64 // the most held at once, ever
	Refused   int64 // closed at once for being over MaxInboundStreams, ever
	Truncated int64 // cut off at MaxStreamBytes, ever
}

// errStreamTooLong ends the read of a stream over its byte bound.
var errStreamTooLong = errors.New("gossip: inbound stream over its byte limit")

// boundedTransport is a memberlist transport whose inbound streams are
// bounded in number and bytes; outbound streams and packets pass
// through. Safe for concurrent use.
type boundedTransport struct {
	memberlist.NodeAwareTransport
	maxStreams int64
	maxBytes   int64
	log        *log.Logger

	streams  chan net.Conn
	stopping chan struct{} // Shutdown began: close what arrives
	done     chan struct{} // the inner transport is shut down
	wg       sync.WaitGroup
	stopOnce sync.Once

	open, peak, refused, truncated atomic.Int64
}

func newBoundedTransport(inner memberlist.NodeAwareTransport, maxStreams int, maxBytes int64, logger *log.Logger) *boundedTransport {
	t := &boundedTransport{NodeAwareTransport: inner, maxStreams: int64(maxStreams), maxBytes: maxBytes, log: logger,
		streams: make(chan net.Conn), stopping: make(chan struct{}), done: make(chan struct{})}
	t.wg.Add(1)
	go t.relay()
	return t
}

// relay admits the inner transport's streams, or closes them, until the
// inner transport is shut down (it may block handing one over until
// then).
func (t *boundedTransport) relay() {
	defer t.wg.Done()
	for {
		select {
		case c := <-t.NodeAwareTransport.StreamCh():
			t.admit(c)
		case <-t.done:
			return
		}
	}
}

func (t *boundedTransport) admit(c net.Conn) {
	n := t.open.Add(1)
	if n > t.maxStreams {
		t.open.Add(-1)
		t.refused.Add(1)
		t.log.Printf("[WARN] gossip: refused a stream from %s: %d open, the most allowed (--gossip-max-streams)", c.RemoteAddr(), t.maxStreams)
		reset(c)
		return
	}
	for p := t.peak.Load(); n > p && !t.peak.CompareAndSwap(p, n); p = t.peak.Load() {
	}
	bc := &boundedConn{Conn: c, t: t, left: t.maxBytes}
	select {
	case t.streams <- bc:
	case <-t.stopping:
		bc.Close()
	}
}

// reset closes c at once, with a reset where it is TCP: nothing of it
// lingers here.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

func (t *boundedTransport) StreamCh() <-chan net.Conn { return t.streams }

func (t *boundedTransport) Shutdown() error {
	t.stopOnce.Do(func() { close(t.stopping) })
	err := t.NodeAwareTransport.Shutdown()
	select {
	case <-t.done:
	default:
		close(t.done)
	}
	t.wg.Wait()
	return err
}

func (t *boundedTransport) stats() StreamStats {
	return StreamStats{Open: t.open.Load(), Peak: t.peak.Load(), Refused: t.refused.Load(), Truncated: t.truncated.Load()}
}

// boundedConn is an inbound stream that reads at most its bound and
// gives its place back when closed (memberlist closes every stream it
// handled).
type boundedConn struct {
	net.Conn
	t         *boundedTransport
	left      int64 // bytes it may still read (reader only)
	truncated atomic.Bool
	closeOnce sync.Once
}

func (c *boundedConn) Read(b []byte) (int, error) {
	if c.left <= 0 {
		if !c.truncated.Swap(true) {
			c.t.truncated.Add(1)
			c.t.log.Printf("[WARN] gossip: cut off a stream from %s at %d bytes (--gossip-max-stream-bytes)", c.RemoteAddr(), c.t.maxBytes)
		}
		return 0, errStreamTooLong
	}
	if int64(len(b)) > c.left {
		b = b[:c.left]
	}
	n, err := c.Conn.Read(b)
	c.left -= int64(n)
	return n, err
}

func (c *boundedConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		if c.truncated.Load() {
			reset(c.Conn) // unread bytes are the sender's problem, not ours
		} else {
			err = c.Conn.Close()
		}
		c.t.open.Add(-1)
	})
	return err
}

// netTransport makes memberlist's own TCP and UDP transport on host:port
// (port 0: a free one, with memberlist's retries when UDP's half of a
// free TCP port is taken).
func netTransport(host string, port int, logger *log.Logger) (*memberlist.NetTransport, error) {
	tries := 1
	if port == 0 {
		tries = 10
	}
	var err error
	for range tries {
		var nt *memberlist.NetTransport
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{host}, BindPort: port, Logger: logger})
		if err == nil {
			return nt, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, fmt.Errorf("gossip: listen on %s: %w", net.JoinHostPort(host, fmt.Sprint(port)), err)
}

var _ memberlist.NodeAwareTransport = (*boundedTransport)(nil)
