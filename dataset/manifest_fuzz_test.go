package dataset

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/longshore/longshore/storage"
)

// manifestSeeds seed the manifest fuzz targets: CSV (jsonl false) and
// JSON lines, good and bad.
var manifestSeeds = []struct {
	data  string
	jsonl bool
}{
	{"key,label\na.jpg,0\nb.jpg,1\n", false},
	{"a.jpg,cat\nb/c.jpg,dog\n\"q,uoted\",cat\n", false},
	{"\ufeffpath,class\nx,1\n", false},
	{"a,1\nb,2,3\n", false},
	{"a,\"unterminated\n", false},
	{"a,99999999999\n", false},
	{"a,1\r\n\r\nb,2\r\n\"c\r\nd\",3\r\nx,4\r", false},
	{"a,1\nb,1\na,2\nc,\n", false},
	{"a,1\nb,\na,2\n", false},
	{"a,1\n../b,1\na,2\n", false},
	{"a,\"x\"\"y\"\nb,\"multi\nline\",s,1,2\n\"c\",-1\n", false},
	{"a,1\n\"b\"x,2\n", false},
	{"a,1\nb\"c,2\n", false},
	{"\"\ufeffkey\",label\n", false},
	{"key,label,object,offset,size\na,1,s.tar,512,10\nb,1,,,\n", false},
	{"a,1,s.tar,0,0\nb,2,s.tar,-1,3\n", false},
	{"a,x,t/1.tar,0,1\nb,y,t/0.tar,0,1\nc,x\nd,x,t/1.tar,1,1\n", false},
	{"a,1\nb,2\na,3", false},
	{`{"key":"a.jpg","label":0}` + "\n" + `{"key":"b.jpg","label":1}`, true},
	{`{"key":"a","label":"cat"}` + "\n\n" + `{"key":"b","label":"dog","x":null}`, true},
	{`{"key":"a","label":1}` + "\n" + `{"key":"b","label":"dog"}`, true},
	{`{"key":"../a","label":1.5}`, true},
	{`[1,2]`, true},
	{`{"key":"s/0.tar/a","label":0,"object":"s/0.tar","offset":512,"size":9}` + "\n" + `{"key":"b","label":1}`, true},
	{`{"key":"a","label":0,"object":"s.tar","size":9}`, true},
	{`{"Key":"a","label":"c\u00e9"}` + "\n" + ` {"key" : "b\/c", "label":"d", "key":"e"} `, true},
	{`{"key":"a","label":01}`, true},
	{`{"key":"a","label":-0,"offset":null}` + "\n" + `{"key":"a","label":2}`, true},
	{"{\"key\":\"a\xff\",\"label\":1}", true},
	{`{"key":"a","label":"x"}` + "\n" + `{"key":"b","label":""}` + "\n" + `{"key":"a","label":"y"}`, true},
	{"", true},
	{"", false},
	{`{"key":"a","label":0,"caption":"x","n":1,"f":[1,2.5],"t":["a"],"m":{"z":[1,"y"]},"b":{"$base64":"AAE="},"ok":true}` + "\n" + `{"key":"b","label":0,"n":2.5,"f":[],"t":[]}`, true},
	{`{"key":"a","label":0,"n":1}` + "\n" + `{"key":"b","label":0,"n":"x"}`, true},
	{`{"key":"a","label":0,"n":1e400,"e":[[]],"s":"\u0000"}`, true},
	{`{"key":"a","label":0,"KEY":1,"Label":2,"":3}`, true},
}

// FuzzManifest feeds arbitrary bytes to ParseManifest in both formats. It
// must never panic; what it accepts must be a consistent dataset; what it
// rejects must be a ManifestError or an empty dataset; and an accepted
// dataset written back as JSON lines, by hand and by WriteManifestJSONL,
// must parse to itself.
func FuzzManifest(f *testing.F) {
	for _, seed := range manifestSeeds {
		f.Add([]byte(seed.data), seed.jsonl)
	}
	f.Fuzz(func(t *testing.T, data []byte, jsonl bool) {
		format := ManifestCSV
		if jsonl {
			format = ManifestJSONL
		}
		ds, err := ParseManifest(bytes.NewReader(data), format)
		if err != nil {
			var me *ManifestError
			if !errors.As(err, &me) && !errors.Is(err, ErrEmptyDataset) {
				t.Fatalf("error %v (%T) is neither a ManifestError nor ErrEmptyDataset", err, err)
			}
			return
		}
		checkDataset(t, ds)

		// Round trip through JSON lines.
		var buf bytes.Buffer
		integers := isIntegerClasses(ds.Classes)
		for _, s := range ds.Samples {
			var label any = ds.Classes[s.Label]
			if integers {
				label = s.Label
			}
			rec := map[string]any{"key": s.Key, "label": label}
			if s.Packed() {
				rec["object"], rec["offset"], rec["size"] = ds.ObjectOf(s), s.Offset, s.Size
			}
			line, _ := json.Marshal(rec)
			buf.Write(line)
			buf.WriteByte('\n')
		}
		again, err := ParseManifest(&buf, ManifestJSONL)
		if err != nil {
			t.Fatalf("re-encoded dataset does not parse: %v\n%s", err, buf.String())
		}
		if again.Fields = ds.Fields; !sameDataset(again, ds) {
			t.Fatalf("round trip changed the dataset:\n%+v\n%+v", ds, again)
		}
		buf.Reset()
		if err := WriteManifestJSONL(&buf, ds); err != nil {
			t.Fatalf("WriteManifestJSONL of a parsed dataset: %v", err)
		}
		again, err = ParseManifest(&buf, ManifestJSONL)
		if err != nil {
			t.Fatalf("WriteManifestJSONL's manifest does not parse: %v\n%s", err, buf.String())
		}
		if !sameDataset(again, ds) || ManifestDigest(again) != ManifestDigest(ds) || !again.Fields.Schema().Equal(ds.Fields.Schema()) {
			t.Fatalf("round trip through WriteManifestJSONL changed the dataset:\n%+v\n%+v\n%s", ds, again, buf.String())
		}
	})
}

