package gpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"unsafe"
)

// Twin is an in-memory Driver and its Devices, the way memberlist ships a
// mock transport beside the real one: device memory is Go slices, a stream
// is a FIFO queue, an event completes once the work enqueued before it on
// its stream has. It lets the bookkeeping above the seam (slot lifetimes,
// stream and event use, fallbacks, IPC handle lifetimes) be tested on a
// machine with no GPU, under -race, with no timing.
//
// Fidelity where it matters:
//   - A copy from page-locked memory (AllocPinned, RegisterHost) reads its
//     source when it completes, as the DMA engine does: a caller that
//     writes a slot before its copy's event completed sees other bytes on
//     the device, and the race detector sees the write race the copy.
//     A copy from pageable memory is staged when enqueued, as the CUDA
//     driver does.
//   - In manual mode (TwinConfig.Manual) work completes only when the test
//     calls Advance or AdvanceStream, so "in flight" is a state a test can
//     hold a slot in. Otherwise work completes as it is enqueued.
//   - Frees that a real device would turn into corruption are refused and
//     recorded as violations: freeing device memory another process still
//     has open through IPC, unregistering or freeing host memory a pending
//     copy reads, a copy out of an allocation's bounds.
//
// Fail injects errors by operation, the way storage/faulty wraps a Store.
// Safe for concurrent use.
type Twin struct {
	cfg TwinConfig
	mu  struct {
		sync.Mutex
		devs       []*twinDevice
		fail       map[TwinOp][]error
		seq        uint64
		changed    chan struct{} // closed and replaced whenever work completes
		violations []string
		imports    map[DevicePtr]int // IPC opens by allocation base
		waiters    int
		copies     []TwinCopy
	}
}

// TwinConfig configures a Twin. The zero value is one device of 1 GiB that
// completes work as it is enqueued.
type TwinConfig struct {
	// Devices is how many devices are visible. 0: 1; negative: none
	// (Devices returns ErrNoDevice).
	Devices int
	// DeviceBytes is each device's memory. 0: 1 GiB.
	DeviceBytes int64
	// Manual: enqueued work completes only on Advance / AdvanceStream.
	Manual bool
}

// TwinOp names a Device operation for Fail.
type TwinOp string

// Operations Fail can target.
const (
	OpOpen         TwinOp = "open"
	OpAllocPinned  TwinOp = "alloc-pinned"
	OpRegisterHost TwinOp = "register-host"
	OpAllocDevice  TwinOp = "alloc-device"
	OpNewStream    TwinOp = "new-stream"
	OpNewEvent     TwinOp = "new-event"
	OpCopy         TwinOp = "copy"
	OpRecord       TwinOp = "record"
	OpIPCHandle    TwinOp = "ipc-handle"
)

// TwinCopy is one completed host-to-device copy, for tests of the stream
// discipline.
type TwinCopy struct {
	Device int
	Stream Stream
	Dst    DevicePtr
	Bytes  int
	Pinned bool // from page-locked memory (read at completion)
}

// TwinStats counts what a Twin holds now and did.
type TwinStats struct {
	Contexts, Allocations, Pinned, Registered, Streams, Events int // live now
	Pending                                                    int // enqueued, not completed
	Copies, PinnedCopies, PageableCopies                       int // completed
	Waiters                                                    int // goroutines in Wait now
	Imports                                                    int // IPC opens not closed
}

// Live is the number of resources not yet released: 0 after a clean
// shutdown.
func (s TwinStats) Live() int {
	return s.Contexts + s.Allocations + s.Pinned + s.Registered + s.Streams + s.Events + s.Imports
}

var _ Driver = (*Twin)(nil)

// NewTwin returns a twin driver.
func NewTwin(cfg TwinConfig) *Twin {
	if cfg.Devices == 0 {
		cfg.Devices = 1
	}
	if cfg.DeviceBytes == 0 {
		cfg.DeviceBytes = 1 << 30
	}
	t := &Twin{cfg: cfg}
	t.mu.fail = map[TwinOp][]error{}
	t.mu.changed = make(chan struct{})
	t.mu.imports = map[DevicePtr]int{}
	for i := 0; i < cfg.Devices; i++ {
		t.mu.devs = append(t.mu.devs, &twinDevice{t: t, ordinal: i})
	}
	return t
}

