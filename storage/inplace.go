package storage

// InPlacer is a Store that can say whether its range reads are as cheap
// as reading whole objects: a directory on a local disk, where a member
// of a tar shard is one pread from the page cache and there is no
// request to amortize. A packed dataset's chunk cache (PackedConfig
// .CacheBytes) buys nothing there: it copies each chunk into memory (or
// to another file, with SpillDir) only to copy its members out again.
type InPlacer interface {
	ReadsInPlace() bool
}

// ReadsInPlace reports whether the first store under s, through the
// wrappers' Unwrap, that answers InPlacer reads in place; false when
// none does (an object store: every read is a request).
func ReadsInPlace(s Store) bool {
	p, ok := under[InPlacer](s)
	return ok && p.ReadsInPlace()
}

// ReadsInPlace implements InPlacer: true when the directory is on a
// local file system (a disk, or memory), false on a network or FUSE file
// system (NFS, SMB, Lustre, s3fs, gcsfuse, ...), where every read is a
// round trip and chunks pay as they do on an object store, and false
// when the file system cannot be told.
func (d *DirStore) ReadsInPlace() bool {
	return localFS(d.root)
}
