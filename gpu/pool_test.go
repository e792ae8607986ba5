package gpu

import (
	"context"
	"errors"
	"testing"
	"unsafe"
)

func allocators() []Allocator {
	return []Allocator{DefaultAllocator(), HeapAllocator{}}
}

func TestHostPoolSlotsAreAlignedDisjointAndWritable(t *testing.T) {
	for _, a := range allocators() {
		t.Run(a.Name(), func(t *testing.T) {
			const n, size = 5, 3*4096 + 17
			p, err := NewHostPool(a, n, size)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if p.Len() != n || p.SlotBytes() != size {
				t.Fatalf("Len, SlotBytes = %d, %d; want %d, %d", p.Len(), p.SlotBytes(), n, size)
			}
			if p.TotalBytes() < n*size {
				t.Fatalf("TotalBytes %d < %d", p.TotalBytes(), n*size)
			}
			for i := 0; i < n; i++ {
				s := p.Slot(i)
				if s.ID() != i || len(s.Bytes()) != size || cap(s.Bytes()) != size {
					t.Fatalf("slot %d: id %d len %d cap %d", i, s.ID(), len(s.Bytes()), cap(s.Bytes()))
				}
				if addr := uintptr(unsafe.Pointer(&s.Bytes()[0])); addr%uintptr(PageSize) != 0 {
					t.Fatalf("slot %d at %#x is not page-aligned", i, addr)
				}
				for j := range s.Bytes() {
					if s.Bytes()[j] != 0 {
						t.Fatalf("slot %d byte %d not zeroed", i, j)
					}
				}
				for j := range s.Bytes() {
					s.Bytes()[j] = byte(i + 1)
				}
			}
			// Writing every slot must not have touched another one.
			for i := 0; i < n; i++ {
				for j, b := range p.Slot(i).Bytes() {
					if b != byte(i+1) {
						t.Fatalf("slot %d byte %d = %d, want %d: slots overlap", i, j, b, i+1)
					}
				}
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			if err := p.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
		})
	}
}

func TestNewHostPoolRejectsBadSizes(t *testing.T) {
	for _, c := range []struct{ n, size int }{{0, 10}, {1, 0}, {-1, 10}, {2, -5}, {1 << 40, 1 << 40}} {
		if p, err := NewHostPool(HeapAllocator{}, c.n, c.size); err == nil {
			p.Close()
			t.Errorf("NewHostPool(%d, %d) succeeded", c.n, c.size)
		}
	}
}

func TestHostUploader(t *testing.T) {
	p, err := NewHostPool(HeapAllocator{}, 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	var u Uploader = HostUploader{}
	if err := u.Upload(context.Background(), p.Slot(0), 100); err != nil {
		t.Fatal(err)
	}
	if err := u.Upload(context.Background(), p.Slot(0), 101); err == nil {
		t.Fatal("upload past the slot succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := u.Upload(ctx, p.Slot(0), 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Upload on a done context = %v", err)
	}
}