// Name returns "twin".
func (t *Twin) Name() string { return "twin" }

// Devices lists the twin's devices.
func (t *Twin) Devices() ([]DeviceInfo, error) {
	if t.cfg.Devices < 0 {
		return nil, ErrNoDevice
	}
	var out []DeviceInfo
	for i := range t.cfg.Devices {
		out = append(out, t.info(i))
	}
	return out, nil
}

func (t *Twin) info(i int) DeviceInfo {
	return DeviceInfo{Ordinal: i, Name: "twin", UUID: fmt.Sprintf("GPU-7717a000-0000-4000-8000-%012x", i), TotalMem: t.cfg.DeviceBytes}
}

// Open opens device ordinal. Opening an open device returns it again (one
// context per device), counted: as with the CUDA driver, the last Close
// closes it.
func (t *Twin) Open(ordinal int) (Device, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ordinal < 0 || ordinal >= len(t.mu.devs) {
		return nil, fmt.Errorf("gpu: twin: device %d of %d: %w", ordinal, len(t.mu.devs), ErrNoDevice)
	}
	if err := t.failLocked(OpOpen); err != nil {
		return nil, err
	}
	d := t.mu.devs[ordinal]
	d.refs++
	if !d.open {
		d.open = true
		d.allocs = map[DevicePtr][]byte{}
		d.pinned = map[uintptr]int{}
		d.registered = map[uintptr]int{}
		d.streams = map[Stream][]*twinOp{}
		d.destroyed = map[Stream]bool{}
		d.events = map[Event]*twinEvent{}
		d.next = DevicePtr(0x7f00_0000_0000) + DevicePtr(ordinal)<<36
	}
	return d, nil
}

// Fail makes the next len(errs) calls of op fail, with errs in turn.
func (t *Twin) Fail(op TwinOp, errs ...error) {
	t.mu.Lock()
	t.mu.fail[op] = append(t.mu.fail[op], errs...)
	t.mu.Unlock()
}

func (t *Twin) failLocked(op TwinOp) error {
	if q := t.mu.fail[op]; len(q) > 0 {
		t.mu.fail[op] = q[1:]
		return fmt.Errorf("gpu: twin %s: %w", op, q[0])
	}
	return nil
}

// Advance completes up to n pieces of enqueued work, oldest first across
// every device and stream, and returns how many it completed.
func (t *Twin) Advance(n int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	done := 0
	for ; done < n; done++ {
		var best *twinDevice
		var bestS Stream
		var bestSeq uint64
		for _, d := range t.mu.devs {
			for s, q := range d.streams {
				if len(q) > 0 && (best == nil || q[0].seq < bestSeq) {
					best, bestS, bestSeq = d, s, q[0].seq
				}
			}
		}
		if best == nil {
			break
		}
		best.completeLocked(bestS)
	}
	if done > 0 {
		t.signalLocked()
	}
	return done
}

// AdvanceStream completes up to n pieces of work on device's stream s.
func (t *Twin) AdvanceStream(device int, s Stream, n int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.mu.devs[device]
	done := 0
	for ; done < n && len(d.streams[s]) > 0; done++ {
		d.completeLocked(s)
	}
	if done > 0 {
		t.signalLocked()
	}
	return done
}

func (t *Twin) signalLocked() {
	close(t.mu.changed)
	t.mu.changed = make(chan struct{})
}

// OpenIPC opens an exported handle as another process would
// (cuIpcOpenMemHandle) and returns the allocation's base; ReadIPC reads
// through it; CloseIPC closes it.
func (t *Twin) OpenIPC(h IPCHandle) (device int, base DevicePtr, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	device, base, ok := decodeTwinHandle(h)
	if !ok || device >= len(t.mu.devs) {
		return 0, 0, errors.New("gpu: twin: not a twin IPC handle")
	}
	if _, ok := t.mu.devs[device].allocs[base]; !ok {
		return 0, 0, fmt.Errorf("gpu: twin: IPC handle of freed memory %#x", base)
	}
	t.mu.imports[base]++
	return device, base, nil
}

