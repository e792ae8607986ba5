package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

func indexTars(ctx context.Context, o options, stdout, stderr io.Writer) error {
	exts, err := dataset.MediaExtensions(o.media)
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
	packed, tars, err := dataset.IndexWebDataset(ctx, s, "", dataset.DiscoverOptions{Extensions: exts, Concurrency: o.concurrency})
	if err != nil {
		return err
	}
	if packed.Unpacker != nil {
		return fmt.Errorf("%s holds compressed (*.tar.gz) shards: a manifest's sample is a byte range of its shard, which a compressed shard has not; read them in place (--dataset %s) or decompress them", s, o.index)
	}
	fmt.Fprintf(stderr, "longshore-pack: indexed %d tars under %s\n", tars, s)
	n := len(packed.Samples)
	var manifest bytes.Buffer
	if err := dataset.WriteManifestJSONL(&manifest, packed); err != nil {
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
	fmt.Fprintf(stdout, "indexed %d samples in %d classes from %d tars; wrote %s\n", n, len(ds.Classes), tars, path.Join(s.String(), dataset.ManifestJSONLName))
	return nil
}
