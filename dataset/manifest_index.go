package dataset

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"strconv"

	"github.com/longshore/longshore/storage"
)

// A manifest index is a small object beside a manifest (IndexKey: the
// manifest's key + ".index") that lets a process use a manifest without
// reading it all: the count, layout, classes and digest of its dataset,
// and the byte offset of every Every-th sample with a checksum of each
// piece between two offsets. ScanManifest makes one (longshore-manifest,
// longshore-pack); IndexedManifest reads a piece of the manifest, with one
// ranged GET, only when a sample of it is needed.
//
// Encoding (little endian):
//
//	"LSMIDX1\n"
//	uint32 header length, header (JSON, indexHeader)
//	(pieces+1) × uint64 offsets: piece p is bytes [off[p], off[p+1]) of
//	        the manifest; off[0] is 0, off[pieces] the manifest's size
//	pieces × uint32 CRC-32C of each piece's bytes
//	uint32 CRC-32C of everything before it
//
// A stale index (the manifest rewritten since) is detected by the pieces'
// checksums and the manifest's size: ErrStaleIndex.

// ErrStaleIndex: a manifest index does not describe the manifest beside
// it (the manifest changed after the index was made). Rebuild it:
// longshore-manifest --index.
var ErrStaleIndex = errors.New("dataset: manifest index is stale")

// ErrBadIndex: a manifest index could not be decoded (truncated, corrupt,
// another version).
var ErrBadIndex = errors.New("dataset: malformed manifest index")

// IndexKey is the key of the index of the manifest at key.
func IndexKey(manifest string) string { return manifest + ".index" }

// DefaultIndexEvery is the samples per piece of an index: a piece of an
// ImageNet-like manifest is about 80 KiB (one ranged GET, small beside
// a block's images), and the index of a billion samples about 12 MB.
// A multiple of every power-of-two block up to 1024, so an order's
// block lies in one piece.
const DefaultIndexEvery = 1024

const indexMagic = "LSMIDX1\n"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ManifestIndex describes a manifest: what a coordinator needs of it
// (Samples, Layout, Digest) without its samples, and where each piece of
// Every samples lies in it.
type ManifestIndex struct {
	// Manifest is the manifest's key, from the store's root.
	Manifest string
	Format   ManifestFormat
	// Samples is the dataset's size; PackedSamples how many of them are
	// packed (see Sample).
	Samples, PackedSamples int64
	// Digest is ManifestDigest of the manifest's Dataset.
	Digest string
	// Classes are the Dataset's classes: "0".."max" for integer labels
	// (IntegerLabels, not stored one by one), else the sorted names.
	Classes       []string
	IntegerLabels bool
	// Every is the samples of each piece but the last (0: no pieces,
	// an index only of the totals: ScanOptions.Every 0).
	Every int
	// Offsets has a piece's start for each piece and the manifest's
	// size last; Sums the CRC-32C (Castagnoli) of each piece's bytes.
	Offsets []int64
	Sums    []uint32
	// Schema is the manifest's fields (nil: none; an index written
	// before fields existed has none).
	Schema Schema
	// Columns is a CSV manifest's header when it names field columns
	// (nil: none), which the pieces after the first are read with.
	Columns []string
}

// Pieces is the number of pieces.
func (x *ManifestIndex) Pieces() int { return len(x.Sums) }

// Size is the manifest's size in bytes (0 without pieces).
func (x *ManifestIndex) Size() int64 {
	if len(x.Offsets) == 0 {
		return 0
	}
	return x.Offsets[len(x.Offsets)-1]
}

// Layout names the dataset's layout: "plain", "packed" or "mixed".
func (x *ManifestIndex) Layout() string {
	switch x.PackedSamples {
	case 0:
		return "plain"
	case x.Samples:
		return "packed"
	}
	return "mixed"
}

