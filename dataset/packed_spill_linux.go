//go:build linux

package dataset

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// spillFile is one spilled chunk: a file unlinked once opened, on the spill directory's
// file system.
type spillFile struct {
	fd int
}

// checkSpillFS refuses a directory whose files live in memory.
func checkSpillFS(dir string) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return err
	}
	const tmpfsMagic, ramfsMagic = 0x01021994, 0x858458f6 // linux/magic.h
	switch int64(st.Type) {
	case tmpfsMagic, ramfsMagic:
		return fmt.Errorf("is in memory (tmpfs): spilled chunks there would take the RAM they are meant to spare; give a directory on a disk")
	}
	return nil
}

// createSpillFile writes data (page-aligned, as offheap.Alloc gives, with
// room up to directSize(len(data))) to a new file in dir, unlinked once opened, with
// direct I/O.
func createSpillFile(dir string, data []byte) (*spillFile, error) {
	// A name for as long as it takes to open it: unlinked at once, the
	// file lives on as its descriptor (the standard library has no
	// O_TMPFILE).
	name := filepath.Join(dir, fmt.Sprintf(".longshore-spill-%d-%d", os.Getpid(), spillSeq.Add(1)))
	fd, err := syscall.Open(name, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL|syscall.O_DIRECT|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("file with direct I/O: %w", err)
	}
	if err := syscall.Unlink(name); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("unlink %s: %w", name, err)
	}
	f := &spillFile{fd: fd}
	out := data[:directSize(int64(len(data)))] // the tail past data is the buffer's, written and never read
	for len(out) > 0 {
		n, err := syscall.Write(fd, out)
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
		k, err := syscall.Pread(f.fd, buf[done:], lo+done)
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

// spillSeq numbers spill files within the process.
var spillSeq atomic.Int64

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
func (f *spillFile) close() error { return syscall.Close(f.fd) }

// SpillDirFree is the space in dir's file system that an unprivileged
// process may still write: how much a spill directory (PackedConfig.SpillDir)
// could hold beside what is there.
func SpillDirFree(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// ProbeSpillDisk measures dir's disk as spilled chunks use it, with
// direct I/O on a file unlinked once opened: sequential writes of 4 MiB
// (up to 32 MiB) and random reads of readSize bytes, 8 at a time (up to
// 256), each part within half of budget. It is the start-up check of
// --pack-spill auto: a disk slower than the node consumes would serve
// the window slower than memory (docs/packed-datasets.md).
func ProbeSpillDisk(dir string, readSize int64, budget time.Duration) (DiskSpeed, error) {
	const piece, most = 4 << 20, 32 << 20
	readSize = min(max(directSize(readSize), directUnit), 1<<20)
	buf := alignedBytes(piece)
	for i := range buf {
		buf[i] = byte(i*131 + i>>12) // not all zeros: no file system shortcut
	}
	f, err := createSpillFile(dir, buf[:directUnit])
	if err != nil {
		return DiskSpeed{}, err
	}
	defer f.close()
	var sp DiskSpeed
	t0 := time.Now()
	size := int64(0)
	for size < most && (size == 0 || time.Since(t0) < budget/2) {
		for out := buf; len(out) > 0; {
			n, err := syscall.Pwrite(f.fd, out, size+int64(piece-len(out)))
			if err != nil {
				return sp, fmt.Errorf("probe write: %w", err)
			}
			out = out[n:]
		}
		size += piece
	}
	sp.Written = size
	sp.WriteBytesPerSecond = float64(size) / time.Since(t0).Seconds()
	var reads atomic.Int64
	var mu sync.Mutex
	var rerr error // the first read's failure
	t1 := time.Now()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := make([]byte, 0, readSize)
			slots := (size - readSize) / directUnit
			// Each reader reads once whatever the clock says (a loaded
			// machine may start it late), as the writes write once.
			for i := int64(w); i == int64(w) || (reads.Load() < 256 && time.Since(t1) < budget/2); i += 8 {
				off := (i * 7919 % max(slots, 1)) * directUnit // spread over the file
				if _, err := f.read(off, readSize, dst); err != nil {
					mu.Lock()
					rerr = cmp.Or(rerr, err)
					mu.Unlock()
					return
				}
				reads.Add(1)
			}
		}()
	}
	wg.Wait()
	if rerr != nil {
		return sp, fmt.Errorf("probe read: %w", rerr)
	}
	sp.ReadSize = readSize
	sp.ReadsPerSecond = float64(reads.Load()) / time.Since(t1).Seconds()
	return sp, nil
}