// CloseIPC closes one OpenIPC of base.
func (t *Twin) CloseIPC(base DevicePtr) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.imports[base] == 0 {
		return fmt.Errorf("gpu: twin: close of IPC memory %#x not open", base)
	}
	if t.mu.imports[base]--; t.mu.imports[base] == 0 {
		delete(t.mu.imports, base)
	}
	return nil
}

// ReadDevice returns a copy of n bytes of device memory at p (what a
// consumer on the device would see now).
func (t *Twin) ReadDevice(device int, p DevicePtr, n int) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	mem, off, err := t.mu.devs[device].findLocked(p, n)
	if err != nil {
		return nil, err
	}
	return slices.Clone(mem[off : off+n]), nil
}

// Violations lists what a real device would have turned into corruption
// or a crash, in the order it happened.
func (t *Twin) Violations() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.mu.violations)
}

// Copies lists the completed host-to-device copies, in completion order.
func (t *Twin) Copies() []TwinCopy {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.mu.copies)
}

// Stats counts the twin's live resources and completed work.
func (t *Twin) Stats() TwinStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	var s TwinStats
	for _, d := range t.mu.devs {
		if d.open {
			s.Contexts++
		}
		s.Allocations += len(d.allocs)
		s.Pinned += len(d.pinned)
		s.Registered += len(d.registered)
		s.Streams += len(d.streams) - len(d.destroyed)
		s.Events += len(d.events)
		for _, q := range d.streams {
			s.Pending += len(q)
		}
	}
	for _, c := range t.mu.copies {
		s.Copies++
		if c.Pinned {
			s.PinnedCopies++
		} else {
			s.PageableCopies++
		}
	}
	for _, n := range t.mu.imports {
		s.Imports += n
	}
	s.Waiters = t.mu.waiters
	return s
}

func (t *Twin) violateLocked(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	t.mu.violations = append(t.mu.violations, msg)
	return errors.New("gpu: twin: " + msg)
}

type twinDevice struct {
	t       *Twin
	ordinal int
	// Guarded by t.mu:
	open       bool
	refs       int
	allocs     map[DevicePtr][]byte
	pinned     map[uintptr]int // host address -> bytes
	registered map[uintptr]int
	streams    map[Stream][]*twinOp
	destroyed  map[Stream]bool // destroyed with work queued: it still runs, as in CUDA
	events     map[Event]*twinEvent
	next       DevicePtr
	ids        uint64
	used       int64
}

type twinOp struct {
	seq    uint64
	copy   bool
	dst    []byte // device bytes
	dstPtr DevicePtr
	src    []byte // pinned: the host memory itself; pageable: a snapshot
	pinned bool
	event  *twinEvent
	gen    uint64
}

type twinEvent struct {
	recorded, completed uint64 // generations
}

var _ Device = (*twinDevice)(nil)

func (d *twinDevice) Info() DeviceInfo { return d.t.info(d.ordinal) }

func (d *twinDevice) lock() error {
	d.t.mu.Lock()
	if !d.open {
		d.t.mu.Unlock()
		return ErrClosed
	}
	return nil
}

func (d *twinDevice) unlock() { d.t.mu.Unlock() }

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func (d *twinDevice) AllocPinned(size int) ([]byte, error) {
	if err := d.lock(); err != nil {
		return nil, err
	}
	defer d.unlock()
	if err := d.t.failLocked(OpAllocPinned); err != nil {
		return nil, err
	}
	b, err := HeapAllocator{}.AllocHost(size)
	if err != nil {
		return nil, err
	}
	d.pinned[addr(b)] = len(b)
	return b, nil
}

func (d *twinDevice) FreePinned(b []byte) error {
	if err := d.lock(); err != nil {
		return err
	}
	defer d.unlock()
	if _, ok := d.pinned[addr(b)]; !ok {
		return d.t.violateLocked("free of pinned memory %#x not allocated", addr(b))
	}
	if d.readingLocked(b) {
		return d.t.violateLocked("free of pinned memory %#x a pending copy reads", addr(b))
	}
	delete(d.pinned, addr(b))
	return nil
}