// indexHeader is the JSON header of an encoded index.
type indexHeader struct {
	Version       int      `json:"version"`
	Manifest      string   `json:"manifest"`
	Format        string   `json:"format"`
	Samples       int64    `json:"samples"`
	PackedSamples int64    `json:"packed_samples"`
	Layout        string   `json:"layout"` // for people reading it; Packed decides
	Digest        string   `json:"digest"`
	IntegerLabels bool     `json:"integer_labels"`
	ClassCount    int      `json:"class_count"`
	Classes       []string `json:"classes,omitempty"` // names only
	Every         int      `json:"every"`
	Pieces        int      `json:"pieces"`
	// Fields is the schema, "name" and "type" (FieldType.String) each;
	// absent without fields, so that an index of a manifest without
	// fields is what it was before fields existed.
	Fields []indexField `json:"fields,omitempty"`
	// Columns is the CSV header, when it names field columns; absent
	// otherwise.
	Columns []string `json:"columns,omitempty"`
}

type indexField struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// MarshalBinary encodes x.
func (x *ManifestIndex) MarshalBinary() ([]byte, error) {
	h := indexHeader{Version: 1, Manifest: x.Manifest, Format: x.Format.String(), Samples: x.Samples,
		PackedSamples: x.PackedSamples, Layout: x.Layout(), Digest: x.Digest, IntegerLabels: x.IntegerLabels,
		ClassCount: len(x.Classes), Every: x.Every, Pieces: x.Pieces(), Columns: x.Columns}
	if !x.IntegerLabels {
		h.Classes = x.Classes
	}
	for _, f := range x.Schema {
		h.Fields = append(h.Fields, indexField{Name: f.Name, Type: f.Type.String()})
	}
	if len(x.Offsets) != len(x.Sums)+1 && !(len(x.Offsets) == 0 && len(x.Sums) == 0) {
		return nil, fmt.Errorf("dataset: manifest index: %d offsets for %d pieces", len(x.Offsets), len(x.Sums))
	}
	hj, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("dataset: manifest index: %w", err)
	}
	b := make([]byte, 0, len(indexMagic)+4+len(hj)+12*len(x.Offsets)+4)
	b = append(b, indexMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(hj)))
	b = append(b, hj...)
	for _, o := range x.Offsets {
		b = binary.LittleEndian.AppendUint64(b, uint64(o))
	}
	for _, s := range x.Sums {
		b = binary.LittleEndian.AppendUint32(b, s)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

// ParseManifestIndex decodes an index MarshalBinary encoded; errors wrap
// ErrBadIndex.
func ParseManifestIndex(b []byte) (*ManifestIndex, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadIndex}, args...)...)
	}
	if len(b) < len(indexMagic)+8 || string(b[:len(indexMagic)]) != indexMagic {
		return nil, bad("not an index (no %q at its start)", indexMagic[:len(indexMagic)-1])
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, bad("checksum mismatch (truncated or corrupt): rebuild it with longshore-manifest --index")
	}
	rest := body[len(indexMagic):]
	hl := binary.LittleEndian.Uint32(rest)
	rest = rest[4:]
	if uint64(hl) > uint64(len(rest)) {
		return nil, bad("header of %d bytes in %d", hl, len(rest))
	}
	var h indexHeader
	if err := json.Unmarshal(rest[:hl], &h); err != nil {
		return nil, bad("header: %v", err)
	}
	rest = rest[hl:]
	if h.Version != 1 {
		return nil, bad("version %d (this build reads 1)", h.Version)
	}
	format, err := ManifestFormatOf("x." + h.Format)
	if err != nil {
		return nil, bad("format %q", h.Format)
	}
	x := &ManifestIndex{Manifest: h.Manifest, Format: format, Samples: h.Samples, PackedSamples: h.PackedSamples,
		Digest: h.Digest, IntegerLabels: h.IntegerLabels, Every: h.Every}
	switch {
	case h.Samples < 1 || h.PackedSamples < 0 || h.PackedSamples > h.Samples:
		return nil, bad("%d samples, %d packed", h.Samples, h.PackedSamples)
	case h.Every < 0 || h.Pieces < 0 || (h.Every == 0) != (h.Pieces == 0):
		return nil, bad("every %d, %d pieces", h.Every, h.Pieces)
	case h.Every > 0 && int64(h.Pieces) != (h.Samples+int64(h.Every)-1)/int64(h.Every):
		return nil, bad("%d pieces of %d for %d samples", h.Pieces, h.Every, h.Samples)
	case h.ClassCount < 1 || h.ClassCount > MaxClasses:
		return nil, bad("%d classes", h.ClassCount)
	case !h.IntegerLabels && len(h.Classes) != h.ClassCount:
		return nil, bad("%d class names for %d classes", len(h.Classes), h.ClassCount)
	}
	for i, f := range h.Fields {
		t, err := ParseFieldType(f.Type)
		if err != nil {
			return nil, bad("field %q: %v", f.Name, err)
		}
		if err := CheckFieldName(f.Name); err != nil {
			return nil, bad("%v", err)
		}
		if i > 0 && h.Fields[i-1].Name >= f.Name {
			return nil, bad("fields %q and %q out of order", h.Fields[i-1].Name, f.Name)
		}
		x.Schema = append(x.Schema, Field{Name: f.Name, Type: t})
	}
	if h.Columns != nil {
		if l, header, err := parseCSVHeader(h.Columns); format != ManifestCSV || err != nil || !header || l == nil {
			return nil, bad("columns %q: not a CSV header with fields", h.Columns)
		}
		x.Columns = h.Columns
	}
	if h.IntegerLabels {
		x.Classes = make([]string, h.ClassCount)
		for i := range x.Classes {
			x.Classes[i] = strconv.Itoa(i)
		}
	} else {
		x.Classes = h.Classes
	}
	if h.Pieces > 0 {
		if len(rest) != 12*h.Pieces+8 {
			return nil, bad("%d bytes of offsets for %d pieces", len(rest), h.Pieces)
		}
		x.Offsets = make([]int64, h.Pieces+1)
		for i := range x.Offsets {
			x.Offsets[i] = int64(binary.LittleEndian.Uint64(rest[8*i:]))
			if x.Offsets[i] < 0 || (i > 0 && x.Offsets[i] <= x.Offsets[i-1]) || (i == 0 && x.Offsets[0] != 0) {
				return nil, bad("offset %d of piece %d out of order", x.Offsets[i], i)
			}
		}
		rest = rest[8*len(x.Offsets):]
		x.Sums = make([]uint32, h.Pieces)
		for i := range x.Sums {
			x.Sums[i] = binary.LittleEndian.Uint32(rest[4*i:])
		}
	} else if len(rest) != 0 {
		return nil, bad("%d bytes after a header without pieces", len(rest))
	}
	return x, nil
}

