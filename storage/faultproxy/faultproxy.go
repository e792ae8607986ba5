// Package faultproxy is an HTTP proxy for tests that sits on loopback in
// front of a real S3 endpoint (storage/miniotest's MinIO) and misbehaves
// on a schedule: what S3 and the networks in front of it do on a bad day,
// at the level of bytes on the wire, where storage/faulty (which wraps the
// Store seam) cannot reach.
//
//	p := faultproxy.Start(t, srv.Endpoint,
//	    faultproxy.Rule{Ops: faultproxy.OpGet, FirstN: 3, Fault: faultproxy.SlowDown(time.Second)},
//	    faultproxy.Rule{Ops: faultproxy.OpGet, Key: faultproxy.Keys("c0/x.jpg"), Fault: faultproxy.Status(403, "AccessDenied")},
//	)
//	opts := srv.Options()
//	opts.Endpoint = p.URL
//
// Each request is matched against the rules in order; the first rule that
// picks it (by operation, key, Skip, FirstN and a seeded draw) decides its
// fate, and a request no rule picks is forwarded untouched. The faults:
//
//   - Status: an S3 error answer (503 SlowDown with or without Retry-After,
//     500 InternalError, 403 AccessDenied, 404 NoSuchKey), upstream never
//     asked;
//   - ResetAfter: the upstream answer's headers and N bytes of its body,
//     then a TCP reset;
//   - ShortBody: the answer with its true Content-Length but N bytes short,
//     then a clean close;
//   - Corrupt: the answer with N bytes of its body flipped, length intact;
//   - Trickle: the answer at a few bytes a second;
//   - Stall: the answer's headers and N bytes of its body, then nothing
//     for a while (or until a Gate opens), then the rest: a connection
//     that stops mid-body and comes back;
//   - Unsized: the answer without its Content-Length (chunked), as
//     from a server or gateway that streams;
//   - Mix: one of several faults, drawn per request;
//   - Silence: the connection is held open and never answered;
//   - Refuse: the proxy stops listening for a while (connection refused)
//     and drops every open connection;
//   - SlowDownAbove: 503 SlowDown to the requests beyond a rate;
//   - WrongRange: a ranged GET is answered with a Content-Range moved by N
//     bytes and its body rotated by as much: the right length, the wrong
//     bytes, as from a cache that mixed up ranges;
//   - Hold: the request waits at a Gate the test opens, and the Gate
//     reports it held and, if so, that its client hung up first (a
//     request the client cancelled): slowness on events, not on a clock.
//
// The proxy keeps the Host header, which S3 signatures cover. A Proxy is
// safe for concurrent use; with concurrent clients which requests a
// probabilistic rule picks follows the scheduler, a single client gets
// the same picks for a seed.
package faultproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Op is a set of S3 request kinds.
type Op uint16

// Request kinds a Rule can match.
const (
	// OpGet is a GET of a whole object.
	OpGet Op = 1 << iota
	// OpGetRange is a GET of an object with a Range header.
	OpGetRange
	// OpHead is a HEAD of an object (Stat).
	OpHead
	// OpPut is a PUT of an object.
	OpPut
	// OpDelete is a DELETE of an object.
	OpDelete
	// OpList is a GET of a bucket (a listing).
	OpList
	// OpBucket is any other request on a bucket (HEAD bucket, location).
	OpBucket

	// Reads are the object reads.
	Reads = OpGet | OpGetRange | OpHead
	// All matches every request (a Rule's zero Ops means the same).
	All = Reads | OpPut | OpDelete | OpList | OpBucket
)

