package feed

import "fmt"

// rawRows are the samples of a raw batch: row r of images (shape
// [N, R], R bytes a row) holds lengths[r] bytes after its RawHeader.
// Views, no copy.
func rawRows(images []byte, shape []int, lengths []int64) ([][]byte, error) {
	n := len(lengths)
	if len(images) == 0 {
		if n != 0 {
			return nil, fmt.Errorf("%d raw lengths for an empty batch", n)
		}
		return nil, nil
	}
	if len(shape) != 2 || shape[0] != n || shape[1] < RawHeader || shape[0]*shape[1] != len(images) {
		return nil, fmt.Errorf("raw batch of shape %v (%d bytes) with %d lengths", shape, len(images), n)
	}
	stride := shape[1]
	rows := make([][]byte, n)
	for r, l := range lengths {
		if l < 0 || l > int64(stride-RawHeader) {
			return nil, fmt.Errorf("raw row %d of %d bytes says it holds %d", r, stride, l)
		}
		lo := r*stride + RawHeader
		rows[r] = images[lo : lo+int(l) : lo+int(l)]
	}
	return rows, nil
}
