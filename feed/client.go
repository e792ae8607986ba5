package feed

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// DialConfig configures a trainer's connection. The zero value connects
// without a token (resume from the server's last commit for the rank).
type DialConfig struct {
	// Token resumes from a checkpoint's commit (Client.State().Token).
	Token []byte
	// Rank, if set, must be the socket's rank.
	Rank *int
	// ConnectTimeout bounds how long DialContext waits for a node that is
	// not accepting yet (no socket, ENOENT; or a socket nobody accepts
	// on, ECONNREFUSED: a node that is starting or restarting): it tries
	// again with a short backoff until then (and until ctx ends), then
	// returns a *ConnectError naming the path. 0: DefaultConnectTimeout;
	// negative: one attempt.
	ConnectTimeout time.Duration
	// OnWait, if set, is called after each attempt that found no node
	// accepting (its error), before DialContext waits to try again: to
	// log "waiting for the node".
	OnWait func(err error)
	// Clock times the data-stall accounting (Client.Stall): how long
	// Next waited for each batch and how long the trainer spent between
	// batches. nil: the system's monotonic clock.
	Clock Clock
	// StallEvery is how many steps' accounting the client gathers before
	// it sends it, on a release (at most MaxStallSteps). 0:
	// DefaultStallEvery.
	StallEvery int
	// NodeUIDs are users accepted as the node besides the trainer's own
	// and root (see NodeUIDEnv, which adds to them): the client asks the
	// kernel who serves the socket and refuses anyone else (*PeerError).
	NodeUIDs []uint32
	// Fields asks for the samples' fields: Batch.Fields, with the schema
	// in Welcome().Fields.
	Fields bool
}

// DefaultConnectTimeout is how long a trainer waits for its node by
// default: long enough for a node launched beside it to start.
const DefaultConnectTimeout = 60 * time.Second

// ConnectError is a dial that found no node accepting on Path within its
// connect timeout. Err is the last attempt's error (errors.Is
// syscall.ENOENT or syscall.ECONNREFUSED, or the context's error).
type ConnectError struct {
	Path     string
	Attempts int
	Waited   time.Duration
	Err      error
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("feed: no node accepting on %s: %d attempt(s) over %v, the last: %v (is the node running, with this feed directory and rank? DialConfig.ConnectTimeout sets how long to wait)",
		e.Path, e.Attempts, e.Waited.Round(time.Millisecond), e.Err)
}

func (e *ConnectError) Unwrap() error { return e.Err }

