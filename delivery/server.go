package delivery

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/feed"
	"github.com/longshore/longshore/gpu"
)

// Config configures a feed Server. The zero value is valid except Ranks.
type Config struct {
	// Dir is the run directory holding the sockets (rank-<r>.sock),
	// created 0700. "": DefaultDir().
	Dir string
	// Ranks is how many ranks (trainers) the node serves. Required (>= 1).
	Ranks int
	// SocketPath, if set, names rank's socket instead of Dir/rank-<r>.sock.
	SocketPath func(rank int) string
	// Job names the job in standalone tokens. "": "standalone".
	Job string
	// Committer makes resume tokens. nil: LocalCommitter{Job, BatchSize}.
	Committer Committer
	// Start is where each rank's stream starts (before any commit). Zero:
	// the first batch of the run.
	Start feed.Cursor
	// HandshakeTimeout bounds how long a connection may take to say hello.
	// 0: 10 s, generous for a trainer that connects then imports torch.
	HandshakeTimeout time.Duration
	// Logger gets connection-level events; nil: discarded.
	Logger *slog.Logger
	// Allocator, if set, is rank's shared-memory allocator (cluster mode:
	// ClusterFeed.Allocator, which the agent's pipelines also use). nil:
	// a new one per rank.
	Allocator func(rank int) *ShmAllocator
	// Peers says which local processes may connect (peercred.go). Zero:
	// the node's own uid only, in a 0700 directory with 0600 sockets.
	Peers PeerPolicy
	// EpochSteps, if set, says how many batches each epoch of rank's
	// stream has, for the welcome's epoch_steps (a trainer's
	// len(loader)); StandaloneSteps for Standalone streams. nil, or a
	// result <= 0: not known, not said.
	EpochSteps func(rank int) int64
	// RankDevice, if set, says rank's GPU (a node running one rank per
	// device, --gpus), for the welcome; nil result or nil func: none.
	RankDevice func(rank int) *RankDevice
	// Fields, if set, is the catalog whose samples rank serves, looked up
	// by a batch's dataset indices for a trainer whose hello asks for
	// fields (feed.Hello.Fields): the welcome carries its schema and each
	// batch a fields frame. nil, a nil result or a catalog without fields:
	// no fields.
	Fields func(rank int) dataset.Catalog
}

// RankDevice is a rank's GPU.
type RankDevice struct {
	Info gpu.DeviceInfo
	// Export: the rank's pipelines leave batches on the device and export
	// them (gpu.UploaderConfig.Export), so a hello asking for device
	// batches gets them through CUDA IPC.
	Export bool
}

func (d *RankDevice) ref() *feed.DeviceRef {
	if d == nil {
		return nil
	}
	return &feed.DeviceRef{Ordinal: d.Info.Ordinal, UUID: d.Info.UUID, Name: d.Info.Name}
}

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	if c.Dir == "" {
		c.Dir = feed.DefaultDir()
	}
	if c.Job == "" {
		c.Job = "standalone"
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	return c
}

func (c Config) socketPath(rank int) string {
	if c.SocketPath != nil {
		return c.SocketPath(rank)
	}
	return filepath.Join(c.Dir, feed.SocketName(rank))
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if c.Ranks < 1 {
		errs = append(errs, fmt.Errorf("feed: Ranks %d: need at least 1", c.Ranks))
	}
	if c.HandshakeTimeout < 0 {
		errs = append(errs, fmt.Errorf("feed: HandshakeTimeout %v: need 0 or more", c.HandshakeTimeout))
	}
	if c.Start.Epoch < 0 || c.Start.Step < 0 {
		errs = append(errs, fmt.Errorf("feed: Start %+v: need epoch and step >= 0", c.Start))
	}
	if err := c.Peers.Validate(); err != nil {
		errs = append(errs, err)
	}
	for r := 0; r < c.Ranks && r < 1024; r++ {
		if p := c.socketPath(r); len(p) >= 108 || tmpSocketLen(p) >= 108 {
			errs = append(errs, fmt.Errorf("feed: socket path %q is %d bytes (%d while it is made under a temporary name); Unix sockets allow 107: use a shorter Dir", p, len(p), tmpSocketLen(p)))
			break
		}
	}
	return errors.Join(errs...)
}

// Server serves each rank's stream to one trainer at a time over a Unix
// socket. See the package documentation for the contract.
type Server struct {
	cfg    Config
	mode   string // "standalone" or "cluster", as the welcome says
	log    *slog.Logger
	ranks  []*rankServer
	ctx    context.Context // canceled by Shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup // accept loops and sessions

	emu      sync.Mutex
	ended    int           // ranks whose stream ended (End sent)
	endedCh  chan struct{} // closed when every rank's stream ended
	finished chan struct{} // closed when, also, no trainer is connected
}

// ErrServerClosed is returned by operations after Shutdown.
var ErrServerClosed = errors.New("feed: server closed")

