package gpu

import (
	"context"
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// PageSize is the alignment of every slot: the OS page size.
var PageSize = os.Getpagesize()

// Allocator allocates page-aligned host memory. Implementations must be safe
// for concurrent use.
type Allocator interface {
	// AllocHost returns size bytes of zeroed memory whose first byte is
	// page-aligned. size is rounded up to whole pages by the caller.
	AllocHost(size int) ([]byte, error)
	// FreeHost releases memory AllocHost returned; b must be exactly the
	// slice it returned.
	FreeHost(b []byte) error
	// Name says what kind of memory this is ("mmap", "heap", "cuda-pinned"),
	// for stats and messages.
	Name() string
}

// Uploader makes a filled slot available to the device.
type Uploader interface {
	// Upload hands the first n bytes of s to the device and returns once the
	// consumer may use the result. It may block; it must return ctx.Err()
	// promptly once ctx is done.
	Upload(ctx context.Context, s *Slot, n int) error
	// Close releases device resources. It is called once, after the last
	// Upload has returned and every batch uploaded has been released (the
	// pipeline closes its uploader right before it frees the slots).
	Close() error
}

// SlotReleaser is an Uploader that keeps a slot's result for its consumer
// (a device buffer): the pipeline calls ReleaseSlot when the slot's batch
// is released, from any goroutine, and only then refills the slot.
type SlotReleaser interface {
	ReleaseSlot(slot int)
}

// DeviceLocator is an Uploader that leaves each batch on a device: Slot
// says where slot i's batch lies after Upload, Export how another process
// maps it (ok false: not exported).
type DeviceLocator interface {
	Slot(i int) DeviceSlot
	Export() (DeviceExport, bool)
}

// HostUploader is the plain-Go Uploader: the slot is already host memory the
// consumer reads directly, so Upload has nothing to copy.
type HostUploader struct{}

var _ Uploader = HostUploader{}

// Upload returns ctx.Err() or nil; it copies nothing.
func (HostUploader) Upload(ctx context.Context, s *Slot, n int) error {
	if n < 0 || n > len(s.buf) {
		return fmt.Errorf("gpu: upload %d bytes of a %d-byte slot", n, len(s.buf))
	}
	return ctx.Err()
}

// Close does nothing.
func (HostUploader) Close() error { return nil }

// Slot is one batch buffer of a HostPool.
type Slot struct {
	id  int
	buf []byte // len = the pool's slot bytes; page-aligned start
}

// ID is the slot's index in its pool, in [0, pool.Len()).
func (s *Slot) ID() int { return s.id }

// Bytes is the slot's memory: SlotBytes long, its first byte page-aligned.
func (s *Slot) Bytes() []byte { return s.buf }

// HostPool is a fixed set of equal slots allocated once from an Allocator.
type HostPool struct {
	alloc     Allocator
	slotBytes int
	stride    int    // slotBytes rounded up to whole pages
	mem       []byte // one allocation holding every slot
	slots     []Slot
	closeOnce sync.Once
	closeErr  error
}

// NewHostPool allocates n slots of slotBytes each from a (MmapAllocator on
// unix, HeapAllocator elsewhere, when a is nil), in one allocation, each slot
// starting on a page boundary.
func NewHostPool(a Allocator, n, slotBytes int) (*HostPool, error) {
	if n < 1 || slotBytes < 1 {
		return nil, fmt.Errorf("gpu: host pool of %d slots of %d bytes: need at least one slot of at least one byte", n, slotBytes)
	}
	if a == nil {
		a = DefaultAllocator()
	}
	stride := roundUp(slotBytes, PageSize)
	const maxInt = int(^uint(0) >> 1)
	if stride < slotBytes || stride > maxInt/n {
		return nil, fmt.Errorf("gpu: host pool of %d slots of %d bytes overflows", n, slotBytes)
	}
	mem, err := a.AllocHost(stride * n)
	if err != nil {
		return nil, fmt.Errorf("gpu: allocate %d slots of %d bytes (%s): %w", n, slotBytes, a.Name(), err)
	}
	p := &HostPool{alloc: a, slotBytes: slotBytes, stride: stride, mem: mem, slots: make([]Slot, n)}
	for i := range p.slots {
		off := i * stride
		p.slots[i] = Slot{id: i, buf: mem[off : off+slotBytes : off+slotBytes]}
	}
	return p, nil
}

// Len is the number of slots.
func (p *HostPool) Len() int { return len(p.slots) }

// SlotBytes is the usable size of each slot.
func (p *HostPool) SlotBytes() int { return p.slotBytes }

// TotalBytes is the memory the pool holds (slots rounded up to pages).
func (p *HostPool) TotalBytes() int { return len(p.mem) }

// Slot returns slot i.
func (p *HostPool) Slot(i int) *Slot { return &p.slots[i] }

// Allocator returns the allocator the pool's memory came from.
func (p *HostPool) Allocator() Allocator { return p.alloc }

// Close frees the pool's memory. Call it once every slot is back; later
// calls return the first call's result.
func (p *HostPool) Close() error {
	p.closeOnce.Do(func() {
		mem := p.mem
		p.mem = nil
		p.closeErr = p.alloc.FreeHost(mem)
	})
	return p.closeErr
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// HeapAllocator allocates page-aligned memory on the Go heap by
// over-allocating one page. The garbage collector frees it once unreachable,
// so FreeHost only forgets it; a slice that outlives its pool stays valid.
type HeapAllocator struct{}

var _ Allocator = HeapAllocator{}

// AllocHost returns size bytes whose first byte is page-aligned.
func (HeapAllocator) AllocHost(size int) ([]byte, error) {
	if size < 0 {
		return nil, fmt.Errorf("gpu: allocate %d bytes", size)
	}
	raw := make([]byte, size+PageSize)
	off := alignOffset(raw, PageSize)
	return raw[off : off+size : off+size], nil
}

// FreeHost does nothing: the garbage collector owns heap memory.
func (HeapAllocator) FreeHost([]byte) error { return nil }

// Name returns "heap".
func (HeapAllocator) Name() string { return "heap" }

// alignOffset is how many bytes into b the first align-aligned address is.
func alignOffset(b []byte, align int) int {
	if len(b) == 0 {
		return 0
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return int((uintptr(align) - p%uintptr(align)) % uintptr(align))
}
