package gpu

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestPlanDevices(t *testing.T) {
	two := []DeviceInfo{{Ordinal: 0}, {Ordinal: 1}}
	for _, c := range []struct {
		spec     string
		ranks    int
		ranksSet bool
		visible  []DeviceInfo
		visErr   error
		want     DevicePlan
		errHas   string
	}{
		{spec: "", ranks: 1, visErr: ErrNoCUDA, want: DevicePlan{Ranks: 1}},
		{spec: "auto", ranks: 3, ranksSet: true, visErr: ErrNoDevice, want: DevicePlan{Ranks: 3}},
		{spec: "auto", ranks: 1, visible: two, want: DevicePlan{Ranks: 2, Device: []int{0, 1}}},
		{spec: "auto", ranks: 2, ranksSet: true, visible: two, want: DevicePlan{Ranks: 2, Device: []int{0, 1}}},
		{spec: "auto", ranks: 4, ranksSet: true, visible: two, want: DevicePlan{Ranks: 4}},
		{spec: "none", ranks: 2, visible: two, want: DevicePlan{Ranks: 2}},
		{spec: "all", ranks: 1, visible: two, want: DevicePlan{Ranks: 2, Device: []int{0, 1}}},
		{spec: "all", ranks: 1, visErr: ErrNoCUDA, errHas: "built without CUDA"},
		{spec: "all", ranks: 1, visErr: ErrNoDevice, errHas: "no CUDA device"},
		{spec: "1", ranks: 1, visible: two, want: DevicePlan{Ranks: 1, Device: []int{1}}},
		{spec: "1,0", ranks: 1, visible: two, want: DevicePlan{Ranks: 2, Device: []int{1, 0}}},
		{spec: "0,2", ranks: 1, visible: two, errHas: "device 2 is not visible"},
		{spec: "0,0", ranks: 1, visible: two, errHas: "twice"},
		{spec: "x", ranks: 1, visible: two, errHas: "want auto, none, all"},
		{spec: "-1", ranks: 1, visible: two, errHas: "want auto, none, all"},
		{spec: "0,1", ranks: 3, ranksSet: true, visible: two, errHas: "one rank per device"},
		{spec: "0", ranks: 1, visErr: ErrNoCUDA, errHas: "built without CUDA"},
	} {
		got, err := PlanDevices(c.spec, c.ranks, c.ranksSet, c.visible, c.visErr)
		if c.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), c.errHas) || !errors.Is(err, ErrBadGPUs) {
				t.Errorf("PlanDevices(%q, %d, %v) err = %v, want %q", c.spec, c.ranks, c.ranksSet, err, c.errHas)
			}
			continue
		}
		if err != nil || got.Ranks != c.want.Ranks || !slices.Equal(got.Device, c.want.Device) {
			t.Errorf("PlanDevices(%q, %d, %v) = %+v, %v; want %+v", c.spec, c.ranks, c.ranksSet, got, err, c.want)
		}
	}
}

func TestHostModes(t *testing.T) {
	if got := hostModes(HostRegister, true); !slices.Equal(got, []HostMode{HostRegister, HostStaged, HostPageable}) {
		t.Fatal(got)
	}
	if got := hostModes(HostStaged, false); !slices.Equal(got, []HostMode{HostStaged}) {
		t.Fatal(got)
	}
	for _, m := range []HostMode{HostRegister, HostStaged, HostPageable} {
		if p, err := ParseHostMode(m.String()); err != nil || p != m {
			t.Fatalf("ParseHostMode(%q) = %v, %v", m, p, err)
		}
	}
	if _, err := ParseHostMode("dma"); err == nil {
		t.Fatal("ParseHostMode(dma) succeeded")
	}
}

func TestSlotBook(t *testing.T) {
	b := newSlotBook(1)
	if v, err := b.begin(0); v != beginCopy || err != nil {
		t.Fatal(v, err)
	}
	if _, err := b.begin(0); err == nil {
		t.Fatal("begin of a copying slot succeeded")
	}
	b.gaveUp(0)
	if v, err := b.begin(0); v != beginWaitPrevious || err != nil {
		t.Fatal(v, err)
	}
	if err := b.release(0); err == nil {
		t.Fatal("release of a copying slot succeeded")
	}
	b.previousDone(0)
	b.begin(0)
	b.copied(0)
	if _, err := b.begin(0); !errors.Is(err, ErrSlotHeld) {
		t.Fatal(err)
	}
	if err := b.release(0); err != nil {
		t.Fatal(err)
	}
	if err := b.release(0); err == nil {
		t.Fatal("double release succeeded")
	}
	b.begin(0)
	b.notStarted(0)
	if b.st[0] != slotIdle {
		t.Fatal(b.st[0])
	}
}