func (o Op) String() string {
	names := []string{"get", "get-range", "head", "put", "delete", "list", "bucket"}
	var out []string
	for i, n := range names {
		if o&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return strings.Join(out, "|")
}

// Kind is what a Fault does.
type Kind int

// The faults; see the package doc.
const (
	KindStatus Kind = iota + 1
	KindResetAfter
	KindShortBody
	KindCorrupt
	KindTrickle
	KindSilence
	KindRefuse
	KindWrongRange
	KindThrottle
	KindHold
	KindDelay
	KindStall
	KindUnsized
	KindMix
)

func (k Kind) String() string {
	switch k {
	case KindStatus:
		return "status"
	case KindResetAfter:
		return "reset-after"
	case KindShortBody:
		return "short-body"
	case KindCorrupt:
		return "corrupt"
	case KindTrickle:
		return "trickle"
	case KindSilence:
		return "silence"
	case KindRefuse:
		return "refuse"
	case KindWrongRange:
		return "wrong-range"
	case KindThrottle:
		return "throttle"
	case KindHold:
		return "hold"
	case KindDelay:
		return "delay"
	case KindStall:
		return "stall"
	case KindUnsized:
		return "unsized"
	case KindMix:
		return "mix"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Fault is one misbehaviour. Make them with the constructors below.
type Fault struct {
	Kind Kind
	// Status and Code: KindStatus's answer (Code is the S3 error code in
	// the XML body).
	Status int
	Code   string
	// RetryAfter: KindStatus adds a Retry-After header of this many whole
	// seconds (rounded up); 0 sends none.
	RetryAfter time.Duration
	// N: bytes of body sent before the reset (KindResetAfter) or the
	// stall (KindStall), missing at the end (KindShortBody), flipped
	// (KindCorrupt); for KindWrongRange, how far the range served is
	// moved.
	N int64
	// Rate: KindTrickle's bytes per second; KindThrottle's requests per
	// second.
	Rate int
	// For: how long KindRefuse refuses connections; how long KindDelay
	// holds a request before forwarding it; how long KindStall sends
	// nothing.
	For time.Duration
	// Gate: where KindHold holds requests; where KindStall holds a body
	// mid-way (instead of For).
	Gate *Gate
	// Faults: KindMix's choices, one drawn per request from the rule's
	// seeded generator.
	Faults []Fault
}

// Status answers with an S3 error of status and code.
func Status(status int, code string) Fault {
	return Fault{Kind: KindStatus, Status: status, Code: code}
}

// SlowDown is S3's throttling answer, 503 SlowDown, with a Retry-After
// header when retryAfter > 0.
func SlowDown(retryAfter time.Duration) Fault {
	return Fault{Kind: KindStatus, Status: http.StatusServiceUnavailable, Code: "SlowDown", RetryAfter: retryAfter}
}

// ResetAfter sends n bytes of the body and resets the connection.
func ResetAfter(n int64) Fault { return Fault{Kind: KindResetAfter, N: n} }

// ShortBody sends the body n bytes short of its Content-Length and closes.
func ShortBody(n int64) Fault { return Fault{Kind: KindShortBody, N: n} }

// Corrupt flips n bytes of the body (spread over it), length intact.
func Corrupt(n int64) Fault { return Fault{Kind: KindCorrupt, N: n} }

// Trickle sends the body at rate bytes a second.
func Trickle(rate int) Fault { return Fault{Kind: KindTrickle, Rate: rate} }

// Stall sends the headers and n bytes of the body, then nothing for d,
// then the rest (unless the client hung up meanwhile).
func Stall(n int64, d time.Duration) Fault { return Fault{Kind: KindStall, N: n, For: d} }

// StallAt sends the headers and n bytes of the body, then holds the rest
// until g opens: g reports the body held (Held, once the n bytes are
// flushed) and whether its client hung up first (HungUp).
func StallAt(n int64, g *Gate) Fault { return Fault{Kind: KindStall, N: n, Gate: g} }

// Unsized forwards the answer without its Content-Length: the body comes
// chunked and its length is known only at its end.
func Unsized() Fault { return Fault{Kind: KindUnsized} }

// Mix disturbs each request it picks with one of faults, drawn from the
// rule's seeded generator (uniformly).
func Mix(faults ...Fault) Fault { return Fault{Kind: KindMix, Faults: faults} }

// Silence accepts the request and never answers.
func Silence() Fault { return Fault{Kind: KindSilence} }

// Refuse makes the endpoint refuse connections for d (the request that
// triggers it is reset).
func Refuse(d time.Duration) Fault { return Fault{Kind: KindRefuse, For: d} }

// SlowDownAbove answers 503 SlowDown to the requests beyond rate a
// second (a token bucket holding a tenth of a second's worth), as S3 does
// to a prefix asked too fast; the others pass.
func SlowDownAbove(rate int) Fault {
	return Fault{Kind: KindThrottle, Rate: rate, Status: http.StatusServiceUnavailable, Code: "SlowDown"}
}

// WrongRange answers a ranged GET with a Content-Range moved by shift
// bytes (within the object) and the body rotated by shift: what a client
// that trusts it would read is the wrong data. Other requests pass.
// (The Range header itself cannot be rewritten: SigV4 signs it.)
func WrongRange(shift int64) Fault { return Fault{Kind: KindWrongRange, N: shift} }

// Delay holds each request it picks for d, then forwards it untouched: a
// store d further away (a request's round trip; TCP's own handshakes on
// the loopback stay fast, so it stands for a network with warm
// connections). The kernel's netem does this below the sockets; this is
// its user-space stand-in where netem is not built in.
func Delay(d time.Duration) Fault { return Fault{Kind: KindDelay, For: d} }

// Hold holds each request it picks at g until g opens, then forwards it
// untouched; a request whose client hangs up first is reported by
// g.HungUp and dropped.
func Hold(g *Gate) Fault { return Fault{Kind: KindHold, Gate: g} }

// Gate is where Hold keeps requests. Held and HungUp report each request
// held, and each whose client hung up while held, by key; both are
// buffered (64): a test that reads neither still runs.
type Gate struct {
	held, hungUp chan string
	open         chan struct{}
	once         sync.Once
}

// NewGate returns a closed gate.
func NewGate() *Gate {
	return &Gate{held: make(chan string, 64), hungUp: make(chan string, 64), open: make(chan struct{})}
}

// Held yields the key of each request as it is held.
func (g *Gate) Held() <-chan string { return g.held }

// HungUp yields the key of each held request whose client hung up
// before the gate opened.
func (g *Gate) HungUp() <-chan string { return g.hungUp }

// Open lets every held request, and every later one, through.
func (g *Gate) Open() { g.once.Do(func() { close(g.open) }) }

func report(ch chan string, key string) {
	select {
	case ch <- key:
	default:
	}
}

// hold keeps r at f.Gate until it opens (then forwards it), the client
// hangs up, or the proxy closes.
func (p *Proxy) hold(w http.ResponseWriter, r *http.Request, key string, g *Gate) {
	p.held.Add(1)
	defer p.held.Done()
	report(g.held, key)
	select {
	case <-g.open:
		p.forward(w, r, nil)
	case <-r.Context().Done():
		report(g.hungUp, key)
	case <-p.done:
	}
}

// Rule picks requests and says what to do with them.
type Rule struct {
	// Name labels the rule in Log; empty: the fault's kind.
	Name string
	// Ops the rule applies to; 0 means All.
	Ops Op
	// Key picks requests by object key (the path after the bucket,
	// unescaped; "" for bucket requests); nil: every key.
	Key func(key string) bool
	// Skip lets the first Skip matching requests through untouched.
	Skip int
	// FirstN disturbs only the first FirstN requests after Skip that
	// match and win the draw; 0: no limit.
	FirstN int
	// Prob is the chance a matching request is disturbed, drawn from a
	// PCG seeded with Seed; 0 (or 1): always.
	Prob float64
	Seed uint64
	// MaxPerKey disturbs each key at most this many times (its later
	// requests pass); 0: no limit.
	MaxPerKey int
	// Fault is what happens to a picked request.
	Fault Fault
}

type rule struct {
	Rule
	mu      sync.Mutex
	rng     *rand.Rand
	seen    int64
	fired   int64
	touched map[string]int64 // key -> times disturbed
	tokens  float64          // KindThrottle's bucket
	filled  time.Time
}

// overRate takes a token from a KindThrottle rule's bucket, reporting
// whether there was none. Called with r.mu held.
func (r *rule) overRateLocked(now time.Time) bool {
	rate := float64(max(r.Fault.Rate, 1))
	burst := max(1, rate/10)
	if r.filled.IsZero() {
		r.tokens = burst
	} else {
		r.tokens = min(burst, r.tokens+now.Sub(r.filled).Seconds()*rate)
	}
	r.filled = now
	if r.tokens >= 1 {
		r.tokens--
		return false
	}
	return true
}

// pick reports whether r disturbs a request of op on key, and how: a
// Mix's choice is drawn here, under the lock, so a seed gives one
// schedule.
func (r *rule) pick(op Op, key string) (Fault, bool) {
	if !r.picks(op, key) {
		return Fault{}, false
	}
	f := r.Fault
	if f.Kind == KindMix && len(f.Faults) > 0 {
		r.mu.Lock()
		f = f.Faults[r.rng.IntN(len(f.Faults))]
		r.mu.Unlock()
	}
	return f, true
}

func (r *rule) picks(op Op, key string) bool {
	if r.Ops != 0 && r.Ops&op == 0 {
		return false
	}
	if r.Key != nil && !r.Key(key) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen++
	if r.seen <= int64(r.Skip) {
		return false
	}
	if r.Prob > 0 && r.Prob < 1 && r.rng.Float64() >= r.Prob {
		return false
	}
	if r.FirstN > 0 && r.fired >= int64(r.FirstN) {
		return false
	}
	if r.MaxPerKey > 0 && r.touched[key] >= int64(r.MaxPerKey) {
		return false
	}
	if r.Fault.Kind == KindThrottle && !r.overRateLocked(time.Now()) {
		return false
	}
	r.fired++
	r.touched[key]++
	return true
}

// Keys matches exactly the keys given.
func Keys(keys ...string) func(string) bool {
	set := make(map[string]bool, len(keys))
	for _, k := range keys {
		set[k] = true
	}
	return func(k string) bool { return set[k] }
}

// HasSuffix matches keys ending in suffix.
func HasSuffix(suffix string) func(string) bool {
	return func(k string) bool { return strings.HasSuffix(k, suffix) }
}

// Entry is one request the proxy saw.
type Entry struct {
	Op   Op
	Key  string
	Rule string // the rule that disturbed it, "" if none
	At   time.Time
}

// Proxy is a running fault-injecting proxy.
type Proxy struct {
	// URL is "http://127.0.0.1:<port>", the endpoint to give the store.
	URL string

	addr     string
	upstream *url.URL
	tr       *http.Transport
	srv      *http.Server
	rules    []*rule
	requests atomic.Int64
	disabled atomic.Bool
	serving  sync.WaitGroup
	held     sync.WaitGroup // silenced and trickled connections

	mu struct {
		sync.Mutex
		ln        net.Listener
		conns     map[net.Conn]bool
		refusedTo time.Time
		listening chan struct{} // closed when listening again after a Refuse
		closed    bool
		log       []Entry
	}
	done chan struct{} // closed by Close: silenced connections let go
}

// Start starts a proxy to upstream ("http://host:port") on a free
// 127.0.0.1 port and registers its Close with t.Cleanup.
func Start(t testing.TB, upstream string, rules ...Rule) *Proxy {
	t.Helper()
	p, err := New(upstream, rules...)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// New starts a proxy to upstream on a free 127.0.0.1 port; Close stops it.
func New(upstream string, rules ...Rule) (*Proxy, error) {
	u, err := url.Parse(upstream)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("upstream %q: want http://host:port", upstream)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		addr:     ln.Addr().String(),
		upstream: u,
		tr:       &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true},
		done:     make(chan struct{}),
	}
	p.URL = "http://" + p.addr
	p.mu.conns = map[net.Conn]bool{}
	for _, r := range rules {
		p.rules = append(p.rules, &rule{Rule: r, rng: rand.New(rand.NewPCG(r.Seed, r.Seed^0x9e3779b97f4a7c15)), touched: map[string]int64{}})
	}
	p.srv = &http.Server{
		Handler:   http.HandlerFunc(p.serveHTTP),
		ConnState: p.connState,
		ErrorLog:  nil,
	}
	p.serve(ln)
	return p, nil
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.ln = ln
	p.serving.Add(1)
	go func() {
		defer p.serving.Done()
		p.srv.Serve(ln) // returns when ln is closed
	}()
}

func (p *Proxy) connState(c net.Conn, st http.ConnState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch st {
	case http.StateNew:
		p.mu.conns[c] = true
	case http.StateClosed, http.StateHijacked:
		delete(p.mu.conns, c)
	}
}

// Close stops the proxy: it stops listening, lets go of silenced
// connections and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return
	}
	p.mu.closed = true
	close(p.done)
	if p.mu.ln != nil {
		p.mu.ln.Close()
		p.mu.ln = nil
	}
	p.mu.Unlock()
	p.srv.Close()
	p.held.Wait()
	p.serving.Wait()
	p.tr.CloseIdleConnections()
}

