// Package ffdecode plugs package decode (FFmpeg via go-astiav) into the
// actors pipeline. It is separate from actors so that actors, and what
// imports it, build without cgo and FFmpeg; the node binary imports both.
package ffdecode

import (
	"errors"
	"fmt"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/decode"
)

// Use configures cfg and deps for decode configuration dc: cfg.Sample
// takes dc's geometry, deps.NewDecoder makes decode.Decoders, and
// deps.SampleSeed is decode.SampleSeed. It fails if dc is invalid.
func Use(cfg *actors.Config, deps *actors.Deps, dc decode.Config) error {
	if err := dc.Validate(); err != nil {
		return err
	}
	cfg.Sample = Shape(dc)
	deps.NewDecoder = Factory(dc)
	deps.SampleSeed = decode.SampleSeed
	return nil
}

// Shape is the sample spec dc produces (dc.Spec()).
func Shape(dc decode.Config) actors.Shape { return dc.Spec() }

// Factory makes a decode.Decoder per decoder actor.
func Factory(dc decode.Config) actors.DecoderFactory {
	return func() (actors.SampleDecoder, error) {
		d, err := decode.NewDecoder(dc)
		if err != nil {
			return nil, err
		}
		return sampleDecoder{d}, nil
	}
}

type sampleDecoder struct{ d *decode.Decoder }

// Decode decodes and classes decode's sentinel errors for failure reports.
func (s sampleDecoder) Decode(data []byte, seed uint64, dst []byte) error {
	_, err := s.d.Decode(data, seed, dst)
	return ClassifyError(err)
}

// ClassifyError classes decode's sentinel errors for failure reports
// (actors.WithFailureClass: corrupt, unsupported, too_large); nil stays
// nil.
func ClassifyError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, decode.ErrCorrupt):
		return actors.WithFailureClass(err, "corrupt")
	case errors.Is(err, decode.ErrUnsupported):
		return actors.WithFailureClass(err, "unsupported")
	case errors.Is(err, decode.ErrTooLarge):
		return actors.WithFailureClass(err, "too_large")
	}
	return fmt.Errorf("decode: %w", err)
}

func (s sampleDecoder) Close() error { return s.d.Close() }
