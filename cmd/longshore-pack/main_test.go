package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/dataset/datasettest"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/miniotest"
	"github.com/longshore/longshore/storage/s3"
	"github.com/longshore/longshore/storage/stores"
)

// realImages are the decoder's test files: real JPEG, PNG and WebP bytes.
func realImages(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, pat := range []string{"*.jpg", "*.png", "*.webp"} {
		files, _ := filepath.Glob(filepath.Join("..", "..", "decode", "testdata", pat))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out[filepath.Base(f)] = b
		}
	}
	if len(out) < 5 {
		t.Fatalf("found %d images under decode/testdata", len(out))
	}
	return out
}

// imageFolder writes the real images into three classes, plus generated
// files with a long name and a non-ASCII one, and returns the root and
// every key's bytes.
func imageFolder(t *testing.T) (string, map[string][]byte) {
	t.Helper()
	root := t.TempDir()
	want := map[string][]byte{}
	put := func(key string, data []byte) {
		p := filepath.Join(root, filepath.FromSlash(key))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		want[key] = data
	}
	names := make([]string, 0)
	imgs := realImages(t)
	for n := range imgs {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, n := range names {
		put(fmt.Sprintf("class%d/%s", i%3, n), imgs[n])
	}
	put("class0/"+strings.Repeat("long-name-", 15)+".jpg", bytes.Repeat([]byte{0xd8}, 1000))
	put("class2/sub/ünïcødé.png", []byte("not really a png, but bytes are bytes"))
	return root, want
}

func runPack(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String(), errb.String(), code
}

// readBack discovers the packed dataset at loc and reads every sample
// through a PackedStore, returning each sample's bytes by its original key
// (the member name) and the dataset.
func readBack(t *testing.T, loc string, sopts s3.Options) (map[string][]byte, *dataset.Dataset) {
	t.Helper()
	ctx := context.Background()
	s, err := stores.Open(ctx, loc, sopts)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := dataset.Discover(ctx, s, dataset.DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := dataset.NewPackedStore(s, ds, dataset.PackedConfig{Block: 4, CacheBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	checkIndex(t, s, ds)
	got := map[string][]byte{}
	for _, smp := range ds.Samples {
		if !smp.Packed() || !strings.HasPrefix(smp.Key, ds.ObjectOf(smp)+"/") {
			t.Fatalf("sample %+v: not packed under its object", smp)
		}
		b, err := ps.Get(ctx, smp.Key, nil)
		if err != nil {
			t.Fatal(err)
		}
		got[strings.TrimPrefix(smp.Key, ds.ObjectOf(smp)+"/")] = b
	}
	return got, ds
}

// checkIndex: the manifest's index, written beside it, describes ds: its
// digest, and every sample read through it.
func checkIndex(t *testing.T, s storage.Store, ds *dataset.Dataset) {
	t.Helper()
	ctx := context.Background()
	m, err := dataset.OpenIndexedManifest(ctx, s, dataset.ManifestJSONLName, dataset.IndexedConfig{})
	if err != nil {
		t.Fatalf("the manifest's index: %v", err)
	}
	defer m.Close()
	if m.Digest() != dataset.ManifestDigest(ds) || m.Len() != int64(len(ds.Samples)) || m.Index().Layout() != "packed" {
		t.Fatalf("index: %d samples, digest %s, layout %s; the manifest %d, %s", m.Len(), m.Digest(), m.Index().Layout(), len(ds.Samples), dataset.ManifestDigest(ds))
	}
	for i, want := range ds.Samples {
		got, object, err := m.Sample(ctx, int64(i))
		if err != nil || got.Key != want.Key || got.Label != want.Label || got.Offset != want.Offset || got.Size != want.Size || object != ds.ObjectOf(want) {
			t.Fatalf("sample %d through the index: %+v in %s (%v), want %+v in %s", i, got, object, err, want, ds.ObjectOf(want))
		}
	}
}

func sameBytes(t *testing.T, got, want map[string][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d samples read back, want %d", len(got), len(want))
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || !bytes.Equal(g, w) {
			t.Errorf("%s: read back %d bytes (present %v), want the original %d", k, len(g), ok, len(w))
		}
	}
}

func discoverDir(t *testing.T, dir string) *dataset.Dataset {
	t.Helper()
	s, err := storage.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := dataset.Discover(context.Background(), s, dataset.DiscoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestPackImageFolder packs a small ImageFolder of real images into shards
// of 4 and reads every sample back, byte for byte, through Discover and
// PackedStore; classes and labels are the source's, in dataset order
// (--shuffle=false; TestPackManifestSources covers the default shuffle).
func TestPackImageFolder(t *testing.T) {
	src, want := imageFolder(t)
	dst := filepath.Join(t.TempDir(), "packed") // created by pack
	out, errs, code := runPack(t, "--dataset", src, "--out", dst, "--per-shard", "4", "--shuffle=false")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(out, fmt.Sprintf("packed %d samples", len(want))) {
		t.Errorf("stdout: %s", out)
	}
	got, ds := readBack(t, dst, s3.DefaultOptions())
	sameBytes(t, got, want)

	srcDS := discoverDir(t, src)
	if !slices.Equal(ds.Classes, srcDS.Classes) {
		t.Errorf("classes %q, source %q", ds.Classes, srcDS.Classes)
	}
	for i, s := range ds.Samples {
		orig := srcDS.Samples[i]
		if s.Key != fmt.Sprintf("shards/shard-%06d.tar/%s", i/4, orig.Key) || s.Label != orig.Label {
			t.Errorf("sample %d: %s label %d, want source's %s label %d in shard %d", i, s.Key, s.Label, orig.Key, orig.Label, i/4)
		}
	}

	// The shards are standard tars: GNU tar lists them.
	if _, err := exec.LookPath("tar"); err == nil {
		b, err := exec.Command("tar", "-tf", filepath.Join(dst, "shards", "shard-000000.tar")).Output()
		if err != nil {
			t.Fatalf("tar -tf: %v", err)
		}
		var first []string
		for _, s := range srcDS.Samples[:4] {
			first = append(first, s.Key)
		}
		if got := strings.Fields(string(b)); !slices.Equal(got, first) {
			t.Errorf("tar -tf lists %q, want %q", got, first)
		}
	}

	// A second run refuses to write over the first, unless forced.
	_, errs, code = runPack(t, "--dataset", src, "--out", dst)
	if code != 1 || !strings.Contains(errs, "already holds manifest.jsonl") || !strings.Contains(errs, "--force") {
		t.Errorf("second run: exit %d, %s", code, errs)
	}
	if _, errs, code = runPack(t, "--dataset", src, "--out", dst, "--force", "--per-shard", "100"); code != 0 {
		t.Fatalf("forced run: exit %d, %s", code, errs)
	}
	got, ds = readBack(t, dst, s3.DefaultOptions())
	sameBytes(t, got, want)
	if last := ds.ObjectOf(ds.Samples[len(ds.Samples)-1]); last != "shards/shard-000000.tar" {
		t.Errorf("--per-shard 100: last sample in %s", last)
	}
}

// TestPackManifestSources: a manifest with class names, one with integer
// labels (classes "0".."max"), a packed dataset packed again, and
// the default shuffle: each keeps the source's classes and every sample.
func TestPackManifestSources(t *testing.T) {
	src, want := imageFolder(t)
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var csv, jsonl strings.Builder
	for i, k := range keys {
		fmt.Fprintf(&csv, "%s,%s\n", k, []string{"zebra", "ant", "moth"}[i%3])
		fmt.Fprintf(&jsonl, "{\"key\":%q,\"label\":%d}\n", k, 2*(i%4)) // labels 0,2,4,6: classes "0".."6"
	}
	os.WriteFile(filepath.Join(src, "names.csv"), []byte(csv.String()), 0o644)
	os.WriteFile(filepath.Join(src, "ints.jsonl"), []byte(jsonl.String()), 0o644)
	for _, tc := range []struct {
		name    string
		args    []string
		classes []string
	}{
		{"names", []string{"--manifest", "names.csv", "--shuffle=false"}, []string{"ant", "moth", "zebra"}},
		{"integers", []string{"--manifest", "ints.jsonl", "--shuffle=false"}, []string{"0", "1", "2", "3", "4", "5", "6"}},
		{"shuffled", []string{"--manifest", "names.csv", "--seed", "7"}, []string{"ant", "moth", "zebra"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := t.TempDir()
			args := append([]string{"--dataset", src, "--out", dst, "--per-shard", "3"}, tc.args...)
			if out, errs, code := runPack(t, args...); code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out, errs)
			}
			got, ds := readBack(t, dst, s3.DefaultOptions())
			sameBytes(t, got, want)
			if !slices.Equal(ds.Classes, tc.classes) {
				t.Errorf("classes %q, want %q", ds.Classes, tc.classes)
			}
			order := make([]string, len(ds.Samples))
			for i, s := range ds.Samples {
				order[i] = strings.TrimPrefix(s.Key, ds.ObjectOf(s)+"/")
			}
			if shuffled := !slices.Equal(order, keys); shuffled != (tc.name == "shuffled") {
				t.Errorf("order %q (shuffled %v)", order, shuffled)
			}

			// Packing the packed dataset again (through a PackedStore,
			// samples alone since the repack is shuffled) keeps every sample.
			again := t.TempDir()
			if out, errs, code := runPack(t, "--dataset", dst, "--out", again, "--per-shard", "5"); code != 0 {
				t.Fatalf("repack: exit %d\n%s%s", code, out, errs)
			}
			got2, ds2 := readBack(t, again, s3.DefaultOptions())
			if !slices.Equal(ds2.Classes, ds.Classes) || len(got2) != len(want) {
				t.Errorf("repacked: classes %q, %d samples", ds2.Classes, len(got2))
			}
			for _, s := range ds2.Samples {
				inner := strings.TrimPrefix(s.Key, ds2.ObjectOf(s)+"/") // shards/shard-N.tar/<original key>
				_, orig, _ := strings.Cut(strings.TrimPrefix(inner, "shards/"), "/")
				if !bytes.Equal(got2[inner], want[orig]) {
					t.Errorf("repacked %s: bytes differ from %s", s.Key, orig)
				}
			}
		})
	}
}

// TestPackS3 packs a directory into a MinIO bucket and reads it back over
// S3, then indexes tars stored in a bucket.
func TestPackS3(t *testing.T) {
	srv := miniotest.Start(t)
	opts := srv.Options()
	t.Setenv("AWS_ENDPOINT_URL", srv.Endpoint)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	src, want := imageFolder(t)
	url := srv.URL(srv.NewBucket(t), "packed/imagenet")
	if out, errs, code := runPack(t, "--dataset", src, "--out", url, "--per-shard", "4"); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	got, _ := readBack(t, url, opts)
	sameBytes(t, got, want)

	// Index WebDataset tars in a bucket.
	bucketURL := srv.URL(srv.NewBucket(t), "wds")
	s, err := stores.Open(context.Background(), bucketURL, opts)
	if err != nil {
		t.Fatal(err)
	}
	tars, wantWDS := webDataset(t)
	for k, b := range tars {
		if _, err := s.Put(context.Background(), k, b, storage.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	if out, errs, code := runPack(t, "--index", bucketURL); code != 0 {
		t.Fatalf("index: exit %d\n%s%s", code, out, errs)
	}
	gotWDS, _ := readBack(t, bucketURL, opts)
	checkWDS(t, gotWDS, wantWDS)
}

type wdsSample struct {
	data  []byte
	label int32
}

// webDataset makes two WebDataset-style tars (one in a subdirectory):
// per sample an image and a .cls, plus a .json sidecar and a metadata
// member that belong to no sample. It returns the tars by key and the
// samples by "<tar key>/<image member>".
func webDataset(t *testing.T) (map[string][]byte, map[string]wdsSample) {
	t.Helper()
	imgs := realImages(t)
	var names []string
	for n := range imgs {
		names = append(names, n)
	}
	sort.Strings(names)
	tars := map[string][]byte{}
	want := map[string]wdsSample{}
	for ti, tarKey := range []string{"train-000000.tar", "more/train-000001.tar"} {
		var members []string
		var datas [][]byte
		add := func(name string, data []byte) { members, datas = append(members, name), append(datas, data) }
		add("./README", []byte("no extension: not a sample"))
		for i, n := range names {
			if i%2 != ti {
				continue
			}
			stem := fmt.Sprintf("n%02d/s%03d", i%2, i)
			ext := strings.TrimPrefix(filepath.Ext(n), ".")
			label := int32(i % 5)
			add(stem+".cls", []byte(fmt.Sprintf("%d\n", label))) // label before the image, as some writers do
			add(stem+"."+ext, imgs[n])
			add(stem+".json", []byte(`{"source":"`+n+`"}`))
			want[tarKey+"/"+stem+"."+ext] = wdsSample{imgs[n], label}
		}
		var buf bytes.Buffer
		if _, err := dataset.WriteTarShard(&buf, members, datas); err != nil {
			t.Fatal(err)
		}
		tars[tarKey] = buf.Bytes()
	}
	return tars, want
}

func checkWDS(t *testing.T, got map[string][]byte, want map[string]wdsSample) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d samples, want %d", len(got), len(want))
	}
	for k, w := range want {
		_, member, _ := strings.Cut(k, ".tar/")
		if !bytes.Equal(got[member], w.data) {
			t.Errorf("%s: bytes differ", k)
		}
	}
}

func TestIndexWebDataset(t *testing.T) {
	dir := t.TempDir()
	tars, want := webDataset(t)
	for k, b := range tars {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, k)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, k), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, errs, code := runPack(t, "--index", dir)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	got, ds := readBack(t, dir, s3.DefaultOptions())
	checkWDS(t, got, want)
	for _, s := range ds.Samples {
		if w := want[s.Key]; s.Label != w.label {
			t.Errorf("%s: label %d, want %d", s.Key, s.Label, w.label)
		}
	}
	if !strings.Contains(out, fmt.Sprintf("indexed %d samples", len(want))) {
		t.Errorf("stdout: %s", out)
	}
	// Again: the manifest exists; --force rewrites it.
	if _, errs, code := runPack(t, "--index", dir); code != 1 || !strings.Contains(errs, "--force") {
		t.Errorf("second index: exit %d %s", code, errs)
	}
	if _, errs, code := runPack(t, "--index", dir, "--force"); code != 0 {
		t.Errorf("forced index: exit %d %s", code, errs)
	}

	// A tar made by GNU tar, with ./ in front of every name.
	if _, err := exec.LookPath("tar"); err == nil {
		gnu := t.TempDir()
		files := t.TempDir()
		os.WriteFile(filepath.Join(files, "a.jpg"), []byte("jpeg bytes"), 0o644)
		os.WriteFile(filepath.Join(files, "a.cls"), []byte("3"), 0o644)
		if b, err := exec.Command("tar", "-C", files, "-cf", filepath.Join(gnu, "x.tar"), ".").CombinedOutput(); err != nil {
			t.Fatalf("tar: %v %s", err, b)
		}
		if out, errs, code := runPack(t, "--index", gnu); code != 0 {
			t.Fatalf("GNU tar: exit %d\n%s%s", code, out, errs)
		}
		got, ds := readBack(t, gnu, s3.DefaultOptions())
		if string(got["a.jpg"]) != "jpeg bytes" || ds.Samples[0].Label != 3 || ds.Samples[0].Key != "x.tar/a.jpg" {
			t.Errorf("GNU tar: %q, %+v", got, ds.Samples)
		}
	}
}

func TestIndexErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members [][2]string
		msg     string
	}{
		{"NoLabel", [][2]string{{"a.jpg", "x"}, {"b.jpg", "y"}, {"b.cls", "1"}}, `sample "a" (a.jpg) has no .cls member`},
		{"TwoImages", [][2]string{{"a.jpg", "x"}, {"a.png", "y"}, {"a.cls", "1"}}, "2 image members"},
		{"BadLabel", [][2]string{{"a.jpg", "x"}, {"a.cls", "cat"}}, `holds "cat"`},
		{"NegativeLabel", [][2]string{{"a.jpg", "x"}, {"a.cls", "-1"}}, "want an integer label"},
		{"LabelOnly", [][2]string{{"a.cls", "1"}}, "no image member"},
		{"Twice", [][2]string{{"a.jpg", "x"}, {"a.cls", "1"}, {"a.jpg", "z"}}, "appears twice"},
		{"Tab", [][2]string{{"a\tb.jpg", "x"}, {"a\tb.cls", "1"}}, "tab or newline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, m := range tc.members {
				tw.WriteHeader(&tar.Header{Name: m[0], Mode: 0o644, Size: int64(len(m[1])), Typeflag: tar.TypeReg})
				tw.Write([]byte(m[1]))
			}
			tw.Close()
			os.WriteFile(filepath.Join(dir, "shard.tar"), buf.Bytes(), 0o644)
			_, errs, code := runPack(t, "--index", dir)
			if code != 1 || !strings.Contains(errs, tc.msg) || !strings.Contains(errs, "shard.tar") {
				t.Errorf("exit %d, stderr %q; want 1 and %q naming the tar", code, errs, tc.msg)
			}
			if _, err := os.Stat(filepath.Join(dir, "manifest.jsonl")); err == nil {
				t.Error("a manifest was written despite the error")
			}
		})
	}
	// No tars at all; a truncated tar.
	if _, errs, code := runPack(t, "--index", t.TempDir()); code != 1 || !strings.Contains(errs, "no *.tar") {
		t.Errorf("empty: exit %d %s", code, errs)
	}
	dir := t.TempDir()
	tars, _ := webDataset(t)
	os.WriteFile(filepath.Join(dir, "cut.tar"), tars["train-000000.tar"][:3000], 0o644)
	if _, errs, code := runPack(t, "--index", dir); code != 1 || !strings.Contains(errs, "unusable tar") {
		t.Errorf("truncated: exit %d %s", code, errs)
	}
}

