package offheap

import (
	"bytes"
	"testing"
)

// TestAllocFree: buffers are zeroed, writable to their capacity, counted
// while held, and freed whole from any reslice of their start;
// ReleasePages zeroes the whole pages inside a range, and only them.
func TestAllocFree(t *testing.T) {
	before := Mapped()
	var bufs [][]byte
	for _, n := range []int{1, 4095, 4096, 4097, 1 << 20} {
		b, err := Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != n || cap(b) < n || !bytes.Equal(b, make([]byte, n)) {
			t.Fatalf("Alloc(%d): len %d cap %d, not zeroed or short", n, len(b), cap(b))
		}
		b = b[:cap(b)]
		for i := range b {
			b[i] = byte(i)
		}
		bufs = append(bufs, b[:0])
	}
	if !OnHeap && Mapped()-before < 1<<20+4 {
		t.Errorf("mapped %d bytes more, want at least the pages allocated", Mapped()-before)
	}
	// The pages wholly inside [100, 3*page+100) of the 1 MiB buffer: the
	// second and third; the bytes around them keep their values.
	b, pg := bufs[4][:1<<20], pageSize
	n, err := ReleasePages(b[100 : 3*pg+100])
	if err != nil {
		t.Fatal(err)
	}
	if !OnHeap {
		if n != 2*pg {
			t.Errorf("released %d bytes, want two pages", n)
		}
		for i := range 4 * pg {
			want := byte(i)
			if i >= pg && i < 3*pg {
				want = 0
			}
			if b[i] != want {
				t.Fatalf("byte %d is %d after the release, want %d", i, b[i], want)
			}
		}
	}
	b[pg+5] = 7 // still writable
	if n, _ := ReleasePages(b[10 : pg-10]); n != 0 {
		t.Errorf("released %d bytes of a range inside one page", n)
	}
	for _, b := range bufs {
		if err := Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if Mapped() != before {
		t.Errorf("mapped %d bytes after freeing everything, want %d", Mapped(), before)
	}
	if _, err := Alloc(0); err == nil {
		t.Errorf("Alloc(0) succeeded")
	}
}