// New serves standalone ranks: it opens every rank's stream at
// cfg.Start (open is called with each rank's shared-memory allocator),
// each the trivial session (one that never fences) deciding through
// cluster.RankDelivery, over cfg.Committer, listens on each rank's socket (mode 0600, in a 0700
// directory; the path appears only once it accepts; a stale socket file
// is replaced, a live one refused) and serves until Shutdown, which
// removes the sockets.
func New(cfg Config, open OpenFunc) (*Server, error) {
	if open == nil {
		return nil, errors.New("feed: nil OpenFunc")
	}
	cfg = cfg.WithDefaults()
	return newServer(cfg, "standalone", func(r int, alloc gpu.Allocator) (SessionStream, error) {
		return newStandaloneRank(cfg, open, r, alloc)
	})
}

// NewSessions is New for ranks whose sessions someone else decides (a
// cluster node: node.ClusterFeed.Open): the welcome says mode "cluster",
// with eras and the last acknowledged commit, and a rollback reaches the
// trainer as a rollback message. cfg.Committer and cfg.Start are not
// used.
func NewSessions(cfg Config, open SessionFunc) (*Server, error) {
	if open == nil {
		return nil, errors.New("feed: nil SessionFunc")
	}
	return newServer(cfg.WithDefaults(), "cluster", open)
}

func newServer(cfg Config, mode string, open SessionFunc) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.SocketPath == nil {
		mode := os.FileMode(0o700)
		if cfg.Peers.Open() {
			mode = 0o711 // others may reach a socket by name, not list them
		}
		if err := prepareDir(cfg.Dir, mode); err != nil {
			return nil, err
		}
	}
	s := &Server{cfg: cfg, mode: mode, log: cfg.Logger, endedCh: make(chan struct{}), finished: make(chan struct{})}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			s.Shutdown(context.Background())
		}
	}()
	for r := 0; r < cfg.Ranks; r++ {
		rs := &rankServer{s: s, rank: r, path: cfg.socketPath(r)}
		if cfg.Allocator != nil {
			rs.alloc = cfg.Allocator(r)
		}
		if rs.alloc == nil {
			rs.alloc = NewShmAllocator(fmt.Sprintf("rank%d", r))
		}
		if cfg.RankDevice != nil {
			rs.dev = cfg.RankDevice(r)
		}
		st, err := open(r, rs.alloc)
		if err != nil {
			return nil, fmt.Errorf("feed: open rank %d: %w", r, err)
		}
		rs.mu.stream = st
		s.ranks = append(s.ranks, rs)
		// Others must be able to connect(2) for the credential check
		// to decide, and to tell them why it refused.
		mode := os.FileMode(0o600)
		if cfg.Peers.Open() {
			mode = 0o666
		}
		if rs.ln, err = listen(rs.path, mode); err != nil {
			return nil, err
		}
	}
	// Accept only once every rank is in s.ranks: a rank whose trainer
	// took its whole stream would otherwise read s.ranks (rankEnded,
	// checkFinished) while it grows, and could find the job finished
	// with ranks still to come. Trainers that connect before wait in the
	// sockets' backlog.
	for _, rs := range s.ranks {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); rs.acceptLoop() }()
	}
	return s, nil
}

// socketListener is a rank's listening socket at its path.
type socketListener struct {
	*net.UnixListener
	path     string
	dev, ino uint64 // the socket file's identity
}

// Close stops listening and removes the socket file, if it is still this
// one: a node started since on the same path has put its own there.
func (l *socketListener) Close() error {
	err := l.UnixListener.Close()
	if fi, e := os.Lstat(l.path); e == nil && l.is(fi) {
		os.Remove(l.path)
	}
	return err
}

func (l *socketListener) is(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(st.Dev) == l.dev && uint64(st.Ino) == l.ino
}

// tmpSocketName is where a socket is made before it is renamed into
// place: in the same directory (rename(2) is atomic only within a file
// system), matching rank-*.sock (what the run directory may hold), never
// a name a rank's socket has.
func tmpSocketName(path string) string {
	return filepath.Join(filepath.Dir(path), fmt.Sprintf("rank-~%04x.sock", rand.Uint32()&0xffff))
}

// tmpSocketLen is how long tmpSocketName(path) is.
func tmpSocketLen(path string) int { return len(filepath.Join(filepath.Dir(path), "rank-~0000.sock")) }

