// Package storage is longshore's seam to object stores: a small Store
// interface with a local-directory implementation, an S3 implementation on
// minio-go v7, an in-memory twin and an error-injecting wrapper for tests,
// plus dataset discovery (ImageFolder layout or a manifest object).
//
// Every Store is safe for concurrent use by many goroutines. Every call that
// may block takes a context and returns promptly with ctx.Err() once the
// context is done.
package storage

import (
	"context"
	"errors"
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
)

// ObjectInfo describes one object. Keys are relative to the store's root
// (the directory or the s3://bucket/prefix the store was opened on) and use
// '/' as separator on every platform.
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
