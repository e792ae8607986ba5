package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// UploaderConfig configures a DeviceUploader. The zero value registers the
// pool's memory in place, falls back (counted) when that fails, and does
// not export device buffers.
type UploaderConfig struct {
	// Host is the host path wanted. Zero: HostRegister.
	Host HostMode
	// NoFallback makes a failure of Host an error at start. Zero: fall
	// back along register -> staged -> pageable, each with its reason in
	// Stats.Fallbacks (a locked-memory limit should slow a run, not stop
	// it; the stats say why it is slow).
	NoFallback bool
	// Export makes the device buffers exportable to another process
	// (CUDA IPC): Export() then returns the handle the feed sends.
	Export bool
}

// DeviceSlot is where a slot's batch lies on the device after Upload.
type DeviceSlot struct {
	Device int       // ordinal
	Ptr    DevicePtr // the slot's first byte
	Offset int64     // from the base of the uploader's device allocation
	Bytes  int64     // the slot's device buffer size
}

// DeviceExport names an uploader's device allocation across processes.
type DeviceExport struct {
	Info   DeviceInfo
	Handle IPCHandle
	Base   DevicePtr
	Size   int64
	u      *DeviceUploader
}

// Hold keeps the allocation from being freed, even after the uploader's
// Close, until release is called: the feed holds an export for as long
// as a connection that was sent its handle lasts, since the trainer may
// keep it open until then (a cluster rank's pipeline can be replaced
// under a connection). ok is false when the allocation is gone already.
func (e *DeviceExport) Hold() (release func(), ok bool) {
	u := e.u
	if u == nil {
		return func() {}, true
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.mu.freed {
		return nil, false
	}
	u.mu.holds++
	var once sync.Once
	return func() { once.Do(u.unhold) }, true
}

func (u *DeviceUploader) unhold() {
	u.mu.Lock()
	u.mu.holds--
	last := u.mu.holds == 0 && u.mu.closed && !u.mu.freed
	if last {
		u.mu.freed = true
	}
	u.mu.Unlock()
	if last {
		u.teardown() // nobody to report to: Close returned long ago
	}
}

// UploaderStats counts an uploader's work.
type UploaderStats struct {
	Mode      HostMode
	Fallbacks []Fallback
	Uploads   int64
	Bytes     int64
	// WaitedPrevious counts uploads that first waited for an orphaned
	// copy into the same slot (one whose Upload gave up).
	WaitedPrevious int64
	// BadReleases counts releases of a slot not held (ignored).
	BadReleases int64
	Held        int // device buffers held by consumers now
}

// DeviceUploader is the Uploader of a device: one device allocation
// (slots x stride, made once), one stream and one event per slot, and the
// pool's host memory page-locked in place (or a fallback). Upload enqueues
// the slot's copy on the slot's stream, records the slot's event after it
// and returns once the event completed; the slot's device buffer is then
// held until ReleaseSlot (the pipeline calls it when the batch is
// released), and an upload into a held slot is refused.
//
// Upload is called by one goroutine at a time (the rank's uploader actor);
// ReleaseSlot, Slot, Export and Stats are safe for concurrent use. Close
// is called once, after every batch is released (the pipeline closes its
// uploader right before it frees the pool); the Device stays open (its
// owner closes it).
type DeviceUploader struct {
	dev     Device
	info    DeviceInfo
	pool    *HostPool
	cfg     UploaderConfig
	mode    HostMode
	falls   []Fallback
	base    DevicePtr
	size    int64
	streams []Stream
	events  []Event
	staging []byte // HostStaged: one pinned buffer per slot, pool-strided
	reg     []byte // HostRegister: the pool memory registered
	handle  IPCHandle

	mu struct {
		sync.Mutex
		book                           slotBook
		closed                         bool
		holds                          int  // DeviceExport.Hold not yet released
		freed                          bool // teardown ran or is running
		uploads, bytes, waited, badRel int64
	}
}

var _ Uploader = (*DeviceUploader)(nil)

// NewDeviceUploader sets up pool's slots on dev. On error, everything it
// made is undone.
func NewDeviceUploader(dev Device, pool *HostPool, cfg UploaderConfig) (_ *DeviceUploader, err error) {
	if cfg.Host >= numHostModes {
		return nil, fmt.Errorf("gpu: uploader: %v", cfg.Host)
	}
	u := &DeviceUploader{dev: dev, info: dev.Info(), pool: pool, cfg: cfg}
	u.mu.book = newSlotBook(pool.Len())
	defer func() {
		if err != nil {
			err = errors.Join(err, u.teardown())
		}
	}()
	var tried []error
	modes := hostModes(cfg.Host, !cfg.NoFallback)
	for i, m := range modes {
		e := u.setupHost(m)
		if e == nil {
			u.mode = m
			break
		}
		tried = append(tried, fmt.Errorf("%v: %w", m, e))
		if i+1 == len(modes) {
			return nil, fmt.Errorf("gpu: device %d: host memory for %d slots: %w", u.info.Ordinal, pool.Len(), errors.Join(tried...))
		}
		u.falls = append(u.falls, Fallback{From: m, To: modes[i+1], Reason: e.Error()})
	}
	u.size = int64(pool.stride) * int64(pool.Len())
	if u.base, err = dev.AllocDevice(u.size); err != nil {
		u.base = 0
		return nil, fmt.Errorf("gpu: device %d: %d slots of %d bytes: %w", u.info.Ordinal, pool.Len(), pool.stride, err)
	}
	for range pool.Len() {
		s, err := dev.NewStream()
		if err != nil {
			return nil, fmt.Errorf("gpu: device %d: stream: %w", u.info.Ordinal, err)
		}
		u.streams = append(u.streams, s)
		e, err := dev.NewEvent()
		if err != nil {
			return nil, fmt.Errorf("gpu: device %d: event: %w", u.info.Ordinal, err)
		}
		u.events = append(u.events, e)
	}
	if cfg.Export {
		if u.handle, err = dev.IPCHandle(u.base); err != nil {
			return nil, fmt.Errorf("gpu: device %d: export slots: %w", u.info.Ordinal, err)
		}
	}
	return u, nil
}

func (u *DeviceUploader) setupHost(m HostMode) error {
	switch m {
	case HostRegister:
		if _, ok := u.pool.Allocator().(PinnedAllocator); ok {
			return nil // page-locked already (portable: any device's context)
		}
		if err := u.dev.RegisterHost(u.pool.mem); err != nil {
			return err
		}
		u.reg = u.pool.mem
	case HostStaged:
		b, err := u.dev.AllocPinned(len(u.pool.mem))
		if err != nil {
			return err
		}
		u.staging = b
	}
	return nil
}

// teardown frees what the uploader made, after the device's work is done.
func (u *DeviceUploader) teardown() error {
	errs := []error{u.dev.Synchronize()}
	for _, e := range u.events {
		errs = append(errs, u.dev.DestroyEvent(e))
	}
	for _, s := range u.streams {
		errs = append(errs, u.dev.DestroyStream(s))
	}
	u.events, u.streams = nil, nil
	if u.base != 0 {
		errs = append(errs, u.dev.FreeDevice(u.base))
		u.base = 0
	}
	if u.reg != nil {
		errs = append(errs, u.dev.UnregisterHost(u.reg))
		u.reg = nil
	}
	if u.staging != nil {
		errs = append(errs, u.dev.FreePinned(u.staging))
		u.staging = nil
	}
	return errors.Join(errs...)
}

// Upload copies the first n bytes of s to its device buffer and returns
// once the copy completed (the slot's event), or ctx.Err() once ctx is
// done; then the copy goes on, and the next upload into the slot waits
// for it first.
func (u *DeviceUploader) Upload(ctx context.Context, s *Slot, n int) error {
	i := s.ID()
	if i < 0 || i >= u.pool.Len() || u.pool.Slot(i) != s {
		return fmt.Errorf("gpu: upload of a slot not of this uploader's pool")
	}
	if n < 0 || n > len(s.buf) {
		return fmt.Errorf("gpu: upload %d bytes of a %d-byte slot", n, len(s.buf))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for {
		u.mu.Lock()
		if u.mu.closed {
			u.mu.Unlock()
			return ErrClosed
		}
		v, err := u.mu.book.begin(i)
		u.mu.Unlock()
		if err != nil {
			return err
		}
		if v == beginCopy {
			break
		}
		if err := u.dev.Wait(ctx, u.events[i]); err != nil {
			return err
		}
		u.mu.Lock()
		u.mu.book.previousDone(i)
		u.mu.waited++
		u.mu.Unlock()
	}
	if n > 0 {
		src := s.buf[:n]
		if u.mode == HostStaged {
			off := i * u.pool.stride
			src = u.staging[off : off+n]
			copy(src, s.buf[:n])
		}
		if err := u.dev.CopyHtoDAsync(u.ptr(i), src, u.streams[i]); err != nil {
			u.mu.Lock()
			u.mu.book.notStarted(i)
			u.mu.Unlock()
			return fmt.Errorf("gpu: device %d: copy slot %d: %w", u.info.Ordinal, i, err)
		}
		err := u.dev.Record(u.events[i], u.streams[i])
		if err == nil {
			err = u.dev.Wait(ctx, u.events[i])
		}
		if err != nil {
			u.mu.Lock()
			u.mu.book.gaveUp(i)
			u.mu.Unlock()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("gpu: device %d: copy slot %d: %w", u.info.Ordinal, i, err)
		}
	}
	u.mu.Lock()
	u.mu.book.copied(i)
	u.mu.uploads++
	u.mu.bytes += int64(n)
	u.mu.Unlock()
	return nil
}

func (u *DeviceUploader) ptr(i int) DevicePtr { return u.base + DevicePtr(i*u.pool.stride) }

// ReleaseSlot gives slot i's device buffer back: its consumer is done
// reading it. A release of a slot not held is counted and ignored.
func (u *DeviceUploader) ReleaseSlot(i int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if i < 0 || i >= len(u.mu.book.st) || u.mu.book.release(i) != nil {
		u.mu.badRel++
	}
}

// Slot is where slot i lies on the device.
func (u *DeviceUploader) Slot(i int) DeviceSlot {
	return DeviceSlot{Device: u.info.Ordinal, Ptr: u.ptr(i), Offset: int64(i * u.pool.stride), Bytes: int64(u.pool.stride)}
}

// Export returns the device allocation's IPC handle; ok is false unless
// UploaderConfig.Export was set.
func (u *DeviceUploader) Export() (DeviceExport, bool) {
	if !u.cfg.Export {
		return DeviceExport{}, false
	}
	return DeviceExport{Info: u.info, Handle: u.handle, Base: u.base, Size: u.size, u: u}, true
}

// Stats returns a snapshot of the uploader's counters.
func (u *DeviceUploader) Stats() UploaderStats {
	u.mu.Lock()
	defer u.mu.Unlock()
	return UploaderStats{Mode: u.mode, Fallbacks: append([]Fallback(nil), u.falls...), Uploads: u.mu.uploads, Bytes: u.mu.bytes,
		WaitedPrevious: u.mu.waited, BadReleases: u.mu.badRel, Held: u.mu.book.count(slotHeld)}
}

// Close waits for the device's work, then frees the device buffers,
// streams and events and unregisters (or frees) the host memory; while an
// export is held (DeviceExport.Hold), that happens at its last release
// instead. Later calls return nil.
func (u *DeviceUploader) Close() error {
	u.mu.Lock()
	if u.mu.closed {
		u.mu.Unlock()
		return nil
	}
	u.mu.closed = true
	now := u.mu.holds == 0
	if now {
		u.mu.freed = true
	}
	u.mu.Unlock()
	if !now {
		return nil
	}
	return u.teardown()
}