// listen makes path a socket that accepts from the moment it exists: the
// socket is bound and listening under a temporary name, with its final
// mode, and then renamed onto path. (bind(2) creates the file before
// listen(2): a trainer connecting in between would be refused.) A stale
// socket at path, one nobody accepts on (a node that was killed), is
// replaced by the rename; a socket some process still accepts on is
// another node's, and is refused; anything else at path is refused.
func listen(path string, mode os.FileMode) (*socketListener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("feed: %s exists and is not a socket; remove it or choose another path", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("feed: %s is in use: a running process accepts connections on it (another node on this feed directory?); stop it or choose another path", path)
		}
	}
	var ln *net.UnixListener
	var tmp string
	for try := 0; ; try++ {
		tmp = tmpSocketName(path)
		old := syscall.Umask(0o177) // the socket is created 0600: no window where others may connect
		var err error
		ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
		syscall.Umask(old)
		if err == nil {
			break
		}
		if errors.Is(err, syscall.EADDRINUSE) && try < 16 {
			continue // another temporary socket of that name: draw again
		}
		return nil, fmt.Errorf("feed: listen: %w", err)
	}
	ln.SetUnlinkOnClose(false) // the listener's name is the temporary one
	fail := func(err error) (*socketListener, error) {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("feed: %w", err)
	}
	if mode != 0o600 {
		if err := os.Chmod(tmp, mode); err != nil {
			return fail(err)
		}
	}
	fi, err := os.Lstat(tmp)
	if err != nil {
		return fail(err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fail(fmt.Errorf("socket %s: no device and inode", tmp))
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	return &socketListener{UnixListener: ln, path: path, dev: uint64(st.Dev), ino: uint64(st.Ino)}, nil
}

// SocketPath is rank's socket.
func (s *Server) SocketPath(rank int) string { return s.ranks[rank].path }

// Allocator is rank's shared-memory allocator (for tests and stats).
func (s *Server) Allocator(rank int) *ShmAllocator { return s.ranks[rank].alloc }

// Ended is closed once every rank's stream has ended and its End was
// sent to a trainer.
func (s *Server) Ended() <-chan struct{} { return s.endedCh }

// Finished is closed once every rank's stream has ended and no trainer is
// connected any more: the job is over for this node.
func (s *Server) Finished() <-chan struct{} { return s.finished }

// rankEnded records that rank's End went out (once per rank).
func (s *Server) rankEnded(r *rankServer) {
	s.emu.Lock()
	defer s.emu.Unlock()
	if r.endedOnce {
		return
	}
	r.endedOnce = true
	if s.ended++; s.ended == len(s.ranks) {
		close(s.endedCh)
	}
}

// checkFinished closes Finished when every rank ended and none has a
// trainer.
func (s *Server) checkFinished() {
	s.emu.Lock()
	defer s.emu.Unlock()
	if s.ended < len(s.ranks) {
		return
	}
	for _, r := range s.ranks {
		r.mu.Lock()
		busy := r.mu.sess != nil
		r.mu.Unlock()
		if busy {
			return
		}
	}
	select {
	case <-s.finished:
	default:
		close(s.finished)
	}
}

// Shutdown stops accepting, tells connected trainers (an Error with code
// "shutdown"), closes their connections (releasing their batches), and
// shuts every rank's stream down. It returns ctx.Err() if ctx ends first
// (the rest still stops in the background). Safe to call more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.cancel()
	for _, r := range s.ranks {
		if r.ln != nil {
			r.ln.Close()
		}
		r.mu.Lock()
		if r.mu.sess != nil {
			r.mu.sess.stop()
		}
		r.mu.Unlock()
	}
	done := make(chan error, 1)
	go func() {
		s.wg.Wait()
		var errs []error
		for _, r := range s.ranks {
			r.mu.Lock()
			if r.mu.pending != nil {
				r.mu.pending.Batch.Release()
				r.mu.pending = nil
			}
			st := r.mu.stream
			r.mu.stream = nil
			r.mu.Unlock()
			if st != nil {
				errs = append(errs, st.Shutdown(context.Background()))
			}
		}
		done <- errors.Join(errs...)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// rankServer serves one rank. Its state is guarded by mu; while a session
// runs, that session's goroutines are the only ones driving the stream.
type rankServer struct {
	s     *Server
	rank  int
	path  string
	ln    *socketListener
	alloc *ShmAllocator
	dev   *RankDevice
	devMu struct {
		sync.Mutex
		ids  map[*gpu.DeviceExport]uint64 // device regions by export
		next uint64
	}
	mu struct {
		sync.Mutex
		stream  SessionStream
		pending *Batch // taken from the stream, not yet delivered
		sess    *trainerConn
	}
	endedOnce bool // guarded by s.emu
	// waits adds up the trainers' data-stall reports (trainerwait.go).
	waits waitBook
	// hellos counts the connections whose hello is being read: they
	// hold a goroutine, a descriptor and up to a frame until their
	// deadline, not the rank; pending lists them, oldest first, at most
	// maxPendingHellos.
	hellos  atomic.Int64
	pending struct {
		sync.Mutex
		conns []*net.UnixConn
	}
}

// maxPendingHellos is how many connections a rank lets wait for their
// hello at once (each may hold a 64 KiB frame); one more closes the
// oldest. A trainer says hello as soon as it connects, so closing the
// oldest, rather than refusing the newest, keeps a flood of silent
// connections from keeping a trainer out.
const maxPendingHellos = 16

// addPending lists c as waiting for its hello, closing the oldest
// waiting over maxPendingHellos.
func (r *rankServer) addPending(c *net.UnixConn) {
	r.pending.Lock()
	r.pending.conns = append(r.pending.conns, c)
	var old *net.UnixConn
	if len(r.pending.conns) > maxPendingHellos {
		old = r.pending.conns[0]
		r.pending.conns = r.pending.conns[1:]
	}
	r.hellos.Store(int64(len(r.pending.conns)))
	r.pending.Unlock()
	if old != nil {
		rejectConn(old, feed.CodeBusy, fmt.Sprintf("rank %d: %d newer connections are waiting to say hello; this one said nothing", r.rank, maxPendingHellos))
	}
}

// dropPending takes c off the waiting list, if still there.
func (r *rankServer) dropPending(c *net.UnixConn) {
	r.pending.Lock()
	defer r.pending.Unlock()
	if i := slices.Index(r.pending.conns, c); i >= 0 {
		r.pending.conns = slices.Delete(r.pending.conns, i, i+1)
	}
	r.hellos.Store(int64(len(r.pending.conns)))
}

func (r *rankServer) acceptLoop() {
	for {
		c, err := r.ln.AcceptUnix()
		if err != nil {
			if r.s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			r.s.log.Warn("feed: accept", "rank", r.rank, "err", err)
			select {
			case <-time.After(50 * time.Millisecond):
			case <-r.s.ctx.Done():
				return
			}
			continue
		}
		if err := r.checkPeer(c); err != nil {
			r.s.log.Warn("feed: refused a connection", "rank", r.rank, "err", err)
			r.s.wg.Add(1)
			go func() { defer r.s.wg.Done(); refuse(c, feed.CodeForbidden, err.Error()) }()
			continue
		}
		r.s.wg.Add(1)
		go func() {
			defer r.s.wg.Done()
			r.serveConn(c)
		}()
	}
}

// checkPeer checks the credentials of the process at the other end of c
// before it may take the rank.
func (r *rankServer) checkPeer(c *net.UnixConn) error {
	cred, err := peerCred(c)
	if err != nil {
		return fmt.Errorf("%w: cannot tell who connected: %v", ErrForbidden, err)
	}
	return r.s.cfg.Peers.Check(cred, os.Geteuid())
}

// serveConn reads c's hello, then runs its session once the rank is
// free. A connection takes the rank only once it said hello: one that
// connects and says nothing is closed at its deadline
// (Config.HandshakeTimeout) and never keeps a trainer out. A trainer that
// crashed and restarts at once may find its old session still tearing
// down: wait a little for it before calling the rank busy.
func (r *rankServer) serveConn(c *net.UnixConn) {
	h, br, buf, ok := r.readHello(c)
	if !ok {
		return
	}
	deadline := time.NewTimer(2 * time.Second)
	defer deadline.Stop()
	var sess *trainerConn
	for sess == nil {
		r.mu.Lock()
		cur := r.mu.sess
		if cur == nil && r.s.ctx.Err() == nil {
			sess = newSession(r, c)
			r.mu.sess = sess
		}
		r.mu.Unlock()
		if sess != nil {
			break
		}
		if cur == nil { // shutting down
			c.Close()
			return
		}
		select {
		case <-cur.done:
		case <-deadline.C:
			rejectConn(c, feed.CodeBusy, fmt.Sprintf("rank %d already has a trainer connected; one trainer per rank", r.rank))
			return
		case <-r.s.ctx.Done():
			c.Close()
			return
		}
	}
	sess.run(h, br, buf)
	r.mu.Lock()
	r.mu.sess = nil
	r.mu.Unlock()
	close(sess.done)
	r.s.checkFinished()
}

// readHello reads and checks c's hello within the handshake timeout; a
// server shutting down closes c at once. It answers a bad hello itself
// and then reports false.
func (r *rankServer) readHello(c *net.UnixConn) (*feed.Hello, *bufio.Reader, []byte, bool) {
	r.addPending(c)
	defer r.dropPending(c)
	stop := context.AfterFunc(r.s.ctx, func() { c.Close() })
	defer stop()
	br := bufio.NewReaderSize(c, 4096)
	c.SetReadDeadline(time.Now().Add(r.s.cfg.HandshakeTimeout))
	t, payload, buf, err := feed.ReadFrame(br, feed.MaxClientFrame, nil)
	if err != nil {
		rejectConn(c, feed.CodeProtocol, fmt.Sprintf("feed: reading hello: %v", err))
		return nil, nil, nil, false
	}
	m, err := feed.ParseClientMsg(t, payload)
	if err == nil && m.Hello == nil {
		err = fmt.Errorf("feed: first message is %s, want hello", t)
	}
	if err != nil {
		rejectConn(c, feed.CodeProtocol, err.Error())
		return nil, nil, nil, false
	}
	h := m.Hello
	if h.Version < feed.MinVersion || h.Version > feed.Version {
		rejectConn(c, feed.CodeVersion, fmt.Sprintf("feed: protocol version %d not supported (server speaks %d to %d)", h.Version, feed.MinVersion, feed.Version))
		return nil, nil, nil, false
	}
	if h.Rank != nil && *h.Rank != -1 && *h.Rank != r.rank {
		rejectConn(c, feed.CodeProtocol, fmt.Sprintf("feed: trainer for rank %d connected to rank %d's socket", *h.Rank, r.rank))
		return nil, nil, nil, false
	}
	return h, br, buf, true
}

func rejectConn(c *net.UnixConn, code, msg string) {
	c.SetWriteDeadline(time.Now().Add(time.Second))
	if f, err := feed.AppendFrame(nil, feed.MsgError, feed.ErrorMsg{Code: code, Message: msg, Fatal: true}); err == nil {
		c.Write(f)
	}
	c.Close()
}

// trainerConn is one connected trainer.
type trainerConn struct {
	r      *rankServer
	conn   *net.UnixConn
	ctx    context.Context
	cancel context.CancelFunc

	wmu  sync.Mutex // one frame at a time on the connection
	wbuf []byte

	// fieldCat and schema: the trainer asked for fields and the dataset
	// has some (Config.Fields).
	fieldCat dataset.Catalog
	schema   dataset.Schema
	fields   batchFields // the writer's buffers

	hmu    sync.Mutex
	held   map[uint64]*actors.Batch // delivered, not released
	nextID uint64

	regions    map[uint64]bool // announced on this connection (writer only)
	devRegions map[uint64]bool // device regions announced (writer only)
	devHolds   []func()        // exports held while this connection lasts (writer; run by run's end)
	delivery   string          // feed.DeliveryHost or DeliveryCUDAIPC
	done       chan struct{}   // closed once the session has ended and let go of the rank
	version    int             // the protocol version agreed in the hello
	commits    sync.WaitGroup  // cluster mode: commits waiting for their ack
	endSent    atomic.Bool     // the writer is sending (or sent) the End
}

func newSession(r *rankServer, c *net.UnixConn) *trainerConn {
	ctx, cancel := context.WithCancel(r.s.ctx)
	return &trainerConn{r: r, conn: c, ctx: ctx, cancel: cancel, held: make(map[uint64]*actors.Batch), regions: make(map[uint64]bool), devRegions: make(map[uint64]bool), done: make(chan struct{})}
}

func (s *trainerConn) stop() {
	s.cancel()
	s.conn.Close()
}

// send writes one frame; fd >= 0 rides along as SCM_RIGHTS.
func (s *trainerConn) send(t feed.MsgType, v any, fd int) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	var err error
	if s.wbuf, err = feed.AppendFrame(s.wbuf[:0], t, v); err != nil {
		return err
	}
	b := s.wbuf
	if fd >= 0 {
		n, _, err := s.conn.WriteMsgUnix(b, syscall.UnixRights(fd), nil)
		if err != nil {
			return err
		}
		b = b[n:]
	}
	_, err = s.conn.Write(b)
	if cap(s.wbuf) > 1<<20 {
		s.wbuf = nil // a rare huge descriptor: do not keep its buffer
	}
	return err
}

// sendFields writes a batch's fields frame.
func (s *trainerConn) sendFields(f *feed.BatchFields) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	var err error
	if s.wbuf, err = feed.AppendFieldsFrame(s.wbuf[:0], f); err != nil {
		return err
	}
	_, err = s.conn.Write(s.wbuf)
	if cap(s.wbuf) > 1<<20 {
		s.wbuf = nil
	}
	return err
}

