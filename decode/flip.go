package decode

import (
	"encoding/binary"
	"math/bits"
)

// flipHorizontal mirrors every row of a size×size sample in place.
func flipHorizontal(dst []byte, size int, layout Layout) {
	if layout == NHWC {
		row := 3 * size
		for off := 0; off+row <= len(dst); off += row {
			reversePixels3(dst[off : off+row])
		}
		return
	}
	for off := 0; off+size <= len(dst); off += size {
		reverseBytes(dst[off : off+size])
	}
}

// reverseBytes reverses b, eight bytes at a time from both ends.
func reverseBytes(b []byte) {
	i, j := 0, len(b)
	for j-i >= 16 {
		lo := binary.LittleEndian.Uint64(b[i:])
		hi := binary.LittleEndian.Uint64(b[j-8:])
		binary.LittleEndian.PutUint64(b[i:], bits.ReverseBytes64(hi))
		binary.LittleEndian.PutUint64(b[j-8:], bits.ReverseBytes64(lo))
		i += 8
		j -= 8
	}
	for j--; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
}

// reversePixels3 reverses the order of the 3-byte pixels of b.
func reversePixels3(b []byte) {
	for i, j := 0, len(b)-3; i < j; i, j = i+3, j-3 {
		p, q := b[i:i+3:i+3], b[j:j+3:j+3]
		p[0], p[1], p[2], q[0], q[1], q[2] = q[0], q[1], q[2], p[0], p[1], p[2]
	}
}
