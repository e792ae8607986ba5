package actors

// SampleDecoder decodes one object into one sample region of a slot. It is
// the seam to package decode: the pipeline's decoder actors each own one
// SampleDecoder, so implementations need not be safe for concurrent use.
type SampleDecoder interface {
	// Decode writes the sample decoded from data, transformed with the
	// randomness fixed by sampleSeed, into dst (exactly Config.Sample's
	// SampleBytes long, in its layout). It must not retain data or dst.
	// Errors are recorded per sample; wrap them with WithFailureClass to
	// group them ("corrupt", "unsupported", "too_large").
	Decode(data []byte, sampleSeed uint64, dst []byte) error
	// Close frees the decoder. It is called once, from the decoder's actor.
	Close() error
}

// DecoderFactory makes one SampleDecoder per decoder actor. NewPipeline
// calls it Decoders times before starting, so a bad decode configuration
// fails there rather than per sample.
type DecoderFactory func() (SampleDecoder, error)

// SampleSeedFunc derives a sample's transform seed from the run's seed, the
// epoch and the sample's dataset index (decode.SampleSeed), so a sample
// gets the same crop whichever rank or decoder handles it.
type SampleSeedFunc func(seed uint64, epoch int, index int64) uint64

// defaultSampleSeed is splitmix64 over (seed, epoch, index), used when no
// SampleSeedFunc is given.
func defaultSampleSeed(seed uint64, epoch int, index int64) uint64 {
	return mix64(mix64(mix64(seed^0x73616d706c65)^uint64(epoch)) ^ uint64(index))
}

func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
