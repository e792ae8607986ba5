package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
	"github.com/longshore/longshore/storage/stores"
)

// ShardDir is where pack writes its tars, relative to --out.
const ShardDir = "shards/"

// shardKey names shard k.
func shardKey(k int) string { return fmt.Sprintf("%sshard-%06d.tar", ShardDir, k) }

// builtShard is a shard's tar and its samples as the manifest lists them.
type builtShard struct {
	key string
	tar []byte
	// shard lists the members of tar, in order, as packed samples of
	// the source's classes in their one object, key.
	shard *dataset.Dataset
}

func pack(ctx context.Context, o options, stdout, stderr io.Writer) error {
	sopts := o.storeOptions()
	srcLoc, err := storage.ParseURL(o.dataset)
	if err != nil {
		return fmt.Errorf("--dataset: %w", err)
	}
	dstLoc, err := storage.ParseURL(o.out)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if srcLoc.String() == dstLoc.String() {
		return fmt.Errorf("--out %s is the dataset itself: write the packed copy elsewhere", o.out)
	}
	dopts := dataset.DefaultDiscoverOptions()
	if dopts.Extensions, err = dataset.MediaExtensions(o.media); err != nil {
		return err
	}
	if o.manifest != "" {
		dopts.Layout = dataset.LayoutManifest
		dopts.Manifest = o.manifest
	}
	// Re-packing a packed dataset: read it chunk by chunk, as the node
	// does, when the walk follows the dataset order; shuffled, a chunk
	// would serve one sample before it is evicted, so read each sample
	// alone.
	cfg := dataset.DefaultPackedConfig()
	if o.shuffle {
		cfg.Block = 0
	}
	if err := cfg.Validate(); err != nil { // before any I/O
		return fmt.Errorf("dataset %s: %w", o.dataset, err)
	}
	s, err := stores.Open(ctx, o.dataset, sopts)
	if err != nil {
		return fmt.Errorf("dataset %s: %w", o.dataset, err)
	}
	src, ds, err := dataset.Open(ctx, s, o.dataset, dopts, &cfg)
	if err != nil {
		return err
	}
	if line := s3.CredentialLine(src); line != "" {
		fmt.Fprintf(stderr, "longshore-pack: %s\n", line)
	}
	defer storage.Close(src)
	for _, s := range ds.Samples {
		if err := checkKeyText(s.Key); err != nil {
			return fmt.Errorf("dataset %s: %w", o.dataset, err)
		}
		if s.Label < 0 {
			// A Parquet split's unlabelled sample (dataset.NoLabel): a
			// manifest's labels are classes.
			return fmt.Errorf("dataset %s: sample %s has label %d (no label), which a manifest cannot hold: read the dataset in place", o.dataset, s.Key, s.Label)
		}
	}
	dst, err := openStore(ctx, o.out, sopts, true, stderr)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	defer storage.Close(dst)
	if !o.force {
		if err := checkFresh(ctx, dst); err != nil {
			return err
		}
	} else if _, err := dst.Stat(ctx, dataset.ManifestCSVName); err == nil {
		return fmt.Errorf("--out %s holds a %s, which would hide the new %s: remove it", dst, dataset.ManifestCSVName, dataset.ManifestJSONLName)
	} else if err := dst.Delete(ctx, dataset.ManifestJSONLName); err != nil {
		// The old manifest goes before its shards are overwritten: a run
		// that fails midway must leave no dataset, not the old manifest
		// over new shards.
		return fmt.Errorf("--force: remove the old %s: %w", dataset.ManifestJSONLName, err)
	} else if err := dst.Delete(ctx, dataset.IndexKey(dataset.ManifestJSONLName)); err != nil {
		return fmt.Errorf("--force: remove the old %s: %w", dataset.IndexKey(dataset.ManifestJSONLName), err)
	}

	order := make([]int, len(ds.Samples))
	for i := range order {
		order[i] = i
	}
	if o.shuffle {
		rng := rand.New(rand.NewPCG(o.seed, 0x7061636b)) // "pack"
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	shards := slices.Collect(slices.Chunk(order, o.perShard))
	fmt.Fprintf(stderr, "longshore-pack: %s: %d samples in %d classes -> %d shards of up to %d at %s\n",
		src, len(ds.Samples), len(ds.Classes), len(shards), o.perShard, dst)

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	built := make(chan builtShard, 1) // one shard built ahead of the upload
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(built)
		for k, idx := range shards {
			b, err := buildShard(ctx, src, ds, k, idx, o.concurrency)
			if err != nil {
				cancel(err)
				return
			}
			select {
			case built <- b:
			case <-ctx.Done():
				return
			}
		}
	})
	var manifest bytes.Buffer
	var bytesOut int64
	last := time.Now()
	done := 0
	for b := range built {
		if _, err := dst.Put(ctx, b.key, b.tar, storage.Cond{}); err != nil {
			cancel(fmt.Errorf("put %s: %w", b.key, err))
			break
		}
		if err := dataset.WriteManifestJSONL(&manifest, b.shard); err != nil {
			cancel(fmt.Errorf("%s: %w", b.key, err))
			break
		}
		bytesOut += int64(len(b.tar))
		done++
		if time.Since(last) >= 5*time.Second {
			last = time.Now()
			fmt.Fprintf(stderr, "longshore-pack: %d/%d shards, %.0f MiB\n", done, len(shards), float64(bytesOut)/(1<<20))
		}
	}
	for range built { // drain, so the builder can see the cancellation
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	if err := checkPacked(manifest.Bytes(), ds, order); err != nil {
		return fmt.Errorf("the packed manifest does not reproduce the dataset (a bug; nothing was written to %s): %w", dataset.ManifestJSONLName, err)
	}
	if _, err := dst.Put(ctx, dataset.ManifestJSONLName, manifest.Bytes(), storage.Cond{}); err != nil {
		return fmt.Errorf("put %s: %w", dataset.ManifestJSONLName, err)
	}
	if _, err := dataset.WriteManifestIndex(ctx, dst, dataset.ManifestJSONLName, o.indexEvery, nil); err != nil {
		return fmt.Errorf("index %s (the manifest is written; make the index with longshore-manifest --index): %w", dataset.ManifestJSONLName, err)
	}
	fmt.Fprintf(stdout, "packed %d samples in %d classes into %d shards (%.1f MiB) at %s; manifest %s\n",
		len(ds.Samples), len(ds.Classes), len(shards), float64(bytesOut)/(1<<20), dst, dataset.ManifestJSONLName)
	return nil
}