func TestFlags(t *testing.T) {
	out, errs, code := runPack(t, "--help")
	if code != 0 || !strings.Contains(errs, "--index SRC") || !strings.Contains(errs, "-per-shard") {
		t.Errorf("--help: exit %d\n%s%s", code, out, errs)
	}
	for _, tc := range []struct {
		args []string
		msgs []string
	}{
		{nil, []string{"want --dataset SRC --out DST"}},
		{[]string{"--dataset", "x"}, []string{"--out DST is required"}},
		{[]string{"--out", "x", "--per-shard", "0", "--seed", "3", "--shuffle=false"}, []string{"--dataset SRC is required", "--per-shard 0", "--seed with --shuffle=false"}},
		{[]string{"--index", "x", "--out", "y", "--per-shard", "9"}, []string{"--out does not go with --index", "--per-shard does not go"}},
		{[]string{"--dataset", "x", "--out", "y", "extra"}, []string{"unexpected arguments: extra"}},
	} {
		_, errs, code := runPack(t, tc.args...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2", tc.args, code)
		}
		for _, m := range tc.msgs {
			if !strings.Contains(errs, m) {
				t.Errorf("%q: stderr lacks %q:\n%s", tc.args, m, errs)
			}
		}
	}
	// Runtime errors: a missing source, the source as destination.
	dir := t.TempDir()
	if _, errs, code := runPack(t, "--dataset", filepath.Join(dir, "nope"), "--out", filepath.Join(dir, "out")); code != 1 || !strings.Contains(errs, "not found") {
		t.Errorf("missing source: exit %d %s", code, errs)
	}
	if _, errs, code := runPack(t, "--dataset", dir, "--out", dir); code != 1 || !strings.Contains(errs, "is the dataset itself") {
		t.Errorf("same place: exit %d %s", code, errs)
	}
}

