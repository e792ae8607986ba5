package storage

import (
	"context"
	"errors"
	"strings"
	"time"
)

// Sentinel errors. Implementations wrap them with the key and the operation
// ("get s3://bucket/key: storage: object not found"); check with errors.Is.
var (
	// ErrNotFound: the key (or bucket) does not exist.
	ErrNotFound = errors.New("storage: object not found")
	// ErrPrecondition: a conditional put lost (the object exists, or its
	// ETag no longer matches). The caller must re-read before retrying.
	ErrPrecondition = errors.New("storage: precondition failed")
	// ErrAccess: the credentials were refused or lack permission.
	ErrAccess = errors.New("storage: access denied")
	// ErrRange: a byte range lies outside the object.
	ErrRange = errors.New("storage: invalid range")
	// ErrInvalidKey: the key breaks the key rules (see CheckKey); no store
	// accepts it, so a dataset stays portable between stores.
	ErrInvalidKey = errors.New("storage: invalid key")
	// ErrLocked: DirStore could not take a key's lock file before the
	// context ended (another writer holds it).
	ErrLocked = errors.New("storage: key locked by another writer")
	// ErrTooLarge: the object is larger than the caller's limit
	// (GetLimit); nothing of it was read into memory.
	ErrTooLarge = errors.New("storage: object too large")
)

// ObjectInfo describes one object. Keys are relative to the store's root
// (the directory or the s3://bucket/prefix the store was opened on) and use
// '/' as separator on every platform.
//
// ETag is the hex MD5 of the content for objects written in one piece (what
// S3 reports for a single PUT, and what DirStore and MemStore compute). It
// may be empty in List results where computing it would mean reading every
// object (DirStore); Stat always fills it.
type ObjectInfo struct {
	Key     string
	Size    int64 // bytes
	ETag    string
	ModTime time.Time
}

// Cond is a precondition on Put. The zero value means unconditional.
type Cond struct {
	// IfAbsent: succeed only if no object has the key (If-None-Match: *).
	IfAbsent bool
	// IfMatch: succeed only if the current object's ETag equals this
	// (If-Match). Empty means no ETag condition.
	IfMatch string
}

// Store is an object store rooted at a directory or bucket prefix.
type Store interface {
	// List calls fn for every object whose key starts with prefix, in
	// lexical key order. An error from fn stops the listing and is returned.
	List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error
	// Get reads the whole object, appending it to dst[:0] (pass a reused
	// buffer to avoid allocating) and returning the extended slice.
	Get(ctx context.Context, key string, dst []byte) ([]byte, error)
	// GetRange reads length bytes starting at off, appending to dst[:0].
	// length < 0 means "to the end of the object".
	GetRange(ctx context.Context, key string, off, length int64, dst []byte) ([]byte, error)
	// Stat returns the object's metadata.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// Put writes the object atomically (readers see the old or the new
	// content, never a mix) under the precondition c, returning the new
	// ETag. A failed precondition returns an error wrapping ErrPrecondition.
	Put(ctx context.Context, key string, data []byte, c Cond) (etag string, err error)
	// Delete removes the object; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// String names the store's root for messages, e.g. "s3://bucket/prefix"
	// or "/data/imagenet".
	String() string
}

// SampleStore is implemented by stores that hold a dataset's samples and
// address them by their index in it (PackedStore), so that reading one
// takes no lookup by key. When the pipeline's Store has it, the fetchers
// read through GetSample, and each work item is announced with
// PrefetchSample as the work arrives, ahead of the fetchers.
type SampleStore interface {
	Store
	// GetSample is Get of the dataset's sample index, whose key is key;
	// it fails with ErrInvalidKey if the dataset's sample index is not
	// key (the store holds another dataset).
	GetSample(ctx context.Context, index int64, key string, dst []byte) ([]byte, error)
	// PrefetchSample hints that sample index will be read soon (a packed
	// sample's chunk may start). It must return at once, and it may do
	// nothing.
	PrefetchSample(index int64)
}

// PrefixLister is implemented by stores that can list the "directories"
// below a prefix without listing every object (S3's delimiter listing).
// Dataset discovery uses it to list a million-object ImageFolder class by
// class, concurrently. Use the ListPrefixes function, which falls back to a
// full List for stores without it.
type PrefixLister interface {
	// ListPrefixes returns, in lexical order and without duplicates, every
	// distinct p+"/" where some key k starts with prefix and p is k cut
	// at its first '/' after len(prefix). For keys "a/x/1", "a/y/2", "a/z"
	// and prefix "a/" it returns ["a/x/", "a/y/"].
	ListPrefixes(ctx context.Context, prefix string) ([]string, error)
}

// ListPrefixes lists the common prefixes of s below prefix (see
// PrefixLister), using s's own ListPrefixes when it has one and a full List
// otherwise.
func ListPrefixes(ctx context.Context, s Store, prefix string) ([]string, error) {
	if pl, ok := s.(PrefixLister); ok {
		return pl.ListPrefixes(ctx, prefix)
	}
	var out []string
	err := s.List(ctx, prefix, func(info ObjectInfo) error {
		if p, ok := CommonPrefix(info.Key, prefix); ok && (len(out) == 0 || out[len(out)-1] != p) {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

// CommonPrefix cuts key at its first '/' after prefix, keeping the '/'.
func CommonPrefix(key, prefix string) (string, bool) {
	if !strings.HasPrefix(key, prefix) {
		return "", false
	}
	i := strings.IndexByte(key[len(prefix):], '/')
	if i < 0 {
		return "", false
	}
	return key[:len(prefix)+i+1], true
}
