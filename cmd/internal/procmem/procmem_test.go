package procmem

import (
	"runtime"
	"testing"
)

// TestPeakRSS: the figure is there on Linux and grows when the process
// touches more memory.
func TestPeakRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("VmHWM is Linux's")
	}
	before := PeakRSS()
	b := make([]byte, 64<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	after := PeakRSS()
	runtime.KeepAlive(b)
	if before <= 0 || after < before+60<<20 {
		t.Errorf("peak RSS %d then %d after touching 64 MiB", before, after)
	}
}
