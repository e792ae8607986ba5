// Package actorstest holds the pipeline's test twins that tests share
// (the pipeline's own included: it imports nothing of the module): a
// decoder that writes a pattern fixed by the object's bytes and the
// sample seed, so a test can check that every sample landed where it
// belongs and was transformed with its own seed, without FFmpeg; a
// sample-seed function and an explicit epoch order, for tests that do not
// use the real ones (decode.SampleSeed, cluster.NewOrder).
package actorstest

import (
	"hash/fnv"
	"math/rand/v2"
)

// PatternDecoder fills a sample with bytes fixed by the object's bytes
// and the sample seed (Pattern): content checks catch misplaced, stale
// or wrongly seeded samples. It never fails.
type PatternDecoder struct{}

// Decode writes Pattern(data, seed) into dst.
func (PatternDecoder) Decode(data []byte, seed uint64, dst []byte) error {
	Pattern(dst, data, seed)
	return nil
}

// Close does nothing.
func (PatternDecoder) Close() error { return nil }

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

// SampleSeed is splitmix64 over (seed, epoch, index): an
// actors.SampleSeedFunc for tests.
func SampleSeed(seed uint64, epoch int, index int64) uint64 {
	return mix64(mix64(mix64(seed^0x73616d706c65)^uint64(epoch)) ^ uint64(index))
}

func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Perm is an explicit epoch order: position -> sample index (an
// actors.Order), 8 bytes a sample.
type Perm []int64

// Len is the number of samples.
func (p Perm) Len() int64 { return int64(len(p)) }

// At is the sample at pos.
func (p Perm) At(pos int64) int64 { return p[pos] }

// Shuffle is a Fisher-Yates permutation of [0, n) from a PCG seeded with
// (seed, epoch).
func Shuffle(seed uint64, epoch int, n int64) Perm {
	r := rand.New(rand.NewPCG(seed, uint64(epoch)^0x9e3779b97f4a7c15))
	p := make(Perm, n)
	for i := range p {
		p[i] = int64(i)
	}
	r.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
	return p
}
