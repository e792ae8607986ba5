package gpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

const testSlotBytes = 3*4096 + 100

func newTestUploader(t *testing.T, tw *Twin, slots int, cfg UploaderConfig) (*HostPool, *DeviceUploader, Device) {
	t.Helper()
	dev, err := tw.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := NewHostPool(HeapAllocator{}, slots, testSlotBytes)
	if err != nil {
		t.Fatal(err)
	}
	u, err := NewDeviceUploader(dev, pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pool, u, dev
}

// closeAll closes in the pipeline's order and checks the twin holds
// nothing afterwards and saw no violation.
func closeAll(t *testing.T, tw *Twin, pool *HostPool, u *DeviceUploader, dev Device) {
	t.Helper()
	if err := u.Close(); err != nil {
		t.Errorf("uploader Close: %v", err)
	}
	if err := pool.Close(); err != nil {
		t.Errorf("pool Close: %v", err)
	}
	if err := dev.Close(); err != nil {
		t.Errorf("device Close: %v", err)
	}
	if st := tw.Stats(); st.Live() != 0 {
		t.Errorf("twin still holds %+v after Close", st)
	}
	if v := tw.Violations(); len(v) > 0 {
		t.Errorf("violations: %q", v)
	}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

func TestUploadRoundTripsEveryMode(t *testing.T) {
	for _, m := range []HostMode{HostRegister, HostStaged, HostPageable} {
		t.Run(m.String(), func(t *testing.T) {
			tw := NewTwin(TwinConfig{})
			pool, u, dev := newTestUploader(t, tw, 3, UploaderConfig{Host: m, NoFallback: true})
			for round := range 3 {
				for i := range pool.Len() {
					s := pool.Slot(i)
					fill(s.Bytes(), byte(10*round+i))
					n := len(s.Bytes()) - i*1000
					if err := u.Upload(context.Background(), s, n); err != nil {
						t.Fatal(err)
					}
					ds := u.Slot(i)
					got, err := tw.ReadDevice(0, ds.Ptr, n)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, s.Bytes()[:n]) {
						t.Fatalf("round %d slot %d: device bytes differ from the host's", round, i)
					}
					u.ReleaseSlot(i)
				}
			}
			st := u.Stats()
			if st.Mode != m || len(st.Fallbacks) != 0 || st.Uploads != 9 || st.BadReleases != 0 || st.Held != 0 {
				t.Fatalf("stats %+v", st)
			}
			tws := tw.Stats()
			if want := m != HostPageable; (tws.PinnedCopies == 9) != want || (tws.PageableCopies == 9) == want {
				t.Fatalf("mode %v: %d pinned, %d pageable copies", m, tws.PinnedCopies, tws.PageableCopies)
			}
			closeAll(t, tw, pool, u, dev)
		})
	}
}

// Each slot's copy goes on its own stream and its event is recorded on
// that stream after the copy: what lets copies of different slots overlap
// and makes "the event completed" mean "this slot's copy completed".
func TestUploadUsesTheSlotsStreamAndEvent(t *testing.T) {
	tw := NewTwin(TwinConfig{Manual: true})
	pool, u, dev := newTestUploader(t, tw, 4, UploaderConfig{})
	for _, i := range []int{2, 0, 3, 1, 2} {
		done := make(chan error, 1)
		go func() { done <- u.Upload(context.Background(), pool.Slot(i), 64) }()
		waitFor(t, func() bool { return tw.Stats().Waiters == 1 })
		if p := tw.Stats().Pending; p != 2 { // the copy and the event after it
			t.Fatalf("slot %d: %d pieces of work pending, want 2", i, p)
		}
		if got := tw.AdvanceStream(0, u.streams[i], 1); got != 1 { // the copy alone...
			t.Fatalf("slot %d: nothing on its stream", i)
		}
		if ok, _ := dev.Query(u.events[i]); ok {
			t.Fatalf("slot %d: event complete before the work enqueued ahead of it", i)
		}
		tw.AdvanceStream(0, u.streams[i], 1) // ...then its event
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		u.ReleaseSlot(i)
	}
	var streams []Stream
	for _, c := range tw.Copies() {
		streams = append(streams, c.Stream)
	}
	want := []Stream{u.streams[2], u.streams[0], u.streams[3], u.streams[1], u.streams[2]}
	if !slices.Equal(streams, want) {
		t.Fatalf("copies on streams %v, want %v", streams, want)
	}
	closeAll(t, tw, pool, u, dev)
}

func TestUploadRefusesAHeldSlot(t *testing.T) {
	tw := NewTwin(TwinConfig{})
	pool, u, dev := newTestUploader(t, tw, 2, UploaderConfig{})
	ctx := context.Background()
	if err := u.Upload(ctx, pool.Slot(0), 10); err != nil {
		t.Fatal(err)
	}
	if err := u.Upload(ctx, pool.Slot(0), 10); !errors.Is(err, ErrSlotHeld) {
		t.Fatalf("upload into a held slot = %v, want ErrSlotHeld", err)
	}
	if err := u.Upload(ctx, pool.Slot(1), 10); err != nil { // other slots are unaffected
		t.Fatal(err)
	}
	u.ReleaseSlot(0)
	u.ReleaseSlot(0) // a double release is counted, not fatal
	if err := u.Upload(ctx, pool.Slot(0), 10); err != nil {
		t.Fatalf("upload after release: %v", err)
	}
	if st := u.Stats(); st.BadReleases != 1 || st.Held != 2 {
		t.Fatalf("stats %+v", st)
	}
	other, _ := NewHostPool(HeapAllocator{}, 1, 10)
	if err := u.Upload(ctx, other.Slot(0), 1); err == nil {
		t.Fatal("upload of another pool's slot succeeded")
	}
	closeAll(t, tw, pool, u, dev)
}

// A canceled Upload leaves its copy running; the slot is not reused until
// that copy completed, and Close waits for it before freeing memory it
// reads.
func TestCanceledUploadHoldsTheSlotUntilItsCopyCompletes(t *testing.T) {
	tw := NewTwin(TwinConfig{Manual: true})
	pool, u, dev := newTestUploader(t, tw, 2, UploaderConfig{})
	s := pool.Slot(1)
	fill(s.Bytes(), 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Upload(ctx, s, 100) }()
	waitFor(t, func() bool { return tw.Stats().Waiters == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled upload = %v", err)
	}
	// The copy is still pending: a new upload into the slot waits for it
	// before enqueuing anything (and before anyone may write the slot).
	go func() { done <- u.Upload(context.Background(), s, 100) }()
	waitFor(t, func() bool { return tw.Stats().Waiters == 1 })
	if p := tw.Stats().Pending; p != 2 {
		t.Fatalf("%d pending, want the first upload's 2 only", p)
	}
	tw.Advance(2) // the first copy and its event
	waitFor(t, func() bool { return tw.Stats().Pending == 2 })
	tw.Advance(2)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := u.Stats(); st.WaitedPrevious != 1 || st.Uploads != 1 {
		t.Fatalf("stats %+v", st)
	}
	if n := len(tw.Copies()); n != 2 {
		t.Fatalf("%d copies, want 2", n)
	}
	u.ReleaseSlot(1)

	// An upload given up on and never retried: Close synchronizes before
	// it unregisters and frees (the twin refuses a free under a copy).
	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- u.Upload(ctx, pool.Slot(0), 100) }()
	waitFor(t, func() bool { return tw.Stats().Waiters == 1 })
	cancel()
	<-done
	closeAll(t, tw, pool, u, dev)
}

func TestHostFallbacks(t *testing.T) {
	memlock := errors.New("CUDA_ERROR_OUT_OF_MEMORY (locked-memory limit)")
	for _, c := range []struct {
		name   string
		fail   map[TwinOp]int
		cfg    UploaderConfig
		mode   HostMode
		falls  []HostMode // each fallback's From
		errHas string
	}{
		{name: "register works", mode: HostRegister},
		{name: "register fails", fail: map[TwinOp]int{OpRegisterHost: 1}, mode: HostStaged, falls: []HostMode{HostRegister}},
		{name: "register and pinned fail", fail: map[TwinOp]int{OpRegisterHost: 1, OpAllocPinned: 1}, mode: HostPageable,
			falls: []HostMode{HostRegister, HostStaged}},
		{name: "staged wanted, pinned fails", cfg: UploaderConfig{Host: HostStaged}, fail: map[TwinOp]int{OpAllocPinned: 1},
			mode: HostPageable, falls: []HostMode{HostStaged}},
		{name: "strict", cfg: UploaderConfig{NoFallback: true}, fail: map[TwinOp]int{OpRegisterHost: 1}, errHas: "register: gpu: twin register-host"},
		{name: "device memory", fail: map[TwinOp]int{OpAllocDevice: 1}, errHas: "slots of"},
		{name: "stream", fail: map[TwinOp]int{OpNewStream: 1}, errHas: "stream"},
		{name: "export", cfg: UploaderConfig{Export: true}, fail: map[TwinOp]int{OpIPCHandle: 1}, errHas: "export"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tw := NewTwin(TwinConfig{})
			for op, n := range c.fail {
				for range n {
					tw.Fail(op, memlock)
				}
			}
			dev, _ := tw.Open(0)
			pool, _ := NewHostPool(HeapAllocator{}, 2, testSlotBytes)
			u, err := NewDeviceUploader(dev, pool, c.cfg)
			if c.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), c.errHas) {
					t.Fatalf("err = %v, want one mentioning %q", err, c.errHas)
				}
				pool.Close()
				if err := dev.Close(); err != nil { // a failed start leaves nothing behind
					t.Fatal(err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			st := u.Stats()
			var froms []HostMode
			for _, f := range st.Fallbacks {
				froms = append(froms, f.From)
				if !strings.Contains(f.Reason, "locked-memory limit") {
					t.Errorf("fallback reason %q does not say why", f.Reason)
				}
			}
			if st.Mode != c.mode || !slices.Equal(froms, c.falls) {
				t.Fatalf("mode %v, fallbacks %+v; want %v after %v", st.Mode, st.Fallbacks, c.mode, c.falls)
			}
			fill(pool.Slot(1).Bytes(), 9)
			if err := u.Upload(context.Background(), pool.Slot(1), testSlotBytes); err != nil {
				t.Fatal(err)
			}
			got, _ := tw.ReadDevice(0, u.Slot(1).Ptr, testSlotBytes)
			if !bytes.Equal(got, pool.Slot(1).Bytes()) {
				t.Fatal("device bytes differ")
			}
			u.ReleaseSlot(1)
			closeAll(t, tw, pool, u, dev)
		})
	}
}

