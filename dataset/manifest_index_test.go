package dataset

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/longshore/longshore/internal/offheap"
	"github.com/longshore/longshore/storage"
)

// checkIndexed holds ScanManifest and IndexedManifest to Discover: for a
// manifest Discover reads, the same count, classes and digest, and every
// sample looked up lazily equal to the Dataset's (its object by key); for
// one it refuses, a refusal.
func checkIndexed(t *testing.T, data []byte, key string, every int, cache int64) {
	t.Helper()
	ctx := context.Background()
	s := storage.NewMemStore("idx")
	if _, err := s.Put(ctx, key, data, storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	want, wantErr := Discover(ctx, s, DiscoverOptions{Manifest: key})
	x, err := ScanManifest(ctx, s, key, ScanOptions{Every: every, CheckDuplicates: true})
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("manifest %q (every %d): scan error %v, Discover error %v", data, every, err, wantErr)
	}
	if err != nil {
		return
	}
	if x.Samples != int64(len(want.Samples)) || x.Digest != ManifestDigest(want) || !slices.Equal(x.Classes, want.Classes) {
		t.Fatalf("manifest %q (every %d): scan %d samples %s classes %q, Discover %d %s %q",
			data, every, x.Samples, x.Digest, x.Classes, len(want.Samples), ManifestDigest(want), want.Classes)
	}
	if (x.Layout() == "plain") == want.Packed() {
		t.Fatalf("manifest %q: layout %s, Discover's packed %v", data, x.Layout(), want.Packed())
	}
	enc, err := x.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, IndexKey(key), enc, storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	mapped := offheap.Mapped()
	m, err := OpenIndexedManifest(ctx, s, key, IndexedConfig{CacheBytes: cache})
	if err != nil {
		t.Fatalf("manifest %q: open indexed: %v", data, err)
	}
	closed := false
	defer func() {
		if !closed {
			m.Close()
		}
	}()
	if m.Digest() != ManifestDigest(want) || m.Len() != int64(len(want.Samples)) {
		t.Fatalf("indexed: %d samples %s", m.Len(), m.Digest())
	}
	// In a shuffled order, so that pieces are read, evicted and read again.
	order := rand.Perm(len(want.Samples))
	for _, i := range order {
		m.Prefetch(int64(i), int64(i)+3)
		got, object, err := m.Sample(ctx, int64(i))
		if err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		w := want.Samples[i]
		if got.Key != w.Key || got.Label != w.Label || got.Offset != w.Offset || got.Size != w.Size || got.Packed() != w.Packed() || object != want.ObjectOf(w) {
			t.Fatalf("manifest %q: sample %d: got %+v in %q, want %+v in %q", data, i, got, object, w, want.ObjectOf(w))
		}
		fields, err := CatalogFields(ctx, m, int64(i))
		if err != nil {
			t.Fatalf("sample %d: fields: %v", i, err)
		}
		if !m.Schema().Equal(want.Fields.Schema()) || !slices.EqualFunc(fields, want.Fields.Row(i), Value.Equal) {
			t.Fatalf("manifest %q: sample %d: fields %v (%v), want %v (%v)", data, i, fields, m.Schema(), want.Fields.Row(i), want.Fields.Schema())
		}
	}
	// The bound, or when it is smaller: the piece served and the
	// prefetches (at most 4) in flight.
	if st := m.Stats(); cache > 0 && st.CacheBytes > cache+5*maxPieceCost(m) {
		t.Fatalf("cache holds %d bytes, bound %d", st.CacheBytes, cache)
	}
	// Every piece's buffer is freed: those evicted on the way, the rest
	// at Close.
	m.Close()
	closed = true
	if got := offheap.Mapped(); got != mapped {
		t.Fatalf("after Close %d bytes are still mapped off the heap, %d before Open", got, mapped)
	}
}

func maxPieceCost(m *IndexedManifest) int64 {
	var c int64
	for k := 0; k < m.x.Pieces(); k++ {
		// Decoded records and keys, rounded up to a whole page off the heap.
		c = max(c, 2*(m.x.Offsets[k+1]-m.x.Offsets[k])+int64(m.x.Every)*48+4096)
	}
	return c
}