// FuzzWebDatasetMemberFields feeds arbitrary members to
// WebDatasetMemberFields: it must never panic, and fields it gives must
// make a dataset that a manifest carries to the same digest.
func FuzzWebDatasetMemberFields(f *testing.F) {
	for _, seed := range []struct{ ext, data string }{
		{"txt", "a caption"}, {"txt", "\xff"}, {"json", `{"caption":"c","w":3,"tags":["a"],"m":{"x":null}}`},
		{"json", `[1,2]`}, {"json", `"s"`}, {"json", `null`}, {"json", `{"a":`}, {"json", `{"\u0001":1}`},
		{"npy", "\x93NUMPY"}, {"seg.png", "png"}, {"key", "x"}, {"", "x"}, {"json.x", "1"},
	} {
		f.Add(seed.ext, []byte(seed.data))
	}
	f.Fuzz(func(t *testing.T, ext string, data []byte) {
		fs, err := WebDatasetMemberFields(ext, data)
		if err != nil {
			return
		}
		b := NewFieldsBuilder()
		for _, nv := range fs {
			if err := b.Set(nv.Name, nv.Value); err != nil {
				return // a name the dataset refuses: the indexer reports it
			}
		}
		b.EndSample()
		ds := &Dataset{Classes: []string{"0"}, Samples: []Sample{{Key: "a"}}, Fields: b.Finish()}
		var buf bytes.Buffer
		if err := WriteManifestJSONL(&buf, ds); err != nil {
			t.Fatalf("fields of a member do not write: %v", err)
		}
		again, err := ParseManifest(&buf, ManifestJSONL)
		if err != nil {
			t.Fatalf("fields of a member do not read back: %v\n%s", err, buf.String())
		}
		if ManifestDigest(again) != ManifestDigest(ds) {
			t.Fatalf("digest changed through the manifest:\n%s", buf.String())
		}
	})
}

func sameDataset(a, b *Dataset) bool {
	return slices.Equal(a.Samples, b.Samples) && slices.Equal(a.Classes, b.Classes) && slices.Equal(a.Objects, b.Objects) &&
		a.Fields.Schema().Equal(b.Fields.Schema()) && sameFields(a, b)
}

// sameFields compares the datasets' fields, sample by sample.
func sameFields(a, b *Dataset) bool {
	for i := range min(a.Fields.Len(), b.Fields.Len()) {
		ra, rb := a.Fields.Row(i), b.Fields.Row(i)
		for c := range ra {
			if !ra[c].Equal(rb[c]) {
				return false
			}
		}
	}
	return a.Fields.Len() == b.Fields.Len()
}

func isIntegerClasses(classes []string) bool {
	for i, c := range classes {
		if c != strconv.Itoa(i) {
			return false
		}
	}
	return true
}

func checkDataset(t *testing.T, ds *Dataset) {
	t.Helper()
	if len(ds.Samples) == 0 {
		t.Fatal("accepted a manifest with no samples")
	}
	if len(ds.Classes) == 0 || len(ds.Classes) > MaxClasses {
		t.Fatalf("%d classes", len(ds.Classes))
	}
	if !isIntegerClasses(ds.Classes) && !slices.IsSorted(ds.Classes) {
		t.Fatalf("class names not sorted: %q", ds.Classes)
	}
	if len(slices.Compact(slices.Clone(ds.Classes))) != len(ds.Classes) {
		t.Fatalf("duplicate class names: %q", ds.Classes)
	}
	keys := map[string]bool{}
	used := 0 // objects used so far
	for i, s := range ds.Samples {
		if err := storage.CheckKey(s.Key); err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		if keys[s.Key] {
			t.Fatalf("sample %d: duplicate key %q", i, s.Key)
		}
		keys[s.Key] = true
		if s.Label < 0 || int(s.Label) >= len(ds.Classes) {
			t.Fatalf("sample %d: label %d outside %d classes", i, s.Label, len(ds.Classes))
		}
		if s.Packed() {
			// Objects are listed in order of first use.
			if s.Object < 1 || int(s.Object) > used+1 || int(s.Object) > len(ds.Objects) {
				t.Fatalf("sample %d: object ID %d after %d objects used, of %d", i, s.Object, used, len(ds.Objects))
			}
			used = max(used, int(s.Object))
			if err := storage.CheckKey(ds.ObjectOf(s)); err != nil || s.Offset < 0 || s.Size < 0 || s.Offset+s.Size < 0 {
				t.Fatalf("sample %d: accepted location %q [%d,+%d): %v", i, ds.ObjectOf(s), s.Offset, s.Size, err)
			}
		} else if s.Object != NoObject || s.Offset != 0 || s.Size != 0 {
			t.Fatalf("sample %d: a plain sample with object %d offset %d size %d", i, s.Object, s.Offset, s.Size)
		}
	}
	if used != len(ds.Objects) {
		t.Fatalf("%d objects, %d used", len(ds.Objects), used)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(ds.Objects)))) != len(ds.Objects) {
		t.Fatalf("an object listed twice: %q", ds.Objects)
	}
}
