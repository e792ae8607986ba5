package ffdecode

import (
	"context"
	"errors"
	"fmt"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/decode/video"
	"github.com/longshore/longshore/storage"
)

// UseVideo configures cfg and deps for video (--media video): cfg.Sample
// becomes uint8 [T,3,S,S] (or [T,S,S,3]), deps.NewDecoder makes
// video.Decoders (WindowDecoders: short clips are marked), and
// deps.SampleSeed is decode.SampleSeed, so a clip's window and crop
// depend on (seed, epoch, index) alone. readAhead > 0 makes the decoders
// ObjectDecoders that demux each object over ranged reads of at least
// readAhead bytes (video.RangeReader) instead of the fetch stage reading
// it whole; 0: whole objects. It fails if vc is invalid.
func UseVideo(cfg *actors.Config, deps *actors.Deps, vc video.Config, readAhead int64) error {
	if err := vc.Validate(); err != nil {
		return err
	}
	vc = vc.WithDefaults()
	cfg.Sample = VideoShape(vc)
	deps.NewDecoder = VideoFactory(vc, readAhead)
	deps.SampleSeed = decode.SampleSeed
	return nil
}

// VideoShape is the sample spec vc produces.
func VideoShape(vc video.Config) actors.Shape {
	vc = vc.WithDefaults()
	l := actors.NCHW
	if vc.NHWC {
		l = actors.NHWC
	}
	return actors.Shape{Kind: actors.KindVideo, Frames: vc.Frames, Height: vc.Size, Width: vc.Size, Layout: l}
}

// VideoFactory makes a video.Decoder per decoder actor; readAhead > 0:
// ranged (see UseVideo).
func VideoFactory(vc video.Config, readAhead int64) actors.DecoderFactory {
	return func() (actors.SampleDecoder, error) {
		d, err := video.NewDecoder(vc)
		if err != nil {
			return nil, err
		}
		if readAhead > 0 {
			return rangedVideoDecoder{videoDecoder{d}, readAhead}, nil
		}
		return videoDecoder{d}, nil
	}
}

// rangedVideoDecoder demuxes over ranged reads of the store.
type rangedVideoDecoder struct {
	videoDecoder
	readAhead int64
}

var _ actors.ObjectDecoder = rangedVideoDecoder{}

// DecodeObject reads key's size (Stat), then its bytes as the demuxer
// asks for them, readAhead at a time.
func (v rangedVideoDecoder) DecodeObject(ctx context.Context, st storage.Store, key string, seed uint64, dst []byte) (bool, error) {
	info, err := st.Stat(ctx, key)
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", key, err)
	}
	r := video.NewRangeReader(ctx, st, key, info.Size, v.readAhead)
	c, err := v.d.DecodeReader(r, info.Size, seed, dst)
	return c.Short, videoClass(err)
}

type videoDecoder struct{ d *video.Decoder }

var _ actors.WindowDecoder = videoDecoder{}

func (v videoDecoder) Decode(data []byte, seed uint64, dst []byte) error {
	_, err := v.DecodeWindow(data, seed, dst)
	return err
}

// DecodeWindow samples the clip and classes video's sentinel errors.
func (v videoDecoder) DecodeWindow(data []byte, seed uint64, dst []byte) (bool, error) {
	c, err := v.d.Decode(data, seed, dst)
	return c.Short, videoClass(err)
}

func videoClass(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, video.ErrCorrupt):
		return actors.WithFailureClass(err, "corrupt")
	case errors.Is(err, video.ErrUnsupported):
		return actors.WithFailureClass(err, "unsupported")
	case errors.Is(err, video.ErrTooLarge):
		return actors.WithFailureClass(err, "too_large")
	case errors.Is(err, video.ErrRead):
		return actors.WithFailureClass(err, "read")
	}
	return fmt.Errorf("decode: %w", err)
}

func (v videoDecoder) Close() error { return v.d.Close() }
