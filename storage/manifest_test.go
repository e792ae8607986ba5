package storage_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/longshore/longshore/storage"
)

func TestManifestPacked(t *testing.T) {
	want := []storage.Sample{
		{Key: "s/0.tar/a.jpg", Label: 1, Object: "s/0.tar", Offset: 512, Size: 100},
		{Key: "plain.jpg", Label: 0},
		{Key: "s/0.tar/b.jpg", Label: 1, Object: "s/0.tar", Offset: 1536, Size: 7},
	}
	for _, tc := range []struct {
		name   string
		format storage.ManifestFormat
		body   string
	}{
		{"CSVHeader", storage.ManifestCSV, "key,label,object,offset,size\n" +
			"s/0.tar/a.jpg,1,s/0.tar,512,100\nplain.jpg,0,,,\ns/0.tar/b.jpg,1, s/0.tar ,1536,7\n"},
		{"CSVNoHeaderMixedWidths", storage.ManifestCSV, "s/0.tar/a.jpg,1,s/0.tar,512,100\nplain.jpg,0\ns/0.tar/b.jpg,1,s/0.tar,1536,7\n"},
		{"CSVShortHeader", storage.ManifestCSV, "key,label\ns/0.tar/a.jpg,1,s/0.tar,512,100\nplain.jpg,0\ns/0.tar/b.jpg,1,s/0.tar,1536,7\n"},
		{"JSONL", storage.ManifestJSONL, `{"key":"s/0.tar/a.jpg","label":1,"object":"s/0.tar","offset":512,"size":100}` + "\n" +
			`{"key":"plain.jpg","label":0,"object":null}` + "\n" +
			`{"size":7,"offset":1536,"object":"s/0.tar","key":"s/0.tar/b.jpg","label":1}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds, err := storage.ParseManifest(strings.NewReader(tc.body), tc.format)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ds.Samples, want) {
				t.Errorf("samples\n%+v\nwant\n%+v", ds.Samples, want)
			}
			if !ds.Packed() || ds.Samples[1].Packed() {
				t.Errorf("Packed: dataset %v, plain sample %v", ds.Packed(), ds.Samples[1].Packed())
			}
		})
	}

	// Discover puts the manifest's directory in front of objects as of keys.
	s := storage.NewMemStore(t.Name())
	fillData(t, s, "data/manifest.jsonl", `{"key":"s/0.tar/a.jpg","label":"cat","object":"s/0.tar","offset":0,"size":1}`)
	ds := discover(t, s, storage.DiscoverOptions{Root: "data"})
	if got := ds.Samples[0]; got.Key != "data/s/0.tar/a.jpg" || got.Object != "data/s/0.tar" {
		t.Errorf("discovered %+v, want key and object under data/", got)
	}
	plain := storage.Dataset{Samples: []storage.Sample{{Key: "a"}}}
	if plain.Packed() {
		t.Error("a dataset of plain samples says it is packed")
	}
}

func TestManifestPackedErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format storage.ManifestFormat
		body   string
		line   int
		msg    string
	}{
		{"CSVFourFields", storage.ManifestCSV, "a,1\nb,1,s.tar,0\n", 2, "or 5"},
		{"CSVObjectOnly", storage.ManifestCSV, "a,1,s.tar,,\n", 1, "object without offset and size"},
		{"CSVNoObject", storage.ManifestCSV, "a,1,,0,10\n", 1, "offset and size without object"},
		{"CSVOffsetText", storage.ManifestCSV, "a,1,s.tar,x,10\n", 1, `offset "x"`},
		{"CSVSizeNegative", storage.ManifestCSV, "a,1,s.tar,0,-2\n", 1, "size -2"},
		{"CSVNegativeOffset", storage.ManifestCSV, "a,1,s.tar,-1,10\n", 1, "negative"},
		{"CSVBadObject", storage.ManifestCSV, "a,1\nb,1,../s.tar,0,10\n", 2, "object"},
		{"CSVOverflow", storage.ManifestCSV, "a,1,s.tar,9223372036854775800,100\n", 1, "overflows"},
		{"JSONLNoSize", storage.ManifestJSONL, `{"key":"a","label":1,"object":"s.tar","offset":0}`, 1, "without size"},
		{"JSONLNoObject", storage.ManifestJSONL, `{"key":"a","label":1,"offset":0,"size":3}`, 1, "without object"},
		{"JSONLStringSize", storage.ManifestJSONL, `{"key":"a","label":1,"object":"s.tar","offset":0,"size":"3"}`, 1, "not an integer"},
		{"JSONLFloatOffset", storage.ManifestJSONL, `{"key":"a","label":1,"object":"s.tar","offset":1.5,"size":3}`, 1, "not an integer"},
		{"JSONLEmptyObject", storage.ManifestJSONL, `{"key":"a","label":1,"object":"","offset":0,"size":3}`, 1, "empty"},
		{"JSONLNegativeSize", storage.ManifestJSONL, "{\"key\":\"a\",\"label\":1}\n" + `{"key":"b","label":1,"object":"s.tar","offset":0,"size":-3}`, 2, "size -3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := storage.ParseManifest(strings.NewReader(tc.body), tc.format)
			var me *storage.ManifestError
			if !errors.As(err, &me) || !errors.Is(err, storage.ErrBadManifest) {
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
	if _, err := storage.Discover(context.Background(), s, storage.DiscoverOptions{}); !errors.Is(err, storage.ErrBadManifest) || !strings.Contains(err.Error(), "manifest.csv") {
		t.Errorf("Discover: %v", err)
	}
}

// TestManifestObjectsShared: the samples of one tar share one object
// string (a million-sample manifest would otherwise hold a copy per
// sample), also below a manifest's directory.
func TestManifestObjectsShared(t *testing.T) {
	s := storage.NewMemStore(t.Name())
	fillData(t, s, "sub/manifest.csv", "a,1,s/0.tar,512,10\nb,1,s/0.tar,1024,10\nc,2,s/1.tar,512,10\n")
	ds, err := storage.Discover(context.Background(), s, storage.DiscoverOptions{Root: "sub"})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := ds.Samples[0].Object, ds.Samples[1].Object, ds.Samples[2].Object
	if a != "sub/s/0.tar" || c != "sub/s/1.tar" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Errorf("objects %q %q %q: want the first two one string", a, b, c)
	}
}
