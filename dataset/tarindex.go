package dataset

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"strings"
)

// TarMember is a regular file inside a tar archive: its name as the
// archive gives it (PAX and GNU long names resolved) and the byte range of
// its data in the archive.
type TarMember struct {
	Name   string
	Offset int64 // first data byte, from the start of the archive
	Size   int64
}

// ErrBadTar: a tar archive could not be indexed (truncated, corrupt, or a
// member the packed format cannot serve, such as a sparse file).
var ErrBadTar = errors.New("dataset: unusable tar archive")

// IndexTar reads a tar archive from r and calls fn for each regular-file
// member, in archive order, with its data's exact offset and size.
// Directories, links and other special members are skipped; PAX, GNU and
// ustar headers are all understood (archive/tar parses them; IndexTar
// counts the bytes it consumes). A sparse member is an error: its data is
// not one contiguous range.
//
// If r is also an io.Seeker, member data is skipped by seeking instead of
// reading (archive/tar does so): over a ranged object reader, indexing a
// tar of large members reads little more than the headers.
//
// An error from fn stops the indexing and is returned; errors of the
// archive itself wrap ErrBadTar.
func IndexTar(r io.Reader, fn func(TarMember) error) error {
	cr := &countingReader{r: r}
	var tr *tar.Reader
	if s, ok := r.(io.ReadSeeker); ok {
		base, err := s.Seek(0, io.SeekCurrent)
		if err == nil {
			tr = tar.NewReader(&countingSeeker{countingReader: cr, s: s, base: base})
		}
	}
	if tr == nil {
		tr = tar.NewReader(cr)
	}
	for i := 0; ; i++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("tar member %d (after %d bytes): %w: %w", i, cr.n, ErrBadTar, err)
		}
		if isSparse(hdr) {
			return fmt.Errorf("tar member %q: sparse file (re-create the archive without --sparse): %w", hdr.Name, ErrBadTar)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		if hdr.Size < 0 {
			return fmt.Errorf("tar member %q: negative size %d: %w", hdr.Name, hdr.Size, ErrBadTar)
		}
		if err := fn(TarMember{Name: hdr.Name, Offset: cr.n, Size: hdr.Size}); err != nil {
			return err
		}
	}
}

// ReadTarIndex is IndexTar collecting the members into a slice.
func ReadTarIndex(r io.Reader) ([]TarMember, error) {
	var out []TarMember
	err := IndexTar(r, func(m TarMember) error {
		out = append(out, m)
		return nil
	})
	return out, err
}

func isSparse(h *tar.Header) bool {
	if h.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// countingReader counts the bytes read (or skipped) through it: when
// tar.Reader.Next returns, n is where the member's data starts, because
// archive/tar reads headers in exact 512-byte blocks and never ahead.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// countingSeeker lets archive/tar skip member data by seeking, keeping the
// count (relative to where the archive began) in step.
type countingSeeker struct {
	*countingReader
	s    io.Seeker
	base int64
}

func (c *countingSeeker) Seek(offset int64, whence int) (int64, error) {
	pos, err := c.s.Seek(offset, whence)
	if err == nil {
		c.n = pos - c.base
	}
	return pos, err
}
