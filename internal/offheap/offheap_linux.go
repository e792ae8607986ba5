//go:build linux

package offheap

import (
	"syscall"
)

// OnHeap is false: buffers are mappings outside the Go heap.
const OnHeap = false

var pageSize = syscall.Getpagesize()

func alloc(n int) ([]byte, error) {
	b, err := syscall.Mmap(-1, 0, roundPages(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, err
	}
	return b[:n], nil // its capacity is the whole mapping's
}

// free unmaps b, the whole mapping (syscall.Munmap knows a mapping by
// its first and last bytes).
func free(b []byte) error {
	return syscall.Munmap(b)
}

func release(b []byte) error {
	return syscall.Madvise(b, syscall.MADV_DONTNEED)
}
