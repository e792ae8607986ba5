package delivery

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/actorstest"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/feed"
	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/storage"
)

type testEnv struct {
	cfg  actors.Config
	ds   *dataset.Dataset
	deps actors.Deps
}

func newEnv(t testing.TB, n int) testEnv {
	t.Helper()
	root := t.TempDir()
	ds := &dataset.Dataset{Classes: []string{"a", "b", "c"}}
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("obj-%04d", i)
		if err := os.WriteFile(filepath.Join(root, key), []byte(key), 0o644); err != nil {
			t.Fatal(err)
		}
		ds.Samples = append(ds.Samples, dataset.Sample{Key: key, Label: int32(i % 3)})
	}
	st, err := storage.NewDirStore(root)
	if err != nil {
		t.Fatal(err)
	}
	cfg := actors.Config{BatchSize: 8, Slots: 3, FetchConcurrency: 2, Decoders: 2, Epochs: 2, Seed: 7,
		Sample: actors.Shape{Height: 16, Width: 16}}
	return testEnv{cfg: cfg, ds: ds, deps: actors.Deps{Store: st, NewDecoder: func() (actors.SampleDecoder, error) { return actorstest.PatternDecoder{}, nil },
		SampleSeed: actorstest.SampleSeed, Order: testOrder}}
}

// sampleSums is crc32 per sample, keyed by (epoch, step, index-in-batch).
type sumKey struct {
	epoch int
	step  int64
	i     int
}

// reference runs the same configuration in process (heap memory) and
// returns every sample's checksum.
func (e testEnv) reference(t testing.TB, world, rank int) map[sumKey]uint32 {
	t.Helper()
	d := e.deps
	d.Allocator = gpu.HeapAllocator{}
	f, err := actors.NewFeeder(e.ds, e.cfg, rank, world, e.deps.Order)
	if err != nil {
		t.Fatal(err)
	}
	p, err := actors.NewPipeline(e.cfg, rank, f, d)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sums := map[sumKey]uint32{}
	for {
		b, err := p.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return sums
		}
		if err != nil {
			t.Fatal(err)
		}
		addSums(sums, b.Epoch, b.Step, b.Images, b.Len())
		b.Release()
	}
}

func addSums(m map[sumKey]uint32, epoch int, step int64, img []byte, n int) {
	if n == 0 {
		return
	}
	sb := len(img) / n
	for i := 0; i < n; i++ {
		m[sumKey{epoch, step, i}] = crc32.ChecksumIEEE(img[i*sb : (i+1)*sb])
	}
}

func (e testEnv) serve(t testing.TB, ranks int) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "lsf") // short: socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s, err := New(Config{Dir: dir, Ranks: ranks, Job: "test"}, Standalone(e.cfg, e.ds, ranks, e.deps))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a failure backstop only
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return s
}

func dial(t testing.TB, path string, tok []byte) *feed.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a failure backstop only
	defer cancel()
	c, err := feed.DialContext(ctx, path, feed.DialConfig{Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func next(t testing.TB, c *feed.Client) *feed.Batch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a failure backstop only
	defer cancel()
	b, err := c.Next(ctx)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	return b
}

// eachBatch reads c to the end of its stream, handing each batch to f
// (nil: none) before releasing it, and returns the batches read.
func eachBatch(t testing.TB, c *feed.Client, f func(*feed.Batch)) (batches int) {
	t.Helper()
	for {
		b, err := c.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return batches
		}
		if err != nil {
			t.Fatal(err)
		}
		if f != nil {
			f(b)
		}
		b.Release()
		batches++
	}
}

func TestZeroCopyAndContent(t *testing.T) {
	e := newEnv(t, 45)
	const world = 2
	s := e.serve(t, world)
	for r := 0; r < world; r++ {
		want := e.reference(t, world, r)
		c := dial(t, s.SocketPath(r), nil)
		got := map[sumKey]uint32{}
		eachBatch(t, c, func(b *feed.Batch) {
			// zero copy: the pixels lie inside a region mapped from the memfd
			if !c.Mapped(b.Images) {
				t.Fatalf("rank %d batch %d/%d: images at %p not inside the shared mapping", r, b.Epoch, b.Step, unsafe.SliceData(b.Images))
			}
			addSums(got, b.Epoch, b.Step, b.Images, len(b.Labels))
		})
		if len(got) != len(want) {
			t.Fatalf("rank %d: %d samples, want %d", r, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("rank %d sample %+v: checksum %08x, want %08x", r, k, got[k], v)
			}
		}
		if st := c.State(); st.EpochsEnded != e.cfg.Epochs {
			t.Errorf("rank %d: %d epoch ends, want %d", r, st.EpochsEnded, e.cfg.Epochs)
		}
		c.Close()
	}
}

