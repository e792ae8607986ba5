package listing

import (
	"bytes"

	"context"
	"fmt"
	"github.com/parquet-go/parquet-go"
	"log/slog"
	"strings"
	"testing"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// readOnly is a store that refuses every write, as a bucket a
// process may only read does.
type readOnly struct{ storage.Store }

func (readOnly) Put(context.Context, string, []byte, storage.Cond) (string, error) {
	return "", fmt.Errorf("put: access denied")
}

// TestWriteManifest: an ImageFolder listed past --write-manifest-over
// gets its manifest and index written once, digesting as the listing
// does, and the next process reads them without a LIST; below the
// threshold, with a manifest already there, or in a folder it may not
// write, it writes nothing and the run goes on.
func TestWriteManifest(t *testing.T) {
	ctx := context.Background()
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))
	mem := storage.NewMemStore("folder")
	for i := range 300 {
		mem.Put(ctx, fmt.Sprintf("%s/%03d.jpg", []string{"cat", "dog", "emu"}[i%3], i), []byte("x"), storage.Cond{})
	}
	dopts := dataset.DefaultDiscoverOptions()
	listed, err := dataset.Discover(ctx, mem, dopts)
	if err != nil {
		t.Fatal(err)
	}
	digest := dataset.ManifestDigest(listed)

	WriteManifest(ctx, mem, listed, dopts.Extensions, 301, log)
	WriteManifest(ctx, readOnly{mem}, listed, dopts.Extensions, 300, log)
	if _, err := mem.Stat(ctx, dataset.ManifestJSONLName); err == nil {
		t.Fatalf("a manifest was written below the threshold, or through a read-only store")
	}
	if !strings.Contains(logged.String(), "could not write the ImageFolder's manifest") {
		t.Errorf("a folder it may not write: no warning in %q", logged.String())
	}

	WriteManifest(ctx, mem, listed, dopts.Extensions, 300, log)
	if !strings.Contains(logged.String(), "wrote the ImageFolder's manifest") {
		t.Errorf("no line says the manifest was written: %q", logged.String())
	}
	x, err := dataset.ReadManifestIndex(ctx, mem, dataset.ManifestJSONLName)
	if err != nil || x.Samples != 300 || x.Digest != digest {
		t.Fatalf("the written index: %+v %v, want 300 samples digesting %s", x, err, digest)
	}
	s := storage.NewCountingStore(mem)
	ds, err := dataset.Discover(ctx, s, dopts)
	if err != nil {
		t.Fatal(err)
	}
	if lists := s.Stats().Count(storage.OpList, storage.OutcomeOK) + s.Stats().Count(storage.OpListPrefixes, storage.OutcomeOK); lists != 0 {
		t.Errorf("the next process listed %d times", lists)
	}
	if d := dataset.ManifestDigest(ds); d != digest || len(ds.Samples) != 300 || ds.Samples[150].Key != listed.Samples[150].Key || ds.Samples[150].Label != listed.Samples[150].Label {
		t.Errorf("the manifest's dataset differs from the listing's: digest %s, want %s", d, digest)
	}

	// Once there, it is neither written again nor replaced.
	before := logged.Len()
	s = storage.NewCountingStore(mem)
	WriteManifest(ctx, s, listed, dopts.Extensions, 1, log)
	if puts := s.Stats().Count(storage.OpPut, storage.OutcomeOK); puts != 0 || logged.Len() != before {
		t.Errorf("with a manifest there: %d puts, logged %q", puts, logged.String()[before:])
	}
}