// TestPackEmptySample: an empty image file is packed like any sample (the
// node's decoder will count it as failed); the manifest holds it with
// size 0 and it reads back empty.
func TestPackEmptySample(t *testing.T) {
	src, want := imageFolder(t)
	empty := "class0/empty.jpg"
	if err := os.WriteFile(filepath.Join(src, filepath.FromSlash(empty)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	want[empty] = nil
	dst := t.TempDir()
	if out, errs, code := runPack(t, "--dataset", src, "--out", dst, "--per-shard", "4"); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	got, _ := readBack(t, dst, s3.DefaultOptions())
	sameBytes(t, got, want)
}

// TestPackForceFailsClean: a --force run over an earlier packing that
// fails midway (a source object vanished) leaves no manifest, never the
// old manifest over shards the new run rewrote.
func TestPackForceFailsClean(t *testing.T) {
	src, want := imageFolder(t)
	dst := t.TempDir()
	if out, errs, code := runPack(t, "--dataset", src, "--out", dst, "--per-shard", "2"); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	// A manifest naming every sample, the last of which is gone.
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var csv strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&csv, "%s,%s\n", k, path.Dir(k))
	}
	os.WriteFile(filepath.Join(src, "m.csv"), []byte(csv.String()), 0o644)
	os.Remove(filepath.Join(src, filepath.FromSlash(keys[len(keys)-1])))
	_, errs, code := runPack(t, "--dataset", src, "--manifest", "m.csv", "--out", dst, "--per-shard", "2", "--force", "--seed", "5")
	if code == 0 {
		t.Fatal("pack of a dataset with a missing object succeeded")
	}
	if _, err := os.Stat(filepath.Join(dst, dataset.ManifestJSONLName)); !os.IsNotExist(err) {
		t.Errorf("after a failed --force run: %s is there (%v); stderr: %s", dataset.ManifestJSONLName, err, errs)
	}
}