// notYet is whether a connect error means no node accepts on the path yet.
func notYet(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

// connect dials path until a node accepts, cfg's connect timeout passes or
// ctx ends.
func connect(ctx context.Context, path string, cfg DialConfig) (*net.UnixConn, error) {
	timeout := cfg.ConnectTimeout
	if timeout == 0 {
		timeout = DefaultConnectTimeout
	}
	start := time.Now()
	var deadline <-chan time.Time
	if timeout > 0 {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		deadline = tm.C
	}
	backoff := 5 * time.Millisecond
	var d net.Dialer
	for attempt := 1; ; attempt++ {
		nc, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			uc := nc.(*net.UnixConn)
			if err := checkNode(uc, path, cfg); err != nil {
				uc.Close()
				return nil, err
			}
			return uc, nil
		}
		if !notYet(err) {
			return nil, fmt.Errorf("feed: dial %s: %w", path, err)
		}
		if timeout < 0 {
			return nil, &ConnectError{Path: path, Attempts: attempt, Waited: time.Since(start), Err: err}
		}
		if cfg.OnWait != nil {
			cfg.OnWait(err)
		}
		wait := time.NewTimer(backoff)
		select {
		case <-wait.C:
		case <-deadline:
			wait.Stop()
			return nil, &ConnectError{Path: path, Attempts: attempt, Waited: time.Since(start), Err: err}
		case <-ctx.Done():
			wait.Stop()
			return nil, &ConnectError{Path: path, Attempts: attempt, Waited: time.Since(start), Err: fmt.Errorf("%w (the last attempt: %v)", ctx.Err(), err)}
		}
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}

// Client is a trainer's connection to one rank's feed. Next and Commit
// must be called from one goroutine; Batch.Release, State and Close are
// safe from any.
type Client struct {
	conn    *net.UnixConn
	welcome Welcome
	fields  bool // the hello asked for fields

	// pendingFields is the fields frame read, for the batch that follows
	pendingFields *BatchFields

	wmu  sync.Mutex
	wbuf []byte

	// reader state (the Next/Commit goroutine)
	rbuf    []byte
	r0, r1  int
	oob     []byte
	fds     []int
	queue   []rawMsg
	regions map[uint64][]byte
	req     uint64
	ended   error // io.EOF after End; a *RemoteError after a fatal error

	smu   sync.Mutex
	state State

	clock Clock
	stall stallMeter

	closeOnce sync.Once
}

type rawMsg struct {
	t       MsgType
	payload []byte
}

// State is where a trainer is: what it received and committed.
type State struct {
	Job  string
	Rank int
	// Resume is where this connection's delivery started.
	Resume Cursor
	// Epoch and Step are the last batch received (Received false: none).
	Epoch    int
	Step     int64
	Received bool
	// EpochsEnded counts end-of-epoch messages received.
	EpochsEnded int
	// Token is the last commit's token (nil: none on this connection).
	Token          []byte
	CommittedEpoch int
	CommittedStep  int64
	// Era is the delivery era of the last batch received (cluster mode;
	// at first the welcome's): Commit names it, so a commit of a batch
	// from before a rollback is refused rather than taken for another.
	Era uint64
	// Rollbacks counts rollback messages received.
	Rollbacks int
}

// RemoteError is an Error message from the server.
type RemoteError struct{ ErrorMsg }

func (e *RemoteError) Error() string { return fmt.Sprintf("feed: server: %s: %s", e.Code, e.Message) }

// Is matches ErrFailureBudgetRemote for budget stops and ErrRolledBack
// for commits refused (or, to a version-1 trainer, a rollback reported)
// because the rank rolled back.
func (e *RemoteError) Is(target error) bool {
	return target == ErrFailureBudgetRemote && e.Code == CodeFailureBudget ||
		target == ErrRolledBack && e.Code == CodeRolledBack
}

// ErrFailureBudgetRemote matches (errors.Is) a RemoteError saying the
// node stopped on its failure budget; the report is in ErrorMsg.Report.
var ErrFailureBudgetRemote = errors.New("feed: failure budget exceeded at the node")

// Batch is a batch as the trainer sees it: Images is a slice over the
// shared mapping (no copy), valid until Release or Close. Its elements
// are DType ("uint8"; "float32" little-endian: Float32s views them;
// "float16" or "bfloat16", 2 bytes each, little-endian, for images the
// node converted with --dtype),
// Shape in Layout; image batches also have Dims.
type Batch struct {
	ID     uint64
	Epoch  int
	Step   int64
	Images []byte
	Dims   [4]int
	Layout string
	DType  string
	// Shape is the batch's dimensions, N first (from an older node,
	// Dims).
	Shape []int
	// Short marks samples shorter than their window (padded).
	Short     []bool
	Labels    []int32
	Keys      []string
	Indices   []int64
	Positions []int64
	Pads      []bool
	Failed    int
	// Filled marks rows that hold a copy of another row in a failed
	// sample's place (see BatchDesc.Filled): mask them out. Always Len
	// long (all false from a node that fills nothing or predates it).
	Filled []bool
	// Era is the batch's delivery era (cluster mode).
	Era uint64
	// EndOfStream: the last batch of the rank's stream for Epoch as the
	// cluster plans it now; commit it (an epoch completes only when every
	// rank committed its stream).
	EndOfStream bool
	// Fields are the rows' fields (DialConfig.Fields, a dataset with
	// fields); nil otherwise. Their bytes stay valid after Release.
	Fields *BatchFields
	// Data are the rows' bytes of a raw batch (the welcome's spec kind
	// KindRaw, --media raw): each sample's object as stored, a view of
	// the shared memory (no copy), valid until Release like Images. nil
	// for other kinds.
	Data [][]byte

	c        *Client
	released atomic.Bool
}

// Len is the number of samples in the batch.
func (b *Batch) Len() int { return len(b.Labels) }

// Float32s views a float32 batch's bytes as float32s (no copy; nil for
// other dtypes). The node writes them in its byte order, which is the
// trainer's: they share a machine.
func (b *Batch) Float32s() []float32 {
	if b.DType != DTypeFloat32 || len(b.Images) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b.Images[0])), len(b.Images)/4)
}