// checkFresh refuses to write into a destination that already holds a
// dataset or shards.
func checkFresh(ctx context.Context, dst storage.Store) error {
	for _, name := range []string{dataset.ManifestJSONLName, dataset.ManifestCSVName} {
		_, err := dst.Stat(ctx, name)
		if err == nil {
			return fmt.Errorf("--out %s already holds %s: choose an empty destination, or pass --force to write over it", dst, name)
		}
		if !errors.Is(err, storage.ErrNotFound) {
			return fmt.Errorf("--out: %w", err)
		}
	}
	errFound := errors.New("found")
	err := dst.List(ctx, ShardDir, func(storage.ObjectInfo) error { return errFound })
	if errors.Is(err, errFound) {
		return fmt.Errorf("--out %s already holds %s: choose an empty destination, or pass --force to write over it", dst, ShardDir)
	}
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("--out: %w", err)
	}
	return nil
}

// buildShard reads the samples idx (conc at once) and writes them, in
// that order, as the members of a tar named by their keys.
func buildShard(ctx context.Context, s storage.Store, ds *dataset.Dataset, k int, idx []int, conc int) (builtShard, error) {
	datas := make([][]byte, len(idx))
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, conc)
	for w := range min(conc, len(idx)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				j := int(next.Add(1) - 1)
				if j >= len(idx) {
					return
				}
				key := ds.Samples[idx[j]].Key
				data, err := s.Get(ctx, key, nil)
				if err != nil {
					errs[w] = fmt.Errorf("read sample %s: %w", key, err)
					return
				}
				datas[j] = data
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return builtShard{}, err
	}
	if err := ctx.Err(); err != nil {
		return builtShard{}, err
	}
	key := shardKey(k)
	names := make([]string, len(idx))
	size := 1024 // the end-of-archive blocks
	for j, i := range idx {
		names[j] = ds.Samples[i].Key
		size += 1536 + len(datas[j]) // a header (PAX records for long names), the data, padding
	}
	var buf bytes.Buffer
	buf.Grow(size)
	members, err := dataset.WriteTarShard(&buf, names, datas)
	if err != nil {
		return builtShard{}, fmt.Errorf("%s: %w", key, err)
	}
	shard := &dataset.Dataset{Classes: ds.Classes, Samples: make([]dataset.Sample, len(idx))}
	object := shard.AddObject(key)
	b := builtShard{key: key, tar: buf.Bytes(), shard: shard}
	// Check the ranges against the tar as a reader sees it, and that they
	// hold what was written: a bug must not reach the manifest.
	read, err := dataset.ReadTarIndex(bytes.NewReader(b.tar))
	if err != nil || !slices.Equal(read, members) {
		return b, fmt.Errorf("%s: reading back: members %v (%v), wrote %v (a bug)", key, read, err, members)
	}
	for j, m := range members {
		if !bytes.Equal(b.tar[m.Offset:m.Offset+m.Size], datas[j]) {
			return b, fmt.Errorf("%s: reading back member %q: its range does not hold the bytes written (a bug)", key, m.Name)
		}
		shard.Samples[j] = m.Sample(shard, object, ds.Samples[idx[j]].Label)
	}
	fields, err := shardFields(ds.Fields, idx)
	if err != nil {
		return b, fmt.Errorf("%s: %w", key, err)
	}
	shard.Fields = fields
	return b, nil
}

