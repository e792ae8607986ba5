package observe

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ErrNotLoopback is returned for an address off loopback without a token.
var ErrNotLoopback = errors.New("observe: address is not loopback")

// ServerConfig configures an HTTP server for metrics (and pages).
type ServerConfig struct {
	// Addr is host:port to listen on; port 0 picks one (Server.Addr says
	// which). A host that is not a loopback address (a wildcard, an
	// interface address, a name that resolves elsewhere) needs TokenFile.
	Addr string
	// TokenFile, if set, holds the bearer token every request must carry
	// (Authorization: Bearer <token>; Prometheus: authorization
	// credentials_file). Leading and trailing white space is ignored.
	TokenFile string
	// Flag names the address's flag in errors ("--metrics").
	Flag string
	// Logger gets the server's errors; nil: discarded.
	Logger *slog.Logger
	// Limits bound what a client can make the server hold: a connection
	// cap and timeouts. Zero: DefaultLimits.
	Limits Limits
	// Registry, if set, gets the server's connection counts
	// (longshore_http_connections_open and _refused_total, labelled
	// server="<Flag without dashes>") until Shutdown.
	Registry prometheus.Registerer
}

// Server serves HTTP on loopback, or anywhere behind a bearer token.
type Server struct {
	srv   *http.Server
	ln    *connLimit
	done  chan error
	reg   prometheus.Registerer
	conns prometheus.Collector
}

// CheckMetricsFlags reports every problem with the metrics flags both
// daemons share: --metrics (addr), --metrics-token-file (tokenFile),
// --metrics-linger and --report-every.
func CheckMetricsFlags(addr, tokenFile string, linger, reportEvery time.Duration) []error {
	var errs []error
	if addr == "" {
		if tokenFile != "" || linger != 0 {
			errs = append(errs, errors.New("--metrics-token-file and --metrics-linger need --metrics HOST:PORT"))
		}
	} else if err := CheckListen("--metrics", addr, tokenFile); err != nil {
		errs = append(errs, err)
	}
	if reportEvery < 0 || linger < 0 {
		errs = append(errs, errors.New("--report-every and --metrics-linger: need 0 or more"))
	}
	return errs
}

// CheckMaxConns reports what is wrong with a -max-conns flag's value n.
func CheckMaxConns(flag string, n int) error {
	if n < 1 {
		return fmt.Errorf("%s %d: need at least 1", flag, n)
	}
	return nil
}

// CheckListen reports what is wrong with serving on addr (HOST:PORT) for
// flag: a malformed address, or one off loopback without a token file
// (tokenFile, the value of flag's -token-file). Listen applies it; the
// daemons' flag checks call it too, so a bad flag is reported at once
// with the others.
func CheckListen(flag, addr, tokenFile string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%s %q: want HOST:PORT: %w", flag, addr, err)
	}
	if tokenFile == "" && !Loopback(addr) {
		return fmt.Errorf("%w: %s %s is not a loopback address and would serve every network: pass %s-token-file FILE (a bearer token clients must send), or listen on 127.0.0.1",
			ErrNotLoopback, flag, addr, flag)
	}
	return nil
}

// Listen starts serving h per c.
func Listen(c ServerConfig, h http.Handler) (*Server, error) {
	if c.Flag == "" {
		c.Flag = "--metrics"
	}
	if err := CheckListen(c.Flag, c.Addr, c.TokenFile); err != nil {
		return nil, err
	}
	var token []byte
	if c.TokenFile != "" {
		b, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("%s-token-file: %w", c.Flag, err)
		}
		token = []byte(strings.TrimSpace(string(b)))
		if len(token) == 0 {
			return nil, fmt.Errorf("%s-token-file %s: empty token", c.Flag, c.TokenFile)
		}
	}
	lim := c.Limits.withDefaults()
	if lim.MaxConns < 0 {
		return nil, fmt.Errorf("%s-max-conns %d: need at least 1", c.Flag, lim.MaxConns)
	}
	tcp, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Flag, err)
	}
	ln := &connLimit{Listener: tcp, max: int64(lim.MaxConns)}
	if token != nil {
		h = bearer(token, h)
	}
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{ln: ln, done: make(chan error, 1), reg: c.Registry, srv: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      lim.WriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}
	if s.reg != nil {
		s.conns = newConnCollector(strings.TrimLeft(c.Flag, "-"), ln)
		if err := s.reg.Register(s.conns); err != nil {
			tcp.Close()
			return nil, fmt.Errorf("%s: register its connection metrics: %w", c.Flag, err)
		}
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

func bearer(token []byte, h http.Handler) http.Handler {
	want := append([]byte("Bearer "), token...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == HealthPath || r.URL.Path == ReadyPath { // a probe has no token (health.go)
			h.ServeHTTP(w, r)
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="longshore"`)
			http.Error(w, "a bearer token is required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Loopback reports whether host:port (or a bare host) names a loopback
// address, without asking DNS.
func Loopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if i := strings.IndexByte(host, '%'); i >= 0 {
		host = host[:i]
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Conns counts the server's connections.
func (s *Server) Conns() ConnStats { return s.ln.stats() }

// Shutdown stops the server, letting requests in progress finish; it
// returns ctx.Err() if they did not in time.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if s.conns != nil {
		s.reg.Unregister(s.conns)
	}
	return err
}

// Registry returns a registry holding cs and the Go runtime's and the
// process's collectors (go_*, process_*: CPU, memory, file descriptors;
// longshore_control_*: the control port's refusals and the control links).
func Registry(cs ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		Metrics.Collector(func() Snapshot { return Snapshot{Process: ProcessNow()} }, []Group{GroupProcess}))
	reg.MustRegister(cs...)
	return reg
}

// Handler serves /metrics from reg, and extra's paths beside it.
func Handler(reg *prometheus.Registry, extra map[string]http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc(HealthPath, healthz) // health.go
	for p, h := range extra {
		mux.Handle(p, h)
	}
	return mux
}
