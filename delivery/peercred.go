package delivery

// Who may open a feed socket. The socket's file mode is the first gate
// (the kernel refuses connect(2) without write permission on it); the
// second is the connecting process's credentials, which the kernel
// reports for a Unix socket (SO_PEERCRED) and which a process cannot
// forge: a refused peer gets error{code:"forbidden"} saying why, and the
// connection is closed before it can take the rank.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/longshore/longshore/feed"
)

// PeerPolicy says which local processes may connect, by the uid and
// primary gid the kernel reports for them. The zero value admits the
// node's own uid only.
type PeerPolicy struct {
	// UIDs are further users admitted (--feed-allow-uid).
	UIDs []int
	// GIDs admit a process whose primary group is one of them
	// (--feed-allow-gid). Supplementary groups are not consulted.
	GIDs []int
}

// Open reports whether the policy admits anyone but the node's own uid:
// then the socket directory is made 0711 and the sockets 0666, and the
// credential check alone decides (the file modes cannot name a list).
func (p PeerPolicy) Open() bool {
	self := os.Geteuid()
	for _, u := range p.UIDs {
		if u != self {
			return true
		}
	}
	return len(p.GIDs) > 0
}

// Validate reports every problem at once.
func (p PeerPolicy) Validate() error {
	var errs []error
	for _, u := range p.UIDs {
		if u < 0 {
			errs = append(errs, fmt.Errorf("feed: allowed uid %d: need 0 or more", u))
		}
	}
	for _, g := range p.GIDs {
		if g < 0 {
			errs = append(errs, fmt.Errorf("feed: allowed gid %d: need 0 or more", g))
		}
	}
	return errors.Join(errs...)
}

// PeerCred is what the kernel says about a connected process.
type PeerCred struct {
	PID      int32
	UID, GID uint32
}

// ErrForbidden is wrapped by Check's refusals.
var ErrForbidden = errors.New("feed: peer not allowed")

// Check returns nil if c may connect to a node running as uid self, else
// an error saying who it is and what would admit it.
func (p PeerPolicy) Check(c PeerCred, self int) error {
	if int(c.UID) == self || slices.Contains(p.UIDs, int(c.UID)) || slices.Contains(p.GIDs, int(c.GID)) {
		return nil
	}
	return fmt.Errorf("%w: process %d runs as uid %d gid %d; this node (uid %d) serves its own uid only%s: run the trainer as uid %d, or start the node with --feed-allow-uid %d or --feed-allow-gid %d",
		ErrForbidden, c.PID, c.UID, c.GID, self, p.listed(), self, c.UID, c.GID)
}

func (p PeerPolicy) listed() string {
	if len(p.UIDs) == 0 && len(p.GIDs) == 0 {
		return ""
	}
	return fmt.Sprintf(" and uids %v, gids %v", p.UIDs, p.GIDs)
}

// refuse tells a refused peer why and closes. The trainer sends its
// hello before it reads, so the error goes out first and its hello is
// read (and dropped) before the close: closing at once would fail the
// trainer's write (EPIPE) before it could read the reason.
func refuse(c *net.UnixConn, code, msg string) {
	c.SetWriteDeadline(time.Now().Add(time.Second))
	if f, err := feed.AppendFrame(nil, feed.MsgError, feed.ErrorMsg{Code: code, Message: msg, Fatal: true}); err == nil {
		c.Write(f)
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	io.Copy(io.Discard, io.LimitReader(c, feed.MaxClientFrame+8)) // until the trainer closes, at most one frame
	c.Close()
}

// prepareDir makes dir the run directory: created with mode (0700, or
// 0711 for an open policy) if missing; refused if it is a symlink, not a
// directory, or belongs to another user (who could then swap the
// sockets). An
// existing directory with another mode gets mode if it holds nothing but
// feed sockets (an earlier run's); any other is refused rather than
// changed (--feed-dir /tmp must not make /tmp private).
func prepareDir(dir string, mode os.FileMode) error {
	// The last component is examined without following a symlink: a link
	// (in /tmp, anyone's) can be repointed after the checks, at
	// directories and sockets trainers would then trust.
	if err := refuseSymlink(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return fmt.Errorf("feed: run directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("feed: run directory: %w", err)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return refuseSymlink(dir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("feed: run directory %s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("feed: run directory %s belongs to uid %d, not this node's %d: another user could replace the sockets; remove it or choose another --feed-dir", dir, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm() != mode {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("feed: run directory: %w", err)
		}
		for _, e := range ents {
			if ok, _ := filepath.Match("rank-*.sock", e.Name()); !ok {
				return fmt.Errorf("feed: run directory %s has mode %04o, want %04o, and holds other files than feed sockets (%s): chmod it, or choose another --feed-dir", dir, fi.Mode().Perm(), mode, e.Name())
			}
		}
		if err := os.Chmod(dir, mode); err != nil {
			return fmt.Errorf("feed: run directory: %w", err)
		}
	}
	return nil
}

// refuseSymlink returns an error if dir is a symlink (dangling or not).
func refuseSymlink(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		return nil // missing (MkdirAll creates it) or not a link
	}
	target, _ := os.Readlink(dir)
	return fmt.Errorf("feed: run directory %s is a symlink (to %s): whoever owns the link could repoint it at other sockets; give --feed-dir (or $LONGSHORE_FEED_DIR) a real directory, e.g. the target itself", dir, target)
}