// TestPackMedia: --media video packs an ImageFolder's clips (what the
// image default would skip) and --index with --media video finds clip
// members in a tar; byte for byte.
func TestPackMedia(t *testing.T) {
	root := t.TempDir()
	want := map[string][]byte{}
	for i, src := range []string{"cfr_h264.mp4", "vp9.webm", "vfr_h264.mkv"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "media", src))
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("c%d/clip%d%s", i%2, i, filepath.Ext(src))
		os.MkdirAll(filepath.Join(root, filepath.Dir(key)), 0o755)
		if err := os.WriteFile(filepath.Join(root, key), data, 0o644); err != nil {
			t.Fatal(err)
		}
		want[key] = data
	}
	os.WriteFile(filepath.Join(root, "c0", "still.jpg"), []byte("an image, not a clip"), 0o644)
	if _, errs, code := runPack(t, "--dataset", root, "--out", filepath.Join(t.TempDir(), "x"), "--per-shard", "2"); code == 0 {
		t.Fatalf("packing clips as images found samples (want none): %s", errs)
	}
	out := filepath.Join(t.TempDir(), "packed")
	if _, errs, code := runPack(t, "--dataset", root, "--out", out, "--per-shard", "2", "--media", "video"); code != 0 {
		t.Fatalf("pack --media video exited %d: %s", code, errs)
	}
	got, ds := readBack(t, out, s3.DefaultOptions())
	if len(ds.Samples) != len(want) {
		t.Fatalf("%d samples packed, want the %d clips", len(ds.Samples), len(want))
	}
	for k, w := range want {
		if !bytes.Equal(got[k], w) {
			t.Errorf("%s: %d bytes back, want %d", k, len(got[k]), len(w))
		}
	}
	// A WebDataset tar of clips, indexed in place by its clip members.
	wds := t.TempDir()
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for i, k := range []string{"c0/clip0.mp4", "c1/clip1.webm"} {
		for _, m := range []struct {
			name string
			data []byte
		}{{fmt.Sprintf("s%d%s", i, filepath.Ext(k)), want[k]}, {fmt.Sprintf("s%d.cls", i), []byte(fmt.Sprint(i))}} {
			tw.WriteHeader(&tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.data))})
			tw.Write(m.data)
		}
	}
	tw.Close()
	os.WriteFile(filepath.Join(wds, "a.tar"), tb.Bytes(), 0o644)
	if _, errs, code := runPack(t, "--index", wds); code == 0 {
		t.Fatalf("indexing clips as images found samples (want none): %s", errs)
	}
	if _, errs, code := runPack(t, "--index", wds, "--media", "video"); code != 0 {
		t.Fatalf("--index --media video exited %d: %s", code, errs)
	}
	s, _ := storage.NewDirStore(wds)
	idx, err := dataset.Discover(context.Background(), s, dataset.DiscoverOptions{})
	if err != nil || len(idx.Samples) != 2 {
		t.Fatalf("indexed %v (%v), want 2 clips", idx, err)
	}
}

