//go:build linux

package storage

import (
	"fmt"

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
// direct I/O, then switches the file to buffered reads.
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
	// Reads are of single members, at any offset: buffered, each one's
	// pages dropped after it (read), and no read-ahead into members that
	// another Get will read later.
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags&^unix.O_DIRECT)
	}
	if err == nil {
		err = unix.Fadvise(fd, 0, 0, unix.FADV_RANDOM)
	}
	if err != nil {
		f.close()
		return nil, fmt.Errorf("set up reads: %w", err)
	}
	return f, nil
}

// read appends the file's bytes [off, off+n) to dst[:0], then drops their
// pages from the page cache.
func (f *spillFile) read(off, n int64, dst []byte) ([]byte, error) {
	if int64(cap(dst)) < n {
		dst = make([]byte, n)
	}
	out := dst[:n]
	for done := int64(0); done < n; {
		k, err := unix.Pread(f.fd, out[done:], off+done)
		if err != nil {
			return dst[:0], fmt.Errorf("read spilled chunk: %w", err)
		}
		if k == 0 {
			return dst[:0], fmt.Errorf("read spilled chunk: end of file at %d of [%d,+%d)", off+done, off, n)
		}
		done += int64(k)
	}
	unix.Fadvise(f.fd, off, n, unix.FADV_DONTNEED) // only the page cache's: an error leaves pages cached
	return out, nil
}

// close closes the file, which frees its blocks.
func (f *spillFile) close() error { return unix.Close(f.fd) }
