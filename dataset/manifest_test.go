package dataset_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

func TestManifestPacked(t *testing.T) {
	want := []dataset.Sample{
		{Key: "s/0.tar/a.jpg", Label: 1, Object: 1, Offset: 512, Size: 100},
		{Key: "plain.jpg", Label: 0},
		{Key: "s/0.tar/b.jpg", Label: 1, Object: 1, Offset: 1536, Size: 7},
	}
	for _, tc := range []struct {
		name   string
		format dataset.ManifestFormat
		body   string
	}{
		{"CSVHeader", dataset.ManifestCSV, "key,label,object,offset,size\n" +
			"s/0.tar/a.jpg,1,s/0.tar,512,100\nplain.jpg,0,,,\ns/0.tar/b.jpg,1, s/0.tar ,1536,7\n"},
		{"CSVNoHeaderMixedWidths", dataset.ManifestCSV, "s/0.tar/a.jpg,1,s/0.tar,512,100\nplain.jpg,0\ns/0.tar/b.jpg,1,s/0.tar,1536,7\n"},
		{"CSVShortHeader", dataset.ManifestCSV, "key,label\ns/0.tar/a.jpg,1,s/0.tar,512,100\nplain.jpg,0\ns/0.tar/b.jpg,1,s/0.tar,1536,7\n"},
		{"JSONL", dataset.ManifestJSONL, `{"key":"s/0.tar/a.jpg","label":1,"object":"s/0.tar","offset":512,"size":100}` + "\n" +
			`{"key":"plain.jpg","label":0,"object":null}` + "\n" +
			`{"size":7,"offset":1536,"object":"s/0.tar","key":"s/0.tar/b.jpg","label":1}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds, err := dataset.ParseManifest(strings.NewReader(tc.body), tc.format)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ds.Samples, want) || !slices.Equal(ds.Objects, []string{"s/0.tar"}) {
				t.Errorf("samples\n%+v\nobjects %q\nwant\n%+v\nobjects [s/0.tar]", ds.Samples, ds.Objects, want)
			}
			if got := ds.ObjectOf(ds.Samples[2]); got != "s/0.tar" {
				t.Errorf("ObjectOf(packed sample) = %q", got)
			}
			if got := ds.ObjectOf(ds.Samples[1]); got != "" {
				t.Errorf("ObjectOf(plain sample) = %q", got)
			}
			if !ds.Packed() || ds.Samples[1].Packed() {
				t.Errorf("Packed: dataset %v, plain sample %v", ds.Packed(), ds.Samples[1].Packed())
			}
		})
	}

	// Discover puts the manifest's directory in front of objects as of keys.
	s := storage.NewMemStore(t.Name())
	fillData(t, s, "data/manifest.jsonl", `{"key":"s/0.tar/a.jpg","label":"cat","object":"s/0.tar","offset":0,"size":1}`)
	ds := discover(t, s, dataset.DiscoverOptions{Root: "data"})
	if got := ds.Samples[0]; got.Key != "data/s/0.tar/a.jpg" || ds.ObjectOf(got) != "data/s/0.tar" {
		t.Errorf("discovered %+v in %q, want key and object under data/", got, ds.Objects)
	}
	plain := dataset.Dataset{Samples: []dataset.Sample{{Key: "a"}}}
	if plain.Packed() {
		t.Error("a dataset of plain samples says it is packed")
	}
}

func TestManifestPackedErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format dataset.ManifestFormat
		body   string
		line   int
		msg    string
	}{
		{"CSVFourFields", dataset.ManifestCSV, "a,1\nb,1,s.tar,0\n", 2, "or 5"},
		{"CSVObjectOnly", dataset.ManifestCSV, "a,1,s.tar,,\n", 1, "object without offset and size"},
		{"CSVNoObject", dataset.ManifestCSV, "a,1,,0,10\n", 1, "offset and size without object"},
		{"CSVOffsetText", dataset.ManifestCSV, "a,1,s.tar,x,10\n", 1, `offset "x"`},
		{"CSVSizeNegative", dataset.ManifestCSV, "a,1,s.tar,0,-2\n", 1, "size -2"},
		{"CSVNegativeOffset", dataset.ManifestCSV, "a,1,s.tar,-1,10\n", 1, "negative"},
		{"CSVBadObject", dataset.ManifestCSV, "a,1\nb,1,../s.tar,0,10\n", 2, "object"},
		{"CSVOverflow", dataset.ManifestCSV, "a,1,s.tar,9223372036854775800,100\n", 1, "overflows"},
		{"JSONLNoSize", dataset.ManifestJSONL, `{"key":"a","label":1,"object":"s.tar","offset":0}`, 1, "without size"},
		{"JSONLNoObject", dataset.ManifestJSONL, `{"key":"a","label":1,"offset":0,"size":3}`, 1, "without object"},
		{"JSONLStringSize", dataset.ManifestJSONL, `{"key":"a","label":1,"object":"s.tar","offset":0,"size":"3"}`, 1, "not an integer"},
		{"JSONLFloatOffset", dataset.ManifestJSONL, `{"key":"a","label":1,"object":"s.tar","offset":1.5,"size":3}`, 1, "not an integer"},
		{"JSONLEmptyObject", dataset.ManifestJSONL, `{"key":"a","label":1,"object":"","offset":0,"size":3}`, 1, "empty"},
		{"JSONLNegativeSize", dataset.ManifestJSONL, "{\"key\":\"a\",\"label\":1}\n" + `{"key":"b","label":1,"object":"s.tar","offset":0,"size":-3}`, 2, "size -3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dataset.ParseManifest(strings.NewReader(tc.body), tc.format)
			var me *dataset.ManifestError
			if !errors.As(err, &me) || !errors.Is(err, dataset.ErrBadManifest) {
				t.Fatalf("err = %v, want a ManifestError", err)
			}
			if me.Line != tc.line || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v, want line %d and %q", err, tc.line, tc.msg)
			}
		})
	}
	// Discover reports it with the manifest's name.
	s := storage.NewMemStore(t.Name())
	fillData(t, s, "manifest.csv", "a,1,s.tar,0,-1\n")
	if _, err := dataset.Discover(context.Background(), s, dataset.DiscoverOptions{}); !errors.Is(err, dataset.ErrBadManifest) || !strings.Contains(err.Error(), "manifest.csv") {
		t.Errorf("Discover: %v", err)
	}
}

// TestManifestObjectsShared: the samples of one tar share one entry of
// Dataset.Objects (a million-sample manifest would otherwise hold a copy
// per sample), with integer labels and class names, at the root and
// below a manifest's directory; the objects are listed in order of first
// use.
func TestManifestObjectsShared(t *testing.T) {
	for _, tc := range []struct {
		name, dir, body string
	}{
		{"integers", "", "a,1,s/1.tar,512,10\nb,1,s/1.tar,1024,10\nc,2,s/0.tar,512,10\nd,0\ne,1,s/1.tar,2048,10\n"},
		{"names", "", "a,x,s/1.tar,512,10\nb,x,s/1.tar,1024,10\nc,y,s/0.tar,512,10\nd,x\ne,y,s/1.tar,2048,10\n"},
		{"directory", "sub/", "a,1,s/1.tar,512,10\nb,1,s/1.tar,1024,10\nc,2,s/0.tar,512,10\nd,0\ne,1,s/1.tar,2048,10\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := storage.NewMemStore(t.Name())
			fillData(t, s, tc.dir+"manifest.csv", tc.body)
			ds, err := dataset.Discover(context.Background(), s, dataset.DiscoverOptions{Root: tc.dir})
			if err != nil {
				t.Fatal(err)
			}
			ids := make([]dataset.ObjectID, len(ds.Samples))
			for i, smp := range ds.Samples {
				ids[i] = smp.Object
			}
			want := []string{tc.dir + "s/1.tar", tc.dir + "s/0.tar"}
			if !slices.Equal(ds.Objects, want) || !slices.Equal(ids, []dataset.ObjectID{1, 1, 2, dataset.NoObject, 1}) {
				t.Errorf("objects %q, sample objects %v: want %q, [1 1 2 0 1]", ds.Objects, ids, want)
			}
			if got := ds.ObjectOf(ds.Samples[4]); got != want[0] {
				t.Errorf("ObjectOf(sample e) = %q, want %q", got, want[0])
			}
		})
	}
}

// TestSampleSize: a dataset holds a Sample per sample in every process,
// ten million of them for ImageNet-21k; 40 bytes is 160 MB less than the
// 56 of a Sample holding its object's key.
func TestSampleSize(t *testing.T) {
	if size := unsafe.Sizeof(dataset.Sample{}); size > 40 {
		t.Errorf("Sample is %d bytes, want at most 40", size)
	}
}

// TestDatasetObjects: AddObject numbers objects from 1, NoObject and the
// zero Sample are plain, and an ID outside the objects panics.
func TestDatasetObjects(t *testing.T) {
	var ds dataset.Dataset
	if got := ds.Object(dataset.NoObject); got != "" {
		t.Errorf("Object(NoObject) = %q", got)
	}
	a, b := ds.AddObject("s/0.tar"), ds.AddObject("s/1.tar")
	if a != 1 || b != 2 || ds.Object(a) != "s/0.tar" || ds.Object(b) != "s/1.tar" {
		t.Errorf("AddObject: %d %d, objects %q", a, b, ds.Objects)
	}
	if (dataset.Sample{Key: "k", Label: 1}).Packed() || !(dataset.Sample{Key: "k", Object: b}).Packed() {
		t.Error("Packed: want a sample without an object plain, one with an object packed")
	}
	for _, id := range []dataset.ObjectID{3, -1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Object(%d) of 2 objects did not panic", id)
				}
			}()
			ds.Object(id)
		}()
	}
}
