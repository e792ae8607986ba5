package feedserver

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/actors/feed"
	"github.com/longshore/longshore/gpu"
)

// endedOpen serves nothing: enough for tests of the socket itself.
func endedOpen(e testEnv) OpenFunc {
	return func(rank int, from feed.Cursor, alloc gpu.Allocator) (Stream, error) {
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
