package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// TestManifestFacts: the coordinator's count, layout and digest come
// from the index when there is one (reading a small part of the
// manifest), from one streaming pass when not, and agree with Discover
// either way; an ImageFolder is not a manifest.
func TestManifestFacts(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		name, key string
		labels    func(i int) string
	}{
		{"csv integers", "manifest.csv", func(i int) string { return fmt.Sprint(i % 5) }},
		{"csv names", "manifest.csv", func(i int) string { return []string{"dog", "cat", "emu"}[i%3] }},
		{"jsonl names", "manifest.jsonl", func(i int) string { return fmt.Sprintf("%q", []string{"dog", "cat"}[i%2]) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := storage.NewMemStore("m")
			var text strings.Builder
			for i := range 5000 {
				if strings.HasSuffix(c.key, ".csv") {
					fmt.Fprintf(&text, "img/%05d.jpg,%s\n", i, c.labels(i))
				} else {
					fmt.Fprintf(&text, `{"key":"img/%05d.jpg","label":%s}`+"\n", i, c.labels(i))
				}
			}
			mem.Put(ctx, c.key, []byte(text.String()), storage.Cond{})
			ds, err := dataset.Discover(ctx, mem, dataset.DiscoverOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want := jobData{samples: 5000, digest: dataset.ManifestDigest(ds)}

			s := storage.NewCountingStore(mem)
			got, ok, err := manifestFacts(ctx, s, "", log)
			if err != nil || !ok || got != want {
				t.Fatalf("streamed: %+v %v %v, want %+v", got, ok, err, want)
			}
			if _, err := dataset.WriteManifestIndex(ctx, mem, c.key, 1024, nil); err != nil {
				t.Fatal(err)
			}
			s = storage.NewCountingStore(mem)
			got, ok, err = manifestFacts(ctx, s, "", log)
			if err != nil || !ok || got != want {
				t.Fatalf("indexed: %+v %v %v, want %+v", got, ok, err, want)
			}
			// The index, a byte past the manifest's end and its last
			// piece: not the manifest.
			if read := s.Stats().BytesRead; read >= int64(text.Len())/2 {
				t.Errorf("with an index, read %d bytes of a %d-byte manifest", read, text.Len())
			}
		})
	}
	mem := storage.NewMemStore("folder")
	mem.Put(ctx, "cat/1.jpg", []byte("x"), storage.Cond{})
	if _, ok, err := manifestFacts(ctx, mem, "", log); ok || err != nil {
		t.Errorf("an ImageFolder: %v %v", ok, err)
	}
	if _, _, err := manifestFacts(ctx, mem, "missing.csv", log); err == nil {
		t.Errorf("a missing --manifest: no error")
	}
}
