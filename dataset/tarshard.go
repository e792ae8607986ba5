package dataset

import (
	"archive/tar"
	"fmt"
	"io"
	"time"
)

// tarMemberTime is every member's modification time in WriteTarShard:
// packing the same samples twice gives the same bytes.
var tarMemberTime = time.Unix(0, 0)

// WriteTarShard writes to w a tar archive of regular files, names[i]
// holding datas[i], in that order, and returns each member's data range
// in the archive exactly as IndexTar reports it when reading the archive
// back. Members have mode 0644 and the Unix epoch as modification time,
// so the same input gives the same bytes; a name too long for a ustar
// header, or not ASCII, gets a PAX record, as archive/tar decides. Names
// are written as given: checking them (CheckKey) is the caller's job.
//
// This is the tar half of a packed dataset (docs/packed-datasets.md):
// TarMember.Sample makes each member a manifest entry, WriteManifestJSONL
// writes the manifest. Nothing is buffered: on error, w holds part of an
// archive.
func WriteTarShard(w io.Writer, names []string, datas [][]byte) ([]TarMember, error) {
	if len(names) != len(datas) {
		return nil, fmt.Errorf("dataset: tar shard: %d names for %d members: give one name per member", len(names), len(datas))
	}
	cw := &countingWriter{w: w}
	tw := tar.NewWriter(cw)
	members := make([]TarMember, len(names))
	for i, name := range names {
		h := &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(datas[i])), ModTime: tarMemberTime}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("dataset: tar shard: member %q: %w", name, err)
		}
		// archive/tar writes a header's blocks (PAX records included) to
		// w as WriteHeader returns, and the data right after them.
		members[i] = TarMember{Name: name, Offset: cw.n, Size: h.Size}
		if _, err := tw.Write(datas[i]); err != nil {
			return nil, fmt.Errorf("dataset: tar shard: member %q: %w", name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("dataset: tar shard: %w", err)
	}
	return members, nil
}

// Sample returns the packed sample that member m of the tar object
// ds.Object(object) holds, labelled label: key "<object key>/<member
// name>", the convention of longshore-pack (see Sample). It does not add
// the sample to ds.
func (m TarMember) Sample(ds *Dataset, object ObjectID, label int32) Sample {
	return Sample{Key: ds.Object(object) + "/" + m.Name, Label: label, Object: object, Offset: m.Offset, Size: m.Size}
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
