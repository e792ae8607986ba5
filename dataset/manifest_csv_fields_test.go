package dataset

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/longshore/longshore/storage"
)

// TestCSVFields: a CSV header's columns after key and label (and the
// location, when named) are fields, typed by a ":type" suffix; an empty
// cell is absent; the scan and the lazy reader agree with the parser.
func TestCSVFields(t *testing.T) {
	data := "key,label,caption,n:int,score: float\n" +
		"a.jpg,0,a cat,1,0.5\n" +
		"b.jpg,1,\"with, comma\",,2\n" +
		"c.jpg,1, spaced ,-3,\n"
	ds, err := ParseManifest(strings.NewReader(data), ManifestCSV)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ds.Fields.Schema().String(), "caption:string,n:int,score:float"; got != want {
		t.Fatalf("schema %s, want %s", got, want)
	}
	want := [][]Value{
		{StringValue("a cat"), IntValue(1), FloatValue(0.5)},
		{StringValue("with, comma"), {}, FloatValue(2)},
		{StringValue(" spaced "), IntValue(-3), {}},
	}
	for i, w := range want {
		row := ds.Fields.Row(i)
		for c := range w {
			if !row[c].Equal(w[c]) {
				t.Fatalf("sample %d: fields %v, want %v", i, row, w)
			}
		}
	}

	// Located and fields; the index carries the header, read back.
	packed := "key,label,object,offset,size,caption\n"
	for i := range 10 {
		packed += "k" + string(rune('a'+i)) + ",0,s.tar," + string(rune('0'+i)) + ",1,cap " + string(rune('a'+i)) + "\n"
	}
	checkIndexed(t, []byte(packed), "d/manifest.csv", 3, 0)
	s := storage.NewMemStore("x")
	s.Put(context.Background(), "manifest.csv", []byte(packed), storage.Cond{})
	x, err := ScanManifest(context.Background(), s, "manifest.csv", ScanOptions{Every: 3})
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := x.MarshalBinary()
	back, err := ParseManifestIndex(enc)
	if err != nil || strings.Join(back.Columns, ",") != "key,label,object,offset,size,caption" || back.Schema.String() != "caption:string" {
		t.Fatalf("index read back: %v, columns %q, schema %v", err, back.Columns, back.Schema)
	}
}

// TestCSVFieldsRefused: a header's bad field columns, and records that
// do not fit it, are errors naming their line.
func TestCSVFieldsRefused(t *testing.T) {
	for _, c := range []struct{ data, want string }{
		{"key,label,n:int\na,0,x\n", `line 2: field "n": "x" is not an integer`},
		{"key,label,f:float\na,0,nan\n", `line 2: field "f": "nan" is not a finite number`},
		{"key,label,c\na,0\n", "line 2: want 3 fields, as the header has, got 2"},
		{"key,label,c,c\na,0,x,y\n", `line 1: header column 4: field "c" named twice`},
		{"key,label,t:list<str>\na,0,x\n", `line 1: header column 3 "t:list<str>": unknown type "list<str>"`},
		{"key,label,size\na,0,1\n", `line 1: header column 3: field name "size": reserved`},
		{"key,label,n:int\na,0,1\nb,1,2\n\"c\",2,x\n", `line 4: field "n": "x" is not an integer`},
	} {
		_, err := ParseManifest(strings.NewReader(c.data), ManifestCSV)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.data, err, c.want)
		}
	}
}

// TestCSVWithoutFieldsUnchanged: manifests of 2 or 5 columns read as
// they did, a 5-column first record that is a sample included, and
// their indexes carry no columns.
func TestCSVWithoutFieldsUnchanged(t *testing.T) {
	for _, data := range []string{
		"key,label\na,0\n",
		"key,label,object,offset,size\na,0,s.tar,0,9\n",
		"path,target,s.tar,0,9\nb,1,,,\n", // the first record a packed sample, as it always was
		"key,label,,,\nb,1\n",
	} {
		ds, err := ParseManifest(strings.NewReader(data), ManifestCSV)
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		if len(ds.Fields.Schema()) != 0 {
			t.Fatalf("%q: fields %v", data, ds.Fields.Schema())
		}
		s := storage.NewMemStore("x")
		s.Put(context.Background(), "manifest.csv", []byte(data), storage.Cond{})
		x, err := ScanManifest(context.Background(), s, "manifest.csv", ScanOptions{Every: 1})
		if err != nil {
			t.Fatal(err)
		}
		enc, _ := x.MarshalBinary()
		if x.Columns != nil || bytes.Contains(enc, []byte("columns")) {
			t.Fatalf("%q: index with columns %q", data, x.Columns)
		}
	}
}
