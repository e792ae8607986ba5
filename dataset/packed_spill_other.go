//go:build !linux

package dataset

import (
	"errors"
	"time"
)

// spillFile is not built here: spilling needs Linux's direct I/O and
// direct I/O.
type spillFile struct{}

func checkSpillFS(string) error {
	return errors.New("spilling chunks to disk needs Linux (direct I/O)")
}

func createSpillFile(string, []byte) (*spillFile, error) {
	return nil, errors.New("spilling chunks to disk needs Linux")
}

func (*spillFile) read(int64, int64, []byte) ([]byte, error) {
	return nil, errors.New("spilling chunks to disk needs Linux")
}

func (*spillFile) close() error { return nil }

// SpillDirFree is not built here: chunks are spilled on Linux only.
func SpillDirFree(string) (int64, error) {
	return 0, errors.New("spilling chunks to disk needs Linux")
}

// ProbeSpillDisk is not built here: chunks are spilled on Linux only.
func ProbeSpillDisk(string, int64, time.Duration) (DiskSpeed, error) {
	return DiskSpeed{}, errors.New("spilling chunks to disk needs Linux")
}