// bytes is the size of an array of s's dtype and shape; -1 if the
// dtype is unknown or a dimension negative.
func (s SampleSpec) bytes() int64 {
	n := int64(s.ItemSize())
	if n == 0 {
		return -1
	}
	for _, d := range s.Shape {
		if d < 0 {
			return -1
		}
		n *= int64(d)
	}
	return n
}

// Release gives the slot back. Harmless more than once.
func (b *Batch) Release() error {
	if b == nil || b.c == nil || !b.released.CompareAndSwap(false, true) {
		return nil
	}
	return b.c.sendMsg(MsgRelease, Release{IDs: []uint64{b.ID}, Stall: b.c.stall.take(false)})
}

// Dial connects to a rank's socket and resumes from the server's last
// commit for the rank.
func Dial(path string) (*Client, error) { return DialContext(context.Background(), path, DialConfig{}) }

// DialContext connects (waiting for a node that is starting: see
// DialConfig.ConnectTimeout), says hello and waits for the welcome.
func DialContext(ctx context.Context, path string, cfg DialConfig) (*Client, error) {
	nc, err := connect(ctx, path, cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{conn: nc, rbuf: make([]byte, 64<<10), oob: make([]byte, syscall.CmsgSpace(4*4)), regions: make(map[uint64][]byte), clock: cfg.Clock, fields: cfg.Fields}
	if c.clock == nil {
		c.clock = systemClock{}
	}
	c.stall.every = cfg.StallEvery
	if c.stall.every <= 0 {
		c.stall.every = DefaultStallEvery
	}
	c.stall.every = min(c.stall.every, MaxStallSteps)
	if err := c.sendMsg(MsgHello, Hello{Version: Version, Rank: cfg.Rank, Token: cfg.Token, Client: "go", Fields: cfg.Fields}); err != nil {
		c.Close()
		return nil, err
	}
	stop := c.watch(ctx)
	defer stop()
	m, err := c.readMsg()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("feed: handshake: %w", err)
	}
	switch m.t {
	case MsgWelcome:
		if err := json.Unmarshal(m.payload, &c.welcome); err != nil {
			c.Close()
			return nil, fmt.Errorf("feed: bad welcome: %w", err)
		}
	case MsgError:
		var e ErrorMsg
		json.Unmarshal(m.payload, &e)
		c.Close()
		return nil, &RemoteError{e}
	default:
		c.Close()
		return nil, fmt.Errorf("feed: handshake: got %s, want welcome", m.t)
	}
	c.state = State{Job: c.welcome.Job, Rank: c.welcome.Rank, Resume: c.welcome.Resume, Era: c.welcome.Era}
	if cm := c.welcome.Committed; cm != nil && cm.Committed {
		c.state.Token, c.state.CommittedEpoch, c.state.CommittedStep = cm.Token, cm.Epoch, cm.Step
	}
	return c, nil
}

// Stall is the trainer's data-stall accounting so far on this
// connection (what the client reports to the node): the steps whose
// next batch was asked for, with their waits and computes.
func (c *Client) Stall() Stall { return c.stall.stall() }

// Welcome is what the server said at connection.
func (c *Client) Welcome() Welcome { return c.welcome }

// State returns a snapshot of the client's position.
func (c *Client) State() State {
	c.smu.Lock()
	defer c.smu.Unlock()
	s := c.state
	s.Token = append([]byte(nil), s.Token...)
	return s
}

// watch makes blocking reads honour ctx: its deadline, or cancellation
// (which sets a past read deadline).
func (c *Client) watch(ctx context.Context) func() {
	if dl, ok := ctx.Deadline(); ok {
		c.conn.SetReadDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.conn.SetReadDeadline(time.Unix(1, 0)) })
	return func() {
		stop()
		c.conn.SetReadDeadline(time.Time{})
	}
}

