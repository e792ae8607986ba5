package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

func runManifest(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String(), errb.String(), code
}

func imageFolder(t *testing.T, classes, per int) string {
	t.Helper()
	dir := t.TempDir()
	for c := range classes {
		for i := range per {
			p := filepath.Join(dir, fmt.Sprintf("class-%02d", c), fmt.Sprintf("sub%d", i%2), fmt.Sprintf("img-%03d.jpg", i))
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte("not decoded here"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	os.WriteFile(filepath.Join(dir, "class-00", "notes.txt"), []byte("skipped"), 0o644)
	return dir
}

// TestListDataset: the manifest written reads as the same dataset as the
// ImageFolder it lists (samples, classes, digest), and its index serves
// every sample.
func TestListDataset(t *testing.T) {
	ctx := context.Background()
	dir := imageFolder(t, 5, 7)
	s, err := storage.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	folder, err := dataset.Discover(ctx, s, dataset.DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, errs, code := runManifest(t, "--dataset", dir, "--concurrency", "3", "--every", "4")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(errs, "listed 35 samples in 5 classes") {
		t.Errorf("stderr: %s", errs)
	}
	ds, err := dataset.Discover(ctx, s, dataset.DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dataset.ManifestDigest(ds) != dataset.ManifestDigest(folder) || len(ds.Samples) != 35 {
		t.Fatalf("manifest: %d samples %s, ImageFolder %s", len(ds.Samples), dataset.ManifestDigest(ds), dataset.ManifestDigest(folder))
	}
	if _, err := s.Stat(ctx, dataset.ManifestJSONLName); err != nil {
		t.Fatalf("Discover did not read a manifest: %v", err)
	}
	m, err := dataset.OpenIndexedManifest(ctx, s, dataset.ManifestJSONLName, dataset.IndexedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i, want := range folder.Samples {
		got, _, err := m.Sample(ctx, int64(i))
		if err != nil || got.Key != want.Key || got.Label != want.Label {
			t.Fatalf("sample %d: %+v %v, want %+v", i, got, err, want)
		}
	}

	// Again: refused, unless forced.
	if _, errs, code := runManifest(t, "--dataset", dir); code != 1 || !strings.Contains(errs, "--force") {
		t.Errorf("second run: exit %d %s", code, errs)
	}
	if _, errs, code := runManifest(t, "--dataset", dir, "--force"); code != 0 {
		t.Errorf("forced: exit %d %s", code, errs)
	}
}

// TestIndexManifest indexes a CSV manifest in a subdirectory, and again
// after it changed: the stale index is refused until rebuilt.
func TestIndexManifest(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "m"), 0o755)
	manifest := filepath.Join(dir, "m", "train.csv")
	os.WriteFile(manifest, []byte("key,label\na.jpg,cat\nb.jpg,dog\nc.jpg,cat\n"), 0o644)
	out, errs, code := runManifest(t, "--index", dir, "--manifest", "m/train.csv", "--every", "2")
	if code != 0 || !strings.Contains(out, "3 samples (plain), 2 classes") {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	s, _ := storage.NewDirStore(dir)
	m, err := dataset.OpenIndexedManifest(ctx, s, "m/train.csv", dataset.IndexedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	smp, _, err := m.Sample(ctx, 1)
	m.Close()
	if err != nil || smp.Key != "m/b.jpg" || smp.Label != 1 {
		t.Fatalf("sample 1: %+v %v", smp, err)
	}
	os.WriteFile(manifest, []byte("key,label\na.jpg,cat\nb.jpg,dog\nc.jpg,cat\nd.jpg,dog\n"), 0o644)
	if _, err := dataset.OpenIndexedManifest(ctx, s, "m/train.csv", dataset.IndexedConfig{}); err == nil || !strings.Contains(err.Error(), "longshore-manifest --index") {
		t.Fatalf("stale index: %v", err)
	}
	if _, errs, code := runManifest(t, "--index", dir, "--manifest", "m/train.csv"); code != 0 {
		t.Fatalf("rebuild: exit %d %s", code, errs)
	}
	m, err = dataset.OpenIndexedManifest(ctx, s, "m/train.csv", dataset.IndexedConfig{})
	if err != nil || m.Len() != 4 {
		t.Fatalf("rebuilt: %v", err)
	}
	m.Close()
}

func TestFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "want --dataset LOC"},
		{[]string{"--dataset", "a", "--index", "b"}, "want --dataset LOC"},
		{[]string{"--index", "a", "--force"}, "--force goes with --dataset"},
		{[]string{"--dataset", "a", "--manifest", "x.csv"}, "--manifest goes with --index"},
		{[]string{"--index", "a", "--every", "0"}, "--every 0"},
		{[]string{"--dataset", "a", "--concurrency", "0"}, "--concurrency 0"},
	} {
		_, errs, code := runManifest(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%q: exit %d, %s; want 2 and %q", c.args, code, errs, c.want)
		}
	}
}
