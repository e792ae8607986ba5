package actors

import (
	"context"

	"github.com/longshore/longshore/storage"
)

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

// WindowDecoder is a SampleDecoder of samples cut from a timeline (video
// clips, audio waveforms) that says whether the sample filled its window:
// short is true when the media ended first and dst was padded (the
// decoder's padding: zeros for audio, the last frame for video). The
// pipeline marks such samples in Batch.Short. It is used instead of
// Decode when a decoder implements it.
type WindowDecoder interface {
	SampleDecoder
	DecodeWindow(data []byte, sampleSeed uint64, dst []byte) (short bool, err error)
}

// ObjectDecoder is a WindowDecoder that reads its object itself, by ranges
// (a long video is not fetched whole to sample two seconds of it). When
// every decoder of a pipeline implements it and the store does not address
// samples by index (a packed dataset's samples are fetched whole, with
// their tar neighbours), the fetch stage reads nothing and the decoder is
// handed the store and the key; its read errors are decode failures (no
// store-outage retries on this path).
type ObjectDecoder interface {
	WindowDecoder
	DecodeObject(ctx context.Context, st storage.Store, key string, sampleSeed uint64, dst []byte) (short bool, err error)
}

// DecoderFactory makes one SampleDecoder per decoder actor. NewPipeline
// calls it Decoders times before starting, so a bad decode configuration
// fails there rather than per sample.
type DecoderFactory func() (SampleDecoder, error)

// SampleSeedFunc derives a sample's transform seed from the run's seed, the
// epoch and the sample's dataset index (decode.SampleSeed), so a sample
// gets the same crop whichever rank or decoder handles it.
type SampleSeedFunc func(seed uint64, epoch int, index int64) uint64
