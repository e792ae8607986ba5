package dataset

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/longshore/longshore/internal/offheap"
	"github.com/longshore/longshore/storage"
)

// DefaultSpillStaging is the fewest staging buffers a spilling store
// keeps (PackedConfig.SpillStaging 0: automatic): four ~2 MB chunks (16
// ImageNet-sized JPEGs each) are 8 MB of memory. maxSpillStaging is the
// most the automatic count grows to.
const (
	DefaultSpillStaging = 4
	maxSpillStaging     = 64
)

// spillTuneEvery is how often the automatic staging count is set anew
// from the consumption rate and hold time measured since the last time.
// The first period is spillTuneFirst, each next one twice the last, up to
// spillTuneEvery: a store far away gets its buffers within ~0.4 s of the
// start (4, 8, 16, 32 at 25, 75, 175, 375 ms), not one doubling each
// 250 ms (32 at 750 ms).
const (
	spillTuneEvery = 250 * time.Millisecond
	spillTuneFirst = 25 * time.Millisecond
)

// ErrSpillDir is returned (wrapped) by NewPackedStore and
// NewCatalogPackedStore, and by CheckSpillDir, for a PackedConfig.SpillDir
// that cannot hold chunks: missing, not writable, in memory (tmpfs:
// spilling there would hold the same bytes in RAM, only not counted as
// the node's), or on a file system without direct I/O.
var ErrSpillDir = errors.New("pack spill directory unusable")

