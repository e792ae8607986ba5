//go:build unix

package gpu

import (
	"fmt"
	"syscall"
)

// MmapAllocator allocates anonymous private mappings: page-aligned, zeroed,
// outside the Go heap (the garbage collector neither scans nor counts them;
// HeapInuse does not include them), returned to the OS by FreeHost.
type MmapAllocator struct{}

var _ Allocator = MmapAllocator{}

// DefaultAllocator is MmapAllocator on unix.
func DefaultAllocator() Allocator { return MmapAllocator{} }

// AllocHost maps size bytes (rounded up to pages by the kernel).
func (MmapAllocator) AllocHost(size int) ([]byte, error) {
	if size <= 0 {
		return nil, fmt.Errorf("gpu: mmap %d bytes", size)
	}
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("gpu: mmap %d bytes: %w", size, err)
	}
	return b, nil
}

// FreeHost unmaps b, which must be a slice AllocHost returned.
func (MmapAllocator) FreeHost(b []byte) error {
	if b == nil {
		return nil
	}
	if err := syscall.Munmap(b); err != nil {
		return fmt.Errorf("gpu: munmap %d bytes: %w", len(b), err)
	}
	return nil
}

// Name returns "mmap".
func (MmapAllocator) Name() string { return "mmap" }
