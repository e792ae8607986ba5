package offheap

import (
	"bytes"
	"testing"
)

// TestAllocFree: buffers are zeroed, writable to their capacity, counted
// while held, and freed whole from any reslice of their start;
// Release keeps a buffer usable and reading zeros.
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
	if !OnHeap && Mapped()-before < 4096+4096+4096+8192+1<<20 {
		t.Errorf("mapped %d bytes more, want at least the pages allocated", Mapped()-before)
	}
	if err := Release(bufs[4]); err != nil {
		t.Fatal(err)
	}
	if b := bufs[4][:1<<20]; !OnHeap && !bytes.Equal(b, make([]byte, len(b))) {
		t.Errorf("a released buffer does not read as zeros")
	}
	bufs[4][:1][0] = 7 // still writable
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
