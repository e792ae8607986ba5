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

// Release gives b's pages back to the kernel but keeps b usable: it
// reads as zeros afterwards, and a page is taken again when written.
// For a buffer kept for reuse that may stay idle.
func Release(b []byte) error {
	if cap(b) == 0 {
		return nil
	}
	if err := release(b[:cap(b)]); err != nil {
		return fmt.Errorf("offheap: release of %d bytes: %w", cap(b), err)
	}
	return nil
}

// Mapped returns the bytes allocated and not yet freed, in whole pages
// (0 where buffers are on the heap).
func Mapped() int64 { return mapped.Load() }

func roundPages(n int) int {
	if OnHeap {
		return 0
	}
	return (n + pageSize - 1) / pageSize * pageSize
}
