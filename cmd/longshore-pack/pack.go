package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/longshore/longshore/storage"
)

// ShardDir is where pack writes its tars, relative to --out.
const ShardDir = "shards/"

// shardKey names shard k.
func shardKey(k int) string { return fmt.Sprintf("%sshard-%06d.tar", ShardDir, k) }

// memberTime is every member's modification time: packing the same
// dataset twice gives the same bytes.
var memberTime = time.Unix(0, 0)

// manifestLine is one line of the packed manifest.
type manifestLine struct {
	Key    string `json:"key"`
	Label  any    `json:"label"` // an integer, or the class name
	Object string `json:"object"`
	Offset int64  `json:"offset"`
	Size   int64  `json:"size"`
}

// builtShard is a shard's tar and where each of its samples landed.
type builtShard struct {
	key     string
	tar     []byte
	samples []int               // dataset indices, in member order
	members []storage.TarMember // their data ranges in tar
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
	src, err := openStore(ctx, o.dataset, sopts, false)
	if err != nil {
		return fmt.Errorf("--dataset: %w", err)
	}
	dopts := storage.DefaultDiscoverOptions()
	if o.manifest != "" {
		dopts.Layout = storage.LayoutManifest
		dopts.Manifest = o.manifest
	}
	ds, err := storage.Discover(ctx, src, dopts)
	if err != nil {
		closeStore(src)
		return fmt.Errorf("dataset %s: %w", o.dataset, err)
	}
	read := src
	if ds.Packed() {
		// Re-packing a packed dataset: read it chunk by chunk, as the node
		// does, when the walk follows the dataset order; shuffled, a chunk
		// would serve one sample before it is evicted, so read each sample
		// alone.
		cfg := storage.DefaultPackedConfig()
		if o.shuffle {
			cfg.Block = 0
		}
		ps, err := storage.NewPackedStore(src, ds, cfg)
		if err != nil {
			closeStore(src)
			return err
		}
		read = ps
	}
	defer closeStore(read)
	for _, s := range ds.Samples {
		if err := checkKeyText(s.Key); err != nil {
			return fmt.Errorf("dataset %s: %w", o.dataset, err)
		}
	}
	dst, err := openStore(ctx, o.out, sopts, true)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	defer closeStore(dst)
	if !o.force {
		if err := checkFresh(ctx, dst); err != nil {
			return err
		}
	} else if _, err := dst.Stat(ctx, storage.ManifestCSVName); err == nil {
		return fmt.Errorf("--out %s holds a %s, which would hide the new %s: remove it", dst, storage.ManifestCSVName, storage.ManifestJSONLName)
	} else if err := dst.Delete(ctx, storage.ManifestJSONLName); err != nil {
		// The old manifest goes before its shards are overwritten: a run
		// that fails midway must leave no dataset, not the old manifest
		// over new shards.
		return fmt.Errorf("--force: remove the old %s: %w", storage.ManifestJSONLName, err)
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
			b, err := buildShard(ctx, read, ds, k, idx, o.concurrency)
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
	integers := integerClasses(ds.Classes)
	var manifest bytes.Buffer
	var bytesOut int64
	last := time.Now()
	done := 0
	for b := range built {
		if _, err := dst.Put(ctx, b.key, b.tar, storage.Cond{}); err != nil {
			cancel(fmt.Errorf("put %s: %w", b.key, err))
			break
		}
		for j, i := range b.samples {
			s, m := ds.Samples[i], b.members[j]
			var label any = ds.Classes[s.Label]
			if integers {
				label = s.Label
			}
			line, _ := json.Marshal(manifestLine{Key: b.key + "/" + m.Name, Label: label, Object: b.key, Offset: m.Offset, Size: m.Size})
			manifest.Write(append(line, '\n'))
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
		return fmt.Errorf("the packed manifest does not reproduce the dataset (a bug; nothing was written to %s): %w", storage.ManifestJSONLName, err)
	}
	if _, err := dst.Put(ctx, storage.ManifestJSONLName, manifest.Bytes(), storage.Cond{}); err != nil {
		return fmt.Errorf("put %s: %w", storage.ManifestJSONLName, err)
	}
	fmt.Fprintf(stdout, "packed %d samples in %d classes into %d shards (%.1f MiB) at %s; manifest %s\n",
		len(ds.Samples), len(ds.Classes), len(shards), float64(bytesOut)/(1<<20), dst, storage.ManifestJSONLName)
	return nil
}

// checkFresh refuses to write into a destination that already holds a
// dataset or shards.
func checkFresh(ctx context.Context, dst storage.Store) error {
	for _, name := range []string{storage.ManifestJSONLName, storage.ManifestCSVName} {
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
func buildShard(ctx context.Context, s storage.Store, ds *storage.Dataset, k int, idx []int, conc int) (builtShard, error) {
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
	b := builtShard{key: shardKey(k), samples: idx}
	var buf bytes.Buffer
	size := 1024 // the end-of-archive blocks
	for _, d := range datas {
		size += 1536 + len(d) // a header (PAX records for long names), the data, padding
	}
	buf.Grow(size)
	tw := tar.NewWriter(&buf)
	for j, i := range idx {
		h := &tar.Header{Name: ds.Samples[i].Key, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(datas[j])), ModTime: memberTime}
		if err := tw.WriteHeader(h); err != nil {
			return b, fmt.Errorf("%s: member %s: %w", b.key, h.Name, err)
		}
		if _, err := tw.Write(datas[j]); err != nil {
			return b, fmt.Errorf("%s: member %s: %w", b.key, h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return b, fmt.Errorf("%s: %w", b.key, err)
	}
	b.tar = buf.Bytes()
	// Take the offsets from the tar as a reader sees it, and check it holds
	// what was written.
	members, err := storage.ReadTarIndex(bytes.NewReader(b.tar))
	if err != nil {
		return b, fmt.Errorf("%s: reading back: %w", b.key, err)
	}
	if len(members) != len(idx) {
		return b, fmt.Errorf("%s: reading back: %d members, wrote %d", b.key, len(members), len(idx))
	}
	for j, m := range members {
		if m.Name != ds.Samples[idx[j]].Key || !bytes.Equal(b.tar[m.Offset:m.Offset+m.Size], datas[j]) {
			return b, fmt.Errorf("%s: reading back member %d: got %q [%d,+%d), wrote %q (%d bytes)", b.key, j, m.Name, m.Offset, m.Size, ds.Samples[idx[j]].Key, len(datas[j]))
		}
	}
	b.members = members
	return b, nil
}

// integerClasses reports whether the classes are "0", "1", ...: a manifest
// with integer labels gives exactly those.
func integerClasses(classes []string) bool {
	for i, c := range classes {
		if c != strconv.Itoa(i) {
			return false
		}
	}
	return true
}

// checkPacked parses the manifest about to be written, as Discover will,
// and checks it gives the source's classes and each sample's label, in
// the packed order.
func checkPacked(manifest []byte, ds *storage.Dataset, order []int) error {
	got, err := storage.ParseManifest(bytes.NewReader(manifest), storage.ManifestJSONL)
	if err != nil {
		return err
	}
	if !slices.Equal(got.Classes, ds.Classes) {
		return fmt.Errorf("classes %q, the dataset has %q (a manifest lists only classes that have samples)", trim(got.Classes), trim(ds.Classes))
	}
	if len(got.Samples) != len(order) {
		return fmt.Errorf("%d samples, the dataset has %d", len(got.Samples), len(order))
	}
	for j, i := range order {
		if g, s := got.Samples[j], ds.Samples[i]; g.Label != s.Label || !g.Packed() {
			return fmt.Errorf("sample %d (%s): label %d, the dataset says %d", j, g.Key, g.Label, s.Label)
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