func (d *twinDevice) RegisterHost(b []byte) error {
	if err := d.lock(); err != nil {
		return err
	}
	defer d.unlock()
	if err := d.t.failLocked(OpRegisterHost); err != nil {
		return err
	}
	if len(b) == 0 || addr(b)%uintptr(PageSize) != 0 {
		return fmt.Errorf("gpu: twin: register %d bytes at %#x: need a page-aligned start", len(b), addr(b))
	}
	if d.lockedHostLocked(b) {
		return fmt.Errorf("gpu: twin: register %#x: already page-locked", addr(b))
	}
	d.registered[addr(b)] = len(b)
	return nil
}

func (d *twinDevice) UnregisterHost(b []byte) error {
	if err := d.lock(); err != nil {
		return err
	}
	defer d.unlock()
	if _, ok := d.registered[addr(b)]; !ok {
		return d.t.violateLocked("unregister of %#x not registered", addr(b))
	}
	if d.readingLocked(b) {
		return d.t.violateLocked("unregister of %#x a pending copy reads", addr(b))
	}
	delete(d.registered, addr(b))
	return nil
}

// lockedHostLocked reports whether b lies in page-locked memory.
func (d *twinDevice) lockedHostLocked(b []byte) bool {
	p := addr(b)
	for _, m := range []map[uintptr]int{d.pinned, d.registered} {
		for base, n := range m {
			if p >= base && p+uintptr(len(b)) <= base+uintptr(n) {
				return true
			}
		}
	}
	return false
}

// readingLocked reports whether a pending copy reads host memory in b.
func (d *twinDevice) readingLocked(b []byte) bool {
	lo, hi := addr(b), addr(b)+uintptr(len(b))
	for _, q := range d.streams {
		for _, op := range q {
			if op.copy && op.pinned && len(op.src) > 0 {
				if p := addr(op.src); p < hi && p+uintptr(len(op.src)) > lo {
					return true
				}
			}
		}
	}
	return false
}

func (d *twinDevice) AllocDevice(size int64) (DevicePtr, error) {
	if err := d.lock(); err != nil {
		return 0, err
	}
	defer d.unlock()
	if err := d.t.failLocked(OpAllocDevice); err != nil {
		return 0, err
	}
	if size <= 0 || d.used+size > d.t.cfg.DeviceBytes {
		return 0, fmt.Errorf("gpu: twin: alloc %d device bytes (%d of %d in use): out of memory", size, d.used, d.t.cfg.DeviceBytes)
	}
	p := d.next
	d.next += DevicePtr(roundUp(int(size), 1<<21)) // 2 MiB, as cuMemAlloc's granularity
	d.allocs[p] = make([]byte, size)
	d.used += size
	return p, nil
}

func (d *twinDevice) FreeDevice(p DevicePtr) error {
	if err := d.lock(); err != nil {
		return err
	}
	defer d.unlock()
	mem, ok := d.allocs[p]
	if !ok {
		return d.t.violateLocked("free of device memory %#x not allocated", p)
	}
	if n := d.t.mu.imports[p]; n > 0 {
		return d.t.violateLocked("free of device memory %#x that %d IPC importer(s) still have open", p, n)
	}
	for _, q := range d.streams {
		for _, op := range q {
			if op.copy && op.dstPtr >= p && op.dstPtr < p+DevicePtr(len(mem)) {
				return d.t.violateLocked("free of device memory %#x a pending copy writes", p)
			}
		}
	}
	d.used -= int64(len(mem))
	delete(d.allocs, p)
	return nil
}

func (d *twinDevice) findLocked(p DevicePtr, n int) ([]byte, int, error) {
	for base, mem := range d.allocs {
		if p >= base && p < base+DevicePtr(len(mem)) {
			off := int(p - base)
			if n < 0 || off+n > len(mem) {
				return nil, 0, d.t.violateLocked("access of %d bytes at %#x past the end of allocation %#x (%d bytes)", n, p, base, len(mem))
			}
			return mem, off, nil
		}
	}
	return nil, 0, d.t.violateLocked("access of device memory %#x not allocated", p)
}

