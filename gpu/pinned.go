package gpu

// PinnedAllocator is an Allocator of page-locked host memory from a
// device (cuMemHostAlloc, portable: every context may DMA from it), for
// slots no other process maps (a Go trainer in the node's process). A
// DeviceUploader over a pool of it copies with no registration and no
// staging. Safe for concurrent use, as its Device is.
type PinnedAllocator struct{ Device Device }

var _ Allocator = PinnedAllocator{}

// AllocHost returns size bytes of zeroed pinned memory.
func (a PinnedAllocator) AllocHost(size int) ([]byte, error) { return a.Device.AllocPinned(size) }

// FreeHost frees memory AllocHost returned.
func (a PinnedAllocator) FreeHost(b []byte) error { return a.Device.FreePinned(b) }

// Name returns "cuda-pinned".
func (PinnedAllocator) Name() string { return "cuda-pinned" }