func (s *trainerConn) fail(code string, err error, report any) {
	m := feed.ErrorMsg{Code: code, Message: err.Error(), Fatal: true}
	if report != nil {
		m.Report, _ = json.Marshal(report)
	}
	s.conn.SetWriteDeadline(time.Now().Add(time.Second))
	s.send(feed.MsgError, m, -1)
}

// run serves the trainer that said hello h (read from br, whose frame
// buffer is buf) and holds the rank.
func (s *trainerConn) run(h *feed.Hello, br *bufio.Reader, buf []byte) {
	defer func() {
		s.stop()
		s.hmu.Lock()
		held := s.held
		s.held = nil
		s.hmu.Unlock()
		for _, b := range held { // a trainer that left frees its slots
			b.Release()
		}
		for _, release := range s.devHolds { // and lets go of the device exports it was sent
			release()
		}
	}()
	log := s.r.s.log.With("rank", s.r.rank)
	s.version = h.Version
	var err error
	att, err := s.r.attach(s.ctx, h.Token)
	if err != nil {
		code := feed.CodeBadToken
		switch {
		case errors.Is(err, feed.ErrStaleToken):
			code = feed.CodeStaleToken
		case isPipeline(err):
			code = feed.CodePipeline
		}
		s.fail(code, err, nil)
		return
	}
	at := att.Resume
	if att.Reset && s.r.s.mode == "cluster" {
		log.Info("feed: trainer reconnected after uncommitted batches; rank reset to its last acknowledged commit", "resume_epoch", at.Epoch, "resume_step", at.Step)
	}
	cfg := s.r.stream().Config()
	if (cfg.Sample.Kind != actors.KindImage || cfg.Sample.DType() != actors.Uint8) && s.version < 3 {
		s.fail(feed.CodeVersion, fmt.Errorf("feed: this node serves %s %s samples (%s), which protocol version %d cannot describe: upgrade the client to version 3", cfg.Sample.DType(), cfg.Sample.Kind, cfg.Sample, s.version), nil)
		return
	}
	w := feed.Welcome{
		Version: s.version, Job: s.r.s.cfg.Job, Rank: s.r.rank, BatchSize: cfg.BatchSize, Slots: cfg.Slots,
		SlotBytes: cfg.SlotBytes(), Layout: cfg.Sample.LayoutName(), DType: cfg.Sample.DType().String(), Resume: at,
	}
	if f := s.r.s.cfg.EpochSteps; f != nil {
		w.EpochSteps = max(f(s.r.rank), 0)
	}
	if k := cfg.Sample.Kind; k == actors.KindImage || k == actors.KindVideo {
		w.Sample = feed.SampleShape{Height: cfg.Sample.Height, Width: cfg.Sample.Width, Channels: actors.Channels}
	}
	if s.version >= 3 {
		w.Spec = &feed.SampleSpec{Kind: cfg.Sample.Kind.String(), DType: cfg.Sample.DType().String(),
			Shape: cfg.Sample.SampleDims(), Layout: cfg.Sample.LayoutName()}
	}
	if s.version >= 2 {
		w.Mode = s.r.s.mode
		if w.Mode == "cluster" {
			w.Era, w.Committed = att.Era, att.Committed
		}
	}
	s.delivery = feed.DeliveryHost
	if h.Device == "cuda" && s.r.dev != nil && s.r.dev.Export {
		s.delivery = feed.DeliveryCUDAIPC
	}
	w.Device, w.Delivery = s.r.dev.ref(), s.delivery
	if f := s.r.s.cfg.Fields; f != nil && h.Fields {
		if cat := f(s.r.rank); cat != nil {
			if schema := dataset.CatalogSchema(cat); len(schema) > 0 {
				s.fieldCat, s.schema = cat, schema
				w.Fields = fieldSpecs(schema)
			}
		}
	}
	if err := s.send(feed.MsgWelcome, w, -1); err != nil {
		return
	}
	log.Info("feed: trainer connected", "resume_epoch", at.Epoch, "resume_step", at.Step)
	s.conn.SetReadDeadline(time.Time{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer s.cancel()
		s.readLoop(br, buf)
	}()
	s.writeLoop(readerDone)
	s.cancel()
	s.conn.Close()
	<-readerDone
	s.commits.Wait()
	log.Info("feed: trainer disconnected")
}

func (r *rankServer) stream() SessionStream {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.stream
}

// attach asks the rank's stream where a connecting trainer starts; a
// reset voids the batch kept from the last connection.
func (r *rankServer) attach(ctx context.Context, token []byte) (Attachment, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.stream == nil {
		return Attachment{}, pipelineError{ErrServerClosed}
	}
	att, err := r.mu.stream.Attach(ctx, token)
	if err == nil && att.Reset && r.mu.pending != nil {
		r.mu.pending.Batch.Release()
		r.mu.pending = nil
	}
	return att, err
}

func (s *trainerConn) writeLoop(readerDone <-chan struct{}) {
	r := s.r
	st := r.stream()
	epoch, haveEpoch, epochEnded := 0, false, false
	for {
		r.mu.Lock()
		pd := r.mu.pending
		r.mu.pending = nil
		r.mu.Unlock()
		var d Batch
		var err error
		if pd != nil {
			d = *pd
		} else {
			d, err = st.NextDelivery(s.ctx)
		}
		var rb *feed.RollbackError
		if errors.As(err, &rb) && s.ctx.Err() == nil {
			if s.version < 2 {
				s.fail(feed.CodeRolledBack, rb, nil)
				return
			}
			if s.send(feed.MsgRollback, rb.Rollback, -1) != nil {
				return
			}
			haveEpoch, epochEnded = false, false
			continue
		}
		if err != nil {
			switch {
			case s.ctx.Err() != nil:
				if r.s.ctx.Err() != nil {
					s.fail(feed.CodeShutdown, errors.New("feed: node shutting down"), nil)
				}
			case errors.Is(err, io.EOF):
				// A standalone trainer of version 4 says when it read the
				// End, or the last epoch's end just before it (it may have
				// stopped short, with them and batches unread in its
				// socket, and come back from its checkpoint): only then is
				// the rank over. To older ones, and in a cluster (whose
				// End comes once the coordinator holds every commit of the
				// job: nothing is left to come back for), the End written
				// is the end.
				s.endSent.Store(true)
				if haveEpoch && !epochEnded {
					s.send(feed.MsgEpochEnd, feed.EpochEnd{Epoch: epoch, Last: s.version >= 4}, -1)
				}
				if s.send(feed.MsgEnd, feed.End{}, -1) == nil && (s.version < 4 || r.s.mode == "cluster") {
					r.s.rankEnded(r)
				}
				select { // the trainer may still commit and release
				case <-readerDone:
				case <-s.ctx.Done():
				}
			case errors.Is(err, feed.ErrBadToken): // a cluster rank checked the trainer's token late (no job at hello)
				s.fail(feed.CodeBadToken, err, nil)
			default:
				var be *actors.BudgetError
				if errors.As(err, &be) {
					s.fail(feed.CodeFailureBudget, err, be.Report)
				} else {
					s.fail(feed.CodePipeline, err, nil)
				}
			}
			return
		}
		b := d.Batch
		if s.ctx.Err() != nil { // the trainer left while we waited: keep it for the next one
			s.keep(d)
			return
		}
		if haveEpoch && b.Epoch != epoch && !epochEnded {
			if s.send(feed.MsgEpochEnd, feed.EpochEnd{Epoch: epoch}, -1) != nil {
				s.keep(d)
				return
			}
		}
		if !haveEpoch || b.Epoch != epoch {
			epochEnded = false
		}
		epoch, haveEpoch = b.Epoch, true
		bd := feed.BatchDesc{
			Dims: b.Dims, Layout: b.Layout.String(), DType: "uint8", Epoch: b.Epoch, Step: b.Step,
			Labels: b.Labels, Keys: b.Keys, Indices: b.Indices, Positions: b.Positions, Pads: b.Pads, Failed: b.Failed,
			NBytes: int64(len(b.Images)),
		}
		if slices.Contains(b.Filled, true) {
			bd.Filled = b.Filled
		}
		if s.version >= 2 {
			bd.Era, bd.EndOfStream = d.Era, d.EndOfStream
		}
		if s.version >= 3 {
			bd.Shape = b.Shape
			if bd.Shape == nil {
				bd.Shape = b.Dims[:]
			}
			bd.DType = b.Spec.DType().String() // images: uint8, or the float dtype the decoder wrote
			if b.Spec.Kind != actors.KindImage {
				bd.Layout, bd.Short = b.Spec.LayoutName(), b.Short
			}
			if b.Spec.Kind == actors.KindRaw {
				if bd.Lengths, err = rawLengths(b); err != nil {
					b.Release()
					s.fail(feed.CodePipeline, err, nil)
					return
				}
			}
		}
		if len(b.Images) > 0 {
			loc, ok := r.alloc.Locate(b.Images)
			if !ok {
				b.Release()
				s.fail(feed.CodePipeline, fmt.Errorf("feed: rank %d: batch memory is not in this rank's shared memory (the stream must use the allocator OpenFunc was given)", r.rank), nil)
				return
			}
			if !s.regions[loc.Region] {
				if s.send(feed.MsgRegion, feed.Region{Region: loc.Region, Size: loc.Size}, loc.fd) != nil {
					s.keep(d)
					return
				}
				s.regions[loc.Region] = true
			}
			bd.Region, bd.Offset = loc.Region, loc.Offset
			if s.delivery == feed.DeliveryCUDAIPC && b.Device != nil && b.Device.Export != nil {
				id, first := r.deviceRegion(b.Device.Export)
				if first || !s.devRegions[id] {
					ex := b.Device.Export
					// The trainer may keep the handle open until the
					// connection ends, even after this pipeline is gone.
					release, ok := ex.Hold()
					if !ok {
						b.Release()
						s.fail(feed.CodePipeline, fmt.Errorf("feed: rank %d: device slots freed under a live batch", r.rank), nil)
						return
					}
					s.devHolds = append(s.devHolds, release)
					dr := feed.DeviceRegion{Region: id, Handle: ex.Handle[:], Size: ex.Size,
						Device: feed.DeviceRef{Ordinal: ex.Info.Ordinal, UUID: ex.Info.UUID, Name: ex.Info.Name}}
					if s.send(feed.MsgDeviceRegion, dr, -1) != nil {
						s.keep(d)
						return
					}
					s.devRegions[id] = true
				}
				bd.DeviceRegion, bd.DeviceOffset = id, b.Device.Offset
			}
		}
		s.hmu.Lock()
		if s.held == nil {
			s.hmu.Unlock()
			s.keep(d)
			return
		}
		s.nextID++
		bd.ID = s.nextID
		s.held[bd.ID] = b
		s.hmu.Unlock()
		// Recorded as sent before it is written: the trainer may
		// commit it before send returns, and a commit must name a
		// delivered batch. A write that fails ends the session, and the
		// next one resumes after the last commit, reopening the stream.
		st.Sent(d)
		if s.fieldCat != nil {
			bf, err := s.fields.read(s.ctx, s.fieldCat, s.schema, bd.ID, b.Indices)
			if err == nil {
				err = s.sendFields(bf)
			}
			if err != nil {
				if s.ctx.Err() == nil {
					s.fail(feed.CodePipeline, err, nil)
				}
				return // held: released when the session ends
			}
		}
		if s.send(feed.MsgBatch, bd, -1) != nil {
			return // held: released when the session ends
		}
		if d.EndOfStream {
			// The rank's stream for the epoch ends here as planned: say so
			// now, so a trainer that commits at epoch ends commits it (the
			// epoch cannot complete without that commit).
			if s.send(feed.MsgEpochEnd, feed.EpochEnd{Epoch: epoch}, -1) != nil {
				return
			}
			epochEnded = true
		}
	}
}

// deviceRegion is the region id of a device export, new (first) or
// known: one per pipeline the rank ran.
func (r *rankServer) deviceRegion(ex *gpu.DeviceExport) (id uint64, first bool) {
	r.devMu.Lock()
	defer r.devMu.Unlock()
	if r.devMu.ids == nil {
		r.devMu.ids = map[*gpu.DeviceExport]uint64{}
	}
	if id, ok := r.devMu.ids[ex]; ok {
		return id, false
	}
	r.devMu.next++
	r.devMu.ids[ex] = r.devMu.next
	return r.devMu.next, true
}

// keep puts an undelivered batch back for the next session.
func (s *trainerConn) keep(d Batch) {
	s.r.mu.Lock()
	s.r.mu.pending = &d
	s.r.mu.Unlock()
}

func (s *trainerConn) readLoop(br *bufio.Reader, buf []byte) {
	for {
		t, payload, nbuf, err := feed.ReadFrame(br, feed.MaxClientFrame, buf)
		buf = nbuf
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || s.ctx.Err() != nil {
				return
			}
			s.fail(feed.CodeProtocol, fmt.Errorf("feed: reading message: %w", err), nil)
			return
		}
		m, err := feed.ParseClientMsg(t, payload)
		if err != nil {
			s.fail(feed.CodeProtocol, err, nil)
			return
		}
		switch {
		case m.Hello != nil:
			s.fail(feed.CodeProtocol, errors.New("feed: second hello on one connection"), nil)
			return
		case m.Release != nil:
			if m.Release.Stall != nil {
				s.r.waits.add(m.Release.Stall)
			}
			for _, id := range m.Release.IDs {
				s.hmu.Lock()
				b, ok := s.held[id]
				delete(s.held, id)
				s.hmu.Unlock()
				if !ok {
					s.fail(feed.CodeProtocol, fmt.Errorf("feed: release of batch %d, which this trainer does not hold", id), nil)
					return
				}
				b.Release()
			}
		case m.Commit != nil:
			s.commit(m.Commit)
		case t == feed.MsgEnded:
			if s.version < 4 || !s.endSent.Load() {
				s.fail(feed.CodeProtocol, fmt.Errorf("feed: ended before the node sent the end (protocol version %d)", s.version), nil)
				return
			}
			s.r.s.rankEnded(s.r)
		case t == feed.MsgBye:
			return
		}
	}
}

