package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// sampleExts are the member extensions that hold a sample's data for
// --media (dataset.MediaExtensions, without the dot): what the decoder
// reads.
func sampleExts(media string) (map[string]bool, error) {
	exts, err := dataset.MediaExtensions(media)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, e := range exts {
		out[strings.TrimPrefix(e, ".")] = true
	}
	return out, nil
}

// labelExt is the member extension that holds a sample's integer label,
// as in WebDataset's ImageNet shards.
const labelExt = "cls"

// maxLabelBytes bounds a .cls member: a decimal integer and some space.
const maxLabelBytes = 64

// readWindow is how much of a tar one ranged read brings in: headers of
// small members come many to a read; big members are skipped by seeking.
const readWindow = 4 << 20

// tarSample is one sample found in a tar.
type tarSample struct {
	image    dataset.TarMember
	label    int32 // in [0, dataset.MaxClasses)
	hasLabel bool  // a .cls member gave label
	fields   []dataset.NamedValue
}

func indexTars(ctx context.Context, o options, stdout, stderr io.Writer) error {
	exts, err := sampleExts(o.media)
	if err != nil {
		return err
	}
	s, err := openStore(ctx, o.index, o.storeOptions(), false, stderr)
	if err != nil {
		return fmt.Errorf("--index: %w", err)
	}
	defer storage.Close(s)
	if !o.force {
		if _, err := s.Stat(ctx, dataset.ManifestJSONLName); err == nil {
			return fmt.Errorf("%s already holds %s: pass --force to write over it", s, dataset.ManifestJSONLName)
		}
	}
	if _, err := s.Stat(ctx, dataset.ManifestCSVName); err == nil {
		return fmt.Errorf("%s holds a %s, which would conflict with the new %s: remove it", s, dataset.ManifestCSVName, dataset.ManifestJSONLName)
	}
	var tars []storage.ObjectInfo
	err = s.List(ctx, "", func(info storage.ObjectInfo) error {
		if strings.HasSuffix(info.Key, ".tar") {
			tars = append(tars, info)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list %s: %w", s, err)
	}
	if len(tars) == 0 {
		return fmt.Errorf("no *.tar objects under %s", s)
	}
	fmt.Fprintf(stderr, "longshore-pack: indexing %d tars under %s\n", len(tars), s)

	found := make([][]tarSample, len(tars))
	errs := make([]error, len(tars))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(o.concurrency, len(tars)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(tars) || ctx.Err() != nil {
					return
				}
				found[i], errs[i] = indexTar(ctx, s, tars[i], exts)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// Labels come from .cls members, in every sample or none (a
	// captioned dataset: every label 0).
	var labelled, unlabelled *tarSample
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
		return fmt.Errorf("index %s/%s: sample %q (%s) has no .cls member holding its label, where %s/%s has one: label every sample or none", s, unlabelledIn, stem, name, labelledIn, labelled.image.Name)
	}
	var packed dataset.Dataset // Classes "0", "1", ...: integer labels
	fields := dataset.NewFieldsBuilder()
	for i, inTar := range found {
		if len(inTar) == 0 {
			continue
		}
		object := packed.AddObject(tars[i].Key)
		for _, ts := range inTar {
			packed.Samples = append(packed.Samples, ts.image.Sample(&packed, object, ts.label))
			for len(packed.Classes) <= int(ts.label) {
				packed.Classes = append(packed.Classes, strconv.Itoa(len(packed.Classes)))
			}
			for _, f := range ts.fields {
				if err := fields.Set(f.Name, f.Value); err != nil {
					return fmt.Errorf("index %s/%s: sample %s: %w", s, tars[i].Key, ts.image.Name, err)
				}
			}
			fields.EndSample()
		}
	}
	packed.Fields = fields.Finish()
	n := len(packed.Samples)
	if n == 0 {
		return fmt.Errorf("the %d tars under %s hold no samples", len(tars), s)
	}
	var manifest bytes.Buffer
	if err := dataset.WriteManifestJSONL(&manifest, &packed); err != nil {
		return fmt.Errorf("write the manifest of the tars (a bug; nothing written): %w", err)
	}
	ds, err := dataset.ParseManifest(bytes.NewReader(manifest.Bytes()), dataset.ManifestJSONL)
	if err != nil {
		return fmt.Errorf("the manifest made from the tars does not parse (a bug; nothing written): %w", err)
	}
	if err := s.Delete(ctx, dataset.IndexKey(dataset.ManifestJSONLName)); err != nil {
		return fmt.Errorf("remove the old %s: %w", dataset.IndexKey(dataset.ManifestJSONLName), err)
	}
	if _, err := s.Put(ctx, dataset.ManifestJSONLName, manifest.Bytes(), storage.Cond{}); err != nil {
		return fmt.Errorf("put %s: %w", dataset.ManifestJSONLName, err)
	}
	if _, err := dataset.WriteManifestIndex(ctx, s, dataset.ManifestJSONLName, o.indexEvery, nil); err != nil {
		return fmt.Errorf("index %s (the manifest is written; make the index with longshore-manifest --index): %w", dataset.ManifestJSONLName, err)
	}
	fmt.Fprintf(stdout, "indexed %d samples in %d classes from %d tars; wrote %s\n", n, len(ds.Classes), len(tars), path.Join(s.String(), dataset.ManifestJSONLName))
	return nil
}

// indexTar lists the samples of one WebDataset-style tar: members grouped
// by stem, each with exactly one image member and a .cls member.
func indexTar(ctx context.Context, s storage.Store, info storage.ObjectInfo, exts map[string]bool) ([]tarSample, error) {
	r := &rangeReader{ctx: ctx, s: s, key: info.Key, size: info.Size}
	type group struct {
		images []dataset.TarMember
		label  *int32
		cls    string
		fields []dataset.NamedValue
	}
	groups := map[string]*group{}
	var stems []string
	seen := map[string]bool{}
	err := dataset.IndexTar(r, func(m dataset.TarMember) error {
		name := strings.TrimPrefix(m.Name, "./")
		m.Name = name
		if seen[name] {
			return fmt.Errorf("member %q appears twice", name)
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
		case exts[ext]:
			key := info.Key + "/" + name
			if err := storage.CheckKey(key); err != nil {
				return fmt.Errorf("member %q: %w", name, err)
			}
			if err := checkKeyText(key); err != nil {
				return err
			}
			g.images = append(g.images, m)
		case ext == labelExt:
			if m.Size > maxLabelBytes {
				return fmt.Errorf("member %q: %d bytes, not an integer label", name, m.Size)
			}
			b, err := r.ReadAt(m.Offset, m.Size)
			if err != nil {
				return fmt.Errorf("member %q: %w", name, err)
			}
			v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil || v < 0 || v >= dataset.MaxClasses {
				return fmt.Errorf("member %q holds %q: want an integer label in [0, %d)", name, b, dataset.MaxClasses)
			}
			label := int32(v)
			g.label, g.cls = &label, name
		default:
			// Any other member is a field of its sample
			// (dataset.WebDatasetMemberFields).
			if m.Size > dataset.MaxMemberField {
				return fmt.Errorf("member %q: %d bytes, more than the %d a field may hold (a second media member? index with --media naming it)", name, m.Size, dataset.MaxMemberField)
			}
			b, err := r.ReadAt(m.Offset, m.Size)
			if err != nil {
				return fmt.Errorf("member %q: %w", name, err)
			}
			fs, err := dataset.WebDatasetMemberFields(ext, b)
			if err != nil {
				return fmt.Errorf("member %q: %w", name, err)
			}
			g.fields = append(g.fields, fs...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index %s/%s: %w", s, info.Key, err)
	}
	var out []tarSample
	for _, stem := range stems {
		g := groups[stem]
		switch {
		case len(g.images) == 0 && g.label == nil:
			continue // neither image nor label: not a sample here (metadata)
		case len(g.images) == 0:
			return nil, fmt.Errorf("index %s/%s: sample %q has a label (%s) but no image member (.jpg, .jpeg, .png, .webp)", s, info.Key, stem, g.cls)
		case len(g.images) > 1:
			return nil, fmt.Errorf("index %s/%s: sample %q has %d image members (%s, %s, ...): which one is the sample?", s, info.Key, stem, len(g.images), g.images[0].Name, g.images[1].Name)
		}
		ts := tarSample{image: g.images[0], fields: g.fields}
		if g.label != nil {
			ts.label, ts.hasLabel = *g.label, true
		}
		out = append(out, ts)
	}
	return out, nil
}

// rangeReader reads an object sequentially through ranged GETs of
// readWindow bytes, and seeks without I/O, so archive/tar skips the data
// of big members instead of downloading it.
type rangeReader struct {
	ctx    context.Context
	s      storage.Store
	key    string
	size   int64
	pos    int64
	buf    []byte
	bufOff int64 // object offset of buf[0]
}

func (r *rangeReader) Read(p []byte) (int, error) {
	if r.pos >= r.size {
		return 0, io.EOF
	}
	if r.pos < r.bufOff || r.pos >= r.bufOff+int64(len(r.buf)) {
		n := min(int64(readWindow), r.size-r.pos)
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

func (r *rangeReader) Seek(offset int64, whence int) (int64, error) {
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

// ReadAt returns n bytes at off, from the window when it holds them (a
// small member's data comes in with its header), else with a GET of its
// own. It does not move the read position.
func (r *rangeReader) ReadAt(off, n int64) ([]byte, error) {
	if off >= r.bufOff && off+n <= r.bufOff+int64(len(r.buf)) {
		return r.buf[off-r.bufOff : off-r.bufOff+n], nil
	}
	return r.s.GetRange(r.ctx, r.key, off, n, nil)
}
