package delivery

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/longshore/longshore/gpu"
)

// ShmAllocator is a gpu.Allocator whose memory a trainer process can map:
// each AllocHost is one memfd (sealed so it can neither shrink nor grow,
// so a trainer cannot make the node fault by truncating it), mapped
// MAP_SHARED. The pipeline makes one allocation per HostPool (all of a
// rank's slots), so a rank has one region per pipeline it ran; the feed
// server finds a batch's region and offset by address (Locate) and passes
// the region's descriptor to the trainer once per connection.
//
// Safe for concurrent use.
type ShmAllocator struct {
	name string
	mu   struct {
		sync.Mutex
		next    uint64
		regions map[uintptr]*shmRegion // by base address
	}
}

var _ gpu.Allocator = (*ShmAllocator)(nil)

type shmRegion struct {
	id   uint64
	fd   int
	mem  []byte
	base uintptr
}

// NewShmAllocator returns an allocator whose memfds are named name (seen
// in /proc/PID/fd; any string).
func NewShmAllocator(name string) *ShmAllocator {
	a := &ShmAllocator{name: name}
	a.mu.regions = make(map[uintptr]*shmRegion)
	return a
}

// AllocHost creates, sizes, seals and maps a memfd of size bytes.
func (a *ShmAllocator) AllocHost(size int) ([]byte, error) {
	if size <= 0 {
		return nil, fmt.Errorf("feed: shared memory of %d bytes", size)
	}
	fd, err := unix.MemfdCreate("longshore-"+a.name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("feed: memfd_create: %w", err)
	}
	fail := func(op string, err error) ([]byte, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("feed: shared memory of %d bytes: %s: %w", size, op, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail("ftruncate", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fail("seal", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	r := &shmRegion{fd: fd, mem: mem, base: uintptr(unsafe.Pointer(unsafe.SliceData(mem)))}
	a.mu.Lock()
	a.mu.next++
	r.id = a.mu.next
	a.mu.regions[r.base] = r
	a.mu.Unlock()
	return mem, nil
}

// FreeHost unmaps b and closes its memfd (a trainer's mapping stays valid
// until the trainer unmaps it: the memory lives while anyone maps it).
func (a *ShmAllocator) FreeHost(b []byte) error {
	if b == nil {
		return nil
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	a.mu.Lock()
	r := a.mu.regions[base]
	delete(a.mu.regions, base)
	a.mu.Unlock()
	if r == nil {
		return fmt.Errorf("feed: free of %d bytes this allocator did not allocate", len(b))
	}
	err := unix.Munmap(r.mem)
	unix.Close(r.fd)
	if err != nil {
		return fmt.Errorf("feed: munmap %d bytes: %w", len(b), err)
	}
	return nil
}

// Name returns "shm-memfd".
func (a *ShmAllocator) Name() string { return "shm-memfd" }

// Location is where a byte slice lies in shared memory.
type Location struct {
	Region uint64 // region id, unique per allocator
	Offset int64  // of the slice's first byte from the region's start
	Size   int64  // the region's size
	fd     int
}

// Locate finds the region holding all of b. ok is false when b is empty
// or does not lie in memory this allocator handed out.
func (a *ShmAllocator) Locate(b []byte) (Location, bool) {
	if len(b) == 0 {
		return Location{}, false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.mu.regions { // a handful of regions per rank
		if p >= r.base && p+uintptr(len(b)) <= r.base+uintptr(len(r.mem)) {
			return Location{Region: r.id, Offset: int64(p - r.base), Size: int64(len(r.mem)), fd: r.fd}, true
		}
	}
	return Location{}, false
}

// Regions is the number of live regions (for tests and stats).
func (a *ShmAllocator) Regions() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.mu.regions)
}
