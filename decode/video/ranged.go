package video

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// RangeGetter is the part of storage.Store a RangeReader needs.
type RangeGetter interface {
	GetRange(ctx context.Context, key string, off, length int64, dst []byte) ([]byte, error)
}

// RangeReader is an io.ReadSeeker over one object of a store, read by
// ranged GETs of at least ReadAhead bytes: the demuxer's small reads and
// seeks (an MP4's moov at the end, a Matroska cue table, the keyframe
// before a window) cost one request per ReadAhead bytes touched, not one
// per read, and a long file is never fetched whole to sample two seconds.
// Not safe for concurrent use.
type RangeReader struct {
	ctx       context.Context
	st        RangeGetter
	key       string
	size, pos int64
	readAhead int64

	buf     []byte // object bytes [bufOff, bufOff+len(buf))
	bufOff  int64
	Fetched int64 // bytes fetched so far
	Gets    int   // ranged GETs so far
}

// DefaultReadAhead is 256 KiB: a few GOPs of a 1080p H.264 stream, and
// one S3 request's latency worth of bandwidth at ~100 MB/s.
const DefaultReadAhead = 256 << 10

// NewRangeReader reads object key of size bytes; readAhead 0 is
// DefaultReadAhead.
func NewRangeReader(ctx context.Context, st RangeGetter, key string, size, readAhead int64) *RangeReader {
	if readAhead <= 0 {
		readAhead = DefaultReadAhead
	}
	return &RangeReader{ctx: ctx, st: st, key: key, size: size, readAhead: readAhead}
}

// Read implements io.Reader.
func (r *RangeReader) Read(p []byte) (int, error) {
	if r.pos >= r.size {
		return 0, io.EOF
	}
	if r.pos < r.bufOff || r.pos >= r.bufOff+int64(len(r.buf)) {
		n := min(max(r.readAhead, int64(len(p))), r.size-r.pos)
		b, err := r.st.GetRange(r.ctx, r.key, r.pos, n, r.buf[:0])
		r.Gets++
		if err != nil {
			return 0, fmt.Errorf("video: read %s at %d: %w", r.key, r.pos, err)
		}
		if len(b) == 0 {
			return 0, io.ErrUnexpectedEOF
		}
		r.buf, r.bufOff = b, r.pos
		r.Fetched += int64(len(b))
	}
	n := copy(p, r.buf[r.pos-r.bufOff:])
	r.pos += int64(n)
	return n, nil
}

// Seek implements io.Seeker.
func (r *RangeReader) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		off += r.pos
	case io.SeekEnd:
		off += r.size
	case io.SeekStart:
	default:
		return r.pos, errors.New("video: bad whence")
	}
	if off < 0 {
		return r.pos, errors.New("video: seek before the start")
	}
	r.pos = off
	return off, nil
}
