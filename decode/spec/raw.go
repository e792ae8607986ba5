package spec

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A raw sample (KindRaw) is its object's bytes, undecoded, in a row of
// RawRowBytes() bytes of the batch slot: RawHeader bytes holding the
// sample's length (uint64, little endian), then the bytes, then whatever
// the row held before (never read). Rows have one size, so the pipeline
// sizes, fills and copies them as any sample's; the length says how much
// of the row is the sample.

// RawHeader is the bytes of a raw row's length.
const RawHeader = 8

// ErrRawTooLarge: a raw sample longer than its row holds.
var ErrRawTooLarge = errors.New("spec: raw sample larger than --raw-max-bytes")

// RawRowBytes is the bytes of one raw sample's row: RawHeader + RawBytes.
func (s Shape) RawRowBytes() int { return RawHeader + s.RawBytes }

// PutRaw writes data into row (a raw sample's row): its length, then
// its bytes.
func PutRaw(row, data []byte) error {
	if len(row) < RawHeader || len(data) > len(row)-RawHeader {
		return fmt.Errorf("%w: %d bytes, the row holds %d", ErrRawTooLarge, len(data), max(len(row)-RawHeader, 0))
	}
	binary.LittleEndian.PutUint64(row, uint64(len(data)))
	copy(row[RawHeader:], data)
	return nil
}

// RawLen is the length of the raw sample in row; an error if the row
// cannot hold it.
func RawLen(row []byte) (int, error) {
	if len(row) < RawHeader {
		return 0, fmt.Errorf("spec: a raw row of %d bytes", len(row))
	}
	n := binary.LittleEndian.Uint64(row)
	if n > uint64(len(row)-RawHeader) {
		return 0, fmt.Errorf("spec: a raw row of %d bytes says it holds %d", len(row), n)
	}
	return int(n), nil
}