// SetEnabled turns the rules on (the initial state) or off; while off,
// every request is forwarded untouched and rules are not consulted.
func (p *Proxy) SetEnabled(on bool) { p.disabled.Store(!on) }

// Requests is how many requests reached the proxy.
func (p *Proxy) Requests() int64 { return p.requests.Load() }

// Fired is how many requests rule i (in Start's order) disturbed.
func (p *Proxy) Fired(i int) int64 {
	r := p.rules[i]
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fired
}

// Touched is how many times rule i disturbed a request for key.
func (p *Proxy) Touched(i int, key string) int64 {
	r := p.rules[i]
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.touched[key]
}

// Log returns every request seen so far, in arrival order.
func (p *Proxy) Log() []Entry {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Entry(nil), p.mu.log...)
}

// classify names the request's kind and object key. Path-style only
// (what minio-go uses for an IP endpoint): /bucket[/key].
func classify(r *http.Request) (Op, string) {
	path := strings.TrimPrefix(r.URL.Path, "/")
	_, key, hasKey := strings.Cut(path, "/")
	if !hasKey || key == "" {
		if r.Method == http.MethodGet && !r.URL.Query().Has("location") {
			return OpList, ""
		}
		return OpBucket, ""
	}
	switch r.Method {
	case http.MethodGet:
		if r.Header.Get("Range") != "" {
			return OpGetRange, key
		}
		return OpGet, key
	case http.MethodHead:
		return OpHead, key
	case http.MethodPut:
		return OpPut, key
	case http.MethodDelete:
		return OpDelete, key
	}
	return OpBucket, key
}

