package decode

import (
	"errors"

	"github.com/longshore/longshore/decode/spec"
)

// Raw is the decoder of raw samples (--media raw, spec.KindRaw): it
// decodes nothing. Each sample's object bytes are copied into its row of
// the batch slot behind their length (spec.PutRaw), for data the node
// does not decode (text, tokens, anything custom); the trainer gets them
// as they were stored. A sample longer than its row fails as too_large
// (a failure like any other: filled, counted, quarantined). Raw is the
// pipeline's SampleDecoder (actors.SampleDecoder) as it is.
type Raw struct{}

// Decode copies data into dst, a raw row (spec.RawRowBytes); the seed
// is not used (there is nothing to transform).
func (Raw) Decode(data []byte, _ uint64, dst []byte) error {
	if err := spec.PutRaw(dst, data); err != nil {
		return rawError{err}
	}
	return nil
}

// Close implements the SampleDecoder: nothing to free.
func (Raw) Close() error { return nil }

// rawError classes a raw sample that does not fit its row as too_large
// in the pipeline's failure reports (actors.WithFailureClass's
// FailureClass, without importing the pipeline).
type rawError struct{ err error }

func (e rawError) Error() string { return e.err.Error() }
func (e rawError) Unwrap() error { return e.err }
func (e rawError) FailureClass() string {
	if errors.Is(e.err, spec.ErrRawTooLarge) {
		return "too_large"
	}
	return "corrupt"
}
