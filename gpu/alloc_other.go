//go:build !unix

package gpu

// DefaultAllocator is HeapAllocator where anonymous mappings are not
// available.
func DefaultAllocator() Allocator { return HeapAllocator{} }