func (p *Proxy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	op, key := classify(r)
	var picked *rule
	var f Fault
	if !p.disabled.Load() {
		for _, rl := range p.rules {
			var ok bool
			if f, ok = rl.pick(op, key); ok {
				picked = rl
				break
			}
		}
	}
	e := Entry{Op: op, Key: key, At: time.Now()}
	if picked != nil {
		e.Rule = picked.Name
		if e.Rule == "" {
			e.Rule = f.Kind.String()
		}
	}
	p.mu.Lock()
	p.mu.log = append(p.mu.log, e)
	p.mu.Unlock()
	if picked == nil {
		p.forward(w, r, nil)
		return
	}
	switch f.Kind {
	case KindStatus, KindThrottle:
		writeError(w, r, f)
	case KindSilence:
		p.silence(w, r)
	case KindRefuse:
		p.refuse(w, f.For)
	case KindHold:
		p.hold(w, r, key, f.Gate)
	case KindDelay:
		t := time.NewTimer(f.For)
		select {
		case <-t.C:
			p.forward(w, r, nil)
		case <-r.Context().Done():
			t.Stop()
		case <-p.done:
			t.Stop()
		}
	default:
		p.forward(w, r, &f)
	}
}

func writeError(w http.ResponseWriter, r *http.Request, f Fault) {
	if f.RetryAfter > 0 {
		secs := int64((f.RetryAfter + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(f.Status)
	if r.Method == http.MethodHead {
		return
	}
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+
		`<Error><Code>%s</Code><Message>injected by faultproxy</Message><Resource>%s</Resource><RequestId>faultproxy</RequestId></Error>`,
		f.Code, r.URL.Path)
}

// silence holds the connection without answering until the client hangs
// up or the proxy closes.
func (p *Proxy) silence(w http.ResponseWriter, r *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	p.held.Add(1)
	defer p.held.Done()
	defer conn.Close()
	gone := make(chan struct{})
	go func() {
		io.Copy(io.Discard, conn) // ends when the client closes
		close(gone)
	}()
	select {
	case <-gone:
	case <-p.done:
	}
}

// refuse stops listening for d, drops every open connection (an endpoint
// that went away), and resets the triggering one.
func (p *Proxy) refuse(w http.ResponseWriter, d time.Duration) {
	// The request that triggers the refusal is reset last: once its
	// client sees the reset, the listener is closed, so its next dial is
	// refused (not accepted into the old backlog and reset).
	if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
		defer reset(conn)
	}
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return
	}
	until := time.Now().Add(d)
	if until.After(p.mu.refusedTo) {
		p.mu.refusedTo = until
	}
	ln := p.mu.ln
	p.mu.ln = nil
	if ln != nil {
		p.mu.listening = make(chan struct{})
	}
	p.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	p.mu.Lock()
	for c := range p.mu.conns {
		reset(c)
	}
	p.mu.Unlock()
	if ln == nil {
		return // already refusing; the reopener sees the new deadline
	}
	p.held.Add(1)
	go func() {
		defer p.held.Done()
		p.reopen()
	}()
}