// randomIndexedManifest writes n samples in format: labels integers or names,
// packed or plain or both, keys sorted or not, a header or not, quoted
// fields, blank lines.
func randomIndexedManifest(r *rand.Rand, n int, jsonl bool) []byte {
	var b bytes.Buffer
	names := r.IntN(2) == 0
	packedMode := r.IntN(3) // 0 plain, 1 packed, 2 mixed
	withFields := false     // a CSV header with field columns
	if !jsonl && r.IntN(2) == 0 {
		withFields = r.IntN(2) == 0
		switch {
		case packedMode == 0 && withFields:
			b.WriteString("key,label,caption,n:int,score:float\n")
		case packedMode == 0:
			b.WriteString("key,label\n")
		case withFields:
			b.WriteString("key,label,object,offset,size,caption,n:int,score:float\n")
		default:
			b.WriteString("key,label,object,offset,size\n")
		}
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("d%02d/img-%05d.jpg", r.IntN(5), i)
	}
	if r.IntN(2) == 0 {
		slices.Sort(keys)
	}
	for i, k := range keys {
		label := fmt.Sprint(r.IntN(7))
		if names {
			label = []string{"cat", "dog", "n014", "zebra", "7"}[r.IntN(5)]
		}
		packed := packedMode == 1 || (packedMode == 2 && r.IntN(2) == 0)
		obj, off, size := fmt.Sprintf("shards/s-%d.tar", i/5), int64(512*i), int64(r.IntN(100))
		if r.IntN(8) == 0 {
			b.WriteString("\n")
		}
		if jsonl {
			lab := label
			if names {
				lab = fmt.Sprintf("%q", label)
			}
			if packed {
				fmt.Fprintf(&b, `{"key":%q,"label":%s,"object":%q,"offset":%d,"size":%d}`+"\n", k, lab, obj, off, size)
			} else {
				fmt.Fprintf(&b, `{"key":%q,"label":%s}`+"\n", k, lab)
			}
			continue
		}
		if r.IntN(6) == 0 {
			k = `"` + strings.Replace(k, "img", `i""m,g`+"\n", 1) + `"`
		}
		cells := ""
		if withFields {
			cells = fmt.Sprintf(",%s,%s,%s", []string{"a cat", "", `"x, ""y"""`, `"line` + "\n" + `break"`}[r.IntN(4)],
				[]string{"1", "", "-3"}[r.IntN(3)], []string{"0.5", "", "2"}[r.IntN(3)])
		}
		switch {
		case withFields && packed:
			fmt.Fprintf(&b, "%s,%s,%s,%d,%d%s\n", k, label, obj, off, size, cells)
		case withFields && packedMode != 0:
			fmt.Fprintf(&b, "%s,%s,,,%s\n", k, label, cells)
		case withFields:
			fmt.Fprintf(&b, "%s,%s%s\n", k, label, cells)
		case packed:
			fmt.Fprintf(&b, "%s,%s,%s,%d,%d\n", k, label, obj, off, size)
		case packedMode != 0:
			fmt.Fprintf(&b, "%s,%s,,,\n", k, label)
		default:
			fmt.Fprintf(&b, "%s,%s\n", k, label)
		}
	}
	return b.Bytes()
}

func TestScanManifestMatchesDiscover(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		jsonl := trial%2 == 0
		data := randomIndexedManifest(r, 1+r.IntN(60), jsonl)
		key := "manifest.csv"
		if jsonl {
			key = "manifest.jsonl"
		}
		if trial%3 == 0 {
			key = "sub/dir/" + key
		}
		every := 1 + r.IntN(9)
		cache := []int64{0, 1, 600}[trial%3]
		checkIndexed(t, data, key, every, cache)
	}
}

func TestScanManifestRefuses(t *testing.T) {
	for _, c := range []struct{ name, key, data string }{
		{"empty", "m.jsonl", "\n\n"},
		{"duplicate sorted", "m.csv", "a,1\nb,1\nb,2\n"},
		{"duplicate unsorted", "m.csv", "b,1\na,1\nc,2\nb,2\n"},
		{"mixed json labels far apart", "m.jsonl", `{"key":"a","label":1}` + "\n" + `{"key":"b","label":"x"}` + "\n"},
		{"bad key", "m.csv", "a,1\n../b,1\n"},
		{"label out of range", "m.csv", "a,1\nb,99999999\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			s := storage.NewMemStore("idx")
			s.Put(ctx, c.key, []byte(c.data), storage.Cond{})
			if _, err := Discover(ctx, s, DiscoverOptions{Manifest: c.key}); err == nil {
				t.Fatalf("Discover accepts %q", c.data)
			}
			for _, every := range []int{0, 1, 2} {
				if _, err := ScanManifest(ctx, s, c.key, ScanOptions{Every: every, CheckDuplicates: true}); err == nil {
					t.Fatalf("every %d: scan accepts %q", every, c.data)
				}
			}
		})
	}
}

