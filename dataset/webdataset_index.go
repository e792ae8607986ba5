package dataset

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/longshore/longshore/storage"
)

// webDatasetFormat is a directory or prefix of WebDataset tar shards
// read as they are: every *.tar object below the root, in key order,
// indexed when the dataset is opened (IndexWebDataset). A root that holds
// a manifest is the manifest's (longshore-pack --index writes one beside
// the tars): the manifest format detects it, this one does not.
type webDatasetFormat struct{}

func (webDatasetFormat) Name() string { return "webdataset" }

// Detect lists the root until the first *.tar key (a WebDataset) or the
// first file of the dataset's media extensions or a *.parquet (not one),
// at most a listing page; a root with a manifest is not one either.
func (webDatasetFormat) Detect(ctx context.Context, s storage.Store, root string, opts DiscoverOptions) (*Found, error) {
	for _, m := range []string{ManifestJSONLName, ManifestCSVName} {
		if _, err := s.Stat(ctx, root+m); err == nil {
			return nil, nil
		} else if !errors.Is(err, storage.ErrNotFound) {
			return nil, err
		}
	}
	media := extensionSet(opts.Extensions)
	var found *Found
	n := 0
	err := s.List(ctx, root, func(info storage.ObjectInfo) error {
		ext := strings.ToLower(path.Ext(info.Key))
		switch {
		case ext == ".tar", gzipTar(info.Key):
			found = &Found{Key: info.Key, Size: info.Size}
			return errStopListing
		case media[ext], ext == ".parquet":
			return errStopListing
		}
		if n++; n >= parquetDetectKeys {
			return errStopListing
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopListing) {
		return nil, err
	}
	return found, nil
}

func (webDatasetFormat) Discover(ctx context.Context, s storage.Store, root string, _ *Found, opts DiscoverOptions) (*Dataset, error) {
	ds, _, err := IndexWebDataset(ctx, s, root, opts)
	return ds, err
}

// maxLabelBytes bounds a .cls member: a decimal integer and some space.
const maxLabelBytes = 64

// tarReadWindow is how much of a tar one ranged read brings in while
// indexing: headers of small members come many to a read; big members
// are skipped by seeking.
const tarReadWindow = 4 << 20

// wdsSample is one sample found in a tar.
type wdsSample struct {
	image    TarMember
	label    int32 // in [0, MaxClasses)
	hasLabel bool  // a .cls member gave label
	fields   []NamedValue
}

// IndexWebDataset reads every *.tar object below root (in key order,
// opts.Concurrency at once) as WebDataset shards and returns their
// samples, packed (docs/packed-datasets.md, "Indexing WebDataset tars"):
// the members that share a stem are a sample, its one member of
// opts.Extensions its data, its .cls member its integer label (in every
// sample or none: without, every label is 0), every other member a field
// (WebDatasetMemberFields). A sample's key is "<tar key>/<member>". It
// returns the number of tars too (some may hold no sample).
//
// The tars are read through tarReadWindow ranged reads, seeking past
// the media members.
func IndexWebDataset(ctx context.Context, s storage.Store, root string, opts DiscoverOptions) (*Dataset, int, error) {
	exts := map[string]bool{}
	for e := range extensionSet(opts.Extensions) {
		exts[strings.TrimPrefix(e, ".")] = true
	}
	var tars, gzs []storage.ObjectInfo
	err := s.List(ctx, root, func(info storage.ObjectInfo) error {
		switch {
		case strings.HasSuffix(info.Key, ".tar"):
			tars = append(tars, info)
		case gzipTar(info.Key):
			gzs = append(gzs, info)
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", s, err)
	}
	if len(tars) > 0 && len(gzs) > 0 {
		return nil, 0, fmt.Errorf("index %s: both *.tar (%s) and compressed *.tar.gz (%s) shards: a dataset is one or the other (docs/packed-datasets.md says what compressed shards cost): %w",
			path.Join(s.String(), root), tars[0].Key, gzs[0].Key, ErrBadTar)
	}
	compressed := len(gzs) > 0
	if compressed {
		tars = gzs
	}
	if len(tars) == 0 {
		return nil, 0, fmt.Errorf("no *.tar objects under %s: %w", path.Join(s.String(), root), ErrEmptyDataset)
	}
	keys := make([]string, len(tars))
	for i, t := range tars {
		keys[i] = t.Key
	}
	found := make([][]wdsSample, len(tars))
	_, err = listConcurrently(ctx, keys, opts.Concurrency, func(ctx context.Context, i int) ([]Sample, error) {
		var f []wdsSample
		var err error
		if compressed {
			f, err = indexGzipTar(ctx, s, tars[i], exts)
		} else {
			r := &tarRangeReader{ctx: ctx, s: s, key: tars[i].Key, size: tars[i].Size}
			f, err = indexWebDatasetTar(r, r.readAt, tars[i].Key, exts)
		}
		if err != nil {
			return nil, fmt.Errorf("index %s/%s: %w", s, tars[i].Key, err)
		}
		found[i] = f
		return nil, nil
	})
	if err != nil {
		return nil, 0, err
	}
	// Labels come from .cls members, in every sample or none (a
	// captioned dataset: every label 0).
	var labelled, unlabelled *wdsSample
	var labelledIn, unlabelledIn string
	for i, inTar := range found {
		for k := range inTar {
			if inTar[k].hasLabel && labelled == nil {
				labelled, labelledIn = &inTar[k], tars[i].Key
			}
			if !inTar[k].hasLabel && unlabelled == nil {
				unlabelled, unlabelledIn = &inTar[k], tars[i].Key
			}
		}
	}
	if labelled != nil && unlabelled != nil {
		name := unlabelled.image.Name
		dir, base := path.Split(name)
		stem := dir + base[:strings.IndexByte(base, '.')]
		return nil, 0, fmt.Errorf("index %s/%s: sample %q (%s) has no .cls member holding its label, where %s/%s has one: label every sample or none: %w", s, unlabelledIn, stem, name, labelledIn, labelled.image.Name, ErrBadTar)
	}
	ds := &Dataset{}
	var gz *gzipTarUnpacker
	if compressed {
		gz = &gzipTarUnpacker{members: map[string]map[string]TarMember{}}
		ds.Unpacker = gz
	}
	fields := NewFieldsBuilder()
	for i, inTar := range found {
		if len(inTar) == 0 {
			continue
		}
		object := ds.AddObject(tars[i].Key)
		if gz != nil {
			gz.members[tars[i].Key] = map[string]TarMember{}
		}
		for _, ts := range inTar {
			smp := ts.image.Sample(ds, object, ts.label)
			if gz != nil {
				// The member lies in the decompressed stream: the range
				// to read is the whole shard.
				gz.members[tars[i].Key][ts.image.Name] = ts.image
				smp.Offset, smp.Size = 0, tars[i].Size
			}
			ds.Samples = append(ds.Samples, smp)
			for len(ds.Classes) <= int(ts.label) {
				ds.Classes = append(ds.Classes, strconv.Itoa(len(ds.Classes)))
			}
			for _, f := range ts.fields {
				if err := fields.Set(f.Name, f.Value); err != nil {
					return nil, 0, fmt.Errorf("index %s/%s: sample %s: %w", s, tars[i].Key, ts.image.Name, err)
				}
			}
			fields.EndSample()
		}
	}
	if len(ds.Samples) == 0 {
		return nil, 0, fmt.Errorf("the %d tars under %s hold no samples: %w", len(tars), path.Join(s.String(), root), ErrEmptyDataset)
	}
	ds.Fields = fields.Finish()
	return ds, len(tars), nil
}

// gzipTar: key names a gzip-compressed tar (.tar.gz, .tgz).
func gzipTar(key string) bool {
	return strings.HasSuffix(key, ".tar.gz") || strings.HasSuffix(key, ".tgz")
}

// maxGzipTar bounds a compressed shard's decompressed size: it is
// decompressed into memory whole.
const maxGzipTar = 4 << 30

// indexGzipTar reads a compressed shard whole (one GET), decompresses it
// and indexes the tar inside; the members' ranges are the decompressed
// stream's.
func indexGzipTar(ctx context.Context, s storage.Store, info storage.ObjectInfo, exts map[string]bool) ([]wdsSample, error) {
	data, err := s.Get(ctx, info.Key, nil)
	if err != nil {
		return nil, err
	}
	raw, err := gunzip(data)
	if err != nil {
		return nil, err
	}
	return indexWebDatasetTar(bytes.NewReader(raw), func(off, n int64) ([]byte, error) {
		return slices.Clone(raw[off : off+n]), nil
	}, info.Key, exts)
}

// gunzip decompresses a compressed shard, at most maxGzipTar bytes.
func gunzip(data []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("gzip: %v: %w", err, ErrBadTar)
	}
	var out bytes.Buffer
	n, err := io.Copy(&out, io.LimitReader(zr, maxGzipTar+1))
	if err != nil {
		return nil, fmt.Errorf("gzip: %v: %w", err, ErrBadTar)
	}
	if n > maxGzipTar {
		return nil, fmt.Errorf("gzip: more than %d bytes decompressed: %w", int64(maxGzipTar), ErrBadTar)
	}
	return out.Bytes(), nil
}

// gzipTarUnpacker serves the samples of compressed shards: a sample's
// range is its whole shard, decompressed once per chunk read.
type gzipTarUnpacker struct {
	members map[string]map[string]TarMember // by shard key, by member name
}

func (u *gzipTarUnpacker) Unpack(object string, off int64, data []byte) Members {
	return &gzipTarMembers{u: u, object: object, off: off, data: data}
}

type gzipTarMembers struct {
	u      *gzipTarUnpacker
	object string
	off    int64
	data   []byte
	once   sync.Once
	raw    []byte
	err    error
}

func (m *gzipTarMembers) Member(s Sample) ([]byte, error) {
	members := m.u.members[m.object]
	name, ok := strings.CutPrefix(s.Key, m.object+"/")
	mem, found := members[name]
	if !ok || !found {
		return nil, fmt.Errorf("webdataset: sample %s is no member of %s: %w", s.Key, m.object, storage.ErrInvalidKey)
	}
	if m.off != 0 || int64(len(m.data)) != s.Size {
		return nil, fmt.Errorf("webdataset: %s: the range read [%d,+%d) is not the whole shard (%d bytes): %w", m.object, m.off, len(m.data), s.Size, storage.ErrInvalidKey)
	}
	m.once.Do(func() { m.raw, m.err = gunzip(m.data) })
	if m.err != nil {
		return nil, fmt.Errorf("webdataset %s: %w", m.object, m.err)
	}
	if mem.Offset < 0 || mem.Offset+mem.Size > int64(len(m.raw)) {
		return nil, fmt.Errorf("webdataset %s: member %s outside the decompressed shard (it changed since it was indexed?): %w", m.object, name, ErrBadTar)
	}
	return m.raw[mem.Offset : mem.Offset+mem.Size : mem.Offset+mem.Size], nil
}

// Release implements Members: the decompressed shard is the collector's.
func (m *gzipTarMembers) Release() {}

// indexWebDatasetTar lists the samples of one WebDataset tar read
// through r (readAt reads a member's bytes): members grouped by stem,
// each with exactly one media member. key is the tar's.
func indexWebDatasetTar(r io.Reader, readAt func(off, n int64) ([]byte, error), key string, exts map[string]bool) ([]wdsSample, error) {
	info := storage.ObjectInfo{Key: key}
	type group struct {
		images []TarMember
		label  *int32
		cls    string
		fields []NamedValue
	}
	groups := map[string]*group{}
	var stems []string
	seen := map[string]bool{}
	err := IndexTar(r, func(m TarMember) error {
		name := strings.TrimPrefix(m.Name, "./")
		m.Name = name
		if seen[name] {
			return fmt.Errorf("member %q appears twice: %w", name, ErrBadTar)
		}
		seen[name] = true
		dir, base := path.Split(name)
		dot := strings.IndexByte(base, '.')
		if dot <= 0 {
			return nil // no extension: not a sample's part
		}
		stem, ext := dir+base[:dot], strings.ToLower(base[dot+1:])
		g := groups[stem]
		if g == nil {
			g = &group{}
			groups[stem] = g
			stems = append(stems, stem)
		}
		switch {
		case exts[ext], exts[anyMember] && ext != WebDatasetLabelExt:
			key := info.Key + "/" + name
			if err := storage.CheckKey(key); err != nil {
				return fmt.Errorf("member %q: %w", name, err)
			}
			if strings.ContainsAny(key, "\t\n\r") {
				return fmt.Errorf("key %q contains a tab or newline, which the node's tab-separated logs cannot carry: rename it: %w", key, ErrBadTar)
			}
			g.images = append(g.images, m)
		case ext == WebDatasetLabelExt:
			if m.Size > maxLabelBytes {
				return fmt.Errorf("member %q: %d bytes, not an integer label: %w", name, m.Size, ErrBadTar)
			}
			b, err := readAt(m.Offset, m.Size)
			if err != nil {
				return fmt.Errorf("member %q: %w", name, err)
			}
			v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil || v < 0 || v >= MaxClasses {
				return fmt.Errorf("member %q holds %q: want an integer label in [0, %d): %w", name, b, MaxClasses, ErrBadTar)
			}
			label := int32(v)
			g.label, g.cls = &label, name
		default:
			// Any other member is a field of its sample.
			if m.Size > MaxMemberField {
				return fmt.Errorf("member %q: %d bytes, more than the %d a field may hold (a second media member? index with --media naming it): %w", name, m.Size, MaxMemberField, ErrBadTar)
			}
			b, err := readAt(m.Offset, m.Size)
			if err != nil {
				return fmt.Errorf("member %q: %w", name, err)
			}
			fs, err := WebDatasetMemberFields(ext, b)
			if err != nil {
				return fmt.Errorf("member %q: %w: %w", name, err, ErrBadTar)
			}
			g.fields = append(g.fields, fs...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []wdsSample
	for _, stem := range stems {
		g := groups[stem]
		switch {
		case len(g.images) == 0 && g.label == nil:
			continue // neither image nor label: not a sample here (metadata)
		case len(g.images) == 0:
			return nil, fmt.Errorf("sample %q has a label (%s) but no image member (.jpg, .jpeg, .png, .webp): %w", stem, g.cls, ErrBadTar)
		case len(g.images) > 1 && exts[anyMember]:
			return nil, fmt.Errorf("sample %q has %d members (%s, %s, ...): which one is the sample's data? name its extension with --media raw:EXT (like raw:%s); the others become its fields: %w",
				stem, len(g.images), g.images[0].Name, g.images[1].Name, memberExt(g.images[0].Name), ErrBadTar)
		case len(g.images) > 1:
			return nil, fmt.Errorf("sample %q has %d image members (%s, %s, ...): which one is the sample?: %w", stem, len(g.images), g.images[0].Name, g.images[1].Name, ErrBadTar)
		}
		ts := wdsSample{image: g.images[0], fields: g.fields}
		if g.label != nil {
			ts.label, ts.hasLabel = *g.label, true
		}
		out = append(out, ts)
	}
	return out, nil
}

// anyMember is AnyExtension among a tar's member extensions (no dot):
// --media raw, whose sample is its one member, whatever it is.
const anyMember = "*"

// memberExt is a member name's extension: what follows the first dot of
// its base name.
func memberExt(name string) string {
	_, base := path.Split(name)
	_, ext, _ := strings.Cut(base, ".")
	return ext
}

// tarRangeReader reads an object sequentially through ranged GETs of
// tarReadWindow bytes, and seeks without I/O, so archive/tar skips the
// data of big members instead of downloading it.
type tarRangeReader struct {
	ctx    context.Context
	s      storage.Store
	key    string
	size   int64
	pos    int64
	buf    []byte
	bufOff int64 // object offset of buf[0]
}

func (r *tarRangeReader) Read(p []byte) (int, error) {
	if r.pos >= r.size {
		return 0, io.EOF
	}
	if r.pos < r.bufOff || r.pos >= r.bufOff+int64(len(r.buf)) {
		n := min(int64(tarReadWindow), r.size-r.pos)
		buf, err := r.s.GetRange(r.ctx, r.key, r.pos, n, r.buf)
		if err != nil {
			return 0, err
		}
		r.buf, r.bufOff = buf, r.pos
	}
	n := copy(p, r.buf[r.pos-r.bufOff:])
	r.pos += int64(n)
	return n, nil
}

func (r *tarRangeReader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += r.pos
	case io.SeekEnd:
		offset += r.size
	default:
		return r.pos, fmt.Errorf("seek: bad whence %d", whence)
	}
	if offset < 0 {
		return r.pos, fmt.Errorf("seek to %d: negative position", offset)
	}
	r.pos = offset
	return offset, nil
}

// readAt returns n bytes at off, from the window when it holds them (a
// small member's data comes in with its header), else with a GET of its
// own. It does not move the read position.
func (r *tarRangeReader) readAt(off, n int64) ([]byte, error) {
	if off >= r.bufOff && off+n <= r.bufOff+int64(len(r.buf)) {
		// A copy: the next window is read into buf, and a bytes field
		// keeps what it is given.
		return slices.Clone(r.buf[off-r.bufOff : off-r.bufOff+n]), nil
	}
	return r.s.GetRange(r.ctx, r.key, off, n, nil)
}
