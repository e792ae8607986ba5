// Package offheap allocates byte buffers outside the Go heap, for caches
// whose size is bounded by bytes: a cache of B bytes on the heap costs
// up to about 2B of memory, since the collector lets the heap grow to
// twice what is live (GOGC 100) with the garbage of entries read and
// dropped; the same cache off the heap costs B, and its pages go back
// to the kernel the moment an entry is freed.
//
// The price is C's: a buffer must not be used after Free, and nothing
// that outlives the buffer may point into it (copy bytes out; a string
// made from its bytes must be a copy). Buffers are zeroed.
//
// On Linux buffers are anonymous private mappings (mmap); elsewhere they are ordinary heap slices and Free, Release do nothing
// (OnHeap reports which).
package offheap

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

var mapped atomic.Int64 // bytes mapped now, pages rounded

// Alloc returns a zeroed buffer of length n, n > 0; its capacity may be
// more (the rest of its last page).
func Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("offheap: alloc of %d bytes", n)
	}
	b, err := alloc(n)
	if err != nil {
		return nil, fmt.Errorf("offheap: alloc of %d bytes: %w", n, err)
	}
	mapped.Add(int64(roundPages(cap(b))))
	return b, nil
}

// Free returns b, from Alloc (whole: b[:0] and reslices of it are fine,
// its first byte must be Alloc's), to the kernel. b must not be used
// after.
func Free(b []byte) error {
	if cap(b) == 0 {
		return nil
	}
	b = b[:cap(b)]
	if err := free(b); err != nil {
		return fmt.Errorf("offheap: free of %d bytes: %w", len(b), err)
	}
	mapped.Add(-int64(roundPages(len(b))))
	return nil
}

// ReleasePages gives the pages that lie wholly inside b (a part of a
// buffer from Alloc) back to the kernel, and returns how many bytes they
// are. b stays usable: those pages read as zeros afterwards, and are
// taken again when written. Bytes of b in a page it shares with bytes
// outside it are left alone, so b may be any part of a buffer, for
// example one member of a chunk whose other members are still being
// read.
func ReleasePages(b []byte) (int, error) {
	if OnHeap || len(b) < pageSize {
		return 0, nil
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	ps := uintptr(pageSize)
	lo := (addr + ps - 1) / ps * ps
	hi := (addr + uintptr(len(b))) / ps * ps
	if hi <= lo {
		return 0, nil
	}
	if err := release(b[lo-addr : hi-addr]); err != nil {
		return 0, fmt.Errorf("offheap: release of %d bytes: %w", hi-lo, err)
	}
	return int(hi - lo), nil
}

// PageSize is the size of the pages ReleasePages gives back (1 where
// buffers are on the heap: nothing is released there).
func PageSize() int { return pageSize }

// Mapped returns the bytes allocated and not yet freed, in whole pages
// (0 where buffers are on the heap).
func Mapped() int64 { return mapped.Load() }

func roundPages(n int) int {
	if OnHeap {
		return 0
	}
	return (n + pageSize - 1) / pageSize * pageSize
}
