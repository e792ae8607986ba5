package dataset

import (
	"context"

	"github.com/longshore/longshore/storage"
)

// GetLimit implements LimitedGetter: a packed sample is refused by its
// manifest size before any read; any other key is the wrapped store's.
func (p *PackedStore) GetLimit(ctx context.Context, key string, limit int64, dst []byte) ([]byte, error) {
	i, ok := p.lookup(key)
	if !ok {
		return storage.GetLimit(ctx, p.inner, key, limit, dst)
	}
	s := &p.ds.Samples[i]
	if p.unpack != nil {
		return p.limitUnpacked(p.Get(ctx, key, dst))(p.ds.ObjectOf(*s), key, limit)
	}
	if limit >= 0 && s.Size > limit {
		return dst[:0], storage.TooLarge("get", p.ds.ObjectOf(*s)+"#"+key, s.Size, limit)
	}
	return p.Get(ctx, key, dst)
}

// GetSampleLimit is GetSample refusing a sample larger than limit by its
// manifest size, before any read (see the function GetSampleLimit);
// limit < 0: no limit.
func (p *PackedStore) GetSampleLimit(ctx context.Context, index int64, key string, limit int64, dst []byte) ([]byte, error) {
	s, object, err := p.sampleAt(ctx, index, key)
	if err != nil {
		return dst[:0], err
	}
	if !s.Packed() {
		return storage.GetLimit(ctx, p.inner, key, limit, dst)
	}
	if p.unpack != nil {
		// The range holds other samples: the sample's size is known
		// once it is unpacked.
		return p.limitUnpacked(p.getSample(ctx, index, s, object, dst))(object, key, limit)
	}
	if limit >= 0 && s.Size > limit {
		return dst[:0], storage.TooLarge("get", object+"#"+key, s.Size, limit)
	}
	return p.getSample(ctx, index, s, object, dst)
}

// limitUnpacked refuses an unpacked sample, b, larger than limit.
func (p *PackedStore) limitUnpacked(b []byte, err error) func(object, key string, limit int64) ([]byte, error) {
	return func(object, key string, limit int64) ([]byte, error) {
		if err == nil && limit >= 0 && int64(len(b)) > limit {
			return b[:0], storage.TooLarge("get", object+"#"+key, int64(len(b)), limit)
		}
		return b, err
	}
}

var _ storage.LimitedGetter = (*PackedStore)(nil)