// spill keeps a PackedStore's chunks in files on local disk instead of in
// memory (PackedConfig.SpillDir): what Mosaic Streaming and LitData do
// with their local cache directories, for the same reason. A chunk's
// fetch reads its span into a staging buffer (the memory spilling costs);
// the Gets waiting for it copy their members from there while it is
// written to a file of its own with direct I/O (so the page cache does
// not keep the bytes either), and the buffer goes back; members asked
// for later are read from the file, with direct I/O too
// (PackedStore.fetchSpilled). A file is unlinked as soon as it is
// opened: closing it, or the process dying, frees its blocks.
//
// How many staging buffers: a fixed count (PackedConfig.SpillStaging),
// or automatic: as many as the fetches the samples' consumption needs in
// flight by Little's law, twice the chunks used per second times how
// long a fetch holds its buffer (the store's round trip and the file's
// write), between DefaultSpillStaging and maxSpillStaging. A store a
// round trip of 20 ms away, at 1,000 chunks a second, needs ~20 chunks in
// flight, where four buffers would cap it at 200 chunks a second. When
// the buffers are what limits, the rate measured is what they allow, and
// twice it doubles them, until the consumption, not the buffers, sets the
// rate. Buffers past the count are freed as they come back.
type spill struct {
	dir   string
	fixed bool             // PackedConfig.SpillStaging given: no tuning
	now   func() time.Time // the clock of the tuning (tests inject one)

	mu      sync.Mutex
	idle    [][]byte      // buffers not in use; nil: not allocated yet; off the Go heap
	circ    int           // buffers idle or in use
	limit   int           // the count circ is brought to
	queue   []chan []byte // fetches waiting for a buffer, oldest first
	since   time.Time     // start of the tuning period
	every   time.Duration // the tuning period's length (spillTuneFirst, doubling to spillTuneEvery)
	hits    atomic.Int64  // members served since (served: no lock per member)
	members int64         // members of the chunks ever fetched, and
	fetched int64         // those chunks: a chunk's members on average
	hold    time.Duration // buffers' hold time, a moving average
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
// buffers for that many fetches at once, or (0) an automatic count.
func newSpill(dir string, staging int, now func() time.Time) (*spill, error) {
	if err := CheckSpillDir(dir); err != nil {
		return nil, err
	}
	s := &spill{dir: dir, fixed: staging > 0, limit: staging, now: now}
	if !s.fixed {
		s.limit = DefaultSpillStaging
	}
	s.since, s.every = now(), spillTuneFirst
	return s, nil
}

// DiskSpeed is what ProbeSpillDisk measured.
type DiskSpeed struct {
	Written             int64   // bytes written
	WriteBytesPerSecond float64 // direct, sequential, 4 MiB a write
	ReadSize            int64   // bytes a read (whole pages)
	ReadsPerSecond      float64 // direct, random, 8 at a time
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

// take waits for a staging buffer (or ctx) for a chunk of members
// members and returns it (nil until first used, sized by get) and when
// it was taken, for give.
func (s *spill) take(ctx context.Context, members int) ([]byte, time.Time, error) {
	s.mu.Lock()
	s.members += int64(members)
	s.fetched++
	if n := len(s.idle); n > 0 {
		buf := s.idle[n-1]
		s.idle = s.idle[:n-1]
		s.mu.Unlock()
		return buf, s.now(), nil
	}
	if s.circ < s.limit {
		s.circ++
		s.mu.Unlock()
		return nil, s.now(), nil
	}
	ch := make(chan []byte, 1)
	s.queue = append(s.queue, ch)
	s.mu.Unlock()
	select {
	case buf := <-ch:
		return buf, s.now(), nil
	case <-ctx.Done():
		s.mu.Lock()
		if i := slices.Index(s.queue, ch); i >= 0 {
			s.queue = slices.Delete(s.queue, i, i+1)
			s.mu.Unlock()
			return nil, time.Time{}, ctx.Err()
		}
		s.mu.Unlock()
		s.give(<-ch, time.Time{}) // handed over as ctx ended: pass it on
		return nil, time.Time{}, ctx.Err()
	}
}

// served counts n members served from chunks: the consumption the
// automatic count follows (tuned as buffers come back, once a chunk).
func (s *spill) served(n int) { s.hits.Add(int64(n)) }

// give returns a staging buffer take gave (or get grew), taken at t (zero:
// not used).
func (s *spill) give(buf []byte, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !t.IsZero() && !s.fixed {
		held := s.now().Sub(t)
		if s.hold == 0 {
			s.hold = held
		} else {
			s.hold += (held - s.hold) / 8
		}
		s.tuneLocked()
	}
	if s.circ > s.limit {
		s.circ--
		if buf != nil {
			offheap.Free(buf)
		}
		return
	}
	if len(s.queue) > 0 {
		ch := s.queue[0]
		s.queue = s.queue[1:]
		ch <- buf
		return
	}
	s.idle = append(s.idle, buf)
}

// tuneLocked sets the automatic count anew once a period has passed:
// when it grew, fetches waiting get new buffers; when it fell, idle
// buffers past it are freed (those in use, as they come back).
func (s *spill) tuneLocked() {
	now := s.now()
	el := now.Sub(s.since)
	if el < s.every || s.fetched == 0 {
		return
	}
	s.every = min(2*s.every, spillTuneEvery)
	perChunk := float64(s.members) / float64(s.fetched)
	chunksPerSec := float64(s.hits.Swap(0)) / perChunk / el.Seconds()
	need := int(math.Ceil(2 * chunksPerSec * s.hold.Seconds()))
	s.limit = min(max(need, DefaultSpillStaging), maxSpillStaging)
	s.since = now
	for s.circ > s.limit && len(s.idle) > 0 {
		if b := s.idle[len(s.idle)-1]; b != nil {
			offheap.Free(b)
		}
		s.idle = s.idle[:len(s.idle)-1]
		s.circ--
	}
	for s.circ < s.limit && len(s.queue) > 0 {
		s.circ++
		ch := s.queue[0]
		s.queue = s.queue[1:]
		ch <- nil
	}
}

// queued is how many fetches wait for a staging buffer.
func (s *spill) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// stagingLimit is the staging buffers' count now.
func (s *spill) stagingLimit() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit
}

// get reads object's bytes [off, off+size) from inner into buf, grown
// (reallocated) when it cannot hold them with room for direct I/O; it
// returns the buffer, to give back, and the bytes, in it.
func (s *spill) get(ctx context.Context, inner storage.Store, object string, off, size int64, buf []byte) ([]byte, []byte, error) {
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
		return buf, nil, fmt.Errorf("get range %s/%s [%d,+%d): got %d bytes: %w", inner, object, off, size, len(data), storage.ErrRange)
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
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, b := range s.idle {
			if b != nil {
				offheap.Free(b)
			}
		}
		s.idle = nil
	})
}

// directUnit is the alignment of direct I/O that every Linux file system
// takes: 4 KiB (a disk's logical block is at most that).
const directUnit = 4096

// directSize is n rounded up to directUnit.
func directSize(n int64) int64 {
	return (n + directUnit - 1) / directUnit * directUnit
}
