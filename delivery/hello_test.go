package delivery

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/longshore/longshore/feed"
)

// serveHello is testEnv.serve with cfg's HandshakeTimeout.
func (e testEnv) serveHello(t testing.TB, ranks int, handshake time.Duration) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "lsf") // short: socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s, err := New(Config{Dir: dir, Ranks: ranks, Job: "test", HandshakeTimeout: handshake}, Standalone(e.cfg, e.ds, ranks, e.deps))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitHellos waits until rank's server is reading n hellos.
func waitHellos(t *testing.T, s *Server, rank int, n int64) {
	t.Helper()
	backstop := time.Now().Add(time.Minute) // a failure backstop only
	for s.ranks[rank].hellos.Load() != n {
		if time.Now().After(backstop) {
			t.Fatalf("rank %d: %d connections waiting for their hello, want %d", rank, s.ranks[rank].hellos.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSilentConnectionHoldsNoRank: connections that open a rank's socket
// and never say hello do not hold the rank: a real trainer that connects
// meanwhile is served at once, and the silent ones are closed at their
// hello deadline.
func TestSilentConnectionHoldsNoRank(t *testing.T) {
	e := newEnv(t, 20)
	s := e.serveHello(t, 1, time.Hour) // no silent connection is closed by its deadline in this test
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a failure backstop only
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown with silent connections pending: %v", err)
		}
	}()
	var silent []net.Conn
	for range 3 {
		nc, err := net.Dial("unix", s.SocketPath(0))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		silent = append(silent, nc)
	}
	silent[1].Write([]byte{9, 0}) // half a frame header
	waitHellos(t, s, 0, 3)

	c := dial(t, s.SocketPath(0), nil)
	defer c.Close()
	b := next(t, c)
	b.Release()
	if got := s.ranks[0].hellos.Load(); got != 3 {
		t.Errorf("%d silent connections pending, want 3", got)
	}
	// Shutdown (deferred) closes the silent ones at once, whatever their
	// deadline.
}

// TestHelloDeadline: a connection that says nothing is closed at its
// hello deadline, with an error saying why.
func TestHelloDeadline(t *testing.T) {
	e := newEnv(t, 20)
	s := e.serveHello(t, 1, 50*time.Millisecond)
	defer s.Shutdown(context.Background())
	nc, err := net.Dial("unix", s.SocketPath(0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetReadDeadline(time.Now().Add(time.Minute)) // a failure backstop: the server closes first
	typ, payload, _, err := feed.ReadFrame(nc, feed.MaxServerFrame, nil)
	if err != nil || typ != feed.MsgError {
		t.Fatalf("silent connection: frame %v, %v; want an error frame", typ, err)
	}
	if m, _ := parseErrorForTest(payload); m.Code != feed.CodeProtocol {
		t.Errorf("error %+v, want code %s", m, feed.CodeProtocol)
	}
	waitHellos(t, s, 0, 0)
	// (No trainer here: 50 ms is too short for a loaded machine's hello;
	// TestSilentConnectionHoldsNoRank has one served beside silent ones.)
}

// TestPendingHelloCap: a rank holds at most maxPendingHellos connections
// waiting to say hello; one more closes the oldest (with "busy"), so a
// flood of silent connections holds bounded memory and still never keeps
// a real trainer out.
func TestPendingHelloCap(t *testing.T) {
	e := newEnv(t, 20)
	s := e.serveHello(t, 1, time.Hour)
	defer s.Shutdown(context.Background())
	const extra = 3
	var silent []net.Conn
	for i := range maxPendingHellos + extra {
		nc, err := net.Dial("unix", s.SocketPath(0))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		silent = append(silent, nc)
		waitHellos(t, s, 0, int64(min(i+1, maxPendingHellos)))
	}
	for i, nc := range silent[:extra] {
		nc.SetReadDeadline(time.Now().Add(time.Minute)) // a failure backstop: the server closes first
		typ, payload, _, err := feed.ReadFrame(nc, feed.MaxServerFrame, nil)
		if err != nil || typ != feed.MsgError {
			t.Fatalf("silent connection %d: frame %v, %v; want an error frame", i, typ, err)
		}
		if m, _ := parseErrorForTest(payload); m.Code != feed.CodeBusy {
			t.Errorf("silent connection %d: %+v, want code %s", i, m, feed.CodeBusy)
		}
	}
	c := dial(t, s.SocketPath(0), nil)
	defer c.Close()
	next(t, c).Release()
	if n := s.ranks[0].hellos.Load(); n > maxPendingHellos {
		t.Errorf("%d connections waiting for their hello, want at most %d", n, maxPendingHellos)
	}
}
