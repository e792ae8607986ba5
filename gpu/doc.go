// Package gpu owns the memory a batch is assembled in and the hand-off of a
// full batch to the device.
//
// # The seam
//
// Two small interfaces separate the pipeline (package actors) from the
// accelerator:
//
//   - Allocator gives page-aligned host memory. The plain-Go allocators here
//     are MmapAllocator (anonymous private mappings, the default on unix:
//     page-aligned, outside the Go heap, never scanned or moved by the
//     garbage collector) and HeapAllocator (Go heap memory aligned by
//     over-allocation: the race detector sees accesses to it, so tests use
//     it). A CUDA build (tag `cuda && cgo`, written later) adds an Allocator
//     on cuMemHostAlloc: pinned (page-locked) memory, which the driver can
//     copy to the device with DMA and which cuMemcpyHtoDAsync requires to be
//     truly asynchronous.
//   - Uploader hands a filled slot to the device. HostUploader, the plain-Go
//     one, does nothing: the batch is already in host memory and the
//     consumer (a Go trainer, or the shared-memory ring) reads it there. The
//     CUDA Uploader will keep one device buffer per slot (allocated once,
//     like the slots), issue cuMemcpyHtoDAsync on its stream, and make
//     Upload return once the copy has completed (or record an event the
//     consumer waits on); DevicePointer(slot) names the device copy.
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
// return promptly with ctx.Err() when ctx is done.
package gpu
