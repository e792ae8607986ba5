package observe

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Limits bound what an HTTP client, authenticated or not, can make the
// server hold. The zero value of each field means its default.
type Limits struct {
	// MaxConns is how many connections the server holds at once; one
	// accepted over it is closed at once, unanswered, and counted
	// (longshore_http_connections_refused_total). Refusing, rather than
	// queueing, keeps a flood's connections out of the process entirely;
	// a scraper refused tries again at its next interval. 0: 64 (a
	// scraper or two and a few browser tabs need a handful).
	MaxConns int
	// ReadHeaderTimeout bounds reading a request's headers. 0: 10 s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request (every path is a GET
	// without a body). 0: 30 s.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response, from the end of its
	// request's headers: no path streams, and the largest response (a
	// scrape of a node of many ranks) is a few hundred KiB. 0: 30 s.
	WriteTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its
	// next request. 0: 2 min, above the usual scrape intervals (15 s, 1
	// min), so a scraper keeps its connection between scrapes.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers. 0: 64 KiB (a bearer
	// token is a few dozen bytes).
	MaxHeaderBytes int
}

// DefaultLimits are the limits the zero Limits means.
func DefaultLimits() Limits {
	return Limits{MaxConns: 64, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
}

// withDefaults fills zero fields.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxConns == 0 {
		l.MaxConns = d.MaxConns
	}
	if l.ReadHeaderTimeout == 0 {
		l.ReadHeaderTimeout = d.ReadHeaderTimeout
	}
	if l.ReadTimeout == 0 {
		l.ReadTimeout = d.ReadTimeout
	}
	if l.WriteTimeout == 0 {
		l.WriteTimeout = d.WriteTimeout
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	return l
}

// ConnStats counts a server's connections.
type ConnStats struct {
	Open    int64 // held now
	Refused int64 // closed at once for being over Limits.MaxConns, ever
}

// connLimit is a listener that holds at most max connections: one
// accepted over the cap is closed at once. Safe for concurrent use.
type connLimit struct {
	net.Listener
	max           int64
	open, refused atomic.Int64
}

func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refused.Add(1)
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0) // a reset: nothing of it lingers here
			}
			c.Close()
			continue
		}
		return &limitedConn{Conn: c, l: l}, nil
	}
}

func (l *connLimit) stats() ConnStats {
	return ConnStats{Open: l.open.Load(), Refused: l.refused.Load()}
}

// limitedConn gives its place back when closed (net/http closes every
// connection it accepted, once or more).
type limitedConn struct {
	net.Conn
	l    *connLimit
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// newConnCollector exports l's ConnStats through the table's rows of
// GroupConns, labelled with its server (the flag that set its address,
// without dashes: "metrics", "http").
func newConnCollector(server string, l *connLimit) prometheus.Collector {
	return Metrics.Collector(func() Snapshot { s := l.stats(); return Snapshot{Conns: &s} }, []Group{GroupConns}, server)
}