// commit hands a commit to the rank's stream and answers it: at once
// when the answer is ready (standalone: its token; in order), else when
// the coordinator acknowledges it (or the rank rolls back), without
// holding up the reader: releases keep flowing while the commit waits.
func (s *trainerConn) commit(c *feed.Commit) {
	era := c.Era
	if s.version < 2 {
		era = 0 // version 1 has no eras; its connection ends at a rollback
	}
	ch, err := s.r.stream().Commit(s.ctx, era, c.Epoch, c.Step)
	if err != nil {
		code := feed.CodeBadCommit
		if errors.Is(err, feed.ErrRolledBack) {
			code = feed.CodeRolledBack
		}
		s.send(feed.MsgError, feed.ErrorMsg{Code: code, Message: err.Error(), Req: c.Req}, -1)
		return
	}
	answer := func(res CommitResult) {
		if res.Err != nil {
			code := feed.CodeCommitFailed
			if errors.Is(res.Err, feed.ErrRolledBack) {
				code = feed.CodeRolledBack
			}
			s.send(feed.MsgError, feed.ErrorMsg{Code: code, Message: res.Err.Error(), Req: c.Req}, -1)
			return
		}
		s.send(feed.MsgCommitted, feed.Committed{Req: c.Req, Epoch: c.Epoch, Step: c.Step, Token: res.Token}, -1)
	}
	select {
	case res := <-ch:
		answer(res)
		return
	default:
	}
	s.commits.Add(1)
	go func() {
		defer s.commits.Done()
		select {
		case res := <-ch:
			answer(res)
		case <-s.ctx.Done():
		}
	}()
}
