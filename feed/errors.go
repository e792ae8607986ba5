package feed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrRolledBack is matched (errors.Is) by a *RollbackError, by a
// RemoteError with code rolled_back, and by a cluster stream's answer to
// a commit whose era ended: the rank rolled back to its last
// acknowledged commit.
var ErrRolledBack = errors.New("feed: rolled back to the last acknowledged commit")

// ErrStaleToken is wrapped by Attach errors for a token the running
// cluster cannot resume from.
var ErrStaleToken = errors.New("feed: resume token is not the rank's last acknowledged commit")

// RollbackError carries a rollback: restore the model of the last
// acknowledged commit it names, then call Next again.
type RollbackError struct{ Rollback }

func (e *RollbackError) Error() string {
	if !e.Committed {
		return "feed: rolled back: the rank's session ended before any acknowledged commit; restore the initial model and read on"
	}
	return fmt.Sprintf("feed: rolled back: restore the checkpoint of epoch %d step %d (token %s) and read on", e.Epoch, e.Step, e.Token)
}

// Is matches ErrRolledBack.
func (e *RollbackError) Is(target error) bool { return target == ErrRolledBack }

// ErrBadToken is wrapped by Resume errors for tokens that are not this
// job's and rank's.
var ErrBadToken = errors.New("feed: bad resume token")

// DefaultDir is $LONGSHORE_FEED_DIR, else $XDG_RUNTIME_DIR/longshore, else
// /tmp/longshore-<uid>: the directory trainers look in by default.
func DefaultDir() string {
	if d := os.Getenv("LONGSHORE_FEED_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "longshore")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("longshore-%d", os.Getuid()))
}

// SocketName is rank's socket file name in a run directory.
func SocketName(rank int) string { return fmt.Sprintf("rank-%d.sock", rank) }