// The IPC lifetime rule: the node frees its device slots only after the
// trainer closed its import. The twin refuses the other order.
func TestExportLifetime(t *testing.T) {
	tw := NewTwin(TwinConfig{})
	pool, u, dev := newTestUploader(t, tw, 2, UploaderConfig{Export: true})
	ex, ok := u.Export()
	if !ok || ex.Size < int64(2*testSlotBytes) || ex.Info.UUID == "" {
		t.Fatalf("export %+v, %v", ex, ok)
	}
	fill(pool.Slot(1).Bytes(), 3)
	if err := u.Upload(context.Background(), pool.Slot(1), 500); err != nil {
		t.Fatal(err)
	}
	// The trainer's side: open the handle, read at the slot's offset.
	devi, base, err := tw.OpenIPC(ex.Handle)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := tw.ReadDevice(devi, base+DevicePtr(u.Slot(1).Offset), 500)
	if !bytes.Equal(got, pool.Slot(1).Bytes()[:500]) {
		t.Fatal("bytes through the IPC mapping differ from the host's")
	}
	u.ReleaseSlot(1)
	// Closing the uploader while the import is open is what the twin
	// catches: a real device would leave the trainer reading freed memory.
	err = u.Close()
	if err == nil || len(tw.Violations()) != 1 {
		t.Fatalf("Close under an open import = %v, violations %q", err, tw.Violations())
	}

	tw2 := NewTwin(TwinConfig{})
	pool2, u2, dev2 := newTestUploader(t, tw2, 2, UploaderConfig{Export: true})
	ex2, _ := u2.Export()
	_, base2, err := tw2.OpenIPC(ex2.Handle)
	if err != nil {
		t.Fatal(err)
	}
	if err := tw2.CloseIPC(base2); err != nil {
		t.Fatal(err)
	}
	closeAll(t, tw2, pool2, u2, dev2)
	pool.Close()
	_ = dev
}

