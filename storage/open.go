package storage

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
)

// Location is a parsed store URL.
type Location struct {
	// Scheme is "file" or "s3".
	Scheme string
	// Path is the directory, for "file".
	Path string
	// Bucket and Prefix ("" or ending in '/') are the S3 root, for "s3".
	Bucket string
	Prefix string
}

// String returns the location in URL form: "/data/x" or "s3://b/p/".
func (l Location) String() string {
	if l.Scheme == "s3" {
		return "s3://" + l.Bucket + "/" + l.Prefix
	}
	return l.Path
}

// ParseURL parses what the binaries accept as a dataset or checkpoint
// location: a directory path, a file:// URL, or s3://bucket[/prefix].
func ParseURL(raw string) (Location, error) {
	if raw == "" {
		return Location{}, fmt.Errorf("storage: empty location: want a directory, file:///dir or s3://bucket/prefix")
	}
	scheme, rest, hasScheme := strings.Cut(raw, "://")
	if !hasScheme {
		return Location{Scheme: "file", Path: raw}, nil
	}
	switch strings.ToLower(scheme) {
	case "file":
		u, err := url.Parse(raw)
		if err != nil {
			return Location{}, fmt.Errorf("storage: location %q: %v", raw, err)
		}
		if u.Host != "" && u.Host != "localhost" {
			return Location{}, fmt.Errorf("storage: location %q: file URLs name a local path (file:///dir), not host %q", raw, u.Host)
		}
		if u.Path == "" {
			return Location{}, fmt.Errorf("storage: location %q: no path", raw)
		}
		return Location{Scheme: "file", Path: u.Path}, nil
	case "s3":
		bucket, prefix, _ := strings.Cut(rest, "/")
		if bucket == "" {
			return Location{}, fmt.Errorf("storage: location %q: no bucket (want s3://bucket/prefix)", raw)
		}
		if prefix != "" && !strings.HasSuffix(prefix, "/") {
			prefix += "/"
		}
		if prefix != "" {
			if err := CheckKey(strings.TrimSuffix(prefix, "/")); err != nil {
				return Location{}, fmt.Errorf("storage: location %q: prefix: %w", raw, err)
			}
		}
		return Location{Scheme: "s3", Bucket: bucket, Prefix: prefix}, nil
	}
	return Location{}, fmt.Errorf("storage: location %q: unsupported scheme %q (want a directory, file:///dir or s3://bucket/prefix)", raw, scheme)
}

// Open opens the store at raw (see ParseURL). opts are used only for s3://
// locations. A missing directory or bucket fails with an error wrapping
// ErrNotFound; refused credentials with one wrapping ErrAccess.
func Open(ctx context.Context, raw string, opts Options) (Store, error) {
	loc, err := ParseURL(raw)
	if err != nil {
		return nil, err
	}
	switch loc.Scheme {
	case "s3":
		return NewS3Store(ctx, loc.Bucket, loc.Prefix, opts)
	default:
		return NewDirStore(loc.Path)
	}
}

// OpenDataset opens the store at raw (see Open) and discovers the dataset
// in it (see Discover): what every binary does at start. When packed is
// not nil and the dataset is packed (Dataset.Packed), the store returned
// is a PackedStore configured by *packed over the store opened, so that
// Get serves samples by key either way; nil packed never wraps, for a
// caller that needs only the sample list.
//
// The caller closes the store returned, if it is an io.Closer (a
// PackedStore closes the store it wraps). On error nothing is left open.
// Errors name the dataset, "dataset <raw>: ...", and wrap those of
// PackedConfig.Validate (checked before any I/O), Open and Discover:
// errors.Is works with ErrNotFound, ErrAccess, ErrEmptyDataset and
// ErrBadManifest.
func OpenDataset(ctx context.Context, raw string, sopts Options, dopts DiscoverOptions, packed *PackedConfig) (Store, *Dataset, error) {
	if packed != nil {
		if err := packed.Validate(); err != nil {
			return nil, nil, fmt.Errorf("dataset %s: %w", raw, err)
		}
	}
	s, err := Open(ctx, raw, sopts)
	if err != nil {
		return nil, nil, fmt.Errorf("dataset %s: %w", raw, err)
	}
	ds, err := Discover(ctx, s, dopts)
	if err != nil {
		Close(s)
		return nil, nil, fmt.Errorf("dataset %s: %w", raw, err)
	}
	if packed == nil || !ds.Packed() {
		return s, ds, nil
	}
	ps, err := NewPackedStore(s, ds, *packed)
	if err != nil {
		Close(s)
		return nil, nil, fmt.Errorf("dataset %s: %w", raw, err)
	}
	return ps, ds, nil
}

// Close closes s if it holds anything to close (an io.Closer: the S3
// store's connections, a PackedStore's fetches), else does nothing.
func Close(s Store) error {
	if c, ok := s.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