func (d *twinDevice) NewStream() (Stream, error) {
	if err := d.lock(); err != nil {
		return 0, err
	}
	defer d.unlock()
	if err := d.t.failLocked(OpNewStream); err != nil {
		return 0, err
	}
	d.ids++
	s := Stream(d.ids)
	d.streams[s] = nil
	return s, nil
}

func (d *twinDevice) DestroyStream(s Stream) error {
	if err := d.lock(); err != nil {
		return err
	}
	defer d.unlock()
	q, ok := d.streams[s]
	if !ok || d.destroyed[s] {
		return d.t.violateLocked("destroy of stream %d not created", s)
	}
	// CUDA returns at once and lets the work finish later: so does the
	// twin, and memory that work uses must not be freed before it has.
	if len(q) == 0 {
		delete(d.streams, s)
	} else {
		d.destroyed[s] = true
	}
	return nil
}

func (d *twinDevice) NewEvent() (Event, error) {
	if err := d.lock(); err != nil {
		return 0, err
	}
	defer d.unlock()
	if err := d.t.failLocked(OpNewEvent); err != nil {
		return 0, err
	}
	d.ids++
	e := Event(d.ids)
	d.events[e] = &twinEvent{}
	return e, nil
}

func (d *twinDevice) DestroyEvent(e Event) error {
	if err := d.lock(); err != nil {
		return err
	}
	defer d.unlock()
	if _, ok := d.events[e]; !ok {
		return d.t.violateLocked("destroy of event %d not created", e)
	}
	delete(d.events, e)
	return nil
}

func (d *twinDevice) CopyHtoDAsync(dst DevicePtr, src []byte, s Stream) error {
	if err := d.lock(); err != nil {
		return err
	}
	defer d.unlock()
	if err := d.t.failLocked(OpCopy); err != nil {
		return err
	}
	if _, ok := d.streams[s]; !ok || d.destroyed[s] {
		return fmt.Errorf("gpu: twin: copy on stream %d not created", s)
	}
	mem, off, err := d.findLocked(dst, len(src))
	if err != nil {
		return err
	}
	op := &twinOp{copy: true, dst: mem[off : off+len(src)], dstPtr: dst, pinned: d.lockedHostLocked(src)}
	if op.pinned {
		op.src = src
	} else {
		op.src = slices.Clone(src) // the driver stages pageable memory before returning
	}
	d.enqueueLocked(s, op)
	return nil
}

func (d *twinDevice) enqueueLocked(s Stream, op *twinOp) {
	d.t.mu.seq++
	op.seq = d.t.mu.seq
	d.streams[s] = append(d.streams[s], op)
	if !d.t.cfg.Manual {
		d.completeLocked(s)
		d.t.signalLocked()
	}
}

// completeLocked completes the oldest work on s.
func (d *twinDevice) completeLocked(s Stream) {
	q := d.streams[s]
	op := q[0]
	d.streams[s] = q[1:]
	if len(q) == 1 && d.destroyed[s] {
		delete(d.streams, s)
		delete(d.destroyed, s)
	}
	if op.copy {
		copy(op.dst, op.src)
		d.t.mu.copies = append(d.t.mu.copies, TwinCopy{Device: d.ordinal, Stream: s, Dst: op.dstPtr, Bytes: len(op.src), Pinned: op.pinned})
		return
	}
	if op.event != nil && op.gen > op.event.completed {
		op.event.completed = op.gen
	}
}

func (d *twinDevice) CopyDtoH(dst []byte, src DevicePtr) error {
	if err := d.lock(); err != nil {
		return err
	}
	defer d.unlock()
	for s, q := range d.streams { // synchronous: after everything enqueued
		for range q {
			d.completeLocked(s)
		}
	}
	d.t.signalLocked()
	mem, off, err := d.findLocked(src, len(dst))
	if err != nil {
		return err
	}
	copy(dst, mem[off:off+len(dst)])
	return nil
}

