// Package listing is what the binaries that list an ImageFolder, or read
// WebDataset tars in place, do past a size where doing it at every start
// costs too much: write the dataset's manifest and index once
// (dataset.WriteFolderManifest), so that every later process reads them
// instead (docs/scale.md, "No LIST on the way to
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
	fs.IntVar(over, "write-manifest-over", DefaultOver, "an ImageFolder listed, or WebDataset tars of images read in place, with at least this many samples gets its manifest.jsonl and index written at its root, if it has no manifest, so that later runs read them instead of listing or reading the tars; the root must be writable (a warning if not), and after changing the dataset write them again with longshore-manifest --dataset LOC --force (tars: longshore-pack --index LOC --force) (0: never write)"+note)
}

// WriteManifest writes the manifest and index of ds, the dataset just
// found in store (an ImageFolder listed, or WebDataset tars indexed in
// place) with the media extensions exts, when it has at least over
// samples (over > 0) and the root has no manifest: the same manifest as
// longshore-manifest --dataset or longshore-pack --index writes. Only
// what a later run reads the same way whatever its --media gets one
// (dataset.ManifestUnwritable): tars indexed for --media other than
// image are logged and left as they are. It only logs what happened: a
// root the process may not write to, or a manifest another process wrote
// first, leaves the run as it was (the dataset is in hand).
func WriteManifest(ctx context.Context, store storage.Store, ds *dataset.Dataset, exts []string, over int, logger *slog.Logger) {
	if over <= 0 || len(ds.Samples) < over {
		return
	}
	// What finding the dataset costs, and what writes its manifest.
	kind, cost, found, tool := "ImageFolder", "lists the folder", "listing", "longshore-manifest --dataset"
	switch ds.Format {
	case "", "imagefolder":
	case "webdataset":
		kind, cost, found, tool = "WebDataset", "reads every tar's headers", "reading the tars", "longshore-pack --index"
	default:
		return // a manifest's dataset, Parquet: read as they are
	}
	if why := dataset.ManifestUnwritable(ds, exts); why != "" {
		logger.Info("not writing the "+kind+"'s manifest: every process "+cost+" at every start", "samples", len(ds.Samples), "why", why)
		return
	}
	for _, name := range []string{dataset.ManifestCSVName, dataset.ManifestJSONLName} {
		if _, err := store.Stat(ctx, name); err == nil {
			return // the dataset was read from it, not listed
		} else if !errors.Is(err, storage.ErrNotFound) {
			logger.Warn("not writing the "+kind+"'s manifest: cannot tell whether one exists", "err", err)
			return
		}
	}
	start := time.Now()
	x, err := dataset.WriteFolderManifest(ctx, store, ds, dataset.FolderManifestOptions{})
	switch {
	case errors.Is(err, storage.ErrPrecondition):
		logger.Info("another process wrote the "+kind+"'s manifest first; later runs read it", "manifest", dataset.ManifestJSONLName)
	case err != nil:
		logger.Warn("could not write the "+kind+"'s manifest: every process "+cost+" at every start (write it once with "+tool+", or pass --write-manifest-over 0 to silence this)",
			"samples", len(ds.Samples), "err", err)
	default:
		logger.Info("wrote the "+kind+"'s manifest and index: later runs read them instead of "+found+" (after changing the dataset, write it again with "+tool+" LOC --force)",
			"manifest", dataset.ManifestJSONLName, "index", dataset.IndexKey(dataset.ManifestJSONLName), "samples", x.Samples, "digest", x.Digest, "took", time.Since(start).Round(time.Millisecond))
	}
}
