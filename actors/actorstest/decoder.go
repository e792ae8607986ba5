// Package actorstest holds the pipeline's test twins that other
// packages' tests share: a decoder that writes a pattern fixed by the
// object's bytes and the sample seed, so a test can check that every
// sample landed where it belongs and was transformed with its own seed,
// without FFmpeg.
package actorstest

import (
	"hash/fnv"

	"github.com/longshore/longshore/actors"
)

// PatternDecoder fills a sample with bytes fixed by the object's bytes
// and the sample seed (Pattern): content checks catch misplaced, stale
// or wrongly seeded samples. It never fails.
type PatternDecoder struct{}

var _ actors.SampleDecoder = PatternDecoder{}

// Decode writes Pattern(data, seed) into dst.
func (PatternDecoder) Decode(data []byte, seed uint64, dst []byte) error {
	Pattern(dst, data, seed)
	return nil
}

// Close does nothing.
func (PatternDecoder) Close() error { return nil }

// NewPatternDecoder is an actors.DecoderFactory of PatternDecoders.
func NewPatternDecoder() (actors.SampleDecoder, error) { return PatternDecoder{}, nil }

// Pattern fills dst with the bytes PatternDecoder writes for an object of
// bytes data decoded with seed.
func Pattern(dst, data []byte, seed uint64) {
	h := fnv.New64a()
	h.Write(data)
	v := h.Sum64() ^ seed
	for i := range dst {
		dst[i] = byte(v >> (8 * (i % 8)))
		if i%8 == 7 {
			v = v*6364136223846793005 + 1442695040888963407
		}
	}
}