// reopen listens again on the same address once the refusal is over.
func (p *Proxy) reopen() {
	for {
		p.mu.Lock()
		wait := time.Until(p.mu.refusedTo)
		p.mu.Unlock()
		if wait > 0 {
			select {
			case <-time.After(wait):
				continue
			case <-p.done:
				return
			}
		}
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			select { // the old socket lingers a moment
			case <-time.After(10 * time.Millisecond):
				continue
			case <-p.done:
				return
			}
		}
		p.mu.Lock()
		if p.mu.closed {
			p.mu.Unlock()
			ln.Close()
			return
		}
		p.serve(ln)
		close(p.mu.listening)
		p.mu.Unlock()
		return
	}
}

func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0) // close with RST, not FIN
	}
	c.Close()
}

// Refusing reports whether the proxy is refusing connections now.
func (p *Proxy) Refusing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.ln == nil && !p.mu.closed
}

// forward sends r upstream and writes the answer, disturbed by f (one of
// the body faults) if not nil.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, f *Fault) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme = p.upstream.Scheme
	out.URL.Host = p.upstream.Host
	out.Host = r.Host // signed
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		http.Error(w, "faultproxy: upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if f == nil || resp.StatusCode >= 300 {
		copyResponse(w, resp)
		return
	}
	switch f.Kind {
	case KindWrongRange:
		cr, moved := moveContentRange(resp.Header.Get("Content-Range"), f.N)
		if !moved {
			copyResponse(w, resp)
			return
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return
		}
		rotate(body, f.N)
		copyHeader(w.Header(), resp.Header)
		w.Header().Set("Content-Range", cr)
		w.WriteHeader(resp.StatusCode)
		w.Write(body)
	case KindCorrupt:
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return
		}
		flip(body, f.N)
		copyHeader(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		w.Write(body)
	case KindTrickle:
		p.trickle(w, r, resp, f.Rate)
	case KindStall:
		p.stall(w, r, resp, f)
	case KindUnsized:
		copyHeader(w.Header(), resp.Header)
		w.Header().Del("Content-Length")
		w.WriteHeader(resp.StatusCode)
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush() // headers out now, without a length: chunked
		}
		io.Copy(w, resp.Body)
	case KindResetAfter, KindShortBody:
		p.cut(w, resp, f)
	default:
		copyResponse(w, resp)
	}
}

