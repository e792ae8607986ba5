package storage

import (
	"context"
	"fmt"
)

// LimitedGetter is implemented by stores that can refuse an object over
// a size limit before reading it into memory (S3: by Content-Length;
// DirStore: by the file's size; PackedStore: by the manifest's size).
type LimitedGetter interface {
	// GetLimit is Get, failing with an error wrapping ErrTooLarge, having
	// read nothing into dst, when the object is larger than limit bytes.
	// limit < 0 means no limit.
	GetLimit(ctx context.Context, key string, limit int64, dst []byte) ([]byte, error)
}

// GetLimit reads key from s like Get, but fails with an error wrapping
// ErrTooLarge when the object is larger than limit bytes (limit < 0: no
// limit), so that one huge object cannot take a fetch buffer of its size.
// It uses s's own GetLimit when it has one, and otherwise a Stat before
// the Get (and a check of the length read, should the object change in
// between).
func GetLimit(ctx context.Context, s Store, key string, limit int64, dst []byte) ([]byte, error) {
	if limit < 0 {
		return s.Get(ctx, key, dst)
	}
	if lg, ok := s.(LimitedGetter); ok {
		return lg.GetLimit(ctx, key, limit, dst)
	}
	info, err := s.Stat(ctx, key)
	if err != nil {
		return dst[:0], err
	}
	if info.Size > limit {
		return dst[:0], TooLarge("get", s.String()+"/"+key, info.Size, limit)
	}
	out, err := s.Get(ctx, key, dst)
	if err == nil && int64(len(out)) > limit {
		return dst[:0], TooLarge("get", s.String()+"/"+key, int64(len(out)), limit)
	}
	return out, err
}

// TooLarge is the error for an object of size bytes over limit: it wraps
// ErrTooLarge and names the flag that sets the limit. Stores and the
// dataset layer's packed reads use it alike.
func TooLarge(op, what string, size, limit int64) error {
	return fmt.Errorf("%s %s: %w: %d bytes, over the limit of %d (--max-object-bytes)", op, what, ErrTooLarge, size, limit)
}

// GetLimit implements LimitedGetter.
func (d *DirStore) GetLimit(ctx context.Context, key string, limit int64, dst []byte) ([]byte, error) {
	if limit < 0 {
		return d.Get(ctx, key, dst)
	}
	f, err := d.open(ctx, "get", key)
	if err != nil {
		return dst[:0], err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return dst[:0], d.opError("get", key, err)
	}
	if fi.Mode().IsRegular() && fi.Size() > limit {
		return dst[:0], TooLarge("get", d.root+"/"+key, fi.Size(), limit)
	}
	out, err := readToEnd(f, 0, dst[:0])
	if err != nil {
		return dst[:0], d.opError("get", key, err)
	}
	if int64(len(out)) > limit { // it grew in between
		return dst[:0], TooLarge("get", d.root+"/"+key, int64(len(out)), limit)
	}
	return out, nil
}

// GetLimit implements LimitedGetter.
func (m *MemStore) GetLimit(ctx context.Context, key string, limit int64, dst []byte) ([]byte, error) {
	o, err := m.lookup(ctx, "get", key)
	if err != nil {
		return dst[:0], err
	}
	if limit >= 0 && int64(len(o.data)) > limit {
		return dst[:0], TooLarge("get", m.String()+"/"+key, int64(len(o.data)), limit)
	}
	return append(dst[:0], o.data...), nil
}

// GetSampleLimit reads sample index (whose key is key) from s like
// GetSample, failing with an error wrapping ErrTooLarge when it is larger
// than limit bytes (limit < 0: no limit): before reading it when s knows
// its samples' sizes (PackedStore: the manifest's), else by the length
// read.
func GetSampleLimit(ctx context.Context, s SampleStore, index int64, key string, limit int64, dst []byte) ([]byte, error) {
	if limit < 0 {
		return s.GetSample(ctx, index, key, dst)
	}
	if ls, ok := s.(interface {
		GetSampleLimit(ctx context.Context, index int64, key string, limit int64, dst []byte) ([]byte, error)
	}); ok {
		return ls.GetSampleLimit(ctx, index, key, limit, dst)
	}
	out, err := s.GetSample(ctx, index, key, dst)
	if err == nil && int64(len(out)) > limit {
		return dst[:0], TooLarge("get", s.String()+"/"+key, int64(len(out)), limit)
	}
	return out, err
}

// GetLimit implements LimitedGetter, counted as a Get.
func (c *CountingStore) GetLimit(ctx context.Context, key string, limit int64, dst []byte) ([]byte, error) {
	out, err := GetLimit(ctx, c.s, key, limit, dst)
	c.count(OpGet, err)
	if err == nil {
		c.read.Add(int64(len(out)))
	}
	return out, err
}

var (
	_ LimitedGetter = (*DirStore)(nil)
	_ LimitedGetter = (*MemStore)(nil)
	_ LimitedGetter = (*CountingStore)(nil)
)
