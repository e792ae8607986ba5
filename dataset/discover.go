package dataset

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/longshore/longshore/storage"
)

// ErrEmptyDataset: discovery found no samples (no class directories, no
// files with a wanted extension, or an empty manifest).
var ErrEmptyDataset = errors.New("dataset: empty dataset")

// Manifest names Discover looks for at the dataset root.
const (
	ManifestCSVName   = "manifest.csv"
	ManifestJSONLName = "manifest.jsonl"
)

// DefaultExtensions are the ImageFolder file extensions Discover keeps:
// what the decoder reads.
var DefaultExtensions = []string{".jpg", ".jpeg", ".png", ".webp"}

// VideoExtensions and AudioExtensions are the ImageFolder file
// extensions of --media video and --media audio datasets (a manifest
// names its objects whatever they are called).
var (
	VideoExtensions = []string{".mp4", ".m4v", ".mov", ".mkv", ".webm"}
	AudioExtensions = []string{".wav", ".flac", ".mp3", ".opus", ".ogg", ".oga"}
)

// AnyExtension, among DiscoverOptions.Extensions, keeps every file (what
// --media raw reads: the node decodes nothing, so any file is a sample).
const AnyExtension = ".*"

// MediaExtensions returns the ImageFolder file extensions of a dataset
// of media (image, video, audio or raw: every daemon's and tool's --media),
// so the coordinator, the nodes and longshore-pack see the same samples.
// "raw:EXT[,EXT...]" is raw samples of those extensions only: an
// ImageFolder's files that end in one, and a WebDataset sample's member
// of one (its data; the sample's other members are fields). Plain "raw"
// takes every file, and a WebDataset sample's one member (one of several
// is refused: which would be the data?).
func MediaExtensions(media string) ([]string, error) {
	kind, members, named := strings.Cut(media, ":")
	if named {
		if kind != "raw" {
			return nil, fmt.Errorf("--media %q: only raw names its members (raw:txt, raw:json,npy)", media)
		}
		var exts []string
		for _, m := range strings.Split(members, ",") {
			e := strings.ToLower(strings.TrimPrefix(strings.TrimSpace(m), "."))
			switch {
			case e == "":
				return nil, fmt.Errorf("--media %q names no member extension there (raw:txt, raw:json,npy)", media)
			case strings.ContainsAny(e, "/*\\"):
				return nil, fmt.Errorf("--media %q: %q is no file extension", media, e)
			case slices.Contains(exts, "."+e):
				return nil, fmt.Errorf("--media %q names %q twice", media, e)
			}
			exts = append(exts, "."+e)
		}
		return exts, nil
	}
	switch media {
	case "", "image":
		return slices.Clone(DefaultExtensions), nil
	case "video":
		return slices.Clone(VideoExtensions), nil
	case "audio":
		return slices.Clone(AudioExtensions), nil
	case "raw":
		return []string{AnyExtension}, nil
	}
	return nil, fmt.Errorf("--media %q: want image, video, audio or raw", media)
}

// MediaKind is the kind of samples a --media value names: "raw" for
// "raw:txt" (MediaExtensions), the value itself otherwise.
func MediaKind(media string) string {
	kind, _, _ := strings.Cut(media, ":")
	return kind
}

// Layout says how Discover reads a dataset.
type Layout int

const (
	// LayoutAuto uses the manifest if DiscoverOptions.Manifest is set or
	// manifest.csv / manifest.jsonl exists at the root, else ImageFolder.
	LayoutAuto Layout = iota
	// LayoutImageFolder: <root>/<class>/<file> (files may sit deeper
	// below the class directory, as torchvision allows).
	LayoutImageFolder
	// LayoutManifest: a manifest object lists the samples.
	LayoutManifest
)

func (l Layout) String() string {
	switch l {
	case LayoutAuto:
		return "auto"
	case LayoutImageFolder:
		return "imagefolder"
	case LayoutManifest:
		return "manifest"
	}
	return fmt.Sprintf("Layout(%d)", int(l))
}