// moveContentRange moves "bytes a-b/total" by shift, within the object.
func moveContentRange(h string, shift int64) (string, bool) {
	spec, ok := strings.CutPrefix(h, "bytes ")
	if !ok {
		return "", false
	}
	rng, total, ok := strings.Cut(spec, "/")
	if !ok {
		return "", false
	}
	as, bs, ok := strings.Cut(rng, "-")
	start, err1 := strconv.ParseInt(as, 10, 64)
	end, err2 := strconv.ParseInt(bs, 10, 64)
	size, err3 := strconv.ParseInt(total, 10, 64)
	if !ok || err1 != nil || err2 != nil || err3 != nil {
		return "", false
	}
	n := end - start + 1
	ns := min(max(start+shift, 0), max(size-n, 0))
	if ns == start {
		ns = (start + n) % max(size-n+1, 1) // nowhere to move by shift: move anywhere else
	}
	if ns == start {
		return "", false
	}
	return fmt.Sprintf("bytes %d-%d/%d", ns, ns+n-1, size), true
}

// rotate turns b left by n bytes: the right length, the wrong data.
func rotate(b []byte, n int64) {
	if len(b) < 2 {
		if len(b) == 1 {
			b[0] ^= 0xFF
		}
		return
	}
	k := int(((n % int64(len(b))) + int64(len(b))) % int64(len(b)))
	if k == 0 {
		k = 1
	}
	tmp := append([]byte(nil), b[:k]...)
	copy(b, b[k:])
	copy(b[len(b)-k:], tmp)
}