// Next returns the next batch. It skips end-of-epoch messages (counted in
// State), returns io.EOF after the job's last batch, and a *RemoteError
// if the server reported a fatal error. In cluster mode it returns a
// *RollbackError (errors.Is ErrRolledBack) when the rank rolled back:
// restore the model of the commit it names, then call Next again; the
// next batches continue right after that commit.
func (c *Client) Next(ctx context.Context) (*Batch, error) {
	if c.ended != nil {
		return nil, c.ended
	}
	asked := c.clock.Now()
	c.stall.ask(asked)
	stop := c.watch(ctx)
	defer stop()
	for {
		m, err := c.nextMsg()
		if err != nil {
			return nil, ctxErr(ctx, err)
		}
		switch m.t {
		case MsgFields:
			f, err := ParseFields(m.payload, c.welcome.Fields)
			if err != nil {
				return nil, err
			}
			c.pendingFields = f
		case MsgBatch:
			b, err := c.batch(m.payload)
			if err == nil {
				c.stall.handed(asked, c.clock.Now())
			}
			return b, err
		case MsgEpochEnd:
			c.smu.Lock()
			c.state.EpochsEnded++
			c.smu.Unlock()
		case MsgEnd:
			c.ended = io.EOF
			if c.welcome.Version >= 4 {
				// the rank is over for the node only once it hears this;
				// a node that is gone already needs no answer
				_ = c.sendMsg(MsgEnded, struct{}{})
			}
			return nil, io.EOF
		case MsgRollback:
			var rb Rollback
			if err := json.Unmarshal(m.payload, &rb); err != nil {
				return nil, fmt.Errorf("feed: bad rollback message: %w", err)
			}
			c.smu.Lock()
			c.state.Rollbacks++
			if rb.Committed {
				c.state.Token, c.state.CommittedEpoch, c.state.CommittedStep = rb.Token, rb.Epoch, rb.Step
			}
			c.smu.Unlock()
			return nil, &RollbackError{rb}
		case MsgError:
			var e ErrorMsg
			if err := json.Unmarshal(m.payload, &e); err != nil {
				return nil, fmt.Errorf("feed: bad error message: %w", err)
			}
			if e.Fatal {
				c.ended = &RemoteError{e}
				return nil, c.ended
			}
			// a non-fatal error answers a Commit, which consumed it
		default:
			return nil, fmt.Errorf("feed: unexpected %s message", m.t)
		}
	}
}

func (c *Client) batch(payload []byte) (*Batch, error) {
	var d BatchDesc
	if err := json.Unmarshal(payload, &d); err != nil {
		return nil, fmt.Errorf("feed: bad batch descriptor: %w", err)
	}
	b := &Batch{ID: d.ID, Epoch: d.Epoch, Step: d.Step, Dims: d.Dims, Layout: d.Layout, DType: d.DType, Shape: d.Shape, Short: d.Short,
		Labels: d.Labels, Keys: d.Keys, Indices: d.Indices, Positions: d.Positions, Pads: d.Pads, Failed: d.Failed, Filled: d.Filled, Era: d.Era, EndOfStream: d.EndOfStream, c: c}
	if b.Shape == nil {
		b.Shape = d.Dims[:]
	}
	switch {
	case d.Filled == nil:
		b.Filled = make([]bool, len(d.Labels))
	case len(d.Filled) != len(d.Labels):
		return nil, fmt.Errorf("feed: batch %d: %d filled marks for %d samples", d.ID, len(d.Filled), len(d.Labels))
	}
	if b.DType == "" {
		b.DType = DTypeUint8
	}
	if f := c.pendingFields; f != nil {
		c.pendingFields = nil
		if f.ID != d.ID || f.Rows != len(d.Labels) {
			return nil, fmt.Errorf("feed: fields of batch %d (%d rows) before batch %d (%d rows)", f.ID, f.Rows, d.ID, len(d.Labels))
		}
		b.Fields = f
	} else if len(c.welcome.Fields) > 0 {
		return nil, fmt.Errorf("feed: batch %d came without its fields", d.ID)
	}
	if d.NBytes > 0 {
		mem := c.regions[d.Region]
		if mem == nil || d.Offset < 0 || d.NBytes < 0 || d.Offset+d.NBytes > int64(len(mem)) {
			return nil, fmt.Errorf("feed: batch %d lies outside region %d", d.ID, d.Region)
		}
		if want := (SampleSpec{DType: b.DType, Shape: b.Shape}).bytes(); want != d.NBytes {
			return nil, fmt.Errorf("feed: batch %d: %d bytes do not hold %s %v (%d bytes)", d.ID, d.NBytes, b.DType, b.Shape, want)
		}
		b.Images = mem[d.Offset : d.Offset+d.NBytes : d.Offset+d.NBytes]
	}
	if sp := c.welcome.Spec; sp != nil && sp.Kind == KindRaw {
		var err error
		if b.Data, err = rawRows(b.Images, b.Shape, d.Lengths); err != nil {
			return nil, fmt.Errorf("feed: batch %d: %w", d.ID, err)
		}
	}
	c.smu.Lock()
	c.state.Epoch, c.state.Step, c.state.Received = d.Epoch, d.Step, true
	if d.Era != 0 {
		c.state.Era = d.Era
	}
	c.smu.Unlock()
	return b, nil
}