// Every member of a WebDataset sample beside its image becomes a field
// of the sample: .txt a string, .json's members "json.<name>", others
// bytes by their extension; without .cls members every label is 0.
func TestIndexWebDatasetFields(t *testing.T) {
	dir := t.TempDir()
	var names []string
	var datas [][]byte
	for i := range 4 {
		stem := fmt.Sprintf("s%03d", i)
		names = append(names, stem+".jpg")
		datas = append(datas, []byte("image of "+stem))
		if i != 2 { // one sample without a caption
			names = append(names, stem+".txt")
			datas = append(datas, []byte("a caption of "+stem))
		}
		names = append(names, stem+".json", stem+".npy")
		datas = append(datas, []byte(fmt.Sprintf(`{"key":%q,"width":%d,"tags":["a","b"],"extra":{"x":1}}`, stem, 10*i)), []byte{byte(i), 0})
	}
	var buf bytes.Buffer
	if _, err := dataset.WriteTarShard(&buf, names, datas); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "shard.tar"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errs, code := runPack(t, "--index", dir); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	_, ds := readBack(t, dir, s3.DefaultOptions())
	if got, want := ds.Fields.Schema().String(), "json.extra:string,json.key:string,json.tags:list<string>,json.width:int,npy:bytes,txt:string"; got != want {
		t.Fatalf("schema %s, want %s", got, want)
	}
	for i, s := range ds.Samples {
		stem := fmt.Sprintf("s%03d", i)
		if s.Key != "shard.tar/"+stem+".jpg" || s.Label != 0 {
			t.Fatalf("sample %d: %+v", i, s)
		}
		get := func(name string) dataset.Value { v, _ := ds.Fields.Get(i, name); return v }
		if v := get("txt"); (i == 2) == v.Present() || (i != 2 && v.Str != "a caption of "+stem) {
			t.Errorf("%s: txt %v", stem, v)
		}
		if get("json.key").Str != stem || get("json.width").Int != int64(10*i) || get("json.extra").Str != `{"x":1}` ||
			!bytes.Equal(get("npy").Bytes, []byte{byte(i), 0}) || len(get("json.tags").Strings) != 2 {
			t.Errorf("%s: %v", stem, ds.Fields.Row(i))
		}
	}
}