// TestWriteManifestOnlyImageFolder: a dataset of another format (Parquet,
// whose packed samples a manifest cannot describe) gets no manifest,
// however big.
func TestWriteManifestOnlyImageFolder(t *testing.T) {
	ctx := context.Background()
	mem := storage.NewMemStore("parquet")
	type row struct {
		Data []byte `parquet:"data"`
	}
	var b bytes.Buffer
	w := parquet.NewGenericWriter[row](&b)
	if _, err := w.Write([]row{{[]byte("a")}, {[]byte("b")}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	mem.Put(ctx, "train.parquet", b.Bytes(), storage.Cond{})
	ds, err := dataset.Discover(ctx, mem, dataset.DefaultDiscoverOptions())
	if err != nil || ds.Format != "parquet" {
		t.Fatalf("Discover: %v, format %q", err, ds.Format)
	}
	WriteManifest(ctx, mem, ds, nil, 1, slog.New(slog.DiscardHandler))
	if _, err := mem.Stat(ctx, dataset.ManifestJSONLName); err == nil {
		t.Fatal("a Parquet dataset got a manifest")
	}
}

// wds puts shards WebDataset tars of per samples in s: sample i is
// s<i>.jpg, s<i>.cls (i%3) and s<i>.txt.
func wds(t *testing.T, s storage.Store, shards, per int) {
	t.Helper()
	for sh := range shards {
		var names []string
		var datas [][]byte
		for k := range per {
			i := sh*per + k
			names = append(names, fmt.Sprintf("s%04d.jpg", i), fmt.Sprintf("s%04d.cls", i), fmt.Sprintf("s%04d.txt", i))
			datas = append(datas, []byte(fmt.Sprintf("jpeg %d", i)), []byte(fmt.Sprint(i%3)), []byte(fmt.Sprintf("caption %d", i)))
		}
		var b bytes.Buffer
		if _, err := dataset.WriteTarShard(&b, names, datas); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(context.Background(), fmt.Sprintf("shard-%03d.tar", sh), b.Bytes(), storage.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWriteManifestWebDataset: WebDataset tars indexed in place past
// --write-manifest-over get their manifest and index written once, as
// an ImageFolder's listing does; the next process reads them and no tar,
// with the same digest and order. Below the threshold, for a --media
// other than image, or in a bucket it may not write, nothing is written
// and the run goes on.
func TestWriteManifestWebDataset(t *testing.T) {
	ctx := context.Background()
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))
	mem := storage.NewMemStore("wds")
	wds(t, mem, 4, 25)
	dopts := dataset.DefaultDiscoverOptions()
	indexed, err := dataset.Discover(ctx, mem, dopts)
	if err != nil || indexed.Format != "webdataset" {
		t.Fatalf("Discover: %v, format %q", err, indexed.Format)
	}
	digest := dataset.ManifestDigest(indexed)

	WriteManifest(ctx, mem, indexed, dopts.Extensions, 101, log)
	WriteManifest(ctx, readOnly{mem}, indexed, dopts.Extensions, 100, log)
	if _, err := mem.Stat(ctx, dataset.ManifestJSONLName); err == nil {
		t.Fatalf("a manifest was written below the threshold, or through a read-only store")
	}
	if !strings.Contains(logged.String(), "could not write the WebDataset's manifest") {
		t.Errorf("a bucket it may not write: no warning in %q", logged.String())
	}

	// Another media picks other members: not written (a later image
	// run would read them), and the log says why.
	raw, _ := dataset.MediaExtensions("raw:txt")
	txt, err := dataset.Discover(ctx, mem, dataset.DiscoverOptions{Extensions: raw})
	if err != nil {
		t.Fatal(err)
	}
	WriteManifest(ctx, mem, txt, raw, 1, log)
	if _, err := mem.Stat(ctx, dataset.ManifestJSONLName); err == nil {
		t.Fatalf("a manifest was written for --media raw:txt")
	}
	if !strings.Contains(logged.String(), "not writing the WebDataset's manifest") {
		t.Errorf("--media raw:txt: no line says why: %q", logged.String())
	}

	WriteManifest(ctx, mem, indexed, dopts.Extensions, 100, log)
	if !strings.Contains(logged.String(), "wrote the WebDataset's manifest") {
		t.Errorf("no line says the manifest was written: %q", logged.String())
	}
	x, err := dataset.ReadManifestIndex(ctx, mem, dataset.ManifestJSONLName)
	if err != nil || x.Samples != 100 || x.Digest != digest {
		t.Fatalf("the written index: %+v %v, want 100 samples digesting %s", x, err, digest)
	}
	s := storage.NewCountingStore(mem)
	ds, err := dataset.Discover(ctx, s, dopts)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().Count(storage.OpGetRange, storage.OutcomeOK) + s.Stats().Count(storage.OpGet, storage.OutcomeOK); n != 1 {
		t.Errorf("the next process made %d GETs, want the manifest's 1 (no tar read)", n)
	}
	if d := dataset.ManifestDigest(ds); d != digest || ds.Format != "manifest-jsonl" || len(ds.Samples) != 100 {
		t.Errorf("the manifest's dataset (%s) digests to %s, want %s", ds.Format, d, digest)
	}
	for i := range ds.Samples {
		if ds.Samples[i] != indexed.Samples[i] {
			t.Fatalf("sample %d: %+v from the manifest, %+v from the tars", i, ds.Samples[i], indexed.Samples[i])
		}
	}
}
