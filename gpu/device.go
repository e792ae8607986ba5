package gpu

import (
	"context"
	"errors"
)

// DevicePtr is an address in a device's memory (a CUdeviceptr).
type DevicePtr uint64

// Stream names a queue of device work a Device handed out: work on one
// stream runs in the order it was enqueued; streams run concurrently.
type Stream uint64

// Event names a marker a Device handed out: recorded on a stream, it
// completes once every piece of work enqueued on that stream before it
// has.
type Event uint64

// IPCHandle names a device allocation across processes (what
// cuIpcGetMemHandle returns): another process on the same machine opens
// it (cuIpcOpenMemHandle) to map the same device memory.
type IPCHandle [64]byte

// DeviceInfo describes one visible device.
type DeviceInfo struct {
	// Ordinal is the device's index among the visible devices (as
	// CUDA_VISIBLE_DEVICES orders them).
	Ordinal int `json:"ordinal"`
	// Name is the product name ("NVIDIA H200").
	Name string `json:"name"`
	// UUID names the device whatever the process's visible-device order:
	// "GPU-" and 32 hex digits in 8-4-4-4-12 groups, as nvidia-smi prints
	// it and torch.cuda.get_device_properties(i).uuid ends.
	UUID string `json:"uuid"`
	// TotalMem is the device memory in bytes.
	TotalMem int64 `json:"total_mem"`
}

// Driver finds and opens devices: the CUDA driver in a `cuda` build, the
// Twin in tests, and NoDriver (every call ErrNoCUDA) in a plain build.
// Implementations are safe for concurrent use.
type Driver interface {
	// Name says which driver this is ("cuda 12040", "twin", "none").
	Name() string
	// Devices lists the visible devices. A driver that finds none returns
	// ErrNoDevice; one that is not built in returns ErrNoCUDA.
	Devices() ([]DeviceInfo, error)
	// Open makes the device's context (one per device, on a locked OS
	// thread) and returns the Device that owns it.
	Open(ordinal int) (Device, error)
}

// Device is one opened accelerator: the narrow seam between the
// bookkeeping of this package (DeviceUploader: which slot's copy is in
// flight, which device buffer a consumer holds, when memory may be freed)
// and the driver. Every method may block briefly (the CUDA implementation
// runs each call on its context's locked OS thread); none blocks on device
// work except Wait. Implementations are safe for concurrent use.
//
// Its twin is Twin (twin.go), whose copies happen when they complete, so
// the bookkeeping is tested on CPU.
type Device interface {
	Info() DeviceInfo

	// AllocPinned returns size bytes of page-locked host memory
	// (cuMemHostAlloc), page-aligned; FreePinned frees it.
	AllocPinned(size int) ([]byte, error)
	FreePinned(b []byte) error
	// RegisterHost page-locks existing host memory in place
	// (cuMemHostRegister), so copies from it are DMA and asynchronous;
	// UnregisterHost undoes it. b must start on a page boundary.
	RegisterHost(b []byte) error
	UnregisterHost(b []byte) error

	// AllocDevice returns size bytes of device memory (cuMemAlloc);
	// FreeDevice frees an allocation by its base.
	AllocDevice(size int64) (DevicePtr, error)
	FreeDevice(p DevicePtr) error

	NewStream() (Stream, error)
	DestroyStream(s Stream) error
	NewEvent() (Event, error)
	DestroyEvent(e Event) error

	// CopyHtoDAsync enqueues a copy of src to dst on s and returns. From
	// page-locked memory the copy reads src when it runs: src must not be
	// written until an event recorded after it has completed. From
	// pageable memory the driver stages src before returning.
	CopyHtoDAsync(dst DevicePtr, src []byte, s Stream) error
	// CopyDtoH copies device memory to the host and returns once done
	// (after the work already enqueued on every stream): for checks.
	CopyDtoH(dst []byte, src DevicePtr) error
	// Record enqueues e on s.
	Record(e Event, s Stream) error
	// Query reports whether e has completed (an event never recorded has).
	Query(e Event) (bool, error)
	// Wait blocks until e has completed, or returns ctx.Err() once ctx is
	// done (the work goes on).
	Wait(ctx context.Context, e Event) error
	// Synchronize blocks until every piece of work enqueued on the device
	// has completed (cuCtxSynchronize): before memory a copy may still use
	// is freed.
	Synchronize() error

	// IPCHandle exports the allocation whose base is p.
	IPCHandle(p DevicePtr) (IPCHandle, error)

	// Close destroys the context. Everything allocated must have been
	// freed; Close after Close returns nil.
	Close() error
}

// Errors of the device seam.
var (
	// ErrNoCUDA: this binary was built without CUDA; rebuild with
	// `-tags cuda` (make cuda-check shows the flags) or run without --gpus.
	ErrNoCUDA = errors.New("gpu: built without CUDA support (go build -tags cuda, with cgo and the CUDA headers; see make cuda-check)")
	// ErrNoDevice: the driver found no device (no GPU, no driver loaded,
	// or CUDA_VISIBLE_DEVICES hides them all).
	ErrNoDevice = errors.New("gpu: no CUDA device visible")
	// ErrSlotHeld: an upload into a slot whose device buffer a consumer
	// still holds (the batch was not released): a bug in the caller.
	ErrSlotHeld = errors.New("gpu: device slot still held by its consumer")
	// ErrClosed: the uploader or device was closed.
	ErrClosed = errors.New("gpu: closed")
)

// NoDriver is the Driver of a build without CUDA: it has no devices.
type NoDriver struct{}

var _ Driver = NoDriver{}

// Name returns "none".
func (NoDriver) Name() string { return "none" }

// Devices returns ErrNoCUDA.
func (NoDriver) Devices() ([]DeviceInfo, error) { return nil, ErrNoCUDA }

// Open returns ErrNoCUDA.
func (NoDriver) Open(int) (Device, error) { return nil, ErrNoCUDA }