// DiscoverOptions configure Discover. The zero value is valid: auto
// layout at the store's root, DefaultExtensions, 16 listings in flight.
type DiscoverOptions struct {
	// Root is the dataset's key prefix in the store, a "directory" ("" is
	// the store's root; "train" and "train/" are the same).
	Root string
	// Layout picks ImageFolder or manifest; LayoutAuto decides by looking.
	Layout Layout
	// Format names the Format to read the dataset with (Formats: "imagefolder",
	// "manifest-csv", "manifest-jsonl", "parquet", "webdataset"); "" decides as Layout
	// says. A format named goes with LayoutAuto only.
	Format string
	// MediaColumn names the column of a Parquet dataset that holds the
	// samples' bytes (binary, or a struct whose "bytes" member is, as
	// Hugging Face's Image feature stores it); "" finds the one such
	// column by its type.
	MediaColumn string
	// LabelColumn names the integer column of a Parquet dataset that
	// holds the labels; "" uses "label" if there is one (else every
	// label is 0).
	LabelColumn string
	// Manifest is the manifest's key (from the store's root, not Root);
	// empty means Root+"manifest.csv" or Root+"manifest.jsonl", whichever
	// exists. Keys inside a manifest are relative to its directory. The
	// format follows the extension (.csv, .jsonl).
	Manifest string
	// Extensions are the ImageFolder file extensions to keep, compared
	// case-insensitively, with or without the leading dot; nil means
	// DefaultExtensions.
	Extensions []string
	// Concurrency is how many class directories are listed at once; 0
	// means 16. Each listing is sequential (S3 pages by 1000 keys), so
	// listing classes side by side is what makes a million-object
	// ImageFolder fast.
	Concurrency int
	// AllowEmptyClasses keeps a class directory without any wanted file
	// (it keeps its label, with no samples). False makes it an error, as
	// in torchvision.
	AllowEmptyClasses bool
	// Exclude leaves these sample keys out of the dataset found (see
	// Dataset.Exclude): they are not part of any epoch, and the
	// dataset's digest is that of what is left, so a coordinator and its
	// nodes must exclude the same keys. nil: none.
	Exclude Exclusions
}

// DefaultDiscoverOptions returns the options the binaries start from.
func DefaultDiscoverOptions() DiscoverOptions {
	return DiscoverOptions{
		// 16 listings in flight: S3 lists 1000 keys per request, one
		// request at a time per listing, so listing time is round trips;
		// 16 hides them without approaching S3's per-prefix request rate.
		Concurrency: 16,
		Extensions:  slices.Clone(DefaultExtensions),
	}
}

// Validate reports every problem with o at once (errors.Join), or nil.
func (o DiscoverOptions) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("discover options: "+format, args...))
	}
	if o.Root != "" {
		if err := storage.CheckKey(strings.TrimSuffix(o.Root, "/")); err != nil {
			bad("Root: %v", err)
		}
	}
	if o.Layout < LayoutAuto || o.Layout > LayoutManifest {
		bad("unknown Layout %d", int(o.Layout))
	}
	if o.Format != "" {
		if FormatNamed(o.Format) == nil {
			bad("unknown Format %q (want one of %s)", o.Format, strings.Join(FormatNames(), ", "))
		} else if o.Layout != LayoutAuto {
			bad("Format %q set with Layout %s", o.Format, o.Layout)
		}
		if o.Manifest != "" {
			if f, err := ManifestFormatOf(o.Manifest); err == nil && o.Format != manifestFormatName(f) {
				bad("Manifest %q set with Format %q", o.Manifest, o.Format)
			}
		}
	}
	for name, col := range map[string]string{"MediaColumn": o.MediaColumn, "LabelColumn": o.LabelColumn} {
		if col != "" && o.Format != "" && o.Format != "parquet" {
			bad("%s %q set with Format %q (columns are Parquet's)", name, col, o.Format)
		}
	}
	if o.Manifest != "" {
		if o.Layout == LayoutImageFolder {
			bad("Manifest %q set with Layout imagefolder", o.Manifest)
		}
		if err := storage.CheckKey(o.Manifest); err != nil {
			bad("Manifest: %v", err)
		} else if _, err := ManifestFormatOf(o.Manifest); err != nil {
			bad("%v", err)
		}
	}
	for _, ext := range o.Extensions {
		if strings.Trim(ext, ".") == "" || strings.Contains(ext, "/") {
			bad("extension %q", ext)
		}
	}
	if o.Concurrency < 0 {
		bad("Concurrency %d is negative", o.Concurrency)
	}
	return errors.Join(errs...)
}

