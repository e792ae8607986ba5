// Package storage is longshore's seam to object stores: a small Store
// interface; DirStore on a local directory; MemStore, the in-memory twin
// for other packages' tests; counting, size limits and request budgets
// over any Store. What the objects mean — datasets, their formats,
// catalogs and the packed format — is package dataset's. It links no object
// store client: the S3 implementation is storage/s3 (minio-go v7), and
// storage/stores opens either by location (a directory, file:// or
// s3:// URL). Sibling packages add the fault-injecting wrapper
// (storage/faulty), the conformance suite every Store passes
// (storage/storetest) and a real MinIO for tests (storage/miniotest).
//
// # Who calls it
//
// The binaries call stores.Open at start and hand the store to
// dataset.Open. The node's fetchers call Get and GetRange for every sample; the coordinator
// keeps checkpoints with Put under a Cond (compare-and-swap) so two
// coordinators can never both win.
//
// # Contract
//
//   - Every Store is safe for concurrent use by many goroutines. Every call
//     may block on I/O, takes a context, and returns promptly with an error
//     wrapping ctx.Err() once the context is done.
//   - Keys are '/'-separated, relative to the store's root, and obey
//     CheckKey (no "..", no leading '/', no empty components) on every
//     store, so a dataset that works on one works on all.
//   - List yields keys in lexical (byte) order, the order S3 lists in, and
//     DirStore's walk reproduces it exactly.
//   - Get and GetRange read into the caller's buffer (dst[:0]) and grow it
//     only when its capacity is short: a fetcher that reuses its buffers
//     does not allocate per object for the payload.
//   - GetRange(off, length) fails with ErrRange unless 0 <= off <= size and
//     off+length <= size (length < 0: to the end).
//   - Put is atomic (old or new content, never a mix). Cond.IfAbsent and
//     Cond.IfMatch are linearizable per key: of concurrent conditional puts
//     on one ETag or on a missing key, exactly one wins and the others get
//     ErrPrecondition. DirStore extends this across processes on one host
//     (see DirStore); S3 relies on the service (MinIO, and AWS S3 since
//     2024).
//   - ETags are the hex MD5 of the content on every store.
//   - Errors wrap the sentinels (ErrNotFound, ErrAccess, ErrPrecondition,
//     ErrRange, ErrInvalidKey, ErrLocked, ErrTooLarge) with the operation and the object's URL, and say
//     what to check: test them with errors.Is.
package storage
