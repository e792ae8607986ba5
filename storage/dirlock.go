package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Lock files serialize writers of one key across processes. The lock for
// <dir>/<name> is <dir>/.longshore-lock-<fnv64(name)>, created with O_EXCL
// (exactly one creator wins on a local filesystem) and holding
// "host pid nonce". A lock whose host is this host and whose PID no longer
// runs is stale; breaking it takes a second O_EXCL file (".break") and
// re-reads the lock under it, so two breakers cannot remove a fresh lock.

const (
	// lockPollMin and lockPollMax bound the wait between attempts on a held
	// lock: short at first, because writes hold it for milliseconds.
	lockPollMin = time.Millisecond
	lockPollMax = 50 * time.Millisecond
	// lockOrphanAge: an empty lock file (its creator died between create
	// and write) or a ".break" file older than this is stale. Both are
	// held for microseconds, so the margin is huge.
	lockOrphanAge = 10 * time.Second
)

var hostname = func() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown-host"
	}
	return strings.ReplaceAll(h, " ", "_")
}()

func lockPath(p string) string {
	h := fnv.New64a()
	h.Write([]byte(filepath.Base(p)))
	return filepath.Join(filepath.Dir(p), fmt.Sprintf("%slock-%016x", reservedPrefix, h.Sum64()))
}

// lockKey takes the lock file for the object at path p, waiting until ctx
// ends, and returns its release function.
func lockKey(ctx context.Context, p string) (unlock func(), err error) {
	lp := lockPath(p)
	var nonce [8]byte
	rand.Read(nonce[:])
	content := []byte(fmt.Sprintf("%s %d %s\n", hostname, os.Getpid(), hex.EncodeToString(nonce[:])))
	wait := lockPollMin
	for {
		f, err := os.OpenFile(lp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			_, werr := f.Write(content)
			cerr := f.Close()
			if err := errors.Join(werr, cerr); err != nil {
				os.Remove(lp)
				return nil, fmt.Errorf("write lock %s: %w", lp, err)
			}
			return func() { releaseLock(lp, content) }, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("lock %s: %w", lp, mapFSError(err))
		}
		if breakStaleLock(lp) {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			holder, _ := os.ReadFile(lp)
			return nil, fmt.Errorf("lock %s held by %q: %w (%w)", lp, strings.TrimSpace(string(holder)), ErrLocked, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, lockPollMax)
	}
}

// releaseLock removes the lock file if it is still ours.
func releaseLock(lp string, content []byte) {
	if cur, err := os.ReadFile(lp); err == nil && bytes.Equal(cur, content) {
		os.Remove(lp)
	}
}

// lockIsStale reports whether the lock's content names a dead process on
// this host (or the file stayed empty too long).
func lockIsStale(content []byte, modTime time.Time) bool {
	fields := strings.Fields(string(content))
	if len(fields) != 3 {
		return time.Since(modTime) > lockOrphanAge
	}
	if fields[0] != hostname {
		return false // another host's process: we cannot tell
	}
	pid, err := strconv.Atoi(fields[1])
	if err != nil {
		return time.Since(modTime) > lockOrphanAge
	}
	return !pidAlive(pid)
}

// breakStaleLock removes lp if it is stale, returning whether it did.
func breakStaleLock(lp string) bool {
	content, modTime, ok := readLock(lp)
	if !ok || !lockIsStale(content, modTime) {
		return false
	}
	bp := lp + ".break"
	f, err := os.OpenFile(bp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		if fi, serr := os.Stat(bp); serr == nil && time.Since(fi.ModTime()) > lockOrphanAge {
			os.Remove(bp) // a breaker died mid-break
		}
		return false
	}
	f.Close()
	defer os.Remove(bp)
	// Under the break lock: remove lp only if it is still the stale one.
	again, againMod, ok := readLock(lp)
	if !ok || !bytes.Equal(again, content) || !againMod.Equal(modTime) {
		return false
	}
	return os.Remove(lp) == nil
}

func readLock(lp string) ([]byte, time.Time, bool) {
	fi, err := os.Stat(lp)
	if err != nil {
		return nil, time.Time{}, false
	}
	content, err := os.ReadFile(lp)
	if err != nil {
		return nil, time.Time{}, false
	}
	return content, fi.ModTime(), true
}