// Discover finds the dataset in s: its samples, in a fixed order, and its
// class names. It may list millions of keys; it honours ctx throughout and
// uses at most Concurrency concurrent listings.
//
// Which Format reads it: the one DiscoverOptions.Format names; a
// manifest format when Manifest is set (by its extension) or Layout is
// LayoutManifest; ImageFolder for LayoutImageFolder; else the first
// registered format that detects itself at Root (a manifest, Parquet
// files), and ImageFolder when none does (see Formats).
//
// ImageFolder follows torchvision: classes are the directories directly
// under Root, labelled by their index in sorted order; samples are the
// files below each class with a wanted extension, sorted by key. Files
// directly under Root are ignored. A manifest gives the samples in its
// own order (see ParseManifest).
//
// Errors: ErrEmptyDataset when nothing is found, ErrNotFound for a
// missing manifest that was asked for, a *ManifestError (ErrBadManifest)
// for a malformed one, each wrapped with the store and what was tried.
func Discover(ctx context.Context, s storage.Store, opts DiscoverOptions) (*Dataset, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("discover %s: %w", s, err)
	}
	root := opts.Root
	if root != "" && !strings.HasSuffix(root, "/") {
		root += "/"
	}
	f, found, err := pickFormat(ctx, s, root, opts)
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", s, err)
	}
	ds, err := f.Discover(ctx, s, root, found, opts)
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", s, err)
	}
	ds.Format = f.Name()
	return excluded(s, ds, opts.Exclude)
}

// excluded applies the exclusions to what discovery found.
func excluded(s storage.Store, ds *Dataset, ex Exclusions) (*Dataset, error) {
	if len(ex) == 0 {
		return ds, nil
	}
	n := len(ds.Samples)
	ds.Excluded = ds.Exclude(ex)
	if len(ds.Samples) == 0 {
		return nil, fmt.Errorf("discover %s: all %d samples are excluded: %w", s, n, ErrEmptyDataset)
	}
	return ds, nil
}

// discoverManifest reads the manifest at key, of size bytes (-1: not
// known yet), in pieces (objectReader): the parser keeps only what the
// Dataset keeps, and the manifest's text is never all in memory.
func discoverManifest(ctx context.Context, s storage.Store, key string, size int64) (*Dataset, error) {
	format, err := ManifestFormatOf(key)
	if err != nil {
		return nil, err
	}
	dir := path.Dir(key)
	prefix := ""
	if dir != "." {
		prefix = dir + "/"
	}
	var r io.Reader
	if size < 0 {
		if info, err := s.Stat(ctx, key); err == nil {
			size = info.Size
		}
	}
	if size >= 0 {
		r = &objectReader{ctx: ctx, s: s, key: key, size: size, piece: manifestPiece}
	} else {
		// Stat failed: Get it whole, as Discover always did, so that a
		// missing manifest fails as it did (with Get's ErrNotFound).
		data, err := s.Get(ctx, key, nil)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(data)
	}
	ds, err := parseManifest(r, format, prefix)
	if err != nil {
		return nil, err
	}
	if prefix == "" {
		return ds, nil
	}
	prefixed := make([]bool, len(ds.Objects)+1) // by ID; each object is checked at its first sample, which errors name
	for i := range ds.Samples {
		s := &ds.Samples[i]
		if len(s.Key) > storage.MaxKeyLen {
			return nil, fmt.Errorf("sample %d: key %q: longer than %d bytes with the manifest's directory: %w", i, s.Key, storage.MaxKeyLen, storage.ErrInvalidKey)
		}
		if s.Packed() && !prefixed[s.Object] {
			o := prefix + ds.ObjectOf(*s)
			if len(o) > storage.MaxKeyLen {
				return nil, fmt.Errorf("sample %d: object %q: longer than %d bytes with the manifest's directory: %w", i, o, storage.MaxKeyLen, storage.ErrInvalidKey)
			}
			ds.Objects[s.Object-1] = o
			prefixed[s.Object] = true
		}
	}
	return ds, nil
}

// manifestPiece is how much of a manifest Discover reads at a time: big
// enough that a request's latency is small beside its transfer from S3,
// small beside the Dataset of any manifest that size.
var manifestPiece int64 = 8 << 20

// objectReader reads an object of a known size in pieces of piece bytes,
// each a GetRange into the same buffer.
type objectReader struct {
	ctx       context.Context
	s         storage.Store
	key       string
	size, off int64 // off: of the next piece
	piece     int64
	buf       []byte
	pos       int // in buf
}

