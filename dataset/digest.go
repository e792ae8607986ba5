package dataset

import (
	"fmt"
	"strconv"
)

// ManifestDigest identifies a dataset: a hash of its keys and labels in
// index order, of its fields' values (only where a sample has any), and of where each packed sample lies (object key — not
// its ID, which depends on the order objects were listed — offset, size),
// so that a node and a coordinator reading differently packed copies
// refuse each other. Coordinator and nodes compare it before
// serving a job. A dataset without packed samples hashes as it did before
// packing existed.
func ManifestDigest(ds *Dataset) string {
	var d Digester
	schema := ds.Fields.Schema()
	for i, s := range ds.Samples {
		d.Add(s, ds.ObjectOf(s))
		if len(schema) > 0 {
			d.AddFields(schema, ds.Fields.Row(i))
		}
	}
	if ds.FormatDigest != "" {
		d.AddFormat(ds.FormatDigest)
	}
	return d.String()
}

// Digester computes ManifestDigest one sample at a time, in index order,
// so that a manifest can be digested as it streams past (ScanManifest)
// without its Dataset. The zero value is ready.
type Digester struct {
	n   int64
	h   uint64
	buf []byte // one buffer for every sample's fields: no allocation a sample
}

// Add hashes sample s, whose object's key is object ("" for a plain one).
func (d *Digester) Add(s Sample, object string) {
	if d.n == 0 {
		// FNV-1a 64 over key, NUL, label, NUL: cheap, and a mismatch here
		// is a misconfiguration, not an attack.
		d.h = 14695981039346656037
	}
	d.n++
	buf := append(d.buf[:0], s.Key...)
	buf = append(buf, 0)
	buf = strconv.AppendInt(buf, int64(s.Label), 10)
	buf = append(buf, 0)
	if s.Packed() {
		// A marker, then the location: a copy packed differently
		// (other shards or offsets) digests differently.
		buf = append(buf, 1)
		buf = append(buf, object...)
		buf = append(buf, 0)
		buf = strconv.AppendInt(buf, s.Offset, 10)
		buf = append(buf, 0)
		buf = strconv.AppendInt(buf, s.Size, 10)
		buf = append(buf, 0)
	}
	h := d.h
	for _, c := range buf {
		h ^= uint64(c)
		h *= 1099511628211
	}
	d.h, d.buf = h, buf
}

// AddFormat hashes what a format adds beyond the samples
// (Dataset.FormatDigest), after them: a dataset without it digests as
// it did before formats could add any.
func (d *Digester) AddFormat(desc string) {
	h := d.h
	if d.n == 0 {
		h = 14695981039346656037
	}
	for _, c := range []byte("\x00format\x00" + desc) {
		h ^= uint64(c)
		h *= 1099511628211
	}
	d.h = h
}

// AddFields hashes the fields of the sample Add hashed last, row laid
// out by schema. A sample whose fields are all absent hashes as one
// without fields, so a dataset without fields digests as it did before
// fields existed; a changed value (a caption) changes the digest.
func (d *Digester) AddFields(schema Schema, row []Value) {
	buf := appendFieldsDigest(d.buf[:0], schema, row)
	h := d.h
	for _, c := range buf {
		h ^= uint64(c)
		h *= 1099511628211
	}
	d.h, d.buf = h, buf
}

// String is the digest of the samples added so far.
func (d *Digester) String() string {
	h := d.h
	if d.n == 0 {
		h = 14695981039346656037
	}
	return fmt.Sprintf("%d:%016x", d.n, h)
}
