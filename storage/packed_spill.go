package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/longshore/longshore/internal/offheap"
)

// DefaultSpillStaging is PackedConfig.SpillStaging's default: chunk
// fetches that hold a buffer in memory at once when chunks are kept on
// disk. Four ~2 MB chunks (16 ImageNet-sized JPEGs each) are 8 MB of
// memory; more fetches wait for a buffer, not for the store.
const DefaultSpillStaging = 4

// ErrSpillDir is returned (wrapped) by NewPackedStore and
// NewCatalogPackedStore, and by CheckSpillDir, for a PackedConfig.SpillDir
// that cannot hold chunks: missing, not writable, in memory (tmpfs:
// spilling there would hold the same bytes in RAM, only not counted as
// the node's), or on a file system without direct I/O.
var ErrSpillDir = errors.New("pack spill directory unusable")

// spill keeps a PackedStore's chunks in files on local disk instead of in
// memory (PackedConfig.SpillDir): what Mosaic Streaming and LitData do
// with their local cache directories, for the same reason. A chunk's
// fetch reads its span into a staging buffer (at most staging of them
// exist: the memory spilling costs); the Gets waiting for it copy their
// members from there while it is written to a file of its own with
// direct I/O (so the page cache does not keep the bytes either), and the
// buffer goes back; members asked for later are read from the file, with
// direct I/O too (PackedStore.fetchSpilled). A file is unlinked as soon
// as it is opened: closing it, or the process dying, frees its blocks.
type spill struct {
	dir     string
	slots   chan []byte  // staging buffers, nil until first used; off the Go heap
	waiting atomic.Int64 // loads waiting for a staging buffer
	closed  sync.Once
	closing sync.WaitGroup // files being closed (discard)
}

// discard closes f on a goroutine of its own: closing a spilled file's
// last descriptor frees its blocks, about a millisecond of the file
// system's work for a 2 MB chunk, which must not be spent holding the
// store's lock (every Get waits on it). close waits for these.
func (s *spill) discard(f *spillFile) {
	s.closing.Add(1)
	go func() {
		defer s.closing.Done()
		f.close()
	}()
}

// newSpill checks dir (CheckSpillDir) and returns its spill with staging
// buffers for that many fetches at once (at least one).
func newSpill(dir string, staging int) (*spill, error) {
	if err := CheckSpillDir(dir); err != nil {
		return nil, err
	}
	s := &spill{dir: dir, slots: make(chan []byte, max(staging, 1))}
	for range cap(s.slots) {
		s.slots <- nil
	}
	return s, nil
}

// CheckSpillDir reports why dir cannot hold spilled chunks (ErrSpillDir,
// wrapped with the cause), or nil: it must be a directory on a disk file
// system that takes direct I/O. It writes and removes
// one such file.
func CheckSpillDir(dir string) error {
	if dir == "" {
		return fmt.Errorf("%w: no directory given", ErrSpillDir)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSpillDir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrSpillDir, dir)
	}
	if err := checkSpillFS(dir); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrSpillDir, dir, err)
	}
	buf, err := offheap.Alloc(offheap.PageSize())
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSpillDir, err)
	}
	defer offheap.Free(buf)
	f, err := createSpillFile(dir, buf)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrSpillDir, dir, err)
	}
	return f.close()
}

// take waits for a staging buffer (or ctx) and returns it: nil until
// first used, sized by get.
func (s *spill) take(ctx context.Context) ([]byte, error) {
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	select {
	case buf := <-s.slots:
		return buf, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// give returns a staging buffer take gave (or get grew).
func (s *spill) give(buf []byte) { s.slots <- buf }

// get reads object's bytes [off, off+size) from inner into buf, grown
// (reallocated) when it cannot hold them with room for direct I/O; it
// returns the buffer, to give back, and the bytes, in it.
func (s *spill) get(ctx context.Context, inner Store, object string, off, size int64, buf []byte) ([]byte, []byte, error) {
	if need := directSize(size); int64(cap(buf)) < need {
		if buf != nil {
			offheap.Free(buf)
			buf = nil
		}
		b, err := offheap.Alloc(int(bufferSize(need)))
		if err != nil {
			return nil, nil, err
		}
		buf = b[:0]
	}
	data, err := inner.GetRange(ctx, object, off, size, buf[:0])
	if err != nil {
		return buf, nil, err
	}
	if int64(len(data)) != size {
		return buf, nil, fmt.Errorf("get range %s/%s [%d,+%d): got %d bytes: %w", inner, object, off, size, len(data), ErrRange)
	}
	if size > 0 && &data[0] != &buf[:1][0] {
		copy(buf[:size], data) // the store's own bytes: direct I/O needs the aligned buffer
	}
	return buf, buf[:size], nil
}

// close frees the staging buffers, once. Every load must have returned.
func (s *spill) close() {
	s.closed.Do(func() {
		s.closing.Wait()
		for range cap(s.slots) {
			if b := <-s.slots; b != nil {
				offheap.Free(b)
			}
		}
	})
}

// directUnit is the alignment of direct I/O that every Linux file system
// takes: 4 KiB (a disk's logical block is at most that).
const directUnit = 4096

// directSize is n rounded up to directUnit.
func directSize(n int64) int64 {
	return (n + directUnit - 1) / directUnit * directUnit
}