func (o *objectReader) Read(p []byte) (int, error) {
	if o.pos == len(o.buf) {
		if o.off >= o.size {
			return 0, io.EOF
		}
		n := min(o.piece, o.size-o.off)
		buf, err := o.s.GetRange(o.ctx, o.key, o.off, n, o.buf[:0])
		if err != nil {
			return 0, err
		}
		if int64(len(buf)) != n {
			return 0, fmt.Errorf("get range %s [%d,+%d): %d bytes: %w", o.key, o.off, n, len(buf), io.ErrUnexpectedEOF)
		}
		o.buf, o.pos, o.off = buf, 0, o.off+n
	}
	n := copy(p, o.buf[o.pos:])
	o.pos += n
	return n, nil
}

func discoverImageFolder(ctx context.Context, s storage.Store, root string, opts DiscoverOptions) (*Dataset, error) {
	exts := opts.Extensions
	if exts == nil {
		exts = DefaultExtensions
	}
	want := make(map[string]bool, len(exts))
	for _, e := range exts {
		want["."+strings.ToLower(strings.TrimPrefix(e, "."))] = true
	}
	prefixes, err := storage.ListPrefixes(ctx, s, root)
	if err != nil {
		return nil, err
	}
	if len(prefixes) == 0 {
		also := ""
		if opts.Layout == LayoutAuto {
			also = fmt.Sprintf(" and no %s or %s", ManifestCSVName, ManifestJSONLName)
		}
		return nil, fmt.Errorf("no class directories under %q (ImageFolder wants <root>/<class>/<file>)%s: %w", root, also, ErrEmptyDataset)
	}
	names := make([]string, len(prefixes))
	for i, p := range prefixes {
		names[i] = strings.TrimSuffix(strings.TrimPrefix(p, root), "/")
	}
	// torchvision labels classes by their sorted names; prefixes sort as
	// name+"/", which differs when a name is a prefix of another ("a" and
	// "a-b"), so sort the names themselves.
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	label := make(map[string]int32, len(sorted))
	for i, n := range sorted {
		label[n] = int32(i)
	}

	perClass, err := listConcurrently(ctx, prefixes, opts.Concurrency, func(ctx context.Context, i int) ([]Sample, error) {
		var out []Sample
		lab := label[names[i]]
		err := s.List(ctx, prefixes[i], func(info storage.ObjectInfo) error {
			if want[AnyExtension] || want[strings.ToLower(path.Ext(info.Key))] || hasExtension(info.Key, want) {
				out = append(out, Sample{Key: info.Key, Label: lab})
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list class %q: %w", names[i], err)
		}
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	var empty []string
	total := 0
	for i, ss := range perClass {
		if len(ss) == 0 {
			empty = append(empty, names[i])
		}
		total += len(ss)
	}
	if total == 0 {
		return nil, fmt.Errorf("no files with extensions %v in %d class directories under %q: %w", exts, len(names), root, ErrEmptyDataset)
	}
	if len(empty) > 0 && !opts.AllowEmptyClasses {
		return nil, fmt.Errorf("class directories %q under %q hold no files with extensions %v (set AllowEmptyClasses to keep them): %w",
			empty, root, exts, ErrEmptyDataset)
	}
	// Each class's listing is sorted and the prefixes are in key order, so
	// the concatenation is sorted by key.
	ds := &Dataset{Classes: sorted, Samples: make([]Sample, 0, total)}
	for _, ss := range perClass {
		ds.Samples = append(ds.Samples, ss...)
	}
	if !slices.IsSortedFunc(ds.Samples, func(a, b Sample) int { return cmp.Compare(a.Key, b.Key) }) {
		slices.SortFunc(ds.Samples, func(a, b Sample) int { return cmp.Compare(a.Key, b.Key) })
	}
	return ds, nil
}

// listConcurrently runs list for every index with at most conc (0: 16) in
// flight, stopping at the first error.
func listConcurrently(ctx context.Context, prefixes []string, conc int, list func(context.Context, int) ([]Sample, error)) ([][]Sample, error) {
	if conc <= 0 {
		conc = 16
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := make([][]Sample, len(prefixes))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(conc, len(prefixes)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(prefixes) {
					return
				}
				ss, err := list(ctx, i)
				if err != nil {
					cancel(err)
					return
				}
				out[i] = ss
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return out, nil
}

// hasExtension: key ends in one of want's extensions of more than one
// part (".seg.npy", as --media raw:seg.npy names), which path.Ext does
// not see.
func hasExtension(key string, want map[string]bool) bool {
	lower := strings.ToLower(key)
	for e := range want {
		if strings.Count(e, ".") > 1 && strings.HasSuffix(lower, e) {
			return true
		}
	}
	return false
}
