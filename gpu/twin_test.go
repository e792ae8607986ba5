package gpu

import (
	"context"
	"errors"
	"strings"
	"testing"
)

var _ Driver = NoDriver{}

// The twin's own promises, which the uploader's tests rely on.
func TestTwinStreamsAndEvents(t *testing.T) {
	tw := NewTwin(TwinConfig{Manual: true, Devices: 2})
	if ds, err := tw.Devices(); err != nil || len(ds) != 2 || ds[1].UUID == ds[0].UUID {
		t.Fatalf("Devices = %+v, %v", ds, err)
	}
	d, _ := tw.Open(1)
	if d2, _ := tw.Open(1); d2 != d {
		t.Fatal("a second Open made a second context")
	}
	d.Close() // the first of two: still open
	if e, err := d.NewEvent(); err != nil {
		t.Fatalf("device closed by the first of two Closes: %v", err)
	} else {
		d.DestroyEvent(e)
	}
	host, _ := d.AllocPinned(4096)
	p, _ := d.AllocDevice(4096)
	s1, _ := d.NewStream()
	s2, _ := d.NewStream()
	e1, _ := d.NewEvent()
	if ok, _ := d.Query(e1); !ok {
		t.Fatal("an event never recorded is not complete")
	}
	host[0] = 1
	d.CopyHtoDAsync(p, host[:1], s1)
	d.Record(e1, s1)
	host[0] = 2 // pinned: the copy reads the host when it runs
	e2, _ := d.NewEvent()
	d.Record(e2, s2)
	if tw.AdvanceStream(1, s2, 5) != 1 {
		t.Fatal("stream 2 had other work")
	}
	if ok, _ := d.Query(e2); !ok {
		t.Fatal("event on an empty stream not complete")
	}
	if ok, _ := d.Query(e1); ok {
		t.Fatal("event complete before the copy ahead of it")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Wait(ctx, e1); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	tw.Advance(2)
	if err := d.Wait(context.Background(), e1); err != nil {
		t.Fatal(err)
	}
	if got, _ := tw.ReadDevice(1, p, 1); got[0] != 2 {
		t.Fatalf("device byte %d: a pinned copy reads the host when it runs", got[0])
	}
	// Pageable memory is staged at the call.
	page := make([]byte, 1)
	page[0] = 5
	d.CopyHtoDAsync(p, page, s1)
	page[0] = 6
	tw.Advance(1)
	if got, _ := tw.ReadDevice(1, p, 1); got[0] != 5 {
		t.Fatalf("device byte %d: a pageable copy is staged at the call", got[0])
	}
	if err := d.CopyHtoDAsync(p+4000, make([]byte, 200), s1); err == nil {
		t.Fatal("copy past the allocation succeeded")
	}
	// A free under a pending copy is a violation, refused.
	d.CopyHtoDAsync(p, host[:1], s1)
	if err := d.FreePinned(host); err == nil {
		t.Fatal("free of pinned memory under a pending copy succeeded")
	}
	d.Synchronize()
	for _, err := range []error{d.FreePinned(host), d.FreeDevice(p), d.DestroyEvent(e1), d.DestroyEvent(e2), d.DestroyStream(s1), d.DestroyStream(s2), d.Close()} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if v := tw.Violations(); len(v) != 2 || !strings.Contains(v[0], "past the end") || !strings.Contains(v[1], "pending copy reads") {
		t.Fatalf("violations %q", v)
	}
	if st := tw.Stats(); st.Live() != 0 {
		t.Fatalf("live %+v", st)
	}
}

func TestTwinCloseReportsLeaks(t *testing.T) {
	tw := NewTwin(TwinConfig{})
	d, _ := tw.Open(0)
	d.NewStream()
	if err := d.Close(); err == nil || !strings.Contains(err.Error(), "1 streams") {
		t.Fatalf("Close with a live stream = %v", err)
	}
	if _, err := NewTwin(TwinConfig{Devices: -1}).Devices(); !errors.Is(err, ErrNoDevice) {
		t.Fatal(err)
	}
	if _, err := (NoDriver{}).Devices(); !errors.Is(err, ErrNoCUDA) {
		t.Fatal(err)
	}
}