// WriteManifestIndex scans the manifest at key (ScanManifest, with every
// samples a piece and duplicates checked) and puts its index beside it,
// replacing any older one. The index is written after the manifest is
// complete: a process that finds none reads the manifest whole.
func WriteManifestIndex(ctx context.Context, s storage.Store, key string, every int, progress func(ScanProgress)) (*ManifestIndex, error) {
	if every < 1 {
		return nil, fmt.Errorf("dataset: manifest index of %s: every %d: need at least 1", key, every)
	}
	x, err := ScanManifest(ctx, s, key, ScanOptions{Every: every, CheckDuplicates: true, Progress: progress})
	if err != nil {
		return nil, err
	}
	b, err := x.MarshalBinary()
	if err != nil {
		return nil, err
	}
	if _, err := s.Put(ctx, IndexKey(key), b, storage.Cond{}); err != nil {
		return nil, fmt.Errorf("put %s: %w", IndexKey(key), err)
	}
	return x, nil
}

// FolderManifestOptions configures WriteFolderManifest.
type FolderManifestOptions struct {
	// Every is the index's samples a piece (DefaultIndexEvery when 0).
	Every int
	// Replace writes over an existing manifest.jsonl (removing its index
	// first, so that no process pairs the new manifest with the old
	// index). Without it the manifest is put only if absent: when another
	// process wrote it first, WriteFolderManifest returns an error
	// wrapping ErrPrecondition and writes nothing.
	Replace bool
	// Progress, if set, is called as the index's scan reads the manifest.
	Progress func(ScanProgress)
}

