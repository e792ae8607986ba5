package delivery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/feed"
)

// The uid and gid another user's trainer runs as in these tests
// (nobody/nogroup on Debian).
const otherUID, otherGID = 65534, 65534

const peerSocketEnv = "LONGSHORE_FEED_PEER_SOCKET"

// TestPeerHelper is the other user's trainer, run by TestOtherUserRefused
// as uid 65534 (setpriv): it dials the socket and prints what happened.
func TestPeerHelper(t *testing.T) {
	path := os.Getenv(peerSocketEnv)
	if path == "" {
		t.Skip("run by TestOtherUserRefused")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := feed.DialContext(ctx, path, feed.DialConfig{})
	var re *feed.RemoteError
	switch {
	case err == nil:
		fmt.Printf("peer(uid %d): welcome rank=%d\n", os.Getuid(), c.Welcome().Rank)
		c.Close()
	case errors.As(err, &re):
		fmt.Printf("peer(uid %d): error code=%s message=%s\n", os.Getuid(), re.Code, re.Message)
	default:
		fmt.Printf("peer(uid %d): dial failed: %v\n", os.Getuid(), err)
	}
}

// asOtherUser runs this test binary's TestPeerHelper as uid 65534
// against the socket at path and returns what it printed. It needs root
// (to switch uid) and setpriv (util-linux): without them the test fails
// rather than skip, since it would then not show what it claims.
func asOtherUser(t *testing.T, path string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test switches to uid %d with setpriv to show another user refused, which needs root; it runs as uid %d: run it as root (as CI and the dev machines do)", otherUID, os.Geteuid())
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) is needed to run a peer as another uid: %v", err)
	}
	// A copy of the test binary the other user may execute.
	dir, err := os.MkdirTemp("", "lsfbin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "feed.test")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, fmt.Sprintf("--reuid=%d", otherUID), fmt.Sprintf("--regid=%d", otherGID), "--clear-groups",
		bin, "-test.run=^TestPeerHelper$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), peerSocketEnv+"="+path, "HOME="+dir, "GOCOVERDIR=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("peer as uid %d: %v\n%s", otherUID, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "peer(") {
			return line
		}
	}
	t.Fatalf("the peer said nothing:\n%s", out)
	return ""
}

func (e testEnv) servePolicy(t *testing.T, p PeerPolicy) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "lsf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s, err := New(Config{Dir: dir, Ranks: 1, Job: "test", Peers: p}, Standalone(e.cfg, e.ds, 1, e.deps))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// TestOtherUserRefused: a trainer of another uid (65534) opens the feed
// socket. By default the socket is 0600 in a 0700 directory and the
// kernel refuses the connect. With sockets opened to others for a group
// it is not in, it connects, is told by SO_PEERCRED who it is and why
// it is refused (error{code:"forbidden"}), and the rank stays free for
// the real trainer. With its uid allowed it is welcomed.
func TestOtherUserRefused(t *testing.T) {
	e := newEnv(t, 20)

	s := e.servePolicy(t, PeerPolicy{})
	if m := mode(t, filepath.Dir(s.SocketPath(0))); m != 0o700 {
		t.Errorf("run directory mode %04o, want 0700", m)
	}
	if m := mode(t, s.SocketPath(0)); m != 0o600 {
		t.Errorf("socket mode %04o, want 0600", m)
	}
	if got := asOtherUser(t, s.SocketPath(0)); !strings.Contains(got, "dial failed") || !strings.Contains(got, "permission denied") {
		t.Errorf("default policy: the other user got %q, want the connect refused", got)
	}

	s = e.servePolicy(t, PeerPolicy{GIDs: []int{4242}})
	if m := mode(t, filepath.Dir(s.SocketPath(0))); m != 0o711 {
		t.Errorf("open policy: run directory mode %04o, want 0711", m)
	}
	got := asOtherUser(t, s.SocketPath(0))
	if !strings.Contains(got, "code="+feed.CodeForbidden) || !strings.Contains(got, fmt.Sprintf("uid %d gid %d", otherUID, otherGID)) ||
		!strings.Contains(got, "--feed-allow-uid") {
		t.Errorf("gid 4242 allowed: the other user got %q, want error forbidden naming its uid and the flag", got)
	}
	// The refused peer never held the rank: the node's own user gets it.
	c := dial(t, s.SocketPath(0), nil)
	next(t, c).Release()
	c.Close()

	s = e.servePolicy(t, PeerPolicy{UIDs: []int{otherUID}})
	if got := asOtherUser(t, s.SocketPath(0)); !strings.Contains(got, "welcome rank=0") {
		t.Errorf("uid %d allowed: the other user got %q, want a welcome", otherUID, got)
	}
}

func TestPeerPolicy(t *testing.T) {
	self := os.Geteuid()
	for _, c := range []struct {
		p    PeerPolicy
		cred PeerCred
		ok   bool
	}{
		{PeerPolicy{}, PeerCred{UID: uint32(self), GID: 1}, true},
		{PeerPolicy{}, PeerCred{UID: uint32(self) + 1, GID: 1}, false},
		{PeerPolicy{UIDs: []int{self + 1}}, PeerCred{UID: uint32(self) + 1}, true},
		{PeerPolicy{GIDs: []int{77}}, PeerCred{UID: uint32(self) + 1, GID: 77}, true},
		{PeerPolicy{GIDs: []int{77}}, PeerCred{UID: uint32(self) + 1, GID: 78}, false},
	} {
		err := c.p.Check(c.cred, self)
		if (err == nil) != c.ok {
			t.Errorf("%+v admits %+v: %v, want %v", c.p, c.cred, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrForbidden) {
			t.Errorf("not ErrForbidden: %v", err)
		}
	}
	if (PeerPolicy{UIDs: []int{self}}).Open() || !(PeerPolicy{UIDs: []int{self + 1}}).Open() || !(PeerPolicy{GIDs: []int{0}}).Open() {
		t.Error("Open is wrong")
	}
	if err := (PeerPolicy{UIDs: []int{-1}}).Validate(); err == nil {
		t.Error("uid -1 accepted")
	}
}

// TestRunDirectory: an existing run directory of another mode is made
// private if it holds only feed sockets, and refused otherwise.
func TestRunDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := prepareDir(dir, 0o700); err != nil || mode(t, dir) != 0o700 {
		t.Errorf("an empty 0755 directory: %v, mode %04o", err, mode(t, dir))
	}
	os.Chmod(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o644)
	if err := prepareDir(dir, 0o700); err == nil || mode(t, dir) != 0o755 {
		t.Errorf("a shared directory: %v, mode %04o; want it refused and left alone", err, mode(t, dir))
	}
	theirs := t.TempDir()
	if err := os.Chown(theirs, otherUID, otherGID); err != nil {
		t.Fatalf("chown a directory to uid %d (needs root, as the tests here run): %v", otherUID, err)
	}
	if err := prepareDir(theirs, 0o700); err == nil || !strings.Contains(err.Error(), "belongs to uid") {
		t.Errorf("another user's directory: %v, want it refused", err)
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o600)
	if err := prepareDir(f, 0o700); err == nil {
		t.Error("a file accepted as run directory")
	}
}
