// Package gpu owns the memory a batch is assembled in and the hand-off of a
// full batch to the device.
//
// # The seams
//
// Three small interfaces separate the pipeline (package actors) from the
// accelerator:
//
//   - Allocator gives page-aligned host memory. The plain-Go allocators here
//     are MmapAllocator (anonymous private mappings, the default on unix:
//     page-aligned, outside the Go heap, never scanned or moved by the
//     garbage collector) and HeapAllocator (Go heap memory aligned by
//     over-allocation: the race detector sees accesses to it, so tests use
//     it). The feed's ShmAllocator (delivery) gives memfd memory a
//     trainer maps; PinnedAllocator gives a device's page-locked memory
//     (cuMemHostAlloc) for slots only the node's process reads.
//   - Uploader hands a filled slot to the device. HostUploader, the plain-Go
//     one, does nothing: the batch is already in host memory and the
//     consumer (a Go trainer, or the shared-memory ring) reads it there.
//     DeviceUploader copies it to the device.
//   - Device (device.go) is one accelerator, opened through a Driver: pinned
//     and registered host memory, device memory, streams, events, async
//     copies, IPC handles. CUDA implements it in a build with the `cuda`
//     tag and cgo (cuda.go, on gorgonia.org/cu, with a few lines of cgo for
//     what cu does not wrap: cuMemHostAlloc, cuMemHostRegister,
//     cuIpcGetMemHandle); Twin (twin.go) implements it in memory for tests,
//     as memberlist ships a mock transport. A plain build's DefaultDriver
//     is NoDriver: every call says ErrNoCUDA, so the default build needs no
//     CUDA at all.
//
// # Slots on the device
//
// DeviceUploader keeps, for a HostPool of n slots, one device allocation
// of n slots made once, one stream and one event per slot, and the pool's
// host memory page-locked in place (cuMemHostRegister over the very
// shared memory a trainer maps), or, when that fails, a pinned bounce
// buffer (HostStaged) or pageable copies (HostPageable), each fallback
// counted with its reason (UploaderConfig.NoFallback makes it an error).
// Upload enqueues the slot's copy on the slot's stream, records the slot's
// event after it, and returns once the event completed: the host slot is
// never written while the DMA engine reads it. The device buffer is then
// held by its consumer until the pipeline calls ReleaseSlot (the batch was
// released); an upload into a held slot is refused (ErrSlotHeld), and an
// upload whose context ended leaves its copy running and the slot marked,
// so the next upload into it first waits for that copy. The bookkeeping
// is a pure state machine (slots.go) under the uploader's lock.
//
// PlanDevices turns --gpus into one rank per device.
//
// # Delivery to another process
//
// With UploaderConfig.Export the device allocation has an IPC handle
// (DeviceExport); the feed sends it once per connection and each batch as
// an offset into it, so a trainer maps the batch with no host copy. The
// lifetime rule: a device slot is reused only after its batch was
// released, and the uploader frees the allocation only at Close, after
// every batch was released, and after the last DeviceExport.Hold is let
// go (the feed holds an export while a connection it was sent to lasts:
// a cluster rank's pipeline may be replaced under a connection); the
// trainer closes its import before it lets go of the connection
// (docs/feed-protocol.md, "Device batches").
//
// A HostPool is a fixed set of equal Slots allocated once, at start, from an
// Allocator, so the memory the pipeline holds is fixed by configuration
// (slots × slot bytes) whatever the dataset size or the consumer's pace.
//
// # Concurrency contract
//
// HostPool hands out nothing by itself: the pipeline's scheduler owns the
// list of free slots and passes each Slot to one owner at a time (a decoder
// writes its sample region, the uploader, then the consumer reads it). Slot
// and HostPool methods that only read (Bytes, ID, Len, SlotBytes) are safe
// for concurrent use. Close must be called once, after every slot has come
// back; using a slot's bytes after Close is a bug (with MmapAllocator it is
// a segmentation fault).
//
// Uploader implementations must be safe for use by one goroutine at a time
// (the pipeline has one uploader actor per rank); Upload may block and must
// return promptly with ctx.Err() when ctx is done. A SlotReleaser's
// ReleaseSlot is called from any goroutine. Driver and Device
// implementations are safe for concurrent use.
package gpu