// shardFields are the fields of the samples idx of a dataset's fields
// f, in that order: what the packed manifest lists with each (nil for
// none).
func shardFields(f *dataset.Fields, idx []int) (*dataset.Fields, error) {
	schema := f.Schema()
	if len(schema) == 0 {
		return nil, nil
	}
	fb := dataset.NewFieldsBuilderFor(schema)
	for _, i := range idx {
		for c, fd := range schema {
			if err := fb.Set(fd.Name, f.Value(i, c)); err != nil {
				return nil, fmt.Errorf("sample %d: %w", i, err)
			}
		}
		fb.EndSample()
	}
	return fb.Finish(), nil
}

// checkPacked parses the manifest about to be written, as Discover will,
// and checks it gives the source's classes and each sample's label, in
// the packed order.
func checkPacked(manifest []byte, ds *dataset.Dataset, order []int) error {
	got, err := dataset.ParseManifest(bytes.NewReader(manifest), dataset.ManifestJSONL)
	if err != nil {
		return err
	}
	if !slices.Equal(got.Classes, ds.Classes) {
		return fmt.Errorf("classes %q, the dataset has %q (a manifest lists only classes that have samples)", trim(got.Classes), trim(ds.Classes))
	}
	if len(got.Samples) != len(order) {
		return fmt.Errorf("%d samples, the dataset has %d", len(got.Samples), len(order))
	}
	if g, w := got.Fields.Schema().String(), ds.Fields.Schema().String(); g != w {
		return fmt.Errorf("fields %s, the dataset has %s", g, w)
	}
	schema := ds.Fields.Schema()
	for j, i := range order {
		if g, s := got.Samples[j], ds.Samples[i]; g.Label != s.Label || !g.Packed() {
			return fmt.Errorf("sample %d (%s): label %d, the dataset says %d", j, g.Key, g.Label, s.Label)
		}
		for c, f := range schema {
			if g, w := got.Fields.Value(j, c), ds.Fields.Value(i, c); g.Present() != w.Present() || g.String() != w.String() {
				return fmt.Errorf("sample %d (%s): field %s = %v, the dataset says %v", j, got.Samples[j].Key, f.Name, g, w)
			}
		}
	}
	return nil
}

func trim(names []string) []string {
	if len(names) > 8 {
		return append(slices.Clip(names[:8]), fmt.Sprintf("... %d more", len(names)-8))
	}
	return names
}
