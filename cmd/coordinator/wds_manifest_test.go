package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
)

// TestCoordinatorWritesWebDatasetManifest: a coordinator that reads
// WebDataset tars in place, at least --write-manifest-over samples of
// them, writes their manifest and index before it serves the job, with
// the digest it serves; the next coordinator reads the facts from the
// index, the same count and digest. With --media raw:txt it writes none.
func TestCoordinatorWritesWebDatasetManifest(t *testing.T) {
	data := t.TempDir()
	for sh := range 3 {
		var names []string
		var datas [][]byte
		for k := range 6 {
			i := sh*6 + k
			names = append(names, fmt.Sprintf("s%03d.jpg", i), fmt.Sprintf("s%03d.cls", i), fmt.Sprintf("s%03d.txt", i))
			datas = append(datas, []byte(fmt.Sprintf("jpeg %d", i)), []byte(fmt.Sprint(i%4)), []byte(fmt.Sprintf("caption %d", i)))
		}
		var b bytes.Buffer
		if _, err := dataset.WriteTarShard(&b, names, datas); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, fmt.Sprintf("shard-%d.tar", sh)), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	facts := func(args ...string) (jobData, string) {
		t.Helper()
		o, err := parseFlags(append([]string{"--dataset", data, "--listen", "127.0.0.1:0", "--gossip", "127.0.0.1:0"}, args...), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		dopts := dataset.DefaultDiscoverOptions()
		dopts.Extensions, _ = dataset.MediaExtensions(o.media)
		var logged strings.Builder
		s, f, err := datasetFacts(context.Background(), o, s3.DefaultOptions(), dopts, slog.New(slog.NewTextHandler(&logged, nil)))
		if err != nil {
			t.Fatalf("%q: %v\n%s", args, err, logged.String())
		}
		storage.Close(s)
		return f, logged.String()
	}
	manifest := filepath.Join(data, dataset.ManifestJSONLName)
	if _, logged := facts("--write-manifest-over", "1", "--media", "raw:txt"); !strings.Contains(logged, "not writing the WebDataset's manifest") {
		t.Errorf("--media raw:txt: no line says why nothing is written: %s", logged)
	}
	if _, err := os.Stat(manifest); err == nil {
		t.Fatal("a manifest was written for --media raw:txt")
	}
	inPlace, _ := facts("--write-manifest-over", "19")
	if _, err := os.Stat(manifest); err == nil {
		t.Fatal("a manifest was written for 18 samples with --write-manifest-over 19")
	}
	first, logged := facts("--write-manifest-over", "18")
	if !strings.Contains(logged, "wrote the WebDataset's manifest") {
		t.Errorf("no line says the manifest was written: %s", logged)
	}
	again, _ := facts("--write-manifest-over", "18")
	if inPlace.samples != 18 || !inPlace.packed || first != inPlace || again != inPlace {
		t.Errorf("facts in place %+v, the run that wrote the manifest %+v, the next %+v: want the same", inPlace, first, again)
	}
	for _, p := range []string{manifest, filepath.Join(data, dataset.IndexKey(dataset.ManifestJSONLName))} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("after the run: %v", err)
		}
	}
}
