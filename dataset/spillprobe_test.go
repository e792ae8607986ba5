//go:build linux

package dataset

import (
	"os"
	"testing"
	"time"
)

// TestProbeSpillDisk: the probe writes and reads a real file in a disk
// directory and reports both; it leaves nothing behind.
func TestProbeSpillDisk(t *testing.T) {
	dir := t.TempDir()
	sp, err := ProbeSpillDisk(dir, 100_000, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %.0f MB/s writes (%d MiB), %.0f reads/s of %d bytes", dir, sp.WriteBytesPerSecond/1e6, sp.Written>>20, sp.ReadsPerSecond, sp.ReadSize)
	if sp.Written < 4<<20 || sp.WriteBytesPerSecond <= 0 || sp.ReadsPerSecond <= 0 || sp.ReadSize != 102400 {
		t.Errorf("probe %+v", sp)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("%d files left in %s", len(ents), dir)
	}
	// No time at all (a machine too loaded to start the readers in
	// time): still one write and a read from each of the 8 readers.
	if sp, err := ProbeSpillDisk(dir, 100_000, 0); err != nil || sp.Written != 4<<20 || sp.ReadsPerSecond <= 0 {
		t.Errorf("a probe with no time: %+v, %v; want one write and some reads", sp, err)
	}
	if _, err := ProbeSpillDisk(dir+"/missing", 4096, time.Millisecond); err == nil {
		t.Error("a probe of a missing directory passed")
	}
}