// ManifestUnwritable says why a manifest written from ds, as Discover
// found it with the given media extensions (DiscoverOptions.Extensions,
// nil: DefaultExtensions), would not be what a later Discover of the
// same root reads the same way, or "" when it would be. A manifest at
// the root is the dataset for every later open, whatever its --media:
//
//   - An ImageFolder (any media: its listing keeps what it lists) may
//     have one, as it always could.
//   - WebDataset tars may when their samples are the default media's
//     (images: --media image, what longshore-pack --index writes without
//     --media). Another media picks other members of the same tars
//     (--media raw:txt the .txt, the image a field no more): a manifest of
//     those would make a later image run read them, so it is not written.
//   - Compressed shards (a manifest's sample is a byte range of its
//     shard, which a compressed member has not), Parquet files and a
//     manifest's dataset never.
func ManifestUnwritable(ds *Dataset, exts []string) string {
	switch ds.Format {
	case "", "imagefolder":
		return ""
	case "webdataset":
	default:
		return fmt.Sprintf("a %s dataset is read as it is", ds.Format)
	}
	if ds.Unpacker != nil {
		return "compressed shards (*.tar.gz): a manifest's sample is a byte range of its shard"
	}
	if !maps.Equal(extensionSet(exts), extensionSet(DefaultExtensions)) {
		return "samples of a --media other than image: a manifest at the root is read by every later run, whatever its --media (index them with longshore-pack --index --media ... to mean it)"
	}
	return ""
}

// WriteFolderManifest writes ds, an ImageFolder as Discover listed it
// from s or WebDataset tars as it indexed them (see ManifestUnwritable
// for which), as s's manifest.jsonl (keys relative to s, labels the class
// names; for tars the manifest longshore-pack --index writes) and then
// its index, so that later processes read the manifest instead of
// listing or reading the tars (Discover prefers a manifest at the root).
// It checks that the manifest written digests to the listing's digest:
// on a mismatch (a bug) it removes both and says so. The manifest's text
// is held in memory while it is put (about 50 bytes a sample): Store.Put
// takes one buffer. A dataset whose samples an Unpacker serves
// (compressed shards, Parquet) is refused: a manifest cannot say where
// they lie.
func WriteFolderManifest(ctx context.Context, s storage.Store, ds *Dataset, o FolderManifestOptions) (*ManifestIndex, error) {
	if ds.Unpacker != nil {
		return nil, fmt.Errorf("dataset: manifest of %s: its %s samples are unpacked from ranges they share, which a manifest cannot describe", s, ds.Format)
	}
	every := o.Every
	if every == 0 {
		every = DefaultIndexEvery
	}
	if every < 1 {
		return nil, fmt.Errorf("dataset: manifest of %s: every %d: need at least 1", s, every)
	}
	digest := ManifestDigest(ds)
	var text bytes.Buffer
	if err := WriteManifestJSONL(&text, ds); err != nil {
		return nil, err
	}
	if o.Replace {
		if err := s.Delete(ctx, IndexKey(ManifestJSONLName)); err != nil {
			return nil, fmt.Errorf("remove the old %s: %w", IndexKey(ManifestJSONLName), err)
		}
	}
	if _, err := s.Put(ctx, ManifestJSONLName, text.Bytes(), storage.Cond{IfAbsent: !o.Replace}); err != nil {
		return nil, fmt.Errorf("put %s: %w", ManifestJSONLName, err)
	}
	text = bytes.Buffer{}
	x, err := WriteManifestIndex(ctx, s, ManifestJSONLName, every, o.Progress)
	if err != nil {
		return nil, fmt.Errorf("index %s (the manifest is written; index it with longshore-manifest --index): %w", ManifestJSONLName, err)
	}
	if x.Digest != digest {
		err := fmt.Errorf("dataset: the %s written digests to %s, the dataset found to %s (a bug): removed it", ManifestJSONLName, x.Digest, digest)
		return nil, errors.Join(err, s.Delete(ctx, IndexKey(ManifestJSONLName)), s.Delete(ctx, ManifestJSONLName))
	}
	return x, nil
}
