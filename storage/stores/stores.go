// Package stores opens stores by location — a directory, a
// file:// URL or s3://bucket/prefix — as the binaries take them on the
// command line: the one package that links every Store implementation
// (the S3 one brings minio-go), so that packages needing only the
// storage.Store seam link none of them.
package stores

import (
	"context"

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
