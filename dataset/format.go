package dataset

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/longshore/longshore/storage"
)

// Format is one way a dataset lies in a store: how it is recognised at a
// root (Detect) and read into a Dataset (Discover). Discover picks the
// format (see Discover); a format's samples may live inside bigger
// objects (Sample.Packed), and the Dataset it returns then says how
// their bytes come out of those objects' ranges (Dataset.Unpacker, nil
// for tar members, whose range is the sample).
//
// A new format is a new file with a type implementing Format, and one
// line in formats below (docs/architecture.md, "Where a change starts").
type Format interface {
	// Name names the format in DiscoverOptions.Format, errors and docs.
	Name() string
	// Detect looks at root ("" or ending in '/') and returns what says
	// the dataset there is in this format (a manifest's key), or nil if
	// it is not. It is cheap: a Stat or a listing's first page.
	Detect(ctx context.Context, s storage.Store, root string, opts DiscoverOptions) (*Found, error)
	// Discover reads the dataset at root, in the order that is its
	// index space. found is what Detect returned, or what the options
	// named (a manifest's key), or nil when the format was named and
	// nothing was detected: Discover then looks for itself.
	Discover(ctx context.Context, s storage.Store, root string, found *Found, opts DiscoverOptions) (*Dataset, error)
}

// Found is what a Format's Detect found: the object that says the
// dataset is in that format, and its size (-1: not known).
type Found struct {
	Key  string
	Size int64
}

// formats are the registered formats, in the order Discover tries to
// detect them; ImageFolder, first, is what a root is when no other
// format detects itself there (it detects nothing by itself).
var formats = []Format{
	imageFolderFormat{},
	manifestFormat{ManifestCSV},
	manifestFormat{ManifestJSONL},
	parquetFormat{},
	webDatasetFormat{},
}

// Formats returns the registered formats, ImageFolder first, then in
// the order Discover detects them.
func Formats() []Format { return append([]Format(nil), formats...) }

// FormatNames returns the names of the registered formats.
func FormatNames() []string {
	names := make([]string, len(formats))
	for i, f := range formats {
		names[i] = f.Name()
	}
	return names
}

// FormatNamed returns the registered format called name, or nil.
func FormatNamed(name string) Format {
	for _, f := range formats {
		if f.Name() == name {
			return f
		}
	}
	return nil
}

// pickFormat chooses the format of the dataset at root (see Discover).
func pickFormat(ctx context.Context, s storage.Store, root string, opts DiscoverOptions) (Format, *Found, error) {
	if opts.Manifest != "" {
		mf, err := ManifestFormatOf(opts.Manifest)
		if err != nil {
			return nil, nil, err
		}
		return manifestFormat{mf}, &Found{Key: opts.Manifest, Size: -1}, nil
	}
	switch {
	case opts.Format != "":
		f := FormatNamed(opts.Format)
		return f, nil, nil
	case opts.Layout == LayoutImageFolder:
		return imageFolderFormat{}, nil, nil
	}
	var picked []Format
	var founds []*Found
	for _, f := range formats {
		if _, ok := f.(imageFolderFormat); ok {
			continue
		}
		if _, ok := f.(manifestFormat); !ok && opts.Layout == LayoutManifest {
			continue
		}
		found, err := f.Detect(ctx, s, root, opts)
		if err != nil {
			return nil, nil, fmt.Errorf("detect %s: %w", f.Name(), err)
		}
		if found != nil {
			picked, founds = append(picked, f), append(founds, found)
		}
	}
	switch {
	case len(picked) == 1:
		return picked[0], founds[0], nil
	case len(picked) > 1:
		var what []string
		for i, f := range picked {
			what = append(what, fmt.Sprintf("%s (%s)", founds[i].Key, f.Name()))
		}
		if _, ok := picked[0].(manifestFormat); ok {
			return nil, nil, fmt.Errorf("both %s exist: set the manifest to use", strings.Join(what, " and "))
		}
		return nil, nil, fmt.Errorf("both %s are under %q: set the format to use", strings.Join(what, " and "), root)
	case opts.Layout == LayoutManifest:
		return nil, nil, fmt.Errorf("no %s or %s under %q: %w", ManifestCSVName, ManifestJSONLName, root, storage.ErrNotFound)
	}
	return imageFolderFormat{}, nil, nil
}

// imageFolderFormat is <root>/<class>/<file> (discoverImageFolder).
type imageFolderFormat struct{}

func (imageFolderFormat) Name() string { return "imagefolder" }

// Detect finds nothing: ImageFolder is what a root is when no other
// format detects itself there.
func (imageFolderFormat) Detect(context.Context, storage.Store, string, DiscoverOptions) (*Found, error) {
	return nil, nil
}

func (imageFolderFormat) Discover(ctx context.Context, s storage.Store, root string, _ *Found, opts DiscoverOptions) (*Dataset, error) {
	return discoverImageFolder(ctx, s, root, opts)
}

// manifestFormat is a manifest object, CSV or JSON lines, at the root
// (or named by DiscoverOptions.Manifest); its samples may be members of
// tar shards (Sample.Packed), served by a PackedStore.
type manifestFormat struct{ format ManifestFormat }

func manifestFormatName(f ManifestFormat) string {
	if f == ManifestJSONL {
		return "manifest-jsonl"
	}
	return "manifest-csv"
}

func (m manifestFormat) Name() string { return manifestFormatName(m.format) }

func (m manifestFormat) fileName() string {
	if m.format == ManifestJSONL {
		return ManifestJSONLName
	}
	return ManifestCSVName
}

// Detect finds the manifest at the root by its name.
func (m manifestFormat) Detect(ctx context.Context, s storage.Store, root string, _ DiscoverOptions) (*Found, error) {
	key := root + m.fileName()
	info, err := s.Stat(ctx, key)
	switch {
	case err == nil:
		return &Found{Key: key, Size: info.Size}, nil
	case errors.Is(err, storage.ErrNotFound):
		return nil, nil
	}
	return nil, err
}

func (m manifestFormat) Discover(ctx context.Context, s storage.Store, root string, found *Found, opts DiscoverOptions) (*Dataset, error) {
	if found == nil {
		f, err := m.Detect(ctx, s, root, opts)
		if err != nil {
			return nil, err
		}
		if f == nil {
			return nil, fmt.Errorf("no %s under %q: %w", m.fileName(), root, storage.ErrNotFound)
		}
		found = f
	}
	ds, err := discoverManifest(ctx, s, found.Key, found.Size)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", found.Key, err)
	}
	return ds, nil
}
