// Package storage is longshore's seam to object stores: a small Store
// interface; DirStore on a local directory; MemStore, the in-memory twin
// for other packages' tests; PackedStore over tar shards; and dataset
// discovery (ImageFolder layout or a manifest object). It links no object
// store client: the S3 implementation is storage/s3 (minio-go v7), and
// storage/stores opens either by location (a directory, file:// or
// s3:// URL). Sibling packages add the fault-injecting wrapper
// (storage/faulty), the conformance suite every Store passes
// (storage/storetest) and a real MinIO for tests (storage/miniotest).
//
// # Who calls it
//
// The binaries call stores.OpenDataset at start: stores.Open, Discover,
// and a PackedStore over a packed dataset. The
// node's fetchers call Get and GetRange for every sample; the coordinator
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
//     ErrRange, ErrInvalidKey, ErrLocked; for discovery ErrEmptyDataset
//     and ErrBadManifest) with the operation and the object's URL, and say
//     what to check: test them with errors.Is.
//
// # Discovery
//
// Discover reads an ImageFolder (<root>/<class>/<file>, classes labelled by
// sorted name as torchvision does, samples sorted by key) or a manifest
// (manifest.csv "key,label" or manifest.jsonl {"key","label"}). For S3 it
// lists class prefixes with a delimiter (PrefixLister) and then the
// classes concurrently, instead of paging through every key of the dataset
// in one sequential listing. A manifest is read in ranges of 8 MiB and
// parsed straight into the Dataset, without a copy of its text or a row
// per line: every process parses it, and its peak is little above what
// the Dataset keeps (about 80 bytes a sample for ImageNet-like keys).
//
// # Manifest indexes
//
// A manifest index (ManifestIndex, IndexKey: beside the manifest) holds a
// manifest's count, layout, classes and digest and the offset and
// checksum of every K-th sample's piece; ScanManifest makes one streaming
// the manifest, WriteManifestIndex puts it. A Catalog gives samples by
// index: DatasetCatalog from memory, IndexedManifest reading only the
// pieces asked for into a bounded cache (a stale index: ErrStaleIndex),
// and NewCatalogPackedStore reads a packed Catalog's samples in chunks
// as NewPackedStore does a Dataset's. The
// cluster node reads a big manifest this way (docs/scale.md).
//
// # Packed datasets
//
// A manifest may place samples inside bigger objects — members of tar
// shards, as longshore-pack writes them or WebDataset publishes them —
// with "object", "offset" and "size" beside the key (Dataset.ObjectOf,
// Sample.Offset, Size). WriteTarShard writes such a tar and returns its members'
// byte ranges, WriteManifestJSONL the manifest; IndexTar lists the
// members of any tar with their exact byte ranges. PackedStore wraps the
// dataset's store and serves a packed sample's bytes under its key,
// reading a chunk of samples (those of one epoch-order block that share a
// shard) with one ranged GET into a cache bounded in bytes.
// docs/packed-datasets.md describes the format and how to choose shard
// and block sizes.
package storage