// TestPackKeepsFields: the fields of a JSON-lines or CSV manifest, and
// a Parquet dataset's columns, are copied into the packed manifest,
// every sample's with it, shuffled or not; a Parquet split with
// unlabelled samples (label -1) is refused before anything is written.
func TestPackKeepsFields(t *testing.T) {
	src, want := imageFolder(t)
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var csv, jsonl strings.Builder
	csv.WriteString("key,label,caption,width:int,score:float\n")
	for i, k := range keys {
		fmt.Fprintf(&csv, "%s,%d,\"caption, %d\",%d,%g\n", k, i%3, i, 10+i, float64(i)/4)
		tags := `["a","b"]`
		if i%2 == 1 {
			tags = `[]`
		}
		caption := fmt.Sprintf(`,"caption":"a caption of %d"`, i)
		if i%3 == 2 {
			caption = "" // absent for this sample
		}
		fmt.Fprintf(&jsonl, "{\"key\":%q,\"label\":%d%s,\"width\":%d,\"tags\":%s,\"meta\":{\"src\":\"s%d\"}}\n", k, i%3, caption, 10+i, tags, i)
	}
	os.WriteFile(filepath.Join(src, "fields.csv"), []byte(csv.String()), 0o644)
	os.WriteFile(filepath.Join(src, "fields.jsonl"), []byte(jsonl.String()), 0o644)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"csv", []string{"--manifest", "fields.csv", "--shuffle=false"}},
		{"jsonl", []string{"--manifest", "fields.jsonl", "--shuffle=false"}},
		{"jsonlShuffled", []string{"--manifest", "fields.jsonl", "--seed", "3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := storage.NewDirStore(src)
			if err != nil {
				t.Fatal(err)
			}
			man := tc.args[1]
			srcDS, err := dataset.Discover(context.Background(), s, dataset.DiscoverOptions{Layout: dataset.LayoutManifest, Manifest: man})
			if err != nil {
				t.Fatal(err)
			}
			if srcDS.Fields.Schema().String() == "" {
				t.Fatalf("the source manifest %s has no fields", man)
			}
			dst := t.TempDir()
			if out, errs, code := runPack(t, append([]string{"--dataset", src, "--out", dst, "--per-shard", "3"}, tc.args...)...); code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out, errs)
			}
			_, ds := readBack(t, dst, s3.DefaultOptions())
			checkSameFields(t, srcDS, ds)
		})
	}
}

