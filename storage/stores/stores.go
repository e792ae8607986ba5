// Package stores opens stores and datasets by location — a directory, a
// file:// URL or s3://bucket/prefix — as the binaries take them on the
// command line: the one package that links every Store implementation
// (the S3 one brings minio-go), so that packages needing only the
// storage.Store seam link none of them.
package stores

import (
	"context"
	"fmt"

	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
)

// Open opens the store at raw (see storage.ParseURL). opts are used only for s3://
// locations. A missing directory or bucket fails with an error wrapping
// ErrNotFound; refused credentials with one wrapping ErrAccess.
func Open(ctx context.Context, raw string, opts s3.Options) (storage.Store, error) {
	loc, err := storage.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	switch loc.Scheme {
	case "s3":
		return s3.New(ctx, loc.Bucket, loc.Prefix, opts)
	default:
		return storage.NewDirStore(loc.Path)
	}
}

// OpenDataset opens the store at raw (see Open) and discovers the dataset
// in it (see storage.Discover): what every binary does at start. When packed is
// not nil and the dataset is packed (Dataset.Packed), the store returned
// is a storage.PackedStore configured by *packed over the store opened, so that
// Get serves samples by key either way; nil packed never wraps, for a
// caller that needs only the sample list.
//
// The caller closes the store returned, if it is an io.Closer (a
// PackedStore closes the store it wraps). On error nothing is left open.
// Errors name the dataset, "dataset <raw>: ...", and wrap those of
// PackedConfig.Validate (checked before any I/O), Open and Discover:
// errors.Is works with ErrNotFound, ErrAccess, ErrEmptyDataset and
// ErrBadManifest.
func OpenDataset(ctx context.Context, raw string, sopts s3.Options, dopts storage.DiscoverOptions, packed *storage.PackedConfig) (storage.Store, *storage.Dataset, error) {
	if packed != nil {
		if err := packed.Validate(); err != nil {
			return nil, nil, fmt.Errorf("dataset %s: %w", raw, err)
		}
	}
	s, err := Open(ctx, raw, sopts)
	if err != nil {
		return nil, nil, fmt.Errorf("dataset %s: %w", raw, err)
	}
	return DatasetIn(ctx, s, raw, dopts, packed)
}

// DatasetIn is OpenDataset on a store already open (raw names it in
// errors): a caller that wraps the store (storage.CountingStore, under
// the packed store) opens it with Open and goes on here. On error s is
// closed.
func DatasetIn(ctx context.Context, s storage.Store, raw string, dopts storage.DiscoverOptions, packed *storage.PackedConfig) (storage.Store, *storage.Dataset, error) {
	if packed != nil {
		if err := packed.Validate(); err != nil {
			storage.Close(s)
			return nil, nil, fmt.Errorf("dataset %s: %w", raw, err)
		}
	}
	ds, err := storage.Discover(ctx, s, dopts)
	if err != nil {
		storage.Close(s)
		return nil, nil, fmt.Errorf("dataset %s: %w", raw, err)
	}
	if packed == nil || !ds.Packed() {
		return s, ds, nil
	}
	ps, err := storage.NewPackedStore(s, ds, *packed)
	if err != nil {
		storage.Close(s)
		return nil, nil, fmt.Errorf("dataset %s: %w", raw, err)
	}
	return ps, ds, nil
}
