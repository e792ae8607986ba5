//go:build linux

package storage

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// spillFile is one spilled chunk: an unnamed file on the spill directory's
// file system.
type spillFile struct {
	fd int
}

// checkSpillFS refuses a directory whose files live in memory.
func checkSpillFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	switch int64(st.Type) {
	case unix.TMPFS_MAGIC, unix.RAMFS_MAGIC:
		return fmt.Errorf("is in memory (tmpfs): spilled chunks there would take the RAM they are meant to spare; give a directory on a disk")
	}
	return nil
}

// createSpillFile writes data (page-aligned, as offheap.Alloc gives, with
// room up to directSize(len(data))) to a new unnamed file in dir with
// direct I/O.
func createSpillFile(dir string, data []byte) (*spillFile, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("unnamed file with direct I/O: %w", err)
	}
	f := &spillFile{fd: fd}
	out := data[:directSize(int64(len(data)))] // the tail past data is the buffer's, written and never read
	for len(out) > 0 {
		n, err := unix.Write(fd, out)
		if err != nil {
			f.close()
			return nil, fmt.Errorf("write: %w", err)
		}
		out = out[n:]
	}
	return f, nil
}

// read appends the file's bytes [off, off+n) to dst[:0]. It reads the
// pages that hold them with direct I/O, as written, into an aligned
// buffer of its own and copies them out: one request to the disk, and
// nothing left in the page cache.
func (f *spillFile) read(off, n int64, dst []byte) ([]byte, error) {
	lo := off / directUnit * directUnit
	span := directSize(off+n) - lo // the file is whole pages long
	bp := alignedPool.Get().(*[]byte)
	defer alignedPool.Put(bp)
	if int64(cap(*bp)) < span {
		*bp = alignedBytes(int(span))
	}
	buf := (*bp)[:span]
	for done := int64(0); done < span; {
		k, err := unix.Pread(f.fd, buf[done:], lo+done)
		if err != nil {
			return dst[:0], fmt.Errorf("read spilled chunk: %w", err)
		}
		if k == 0 {
			return dst[:0], fmt.Errorf("read spilled chunk: end of file at %d of [%d,+%d)", lo+done, off, n)
		}
		done += int64(k)
	}
	return append(dst[:0], buf[off-lo:off-lo+n]...), nil
}

// alignedPool holds read buffers for direct I/O (*[]byte, aligned to
// directUnit; the Go heap does not move them).
var alignedPool = sync.Pool{New: func() any { return new([]byte) }}

// alignedBytes returns n bytes starting on a multiple of directUnit.
func alignedBytes(n int) []byte {
	b := make([]byte, n+directUnit)
	skip := (directUnit - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%directUnit)) % directUnit
	return b[skip : skip+n : skip+n]
}

// close closes the file, which frees its blocks.
func (f *spillFile) close() error { return unix.Close(f.fd) }
