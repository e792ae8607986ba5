package dataset

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"

	"github.com/longshore/longshore/storage"
)

func TestFieldsBuilderColumns(t *testing.T) {
	b := NewFieldsBuilder()
	set := func(name string, v Value) {
		t.Helper()
		if err := b.Set(name, v); err != nil {
			t.Fatal(err)
		}
	}
	set("caption", StringValue("a cat"))
	set("n", IntValue(3))
	b.EndSample()
	b.EndSample()             // no fields
	set("n", FloatValue(2.5)) // widens n to float
	set("tags", StringsValue([]string{"x", "y"}))
	set("blob", BytesValue([]byte{0, 1}))
	b.EndSample()
	if err := b.Set("caption", IntValue(1)); err == nil {
		t.Fatal("an int in a string field: no error")
	}
	f := b.Finish()
	if f.Len() != 3 {
		t.Fatalf("Len %d", f.Len())
	}
	if got, want := f.Schema().String(), "blob:bytes,caption:string,n:float,tags:list<string>"; got != want {
		t.Fatalf("schema %s, want %s", got, want)
	}
	rows := []string{
		"[absent \"a cat\" 3 absent]",
		"[absent absent absent absent]",
		"[0x0001 absent 2.5 [\"x\",\"y\"]]",
	}
	for i, want := range rows {
		var parts []string
		for _, v := range f.Row(i) {
			parts = append(parts, v.String())
		}
		if got := "[" + strings.Join(parts, " ") + "]"; got != want {
			t.Errorf("row %d: %s, want %s", i, got, want)
		}
	}
	if v, ok := f.Get(0, "n"); !ok || v.Type != FieldFloat || v.Float != 3 {
		t.Errorf("n of 0: %v %v", v, ok)
	}
}

func TestFieldNamesChecked(t *testing.T) {
	b := NewFieldsBuilder()
	for _, name := range []string{"", "key", "label", "KeY", "Label", "SIZE", "a\nb", strings.Repeat("x", MaxFieldName+1)} {
		if err := b.Set(name, IntValue(1)); err == nil {
			t.Errorf("field name %q: no error", name)
		}
	}
	if err := b.Set("x", IntValue(1)); err != nil {
		t.Fatal(err)
	}
	if err := b.Set("x", IntValue(2)); err == nil {
		t.Error("a field set twice in one sample: no error")
	}
}

func TestEmptyListsTakeTheColumnsType(t *testing.T) {
	b := NewFieldsBuilder()
	for _, v := range []Value{IntsValue(nil), StringsValue([]string{"a"}), IntsValue([]int64{})} {
		if err := b.Set("l", v); err != nil {
			t.Fatal(err)
		}
		b.EndSample()
	}
	f := b.Finish()
	if f.Schema()[0].Type != FieldStrings || f.Value(2, 0).Type != FieldStrings || len(f.Value(2, 0).Strings) != 0 {
		t.Fatalf("schema %s, last %v", f.Schema(), f.Value(2, 0))
	}
}

func TestDigestWithoutFieldsUnchangedWithFieldsChanged(t *testing.T) {
	ds := &Dataset{Classes: []string{"a"}, Samples: []Sample{{Key: "x"}, {Key: "y"}}}
	plain := ManifestDigest(ds)
	b := NewFieldsBuilder()
	b.EndSample()
	b.EndSample()
	ds.Fields = b.Finish() // nil: no field at all
	if ManifestDigest(ds) != plain {
		t.Fatal("a dataset without fields digests differently")
	}
	digest := func(caption string) string {
		b := NewFieldsBuilder()
		b.EndSample()
		b.Set("caption", StringValue(caption))
		b.EndSample()
		ds.Fields = b.Finish()
		return ManifestDigest(ds)
	}
	one, two := digest("a cat"), digest("a dog")
	if one == plain || one == two || digest("a cat") != one {
		t.Fatalf("digests: plain %s, cat %s, dog %s", plain, one, two)
	}
}

func TestDatasetCatalogFields(t *testing.T) {
	ds, err := ParseManifest(strings.NewReader(`{"key":"a","label":0,"caption":"of a"}
{"key":"b","label":1}
`), ManifestJSONL)
	if err != nil {
		t.Fatal(err)
	}
	c := DatasetCatalog(ds)
	if got := CatalogSchema(c).String(); got != "caption:string" {
		t.Fatalf("schema %s", got)
	}
	row, err := CatalogFields(context.Background(), c, 0)
	if err != nil || row[0].Str != "of a" {
		t.Fatalf("row 0: %v %v", row, err)
	}
	row, err = CatalogFields(context.Background(), c, 1)
	if err != nil || row[0].Present() {
		t.Fatalf("row 1: %v %v", row, err)
	}
}