func TestResumeFromCommit(t *testing.T) {
	e := newEnv(t, 50) // 7 steps per epoch (last short)
	want := e.reference(t, 1, 0)
	s := e.serve(t, 1)
	path := s.SocketPath(0)

	c := dial(t, path, nil)
	var tok2 []byte
	for i := 0; i < 5; i++ {
		b := next(t, c)
		if b.Step != int64(i) {
			t.Fatalf("step %d, want %d", b.Step, i)
		}
		if i == 2 {
			var err error
			if tok2, err = c.Commit(context.Background(), b.Epoch, b.Step); err != nil {
				t.Fatal(err)
			}
		}
		if i < 3 {
			b.Release()
		} // 3 and 4 held when the trainer "crashes"
	}
	if _, err := c.Commit(context.Background(), 0, 6); err == nil {
		t.Fatal("commit of an undelivered step succeeded")
	}
	c.Abort() // crash: no bye, no releases

	// Without a token: resumes after the server's last commit (step 2).
	check := func(c *feed.Client, epoch int, step int64) {
		t.Helper()
		b := next(t, c)
		if b.Epoch != epoch || b.Step != step {
			t.Fatalf("resumed at %d/%d, want %d/%d", b.Epoch, b.Step, epoch, step)
		}
		got := map[sumKey]uint32{}
		addSums(got, b.Epoch, b.Step, b.Images, len(b.Labels))
		for k, v := range got {
			if want[k] != v {
				t.Fatalf("resumed sample %+v differs from the reference", k)
			}
		}
		for i, p := range b.Positions {
			if p != step*int64(e.cfg.BatchSize)+int64(i) {
				t.Fatalf("position %d = %d", i, p)
			}
		}
		b.Release()
	}
	c = dial(t, path, nil)
	if r := c.Welcome().Resume; r != (feed.Cursor{Epoch: 0, Step: 3}) {
		t.Fatalf("welcome resume %+v", r)
	}
	check(c, 0, 3)
	for i := 4; i < 7; i++ {
		next(t, c).Release()
	}
	b := next(t, c) // epoch 1 step 0
	if _, err := c.Commit(context.Background(), b.Epoch, b.Step); err != nil {
		t.Fatal(err)
	}
	c.Close()

	// With the older token: back to epoch 0 step 3 (a checkpoint restores its own cursor).
	c = dial(t, path, tok2)
	check(c, 0, 3)
	c.Close()
	// A reconnect at exactly where the stream is continues it without reopening.
	c = dial(t, path, nil)
	if r := c.Welcome().Resume; r != (feed.Cursor{Epoch: 0, Step: 3}) {
		t.Fatalf("resume %+v", r)
	}
	c.Close()
	// A bad token is refused.
	if _, err := feed.DialContext(context.Background(), path, feed.DialConfig{Token: []byte("garbage-token-garbage-token-xx")}); !isCode(err, feed.CodeBadToken) {
		t.Fatalf("bad token: %v", err)
	}
}

func isCode(err error, code string) bool {
	var re *feed.RemoteError
	return errors.As(err, &re) && re.Code == code
}

func TestOneTrainerPerRank(t *testing.T) {
	e := newEnv(t, 20)
	s := e.serve(t, 1)
	c := dial(t, s.SocketPath(0), nil)
	defer c.Close()
	if _, err := feed.DialContext(context.Background(), s.SocketPath(0), feed.DialConfig{}); !isCode(err, feed.CodeBusy) {
		t.Fatalf("second trainer: %v", err)
	}
	fi, err := os.Stat(s.SocketPath(0))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v %v", fi.Mode(), err)
	}
}

func frame(t feed.MsgType, payload string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(payload)+1))
	return append(append(b, byte(t)), payload...)
}

