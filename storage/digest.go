package storage

import (
	"fmt"
	"strconv"
)

// ManifestDigest identifies a dataset: a hash of its keys and labels in
// index order, and of where each packed sample lies (object key — not
// its ID, which depends on the order objects were listed — offset, size),
// so that a node and a coordinator reading differently packed copies
// refuse each other. Coordinator and nodes compare it before
// serving a job. A dataset without packed samples hashes as it did before
// packing existed.
func ManifestDigest(ds *Dataset) string {
	// FNV-1a 64 over key, NUL, label, NUL: cheap, and a mismatch here is
	// a misconfiguration, not an attack.
	h := uint64(14695981039346656037)
	add := func(b []byte) {
		for _, c := range b {
			h ^= uint64(c)
			h *= 1099511628211
		}
	}
	var buf []byte // one buffer for every sample's fields: no allocation a sample
	for _, s := range ds.Samples {
		buf = append(buf[:0], s.Key...)
		buf = append(buf, 0)
		buf = strconv.AppendInt(buf, int64(s.Label), 10)
		buf = append(buf, 0)
		if s.Packed() {
			// A marker, then the location: a copy packed differently
			// (other shards or offsets) digests differently.
			buf = append(buf, 1)
			buf = append(buf, ds.ObjectOf(s)...)
			buf = append(buf, 0)
			buf = strconv.AppendInt(buf, s.Offset, 10)
			buf = append(buf, 0)
			buf = strconv.AppendInt(buf, s.Size, 10)
			buf = append(buf, 0)
		}
		add(buf)
	}
	return fmt.Sprintf("%d:%016x", len(ds.Samples), h)
}
