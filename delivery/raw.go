package delivery

import (
	"encoding/binary"
	"fmt"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/feed"
)

// The raw row is the decoder's (spec.PutRaw) and the protocol's: one
// layout.
var _ [0]struct{} = [actors.RawHeader - feed.RawHeader]struct{}{}

// rawLengths are the lengths of a raw batch's samples (--media raw), read
// from their rows' headers, for the batch message (feed's Lengths): the
// trainer finds row r's bytes at [RawHeader, RawHeader+lengths[r]) of
// the row. A filled row was copied whole, header included, so it says
// the length of the row it copies.
func rawLengths(b *actors.Batch) ([]int64, error) {
	if len(b.Images) == 0 {
		return nil, nil // every sample failed: no rows
	}
	stride := b.Spec.RawRowBytes()
	n := b.Len()
	if len(b.Images) != n*stride {
		return nil, fmt.Errorf("feed: a raw batch of %d rows in %d bytes (rows of %d)", n, len(b.Images), stride)
	}
	out := make([]int64, n)
	for r := range out {
		row := b.Images[r*stride : (r+1)*stride]
		l := binary.LittleEndian.Uint64(row)
		if l > uint64(stride-actors.RawHeader) {
			return nil, fmt.Errorf("feed: raw row %d of %d bytes says it holds %d", r, stride, l)
		}
		out[r] = int64(l)
	}
	return out, nil
}
