package observe

import (
	"bufio"
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/longshore/longshore/cluster/gossip"
)

// ask sends one request on c without a token and reads the answer: its
// status, or 0 if the server closed c instead.
func ask(t *testing.T, c net.Conn, br *bufio.Reader) int {
	t.Helper()
	if _, err := c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		return 0 // closed (reset) before the request was written
	}
	c.SetReadDeadline(time.Now().Add(time.Minute)) // a failure backstop only
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("no answer and no close within a minute")
		}
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// waitClosed waits until the server closes c (a read ends).
func waitClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(time.Minute)) // a failure backstop only
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server did not close an idle connection within a minute")
	}
}

func waitOpen(t *testing.T, s *Server, n int64) {
	t.Helper()
	backstop := time.Now().Add(time.Minute) // a failure backstop only
	for s.Conns().Open != n {
		if time.Now().After(backstop) {
			t.Fatalf("server holds %d connections, want %d", s.Conns().Open, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func tokenServer(t *testing.T, lim Limits, reg prometheus.Registerer) *Server {
	t.Helper()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Listen(ServerConfig{Addr: "127.0.0.1:0", TokenFile: tok, Limits: lim, Registry: reg}, Handler(prometheus.NewRegistry(), nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a failure backstop only
		defer cancel()
		s.Shutdown(ctx)
	})
	return s
}

// TestServerConnectionCap: keep-alive connections answered 401 and left
// idle are held up to the cap; those over it are closed unanswered and
// counted; a place freed is taken again.
func TestServerConnectionCap(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := tokenServer(t, Limits{MaxConns: 4, IdleTimeout: time.Hour}, reg)
	var held []net.Conn
	answered := 0
	for range 10 {
		c, err := net.Dial("tcp", s.Addr())
		if errors.Is(err, syscall.ECONNRESET) {
			continue // refused before the dial returned
		}
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if code := ask(t, c, bufio.NewReader(c)); code == http.StatusUnauthorized {
			answered++
			held = append(held, c)
		} else if code != 0 {
			t.Fatalf("status %d, want 401 or a close", code)
		}
	}
	if got := s.Conns(); answered != 4 || got != (ConnStats{Open: 4, Refused: 6}) {
		t.Fatalf("answered %d, server %+v; want 4 answered, {Open:4 Refused:6}", answered, got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != "server" || l[0].GetValue() != "metrics" {
				t.Errorf("%s labels %v, want server=metrics", mf.GetName(), l)
			}
			got[mf.GetName()] = value(m)
		}
	}
	if got["longshore_http_connections_open"] != 4 || got["longshore_http_connections_refused_total"] != 6 {
		t.Errorf("metrics %v, want open 4, refused 6", got)
	}

	held[0].Close()
	held[1].Close()
	waitOpen(t, s, 2)
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if code := ask(t, c, bufio.NewReader(c)); code != http.StatusUnauthorized {
		t.Errorf("after two left: status %d, want 401", code)
	}
}

func value(m *dto.Metric) float64 {
	if g := m.GetGauge(); g != nil {
		return g.GetValue()
	}
	return m.GetCounter().GetValue()
}

// TestServerTimeouts: a keep-alive connection left idle is closed at the
// idle timeout, and one that never sends its headers at the header
// timeout (both set small here); the server then holds nothing.
func TestServerTimeouts(t *testing.T) {
	// Two servers, so that a loaded machine's delay before the first
	// request is not taken for an idle or a header timeout.
	s := tokenServer(t, Limits{IdleTimeout: 20 * time.Millisecond}, nil)
	hs := tokenServer(t, Limits{ReadHeaderTimeout: 20 * time.Millisecond}, nil)
	idle, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	br := bufio.NewReader(idle)
	if code := ask(t, idle, br); code != http.StatusUnauthorized {
		t.Fatalf("status %d, want 401", code)
	}
	silent, err := net.Dial("tcp", hs.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	silent.Write([]byte("GET /metrics HTTP/1.1\r\n")) // and never the rest
	waitClosed(t, idle)
	waitClosed(t, silent)
	waitOpen(t, s, 0)
	waitOpen(t, hs, 0)
}

// TestLimitsDefaults: the zero Limits means DefaultLimits, and every
// default bounds something.
func TestLimitsDefaults(t *testing.T) {
	d := Limits{}.withDefaults()
	if d != DefaultLimits() {
		t.Errorf("zero Limits: %+v, want %+v", d, DefaultLimits())
	}
	if d.MaxConns <= 0 || d.ReadHeaderTimeout <= 0 || d.ReadTimeout <= 0 || d.WriteTimeout <= 0 || d.IdleTimeout <= 0 || d.MaxHeaderBytes <= 0 {
		t.Errorf("a default leaves something unbounded: %+v", d)
	}
}

// TestGossipCollector: the gossip stream counts are exported as read.
func TestGossipCollector(t *testing.T) {
	var mem atomic.Pointer[gossip.Membership]
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewGossipCollector(GossipStreams(&mem))) // not started: zeros
	reg2 := prometheus.NewRegistry()
	reg2.MustRegister(NewGossipCollector(func() gossip.StreamStats { return gossip.StreamStats{Open: 2, Peak: 5, Refused: 3, Truncated: 4} }))
	for _, c := range []struct {
		reg  *prometheus.Registry
		want map[string]float64
	}{
		{reg, map[string]float64{"longshore_gossip_streams_open": 0, "longshore_gossip_streams_refused_total": 0, "longshore_gossip_streams_truncated_total": 0}},
		{reg2, map[string]float64{"longshore_gossip_streams_open": 2, "longshore_gossip_streams_refused_total": 3, "longshore_gossip_streams_truncated_total": 4}},
	} {
		mfs, err := c.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			got[mf.GetName()] = value(mf.GetMetric()[0])
		}
		if !maps.Equal(got, c.want) {
			t.Errorf("got %v, want %v", got, c.want)
		}
	}
}
