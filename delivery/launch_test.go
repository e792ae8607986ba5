package delivery

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/longshore/longshore/feed"
	"github.com/longshore/longshore/gpu"
)

// endedOpen serves nothing: enough for tests of the socket itself.
func endedOpen(e testEnv) OpenFunc {
	return func(rank int, from feed.Cursor, alloc gpu.Allocator) (BatchSource, error) {
		return endedStream{cfg: e.cfg}, nil
	}
}

// TestSocketAcceptsOnceItExists starts a server 100 times while a trainer
// watches for its socket path and connects once, the moment it appears,
// with no retry: the path must never exist before it accepts (a socket
// created by bind(2) exists before listen(2), and a connect in between
// is refused).
func TestSocketAcceptsOnceItExists(t *testing.T) {
	e := newEnv(t, 8)
	dir, err := os.MkdirTemp("", "lsf")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, feed.SocketName(0))
	for i := 0; i < 100; i++ {
		stop := make(chan struct{})
		res := make(chan error, 1)
		go func() {
			for {
				select {
				case <-stop:
					res <- errors.New("gave up")
					return
				default:
				}
				if _, err := os.Lstat(path); err != nil {
					continue // spin: connect the moment the path appears
				}
				c, err := net.Dial("unix", path)
				if err == nil {
					c.Close()
				}
				res <- err
				return
			}
		}()
		s, err := New(Config{Dir: dir, Ranks: 1, Job: "test"}, endedOpen(e))
		if err != nil {
			close(stop)
			t.Fatal(err)
		}
		var cerr error
		select {
		case cerr = <-res:
		case <-time.After(time.Minute): // a failure backstop only
			cerr = errors.New("no connect within a minute")
		}
		close(stop)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a failure backstop only
		s.Shutdown(ctx)
		cancel()
		if cerr != nil {
			t.Fatalf("launch %d: a connect as soon as %s appeared: %v", i, path, cerr)
		}
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("launch %d: socket left after shutdown: %v", i, err)
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, en := range ents {
		t.Errorf("left in the socket directory: %s", en.Name())
	}
}

// TestStaleSocketReplaced: a socket file nobody listens on (a node that
// was killed) is replaced; a file that is not a socket is refused.
func TestStaleSocketReplaced(t *testing.T) {
	e := newEnv(t, 8)
	dir, err := os.MkdirTemp("", "lsf")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, feed.SocketName(0))
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close() // the file stays, refusing: a dead node's socket
	s, err := New(Config{Dir: dir, Ranks: 1, Job: "test"}, endedOpen(e))
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	c := dial(t, path, nil)
	c.Close()
	s.Shutdown(context.Background())

	if err := os.WriteFile(path, []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Dir: dir, Ranks: 1, Job: "test"}, endedOpen(e)); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("a regular file at the socket path: %v", err)
	}
}

// TestClientWaitsForNode: a trainer dialling before its node exists (no
// directory, no socket), or while a killed node's socket refuses, waits
// for the node, then gets its batches.
func TestClientWaitsForNode(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(map[bool]string{false: "absent", true: "stale"}[stale], func(t *testing.T) {
			e := newEnv(t, 20)
			dir, err := os.MkdirTemp("", "lsf")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			path := filepath.Join(dir, "run", feed.SocketName(0))
			want := syscall.ENOENT
			if stale {
				want = syscall.ECONNREFUSED
				os.Mkdir(filepath.Dir(path), 0o700)
				l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
				if err != nil {
					t.Fatal(err)
				}
				l.SetUnlinkOnClose(false)
				l.Close()
			}
			type result struct {
				c   *feed.Client
				err error
			}
			res := make(chan result, 1)
			waiting := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a failure backstop only
				defer cancel()
				c, err := feed.DialContext(ctx, path, feed.DialConfig{OnWait: func(err error) {
					select {
					case waiting <- err:
					default:
					}
				}})
				res <- result{c, err}
			}()
			select { // the trainer tried and found no node: now start it
			case err := <-waiting:
				if !errors.Is(err, want) {
					t.Fatalf("waiting on %v, want %v", err, want)
				}
			case r := <-res:
				t.Fatalf("a trainer started before its node: %v", r.err)
			}
			s, err := New(Config{Dir: filepath.Dir(path), Ranks: 1, Job: "test"}, Standalone(e.cfg, e.ds, 1, e.deps))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Shutdown(context.Background())
			r := <-res
			if r.err != nil {
				t.Fatalf("a trainer started before its node: %v", r.err)
			}
			defer r.c.Close()
			b := next(t, r.c)
			if b.Epoch != 0 || b.Step != 0 || b.Len() != e.cfg.BatchSize {
				t.Fatalf("first batch epoch %d step %d n %d", b.Epoch, b.Step, b.Len())
			}
			b.Release()
		})
	}
}

// TestClientNoNode: with no node, the dial gives up after its connect
// timeout with an error naming the path; with a negative timeout it
// tries once.
func TestClientNoNode(t *testing.T) {
	path := filepath.Join(t.TempDir(), feed.SocketName(3))
	for _, to := range []time.Duration{-1, 50 * time.Millisecond} {
		waits := 0
		_, err := feed.DialContext(context.Background(), path, feed.DialConfig{ConnectTimeout: to, OnWait: func(error) { waits++ }})
		var ce *feed.ConnectError
		if !errors.As(err, &ce) || ce.Path != path || !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), path) {
			t.Fatalf("timeout %v: %v, want a ConnectError naming %s", to, err, path)
		}
		if to < 0 && (ce.Attempts != 1 || waits != 0) {
			t.Fatalf("one attempt wanted: %d attempts, %d waits", ce.Attempts, waits)
		}
		if to > 0 && waits != ce.Attempts {
			t.Fatalf("timeout %v: %d attempts, %d waits: every failed attempt is retried until the timeout", to, ce.Attempts, waits)
		}
	}
	// the context's end stops the wait too, saying so
	ctx, cancel := context.WithCancel(context.Background())
	_, err := feed.DialContext(ctx, path, feed.DialConfig{OnWait: func(error) { cancel() }})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), path) {
		t.Fatalf("canceled: %v", err)
	}
}