func TestHostileMessages(t *testing.T) {
	e := newEnv(t, 40)
	s := e.serve(t, 1)
	hello := frame(feed.MsgHello, `{"version":1}`)
	cases := []struct {
		name string
		send []byte
		code string
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\n\r\n"), feed.CodeProtocol},
		{"huge length", binary.LittleEndian.AppendUint32(nil, 1<<31), feed.CodeProtocol},
		{"empty frame", binary.LittleEndian.AppendUint32(nil, 0), feed.CodeProtocol},
		{"not hello first", frame(feed.MsgCommit, `{"epoch":0,"step":0}`), feed.CodeProtocol},
		{"bad json", frame(feed.MsgHello, `{"version":`), feed.CodeProtocol},
		{"wrong version", frame(feed.MsgHello, `{"version":99}`), feed.CodeVersion},
		{"wrong rank", frame(feed.MsgHello, `{"version":1,"rank":5}`), feed.CodeProtocol},
		{"unknown type", append(hello, frame(200, `{}`)...), feed.CodeProtocol},
		{"release not held", append(hello, frame(feed.MsgRelease, `{"ids":[12345]}`)...), feed.CodeProtocol},
		{"second hello", append(hello, hello...), feed.CodeProtocol},
		{"server-only type", append(hello, frame(feed.MsgBatch, `{}`)...), feed.CodeProtocol},
		{"negative commit", append(hello, frame(feed.MsgCommit, `{"epoch":-1,"step":0}`)...), feed.CodeProtocol},
		{"truncated", append(hello, 9, 0, 0, 0, 3, '{'), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := net.Dial("unix", s.SocketPath(0))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.Write(tc.send)
			if tc.code == "" {
				nc.(*net.UnixConn).CloseWrite()
			}
			nc.SetReadDeadline(time.Now().Add(time.Minute)) // a failure backstop: the server closes first
			var codes []string
			for {
				typ, payload, _, err := feed.ReadFrame(nc, feed.MaxServerFrame, nil)
				if err != nil {
					break // closed by the server
				}
				if typ == feed.MsgError {
					m, _ := parseErrorForTest(payload)
					codes = append(codes, m.Code)
				}
			}
			if tc.code != "" && (len(codes) == 0 || codes[len(codes)-1] != tc.code) {
				t.Fatalf("errors %v, want %s then close", codes, tc.code)
			}
		})
	}
	// The node is fine: a proper trainer still gets every batch.
	c := dial(t, s.SocketPath(0), nil)
	defer c.Close()
	n := 0
	eachBatch(t, c, func(b *feed.Batch) {
		n += b.Len()
	})
	if n != 80 {
		t.Fatalf("%d samples after hostile clients, want 80", n)
	}
}

// TestMemoryFlat drives slow, fast, stalled and vanishing consumers and
// checks the rank never holds more than its one shared region (plus the
// one it is replacing on a resume) and the heap does not grow.
func TestMemoryFlat(t *testing.T) {
	e := newEnv(t, 200)
	e.cfg.Epochs = 50
	s := e.serve(t, 1)
	path := s.SocketPath(0)
	var ms runtime.MemStats
	heap := func() uint64 { runtime.GC(); runtime.ReadMemStats(&ms); return ms.HeapInuse }
	var base uint64
	for round := 0; round < 12; round++ {
		c := dial(t, path, nil)
		switch round % 4 {
		case 0: // fast: release at once
			for i := 0; i < 40; i++ {
				next(t, c).Release()
			}
		case 1: // stall: hold every slot, wait, then drop the connection
			for i := 0; i < e.cfg.Slots; i++ {
				next(t, c)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			if _, err := c.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("4th batch with 3 slots held: %v", err)
			}
			cancel()
		case 2: // slow, with commits
			for i := 0; i < 10; i++ {
				b := next(t, c)
				time.Sleep(2 * time.Millisecond)
				if _, err := c.Commit(context.Background(), b.Epoch, b.Step); err != nil {
					t.Fatal(err)
				}
				b.Release()
			}
		case 3: // read some, hold some, vanish
			next(t, c)
			next(t, c).Release()
		}
		c.Abort()
		sessionEnded(t, s, 0) // the server let go of this trainer's batches
		if n := s.Allocator(0).Regions(); n > 2 {
			t.Fatalf("round %d: %d shared regions live", round, n)
		}
		if round == 3 {
			base = heap()
		}
		if round > 3 {
			if h := heap(); h > base+8<<20 {
				t.Fatalf("round %d: heap in use %d, was %d", round, h, base)
			}
		}
	}
}

// sessionEnded waits until the session rank's server holds now (the
// trainer that just hung up, or none) has ended and let go of the rank;
// the minute is a failure backstop only.
func sessionEnded(t *testing.T, s *Server, rank int) {
	t.Helper()
	r := s.ranks[rank]
	r.mu.Lock()
	sess := r.mu.sess
	r.mu.Unlock()
	if sess == nil {
		return
	}
	select {
	case <-sess.done:
	case <-time.After(time.Minute):
		t.Fatalf("rank %d's session did not end within a minute of its trainer hanging up", rank)
	}
}

func parseErrorForTest(p []byte) (feed.ErrorMsg, error) {
	var m feed.ErrorMsg
	err := json.Unmarshal(p, &m)
	return m, err
}

func testOrder(seed uint64, epoch int, n int64) actors.Order {
	return actorstest.Shuffle(seed, epoch, n)
}
