// Package listing is what the binaries that list an ImageFolder do past
// a size where listing at every start costs too much: write the folder's
// manifest and index once (dataset.WriteFolderManifest), so that every
// later process reads them instead (docs/scale.md, "No LIST on the way to
// the first batch").
package listing

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"time"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// DefaultOver is the default ImageFolder size, in samples, past which a
// listing process writes the folder's manifest (--write-manifest-over): a
// million keys is a thousand LIST requests, done again by every process
// at every start.
const DefaultOver = 1 << 20

// Register adds --write-manifest-over to fs, into over; note ends its
// help (who writes, who reads).
func Register(fs *flag.FlagSet, over *int, note string) {
	fs.IntVar(over, "write-manifest-over", DefaultOver, "an ImageFolder listed with at least this many samples gets its manifest.jsonl and index written at its root, if it has no manifest, so that later runs read them instead of listing; the folder must be writable (a warning if not), and after changing it list it again with longshore-manifest --dataset LOC --force (0: never write)"+note)
}

// WriteManifest writes the manifest and index of ds, the ImageFolder just
// listed from store, when it has at least over samples (over > 0) and the
// folder has no manifest. It only logs what happened: a folder the process
// may not write to, or a manifest another process wrote first, leaves the
// run as it was (the listing is in hand).
func WriteManifest(ctx context.Context, store storage.Store, ds *dataset.Dataset, over int, logger *slog.Logger) {
	if over <= 0 || len(ds.Samples) < over || (ds.Format != "" && ds.Format != "imagefolder") {
		return // only an ImageFolder is listed: other formats are read as they are
	}
	for _, name := range []string{dataset.ManifestCSVName, dataset.ManifestJSONLName} {
		if _, err := store.Stat(ctx, name); err == nil {
			return // the dataset was read from it, not listed
		} else if !errors.Is(err, storage.ErrNotFound) {
			logger.Warn("not writing the ImageFolder's manifest: cannot tell whether one exists", "err", err)
			return
		}
	}
	start := time.Now()
	x, err := dataset.WriteFolderManifest(ctx, store, ds, dataset.FolderManifestOptions{})
	switch {
	case errors.Is(err, storage.ErrPrecondition):
		logger.Info("another process wrote the ImageFolder's manifest first; later runs read it", "manifest", dataset.ManifestJSONLName)
	case err != nil:
		logger.Warn("could not write the ImageFolder's manifest: every process lists the folder at every start (write it once with longshore-manifest --dataset, or pass --write-manifest-over 0 to silence this)",
			"samples", len(ds.Samples), "err", err)
	default:
		logger.Info("wrote the ImageFolder's manifest and index: later runs read them instead of listing (after changing the folder, list it again with longshore-manifest --dataset LOC --force)",
			"manifest", dataset.ManifestJSONLName, "index", dataset.IndexKey(dataset.ManifestJSONLName), "samples", x.Samples, "digest", x.Digest, "took", time.Since(start).Round(time.Millisecond))
	}
}