// TestPackParquet packs a Parquet dataset (datasettest's Hugging Face
// layout): its images byte for byte, its labels and classes, and its
// columns as fields; a split with unlabelled samples (label -1, which a
// manifest cannot hold) is refused before anything is written.
func TestPackParquet(t *testing.T) {
	src := t.TempDir()
	var images [][]byte
	for i := range 17 {
		images = append(images, datasettest.JPEG(t, i))
	}
	files, rows := datasettest.HFDataset(t, images, nil, 7, 3)
	for _, f := range files {
		p := filepath.Join(src, filepath.FromSlash(f.Key))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srcDS := discoverDir(t, src)
	dst := t.TempDir()
	if out, errs, code := runPack(t, "--dataset", src, "--out", dst, "--per-shard", "4", "--seed", "2"); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	got, ds := readBack(t, dst, s3.DefaultOptions())
	if !slices.Equal(ds.Classes, datasettest.HFClasses) {
		t.Errorf("classes %q, want %q", ds.Classes, datasettest.HFClasses)
	}
	for i, smp := range srcDS.Samples {
		if !bytes.Equal(got[smp.Key], images[i]) {
			t.Errorf("%s: %d bytes read back, want the %d written", smp.Key, len(got[smp.Key]), len(images[i]))
		}
	}
	checkSameFields(t, srcDS, ds)
	if v, _ := ds.Fields.Get(0, "caption"); v.Str == "" || len(rows) != 17 {
		t.Errorf("caption of the first packed sample: %v", v)
	}

	// Unlabelled samples: refused, and nothing written.
	type unlabelled struct {
		Image []byte `parquet:"image"`
		Label int64  `parquet:"label"`
	}
	un := t.TempDir()
	os.WriteFile(filepath.Join(un, "test.parquet"), datasettest.WriteParquet(t, []unlabelled{{images[0], 1}, {images[1], dataset.NoLabel}}, 2), 0o644)
	dst = t.TempDir()
	_, errs, code := runPack(t, "--dataset", un, "--out", dst)
	if code != 1 || !strings.Contains(errs, "label -1") {
		t.Errorf("packing unlabelled samples: exit %d, %s", code, errs)
	}
	if ents, _ := os.ReadDir(dst); len(ents) != 0 {
		t.Errorf("a refused pack wrote %d entries to --out", len(ents))
	}
}

// TestIndexCompressedRefused: --index of .tar.gz shards is refused
// (a manifest's sample is a byte range of its shard), nothing written.
func TestIndexCompressedRefused(t *testing.T) {
	dir := t.TempDir()
	var b bytes.Buffer
	if _, err := dataset.WriteTarShard(&b, []string{"a.jpg", "a.cls"}, [][]byte{[]byte("jpeg"), []byte("1")}); err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(b.Bytes())
	zw.Close()
	os.WriteFile(filepath.Join(dir, "s.tar.gz"), z.Bytes(), 0o644)
	_, errs, code := runPack(t, "--index", dir)
	if code != 1 || !strings.Contains(errs, "compressed") {
		t.Errorf("exit %d, %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, dataset.ManifestJSONLName)); err == nil {
		t.Error("a manifest was written")
	}
}

// checkSameFields: every sample of the packed dataset ds has the fields
// (and label) of the source's sample it packs (its key after the shard's).
func checkSameFields(t *testing.T, src, ds *dataset.Dataset) {
	t.Helper()
	if got, want := ds.Fields.Schema().String(), src.Fields.Schema().String(); got != want {
		t.Fatalf("packed fields %s, the source's %s", got, want)
	}
	bySrc := map[string]int{}
	for i, s := range src.Samples {
		bySrc[s.Key] = i
	}
	schema := src.Fields.Schema()
	for i, s := range ds.Samples {
		j, ok := bySrc[strings.TrimPrefix(s.Key, ds.ObjectOf(s)+"/")]
		if !ok {
			t.Fatalf("packed sample %s is none of the source's", s.Key)
		}
		if s.Label != src.Samples[j].Label {
			t.Errorf("%s: label %d, the source's %d", s.Key, s.Label, src.Samples[j].Label)
		}
		for c, f := range schema {
			got, want := ds.Fields.Value(i, c), src.Fields.Value(j, c)
			if got.String() != want.String() || got.Present() != want.Present() {
				t.Errorf("%s: field %s = %v, the source's %v", s.Key, f.Name, got, want)
			}
		}
	}
}
