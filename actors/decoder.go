package actors

import (
	"context"
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

// ObjectDecoder is a WindowDecoder that reads its object by ranges (a
// long video is not fetched whole to sample two seconds of it). When
// every decoder of a pipeline implements it and the store does not
// address samples by index (a packed dataset's samples are fetched
// whole, with their tar neighbours), the fetch stage reads in its ranged
// mode: it states the object (Store.Stat, its size) and the decoder is
// handed the object, whose ranged reads go through the fetch stage's
// store-outage retries (Config.StoreOutage), as whole-object reads do.
type ObjectDecoder interface {
	WindowDecoder
	DecodeObject(ctx context.Context, obj Object, sampleSeed uint64, dst []byte) (short bool, err error)
}

// Object is what a ranged fetch hands an ObjectDecoder: the object's key
// and size, as the fetch stage stated it, and its ranged reads.
type Object struct {
	Key  string
	Size int64
	// Ranges reads [off, off+length) of Key into dst (appending to
	// dst[:0], as Store.GetRange does), trying again with the fetch
	// stage's backoff while the store does not answer, for up to
	// Config.StoreOutage; the time spent waiting does not count against
	// the decode deadline. Errors about the object (not found, a bad
	// range) come back at once.
	Ranges RangeGetter
}

// RangeGetter reads a range of an object (the part of storage.Store a
// ranged demuxer needs; video.RangeGetter is the same method).
type RangeGetter interface {
	GetRange(ctx context.Context, key string, off, length int64, dst []byte) ([]byte, error)
}

// DecoderFactory makes one SampleDecoder per decoder actor. NewPipeline
// calls it Decoders times before starting, so a bad decode configuration
// fails there rather than per sample.
type DecoderFactory func() (SampleDecoder, error)

// SampleSeedFunc derives a sample's transform seed from the run's seed, the
// epoch and the sample's dataset index (decode.SampleSeed), so a sample
// gets the same crop whichever rank or decoder handles it.
type SampleSeedFunc func(seed uint64, epoch int, index int64) uint64