// TestIndexStale: a manifest changed after its index was made is
// refused with ErrStaleIndex, whether it grew, shrank or changed in place.
func TestIndexStale(t *testing.T) {
	ctx := context.Background()
	orig := "a.jpg,0\nb.jpg,1\nc.jpg,0\nd.jpg,1\n"
	for _, c := range []struct{ name, now string }{
		{"grew", orig + "e.jpg,1\n"},
		{"shrank", "a.jpg,0\nb.jpg,1\nc.jpg,0\n"},
		{"end changed", "a.jpg,0\nb.jpg,1\nc.jpg,0\nd.jpg,0\n"},
		{"start changed", "x.jpg,0\nb.jpg,1\nc.jpg,0\nd.jpg,1\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := storage.NewMemStore("stale")
			s.Put(ctx, "manifest.csv", []byte(orig), storage.Cond{})
			x, err := ScanManifest(ctx, s, "manifest.csv", ScanOptions{Every: 2})
			if err != nil {
				t.Fatal(err)
			}
			enc, _ := x.MarshalBinary()
			s.Put(ctx, IndexKey("manifest.csv"), enc, storage.Cond{})
			s.Put(ctx, "manifest.csv", []byte(c.now), storage.Cond{})
			m, err := OpenIndexedManifest(ctx, s, "manifest.csv", IndexedConfig{})
			if err == nil {
				defer m.Close()
				_, _, err = m.Sample(ctx, 0)
			}
			if !errors.Is(err, ErrStaleIndex) {
				t.Fatalf("got %v, want ErrStaleIndex", err)
			}
		})
	}
}

func FuzzManifestIndex(f *testing.F) {
	x := &ManifestIndex{Manifest: "m.csv", Format: ManifestCSV, Samples: 3, Digest: "3:00", Classes: []string{"0", "1"},
		IntegerLabels: true, Every: 2, Offsets: []int64{0, 10, 20}, Sums: []uint32{1, 2}}
	enc, _ := x.MarshalBinary()
	f.Add(enc)
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := ParseManifestIndex(b)
		if err != nil {
			if !errors.Is(err, ErrBadIndex) {
				t.Fatalf("error %v does not wrap ErrBadIndex", err)
			}
			return
		}
		again, err := x.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		y, err := ParseManifestIndex(again)
		if err != nil || y.Digest != x.Digest || !slices.Equal(y.Offsets, x.Offsets) || !slices.Equal(y.Classes, x.Classes) {
			t.Fatalf("round trip: %v %+v %+v", err, x, y)
		}
	})
}

// FuzzScanManifest holds the scan and the lazy reader to Discover on any
// input.
func FuzzScanManifest(f *testing.F) {
	for _, seed := range manifestSeeds {
		f.Add([]byte(seed.data), seed.jsonl, uint8(2))
	}
	f.Fuzz(func(t *testing.T, data []byte, jsonl bool, every uint8) {
		key := "manifest.csv"
		if jsonl {
			key = "manifest.jsonl"
		}
		checkIndexed(t, data, key, 1+int(every%8), 0)
	})
}

// TestWriteFolderManifest: the manifest written for a listed ImageFolder
// digests as the listing and is put only if absent (a second writer gets
// ErrPrecondition and changes nothing), unless Replace.
func TestWriteFolderManifest(t *testing.T) {
	ctx := context.Background()
	mem := storage.NewMemStore("folder")
	for i := range 50 {
		mem.Put(ctx, fmt.Sprintf("%s/%02d.jpg", []string{"b", "a"}[i%2], i), []byte("x"), storage.Cond{})
	}
	ds, err := Discover(ctx, mem, DefaultDiscoverOptions())
	if err != nil {
		t.Fatal(err)
	}
	x, err := WriteFolderManifest(ctx, mem, ds, FolderManifestOptions{Every: 8})
	if err != nil || x.Samples != 50 || x.Digest != ManifestDigest(ds) || x.Every != 8 {
		t.Fatalf("first write: %+v %v", x, err)
	}
	first, _ := mem.Get(ctx, ManifestJSONLName, nil)
	fewer := &Dataset{Classes: ds.Classes, Samples: ds.Samples[:10]}
	if _, err := WriteFolderManifest(ctx, mem, fewer, FolderManifestOptions{}); !errors.Is(err, storage.ErrPrecondition) {
		t.Errorf("a second writer: %v, want ErrPrecondition", err)
	}
	if now, _ := mem.Get(ctx, ManifestJSONLName, nil); !bytes.Equal(now, first) {
		t.Errorf("the second writer changed the manifest")
	}
	x, err = WriteFolderManifest(ctx, mem, fewer, FolderManifestOptions{Replace: true})
	if err != nil || x.Samples != 10 || x.Digest != ManifestDigest(fewer) {
		t.Errorf("replace: %+v %v", x, err)
	}
}