// A seeded random schedule of uploads, cancellations, releases and
// device progress against a naive model: a held slot's device bytes are
// the host bytes of its upload, an upload into a held slot is refused,
// and nothing leaks.
func TestRandomScheduleAgainstModel(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0))
			tw := NewTwin(TwinConfig{Manual: true})
			const slots = 4
			pool, u, dev := newTestUploader(t, tw, slots, UploaderConfig{Host: HostMode(rng.IntN(3))})
			held := map[int][]byte{}
			var wg sync.WaitGroup
			for step := range 60 {
				i := rng.IntN(slots)
				switch {
				case held[i] != nil && rng.IntN(2) == 0:
					u.ReleaseSlot(i)
					delete(held, i)
				case held[i] != nil:
					if err := u.Upload(context.Background(), pool.Slot(i), 10); !errors.Is(err, ErrSlotHeld) {
						t.Fatalf("step %d: upload into held slot %d = %v", step, i, err)
					}
				default:
					s := pool.Slot(i)
					n := 1 + rng.IntN(len(s.Bytes()))
					fill(s.Bytes()[:n], byte(step))
					want := slices.Clone(s.Bytes()[:n])
					ctx, cancel := context.WithCancel(context.Background())
					done := make(chan error, 1)
					wg.Add(1)
					go func() { defer wg.Done(); done <- u.Upload(ctx, s, n) }()
					if rng.IntN(4) == 0 { // give up before the device finishes
						waitFor(t, func() bool { return tw.Stats().Waiters == 1 })
						cancel()
						if err := <-done; !errors.Is(err, context.Canceled) {
							t.Fatalf("step %d: canceled upload = %v", step, err)
						}
						continue
					}
					var err error
					for {
						tw.Advance(1 + rng.IntN(2))
						select {
						case err = <-done:
						default:
							runtime.Gosched()
							continue
						}
						break
					}
					cancel()
					if err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
					held[i] = want
				}
				for j, want := range held {
					got, _ := tw.ReadDevice(0, u.Slot(j).Ptr, len(want))
					if !bytes.Equal(got, want) {
						t.Fatalf("step %d: held slot %d's device bytes changed", step, j)
					}
				}
			}
			wg.Wait()
			for j := range held {
				u.ReleaseSlot(j)
			}
			if st := u.Stats(); st.BadReleases != 0 || st.Held != 0 {
				t.Fatalf("stats %+v", st)
			}
			closeAll(t, tw, pool, u, dev)
		})
	}
}