// Commit says the trainer has saved its model through batch (epoch, step)
// and returns the resume token for it (keep it in the checkpoint). In
// cluster mode it blocks until the coordinator acknowledges the commit;
// if the rank rolled back first the error is a *RemoteError that
// errors.Is ErrRolledBack (Next then reports the rollback). The commit
// names the era of the last batch Next returned.
func (c *Client) Commit(ctx context.Context, epoch int, step int64) ([]byte, error) {
	if c.ended != nil && c.ended != io.EOF {
		return nil, c.ended
	}
	c.req++
	req := c.req
	c.smu.Lock()
	era := c.state.Era
	c.smu.Unlock()
	if err := c.sendMsg(MsgCommit, Commit{Req: req, Epoch: epoch, Step: step, Era: era}); err != nil {
		return nil, err
	}
	stop := c.watch(ctx)
	defer stop()
	var held []rawMsg
	defer func() { c.queue = append(c.queue, held...) }() // after what earlier reads queued: order kept
	for {
		m, err := c.readMsg()
		if err != nil {
			return nil, ctxErr(ctx, err)
		}
		switch m.t {
		case MsgCommitted:
			var r Committed
			if err := json.Unmarshal(m.payload, &r); err != nil || r.Req != req {
				return nil, fmt.Errorf("feed: bad commit answer")
			}
			c.smu.Lock()
			c.state.Token, c.state.CommittedEpoch, c.state.CommittedStep = r.Token, r.Epoch, r.Step
			c.smu.Unlock()
			return r.Token, nil
		case MsgError:
			var e ErrorMsg
			if err := json.Unmarshal(m.payload, &e); err != nil {
				return nil, fmt.Errorf("feed: bad error message: %w", err)
			}
			if e.Fatal || e.Req == req {
				return nil, &RemoteError{e}
			}
		}
		held = append(held, m)
	}
}

// Close says goodbye, closes the connection and unmaps the shared memory:
// every batch's Images is invalid afterwards. The server releases the
// batches still held.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.conn.SetWriteDeadline(time.Now().Add(time.Second))
		if r := c.stall.take(true); r != nil {
			// the steps not yet reported, on a release of nothing (which
			// any node takes)
			c.sendMsg(MsgRelease, Release{IDs: []uint64{}, Stall: r})
		}
		c.sendMsg(MsgBye, struct{}{})
		err = c.conn.Close()
		for id, mem := range c.regions {
			syscall.Munmap(mem)
			delete(c.regions, id)
		}
		for _, fd := range c.fds {
			syscall.Close(fd)
		}
		c.fds = nil
	})
	return err
}

// Abort drops the connection as a crashed trainer would: no goodbye, no
// releases. The node reclaims the batches still held (and, in a cluster,
// resets the rank if they were not committed). The shared memory stays
// mapped until Close, so batches already read stay readable; call Close
// afterwards to unmap it.
func (c *Client) Abort() error { return c.conn.Close() }

