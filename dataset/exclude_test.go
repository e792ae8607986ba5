package dataset_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

func TestReadExclusions(t *testing.T) {
	in := "\xef\xbb\xbf# a quarantine list\r\n" +
		`{"key":"c0/bad one.jpg","stage":"decode","class":"corrupt","reason":"truncated"}` + "\r\n" +
		"\n" +
		"c1/üñí.png\n" +
		`{"key":"c2/x.jpg"}`
	ex, err := dataset.ReadExclusions(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := dataset.Exclusions{"c0/bad one.jpg": "truncated", "c1/üñí.png": "", "c2/x.jpg": ""}
	if !reflect.DeepEqual(ex, want) {
		t.Errorf("got %q; want %q", ex, want)
	}
	for _, bad := range []string{"ok\n{\"key\": 3}\n", "{\"stage\":\"decode\"}", "{not json"} {
		if _, err := dataset.ReadExclusions(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line") {
			t.Errorf("%q: %v; want an error naming the line", bad, err)
		}
	}
}

// TestDiscoverExcludes: excluded keys are not in the dataset, the others
// keep their order and labels, the digest is that of what is left, and
// excluding everything is an empty dataset.
func TestDiscoverExcludes(t *testing.T) {
	ctx := context.Background()
	m := storage.NewMemStore("x")
	for _, k := range []string{"a/1.jpg", "a/2.jpg", "b/3.jpg", "b/4.jpg"} {
		m.Put(ctx, k, []byte(k), storage.Cond{})
	}
	all, err := dataset.Discover(ctx, m, dataset.DefaultDiscoverOptions())
	if err != nil {
		t.Fatal(err)
	}
	opts := dataset.DefaultDiscoverOptions()
	opts.Exclude = dataset.Exclusions{"a/2.jpg": "corrupt", "zzz/not-there.jpg": ""}
	ds, err := dataset.Discover(ctx, m, opts)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, s := range ds.Samples {
		keys = append(keys, s.Key)
	}
	if !reflect.DeepEqual(keys, []string{"a/1.jpg", "b/3.jpg", "b/4.jpg"}) || ds.Excluded != 1 || len(ds.Classes) != 2 || ds.Samples[1].Label != 1 {
		t.Errorf("samples %v, excluded %d, classes %v", ds.Samples, ds.Excluded, ds.Classes)
	}
	if dataset.ManifestDigest(ds) == dataset.ManifestDigest(all) {
		t.Error("excluding a sample left the digest as it was")
	}
	all.Exclude(dataset.Exclusions{"a/2.jpg": ""})
	if dataset.ManifestDigest(ds) != dataset.ManifestDigest(all) {
		t.Error("two processes excluding the same key disagree on the digest")
	}
	opts.Exclude = dataset.Exclusions{"a/1.jpg": "", "a/2.jpg": "", "b/3.jpg": "", "b/4.jpg": ""}
	if _, err := dataset.Discover(ctx, m, opts); !errors.Is(err, dataset.ErrEmptyDataset) {
		t.Errorf("all excluded: %v; want ErrEmptyDataset", err)
	}
}