func (d *twinDevice) Synchronize() error {
	if err := d.lock(); err != nil {
		return err
	}
	defer d.unlock()
	for s, q := range d.streams {
		for range q {
			d.completeLocked(s)
		}
	}
	d.t.signalLocked()
	return nil
}

func (d *twinDevice) Record(e Event, s Stream) error {
	if err := d.lock(); err != nil {
		return err
	}
	defer d.unlock()
	if err := d.t.failLocked(OpRecord); err != nil {
		return err
	}
	ev, ok := d.events[e]
	if !ok {
		return fmt.Errorf("gpu: twin: record of event %d not created", e)
	}
	if _, ok := d.streams[s]; !ok || d.destroyed[s] {
		return fmt.Errorf("gpu: twin: record on stream %d not created", s)
	}
	ev.recorded++
	d.enqueueLocked(s, &twinOp{event: ev, gen: ev.recorded})
	return nil
}

func (d *twinDevice) Query(e Event) (bool, error) {
	if err := d.lock(); err != nil {
		return false, err
	}
	defer d.unlock()
	ev, ok := d.events[e]
	if !ok {
		return false, fmt.Errorf("gpu: twin: query of event %d not created", e)
	}
	return ev.completed >= ev.recorded, nil
}

func (d *twinDevice) Wait(ctx context.Context, e Event) error {
	for {
		if err := d.lock(); err != nil {
			return err
		}
		ev, ok := d.events[e]
		if !ok {
			d.unlock()
			return fmt.Errorf("gpu: twin: wait on event %d not created", e)
		}
		if ev.completed >= ev.recorded {
			d.unlock()
			return nil
		}
		ch := d.t.mu.changed
		d.t.mu.waiters++
		d.unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		d.t.mu.Lock()
		d.t.mu.waiters--
		d.t.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func (d *twinDevice) IPCHandle(p DevicePtr) (IPCHandle, error) {
	if err := d.lock(); err != nil {
		return IPCHandle{}, err
	}
	defer d.unlock()
	if err := d.t.failLocked(OpIPCHandle); err != nil {
		return IPCHandle{}, err
	}
	if _, ok := d.allocs[p]; !ok {
		return IPCHandle{}, fmt.Errorf("gpu: twin: IPC handle of %#x: not an allocation's base", p)
	}
	return encodeTwinHandle(d.ordinal, p), nil
}

func (d *twinDevice) Close() error {
	d.t.mu.Lock()
	defer d.t.mu.Unlock()
	if !d.open {
		return nil
	}
	if d.refs--; d.refs > 0 {
		return nil
	}
	var leaks []string
	for _, kv := range []struct {
		what string
		n    int
	}{{"device allocations", len(d.allocs)}, {"pinned buffers", len(d.pinned)}, {"host registrations", len(d.registered)},
		{"streams", len(d.streams) - len(d.destroyed)}, {"events", len(d.events)}} {
		if kv.n > 0 {
			leaks = append(leaks, fmt.Sprintf("%d %s", kv.n, kv.what))
		}
	}
	sort.Strings(leaks)
	d.open = false
	if len(leaks) > 0 {
		return d.t.violateLocked("device %d closed with %v still live", d.ordinal, leaks)
	}
	return nil
}

var twinMagic = [8]byte{'l', 's', 't', 'w', 'i', 'n', 0, 1}

func encodeTwinHandle(device int, p DevicePtr) IPCHandle {
	var h IPCHandle
	copy(h[:8], twinMagic[:])
	for i := 0; i < 8; i++ {
		h[8+i] = byte(uint64(p) >> (8 * i))
	}
	h[16] = byte(device)
	return h
}

func decodeTwinHandle(h IPCHandle) (int, DevicePtr, bool) {
	if [8]byte(h[:8]) != twinMagic {
		return 0, 0, false
	}
	var p uint64
	for i := 0; i < 8; i++ {
		p |= uint64(h[8+i]) << (8 * i)
	}
	return int(h[16]), DevicePtr(p), true
}