// Mapped reports whether b lies inside the shared memory this client
// mapped from the node: a batch's Images always do (zero copy).
func (c *Client) Mapped(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	for _, mem := range c.regions {
		base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
		if p >= base && p+uintptr(len(b)) <= base+uintptr(len(mem)) {
			return true
		}
	}
	return false
}

func (c *Client) sendMsg(t MsgType, v any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var err error
	if c.wbuf, err = AppendFrame(c.wbuf[:0], t, v); err != nil {
		return err
	}
	_, err = c.conn.Write(c.wbuf)
	return err
}

// nextMsg returns a queued message or reads one.
func (c *Client) nextMsg() (rawMsg, error) {
	if len(c.queue) > 0 {
		m := c.queue[0]
		c.queue = c.queue[1:]
		return m, nil
	}
	return c.readMsg()
}

// readMsg reads one frame, mapping Region frames' descriptors as it goes
// (they are never returned).
func (c *Client) readMsg() (rawMsg, error) {
	for {
		if err := c.fill(5); err != nil {
			return rawMsg{}, err
		}
		n := int(binary.LittleEndian.Uint32(c.rbuf[c.r0:]))
		limit := MaxServerFrame
		if c.fields {
			limit = MaxFieldsFrame
		}
		if n == 0 || n > limit {
			return rawMsg{}, fmt.Errorf("feed: bad frame length %d", n)
		}
		if err := c.fill(4 + n); err != nil {
			return rawMsg{}, err
		}
		t := MsgType(c.rbuf[c.r0+4])
		payload := append([]byte(nil), c.rbuf[c.r0+5:c.r0+4+n]...)
		c.r0 += 4 + n
		if t != MsgRegion {
			return rawMsg{t: t, payload: payload}, nil
		}
		if err := c.mapRegion(payload); err != nil {
			return rawMsg{}, err
		}
	}
}

func (c *Client) mapRegion(payload []byte) error {
	var r Region
	if err := json.Unmarshal(payload, &r); err != nil {
		return fmt.Errorf("feed: bad region message: %w", err)
	}
	if len(c.fds) == 0 {
		return errors.New("feed: region message without a file descriptor")
	}
	fd := c.fds[0]
	c.fds = c.fds[1:]
	defer syscall.Close(fd) // the mapping keeps the memory
	if r.Size <= 0 || r.Size > 1<<40 {
		return fmt.Errorf("feed: region of %d bytes", r.Size)
	}
	mem, err := syscall.Mmap(fd, 0, int(r.Size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("feed: map region %d: %w", r.Region, err)
	}
	if old := c.regions[r.Region]; old != nil {
		syscall.Munmap(old)
	}
	c.regions[r.Region] = mem
	return nil
}

// fill reads until n bytes are buffered, collecting passed descriptors.
func (c *Client) fill(n int) error {
	for c.r1-c.r0 < n {
		if c.r0 > 0 {
			c.r1 = copy(c.rbuf, c.rbuf[c.r0:c.r1])
			c.r0 = 0
		}
		if n > len(c.rbuf) {
			nb := make([]byte, max(n, 2*len(c.rbuf)))
			copy(nb, c.rbuf[:c.r1])
			c.rbuf = nb
		}
		k, oobn, _, _, err := c.conn.ReadMsgUnix(c.rbuf[c.r1:], c.oob)
		if oobn > 0 {
			if msgs, perr := syscall.ParseSocketControlMessage(c.oob[:oobn]); perr == nil {
				for _, m := range msgs {
					if fds, err := syscall.ParseUnixRights(&m); err == nil {
						c.fds = append(c.fds, fds...)
					}
				}
			}
		}
		c.r1 += k
		if err != nil {
			if err == io.EOF && c.r1-c.r0 > 0 {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		if k == 0 && oobn == 0 {
			return io.EOF
		}
	}
	return nil
}

// ctxErr reports a read that failed because of ctx (its deadline set on
// the socket, or cancellation) as ctx's error. Buffered bytes of a
// partly read frame are kept, so the next call continues it.
func ctxErr(ctx context.Context, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if _, ok := ctx.Deadline(); ok {
			<-ctx.Done()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return err
}