// waitFor polls cond: a condition another goroutine reaches, never a
// duration.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 5_000_000 {
			t.Fatal("condition never reached")
		}
		runtime.Gosched()
	}
}

// A pool of pinned memory needs neither registration nor staging.
func TestPinnedPool(t *testing.T) {
	tw := NewTwin(TwinConfig{})
	dev, _ := tw.Open(0)
	pool, err := NewHostPool(PinnedAllocator{Device: dev}, 2, testSlotBytes)
	if err != nil {
		t.Fatal(err)
	}
	u, err := NewDeviceUploader(dev, pool, UploaderConfig{NoFallback: true})
	if err != nil {
		t.Fatal(err)
	}
	fill(pool.Slot(0).Bytes(), 4)
	if err := u.Upload(context.Background(), pool.Slot(0), testSlotBytes); err != nil {
		t.Fatal(err)
	}
	if st := tw.Stats(); st.Registered != 0 || st.PinnedCopies != 1 {
		t.Fatalf("twin %+v", st)
	}
	u.ReleaseSlot(0)
	closeAll(t, tw, pool, u, dev)
}

// A held export outlives the uploader's Close: the feed holds it while a
// connection that has the handle lasts, so a trainer whose rank got a new
// pipeline mid-connection never has its import freed under it.
func TestHeldExportOutlivesClose(t *testing.T) {
	tw := NewTwin(TwinConfig{})
	pool, u, dev := newTestUploader(t, tw, 2, UploaderConfig{Export: true})
	ex, _ := u.Export()
	release, ok := ex.Hold()
	if !ok {
		t.Fatal("Hold of a live export refused")
	}
	_, base, _ := tw.OpenIPC(ex.Handle)
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	if st := tw.Stats(); st.Allocations != 1 {
		t.Fatalf("device memory freed under a held export: %+v", st)
	}
	tw.CloseIPC(base) // the trainer closes its import, then the connection ends
	release()
	release() // once only
	if _, ok := ex.Hold(); ok {
		t.Fatal("Hold after the memory was freed succeeded")
	}
	if err := pool.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if st := tw.Stats(); st.Live() != 0 || len(tw.Violations()) != 0 {
		t.Fatalf("twin %+v, violations %q", st, tw.Violations())
	}
}
