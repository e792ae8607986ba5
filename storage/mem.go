package storage

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// MemStore is the in-memory twin of a Store, for tests of other packages.
// The zero value is not usable; call NewMemStore.
type MemStore struct {
	name string
	mu   struct {
		sync.Mutex
		objs map[string]memObject
		// sorted holds the keys in order, or is nil after a key was added
		// or removed; List rebuilds it, so listing many prefixes of a big
		// store costs one sort and a binary search each.
		sorted []string
	}
}

type memObject struct {
	data []byte
	etag string
	mod  time.Time
}

var (
	_ Store        = (*MemStore)(nil)
	_ PrefixLister = (*MemStore)(nil)
)

// NewMemStore returns an empty in-memory store; name is what String reports.
func NewMemStore(name string) *MemStore {
	m := &MemStore{name: name}
	m.mu.objs = make(map[string]memObject)
	return m
}

func (m *MemStore) String() string { return "mem://" + m.name }

func (m *MemStore) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	if err := CheckPrefix(prefix); err != nil {
		return fmt.Errorf("list %s/%s: %w", m, prefix, err)
	}
	m.mu.Lock()
	keys := m.sortedLocked()
	lo, _ := slices.BinarySearch(keys, prefix)
	var infos []ObjectInfo
	for _, k := range keys[lo:] {
		if !strings.HasPrefix(k, prefix) {
			break
		}
		o := m.mu.objs[k]
		infos = append(infos, ObjectInfo{Key: k, Size: int64(len(o.data)), ETag: o.etag, ModTime: o.mod})
	}
	m.mu.Unlock()
	for _, info := range infos {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(info); err != nil {
			return err
		}
	}
	return nil
}

// sortedLocked returns the keys in order, rebuilding the index if needed.
func (m *MemStore) sortedLocked() []string {
	if m.mu.sorted == nil {
		m.mu.sorted = make([]string, 0, len(m.mu.objs))
		for k := range m.mu.objs {
			m.mu.sorted = append(m.mu.sorted, k)
		}
		slices.Sort(m.mu.sorted)
	}
	return m.mu.sorted
}

func (m *MemStore) lookup(ctx context.Context, op, key string) (memObject, error) {
	if err := ctx.Err(); err != nil {
		return memObject{}, err
	}
	if err := CheckKey(key); err != nil {
		return memObject{}, fmt.Errorf("%s %s: %w", op, m, err)
	}
	m.mu.Lock()
	o, ok := m.mu.objs[key]
	m.mu.Unlock()
	if !ok {
		return memObject{}, fmt.Errorf("%s %s/%s: %w", op, m, key, ErrNotFound)
	}
	return o, nil
}

func (m *MemStore) Get(ctx context.Context, key string, dst []byte) ([]byte, error) {
	o, err := m.lookup(ctx, "get", key)
	if err != nil {
		return dst[:0], err
	}
	return append(dst[:0], o.data...), nil
}

func (m *MemStore) GetRange(ctx context.Context, key string, off, length int64, dst []byte) ([]byte, error) {
	o, err := m.lookup(ctx, "get range", key)
	if err != nil {
		return dst[:0], err
	}
	size := int64(len(o.data))
	if off < 0 || off > size || (length >= 0 && off+length > size) {
		return dst[:0], fmt.Errorf("get range %s/%s [%d,+%d) of %d bytes: %w", m, key, off, length, size, ErrRange)
	}
	end := size
	if length >= 0 {
		end = off + length
	}
	return append(dst[:0], o.data[off:end]...), nil
}

func (m *MemStore) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	o, err := m.lookup(ctx, "stat", key)
	if err != nil {
		return ObjectInfo{}, err
	}
	return ObjectInfo{Key: key, Size: int64(len(o.data)), ETag: o.etag, ModTime: o.mod}, nil
}

func (m *MemStore) Put(ctx context.Context, key string, data []byte, c Cond) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := CheckKey(key); err != nil {
		return "", fmt.Errorf("put %s: %w", m, err)
	}
	sum := md5.Sum(data)
	etag := hex.EncodeToString(sum[:])
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, exists := m.mu.objs[key]
	if c.IfAbsent && exists {
		return "", fmt.Errorf("put %s/%s if absent: %w", m, key, ErrPrecondition)
	}
	if c.IfMatch != "" && (!exists || cur.etag != c.IfMatch) {
		return "", fmt.Errorf("put %s/%s if-match %q: %w", m, key, c.IfMatch, ErrPrecondition)
	}
	if !exists {
		m.mu.sorted = nil
	}
	m.mu.objs[key] = memObject{data: append([]byte(nil), data...), etag: etag, mod: time.Now()}
	return etag, nil
}

func (m *MemStore) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := CheckKey(key); err != nil {
		return fmt.Errorf("delete %s: %w", m, err)
	}
	m.mu.Lock()
	if _, ok := m.mu.objs[key]; ok {
		delete(m.mu.objs, key)
		m.mu.sorted = nil
	}
	m.mu.Unlock()
	return nil
}

// ListPrefixes implements PrefixLister.
func (m *MemStore) ListPrefixes(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckPrefix(prefix); err != nil {
		return nil, fmt.Errorf("list prefixes %s/%s: %w", m, prefix, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := m.sortedLocked()
	var out []string
	i, _ := slices.BinarySearch(keys, prefix)
	for i < len(keys) && strings.HasPrefix(keys[i], prefix) {
		p, ok := CommonPrefix(keys[i], prefix)
		if !ok {
			i++
			continue
		}
		out = append(out, p)
		// Skip the rest of p: every key below it sorts before p+"\xff..."
		// and after p, so jump past the last key starting with p.
		i += sort.Search(len(keys)-i, func(j int) bool { return !strings.HasPrefix(keys[i+j], p) })
	}
	return out, nil
}