func TestIndexedManifestCarriesFields(t *testing.T) {
	ctx := context.Background()
	text := `{"key":"a","label":0,"n":1,"caption":"of a","tags":[]}
{"key":"b","label":1,"n":2}
{"key":"c","label":0,"n":2.5,"tags":["x"],"meta":{"w":1,"h":[2,"z"]}}
{"key":"d","label":1,"blob":{"$base64":"AAE="}}
{"key":"e","label":0,"caption":"of e","tags":[]}
`
	ds, err := ParseManifest(strings.NewReader(text), ManifestJSONL)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ds.Fields.Schema().String(), "blob:bytes,caption:string,meta:string,n:float,tags:list<string>"; got != want {
		t.Fatalf("schema %s, want %s", got, want)
	}
	s := storage.NewMemStore("idx")
	if _, err := s.Put(ctx, "m.jsonl", []byte(text), storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	x, err := WriteManifestIndex(ctx, s, "m.jsonl", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if x.Digest != ManifestDigest(ds) {
		t.Fatalf("scan digest %s, parse %s", x.Digest, ManifestDigest(ds))
	}
	m, err := OpenIndexedManifest(ctx, s, "m.jsonl", IndexedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.Schema().Equal(ds.Fields.Schema()) {
		t.Fatalf("index schema %s, manifest %s", m.Schema(), ds.Fields.Schema())
	}
	for i := range ds.Samples {
		row, err := CatalogFields(ctx, m, int64(i))
		if err != nil {
			t.Fatal(err)
		}
		want := ds.Fields.Row(i)
		for c := range want {
			if !row[c].Equal(want[c]) {
				t.Errorf("sample %d field %s: %v from the index, %v parsed", i, m.Schema()[c].Name, row[c], want[c])
			}
		}
	}
	if v, _ := ds.Fields.Get(2, "meta"); v.Str != `{"w":1,"h":[2,"z"]}` {
		t.Errorf("meta kept as %v", v)
	}

	// A changed caption changes the digest.
	changed := strings.Replace(text, "of e", "of E", 1)
	ds2, err := ParseManifest(strings.NewReader(changed), ManifestJSONL)
	if err != nil {
		t.Fatal(err)
	}
	if ManifestDigest(ds2) == x.Digest {
		t.Fatal("a changed caption kept the digest")
	}
}

func TestManifestFieldTypesChecked(t *testing.T) {
	_, err := ParseManifest(strings.NewReader(`{"key":"a","label":0,"n":1}
{"key":"b","label":0,"n":"two"}
`), ManifestJSONL)
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("a string after an int: %v", err)
	}
}

func TestWriteManifestJSONLFieldsRoundTrip(t *testing.T) {
	ds := &Dataset{Classes: []string{"0", "1"}, Samples: []Sample{{Key: "a"}, {Key: "b", Label: 1}, {Key: "c"}}}
	b := NewFieldsBuilder()
	b.Set("caption", StringValue("ü \"q\""))
	b.Set("f", FloatValue(2))
	b.Set("blob", BytesValue([]byte{0, 255}))
	b.Set("ls", StringsValue([]string{"x"}))
	b.Set("li", IntsValue([]int64{-1, 2}))
	b.Set("lf", FloatsValue([]float64{0.5, 3}))
	b.Set("json", StringValue(`{"a":1}`))
	b.EndSample()
	b.EndSample()
	b.Set("f", FloatValue(-1e300))
	b.EndSample()
	ds.Fields = b.Finish()
	var out bytes.Buffer
	if err := WriteManifestJSONL(&out, ds); err != nil {
		t.Fatal(err)
	}
	back, err := ParseManifest(&out, ManifestJSONL)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if ManifestDigest(back) != ManifestDigest(ds) || !back.Fields.Schema().Equal(ds.Fields.Schema()) {
		t.Fatalf("read back as %s %s, written %s %s\n%s", back.Fields.Schema(), ManifestDigest(back), ds.Fields.Schema(), ManifestDigest(ds), out.String())
	}
	b = NewFieldsBuilder()
	b.Set("f", FloatValue(math.NaN()))
	b.EndSample()
	b.EndSample()
	b.EndSample()
	ds.Fields = b.Finish()
	if err := WriteManifestJSONL(&out, ds); err == nil {
		t.Fatal("NaN written")
	}
}