// flip inverts n bytes spread evenly over b.
func flip(b []byte, n int64) {
	if len(b) == 0 || n <= 0 {
		return
	}
	n = min(n, int64(len(b)))
	step := int64(len(b)) / n
	for i := int64(0); i < n; i++ {
		b[i*step] ^= 0xFF
	}
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append([]string(nil), vs...)
	}
}

func copyResponse(w http.ResponseWriter, resp *http.Response) {
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// trickle writes the body at rate bytes a second until done or the client
// hangs up.
func (p *Proxy) trickle(w http.ResponseWriter, r *http.Request, resp *http.Response, rate int) {
	p.held.Add(1)
	defer p.held.Done()
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	fl, _ := w.(http.Flusher)
	chunk := max(rate/10, 1) // ten writes a second
	buf := make([]byte, chunk)
	tick := time.NewTicker(time.Second * time.Duration(chunk) / time.Duration(max(rate, 1)))
	defer tick.Stop()
	for {
		n, err := io.ReadFull(resp.Body, buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if err != nil {
			return
		}
		select {
		case <-tick.C:
		case <-r.Context().Done():
			return
		case <-p.done:
			return
		}
	}
}

// stall writes the headers and f.N bytes of the body, flushes them, and
// sends the rest after f.For or once f.Gate opens; a client that hangs up
// meanwhile gets nothing more (and is reported to the gate).
func (p *Proxy) stall(w http.ResponseWriter, r *http.Request, resp *http.Response, f *Fault) {
	p.held.Add(1)
	defer p.held.Done()
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	if _, err := io.CopyN(w, resp.Body, f.N); err != nil {
		return
	}
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	_, key := classify(r)
	var open <-chan struct{}
	var after <-chan time.Time
	if f.Gate != nil {
		report(f.Gate.held, key)
		open = f.Gate.open
	} else {
		t := time.NewTimer(f.For)
		defer t.Stop()
		after = t.C
	}
	select {
	case <-open:
	case <-after:
	case <-r.Context().Done():
		if f.Gate != nil {
			report(f.Gate.hungUp, key)
		}
		return
	case <-p.done:
		return
	}
	io.Copy(w, resp.Body)
}

// cut writes the status line, the headers and part of the body on the raw
// connection, then resets (ResetAfter) or closes (ShortBody) it.
func (p *Proxy) cut(w http.ResponseWriter, resp *http.Response, f *Fault) {
	conn, bw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	size := resp.ContentLength
	send := f.N
	if f.Kind == KindShortBody {
		send = max(size-f.N, 0)
	}
	if size >= 0 {
		send = min(send, size)
	}
	h := resp.Header.Clone()
	h.Del("Connection")
	fmt.Fprintf(bw, "HTTP/1.1 %s\r\n", resp.Status)
	if size >= 0 {
		h.Set("Content-Length", strconv.FormatInt(size, 10))
	}
	h.Write(bw)
	bw.WriteString("\r\n")
	io.CopyN(bw, resp.Body, send)
	bw.Flush()
	if f.Kind == KindResetAfter {
		reset(conn)
		return
	}
	closeWrite(conn, bw)
}

// closeWrite ends the connection with a FIN after what was written.
func closeWrite(conn net.Conn, bw *bufio.ReadWriter) {
	bw.Flush()
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.CloseWrite()
		// Let the client read what we sent before the socket goes.
		tc.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.Copy(io.Discard, tc)
	}
	conn.Close()
}

// ErrClosed is returned by Wait helpers once the proxy is closed.
var ErrClosed = errors.New("faultproxy: proxy closed")

// WaitRefusal blocks until the proxy listens again after a Refuse fault,
// or ctx ends, or the proxy closes.
func (p *Proxy) WaitRefusal(ctx context.Context) error {
	p.mu.Lock()
	refusing, listening := p.mu.ln == nil && !p.mu.closed, p.mu.listening
	p.mu.Unlock()
	if !refusing {
		return nil
	}
	select {
	case <-listening:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.done:
		return ErrClosed
	}
}
