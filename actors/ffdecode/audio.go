package ffdecode

import (
	"errors"
	"fmt"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/decode/audio"
)

// UseAudio configures cfg and deps for audio (--media audio): cfg.Sample
// becomes float32 [Channels, Samples], deps.NewDecoder makes
// audio.Decoders (WindowDecoders: short waveforms are marked), and
// deps.SampleSeed is decode.SampleSeed, as for images, so a sample's
// window depends on (seed, epoch, index) alone. It fails if ac is invalid.
func UseAudio(cfg *actors.Config, deps *actors.Deps, ac audio.Config) error {
	if err := ac.Validate(); err != nil {
		return err
	}
	ac = ac.WithDefaults()
	cfg.Sample = AudioShape(ac)
	deps.NewDecoder = AudioFactory(ac)
	deps.SampleSeed = decode.SampleSeed
	return nil
}

// AudioShape is the sample spec ac produces.
func AudioShape(ac audio.Config) actors.Shape {
	ac = ac.WithDefaults()
	return actors.Shape{Kind: actors.KindAudio, AudioChannels: ac.Channels, AudioSamples: ac.Samples()}
}

// AudioFactory makes an audio.Decoder per decoder actor.
func AudioFactory(ac audio.Config) actors.DecoderFactory {
	return func() (actors.SampleDecoder, error) {
		d, err := audio.NewDecoder(ac)
		if err != nil {
			return nil, err
		}
		return audioDecoder{d}, nil
	}
}

type audioDecoder struct{ d *audio.Decoder }

var _ actors.WindowDecoder = audioDecoder{}

func (a audioDecoder) Decode(data []byte, seed uint64, dst []byte) error {
	_, err := a.DecodeWindow(data, seed, dst)
	return err
}

// DecodeWindow decodes and classes audio's sentinel errors.
func (a audioDecoder) DecodeWindow(data []byte, seed uint64, dst []byte) (bool, error) {
	short, err := a.d.Decode(data, seed, dst)
	switch {
	case err == nil:
		return short, nil
	case errors.Is(err, audio.ErrCorrupt):
		return false, actors.WithFailureClass(err, "corrupt")
	case errors.Is(err, audio.ErrUnsupported):
		return false, actors.WithFailureClass(err, "unsupported")
	case errors.Is(err, audio.ErrTooLarge):
		return false, actors.WithFailureClass(err, "too_large")
	}
	return false, fmt.Errorf("decode: %w", err)
}

func (a audioDecoder) Close() error { return a.d.Close() }
