// Package storetest is the conformance suite every storage.Store must pass:
// MemStore, DirStore, s3.Store on a real MinIO, and wrappers such as the
// fault-injecting store with no rules. Run it from a test:
//
//	storetest.Run(t, func(t *testing.T) storage.Store { return storage.NewMemStore(t.Name()) })
package storetest

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/longshore/longshore/storage"
)

// Behaviour is one named property of a Store.
type Behaviour struct {
	Name string
	Test func(t *testing.T, ctx context.Context, s storage.Store)
}

// Run runs every behaviour in Behaviours as a subtest, each on a fresh,
// empty store from open.
func Run(t *testing.T, open func(t *testing.T) storage.Store) {
	for _, b := range Behaviours {
		t.Run(b.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			b.Test(t, ctx, open(t))
		})
	}
}

// Behaviours is the suite's table.
var Behaviours = []Behaviour{
	{"ListOrderAndPrefix", testListOrderAndPrefix},
	{"ListStopsOnCallbackError", testListStops},
	{"ListPrefixes", testListPrefixes},
	{"Get", testGet},
	{"GetIntoReusedBuffer", testGetReusedBuffer},
	{"GetDoesNotAllocateTheObject", testGetAllocations},
	{"GetRange", testGetRange},
	{"MissingKey", testMissingKey},
	{"Stat", testStat},
	{"PutOverwrite", testPutOverwrite},
	{"IfAbsentRaceExactlyOneWins", testIfAbsentRace},
	{"IfMatch", testIfMatch},
	{"IfMatchRaceExactlyOneWins", testIfMatchRace},
	{"Delete", testDelete},
	{"InvalidKeys", testInvalidKeys},
	{"CanceledContext", testCanceled},
}

func etagOf(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

func put(t *testing.T, ctx context.Context, s storage.Store, key string, data []byte) string {
	t.Helper()
	etag, err := s.Put(ctx, key, data, storage.Cond{})
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	return etag
}

func listKeys(t *testing.T, ctx context.Context, s storage.Store, prefix string) []string {
	t.Helper()
	keys := []string{}
	err := s.List(ctx, prefix, func(info storage.ObjectInfo) error {
		keys = append(keys, info.Key)
		return nil
	})
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return keys
}

// tricky keys: '-' and '.' sort before '/', so a walk that visits
// directory "a" before file "a-c" gets the order wrong.
var trickyKeys = []string{
	"a/b", "a-c", "a/b-x/y", "a.b", "b", "a/c/d/e", "ab", "a/b0", "a/b/c", "z/y/x", "é/ü",
}

func testListOrderAndPrefix(t *testing.T, ctx context.Context, s storage.Store) {
	want := map[string]int{}
	for i, k := range slices.Concat(trickyKeys, []string{"a/b/c/d"}) {
		if k == "a/b" || k == "a/b/c" {
			continue // a key cannot also be a directory on a filesystem
		}
		data := bytes.Repeat([]byte{byte(i)}, i+1)
		put(t, ctx, s, k, data)
		want[k] = len(data)
	}
	all := make([]string, 0, len(want))
	for k := range want {
		all = append(all, k)
	}
	slices.Sort(all)
	for _, tc := range []struct{ prefix string }{{""}, {"a"}, {"a/"}, {"a-"}, {"ab"}, {"abc"}, {"bx"}, {"a/b"}, {"a/b/"}, {"a/b0x"}, {"a/c/d/"}, {"z"}, {"nope/"}, {"nope"}, {"é/"}} {
		var wantKeys []string
		for _, k := range all {
			if len(k) >= len(tc.prefix) && k[:len(tc.prefix)] == tc.prefix {
				wantKeys = append(wantKeys, k)
			}
		}
		var got []string
		err := s.List(ctx, tc.prefix, func(info storage.ObjectInfo) error {
			got = append(got, info.Key)
			if info.Size != int64(want[info.Key]) {
				t.Errorf("List(%q): %q has Size %d, want %d", tc.prefix, info.Key, info.Size, want[info.Key])
			}
			return nil
		})
		if err != nil {
			t.Fatalf("List(%q): %v", tc.prefix, err)
		}
		if !slices.Equal(got, wantKeys) {
			t.Errorf("List(%q) =\n  %q\nwant\n  %q", tc.prefix, got, wantKeys)
		}
	}
}

func testListStops(t *testing.T, ctx context.Context, s storage.Store) {
	for _, k := range []string{"x/1", "x/2", "x/3"} {
		put(t, ctx, s, k, []byte(k))
	}
	stop := errors.New("enough")
	n := 0
	err := s.List(ctx, "x/", func(storage.ObjectInfo) error {
		n++
		if n == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("List returned %v, want the callback's error", err)
	}
	if n != 2 {
		t.Fatalf("callback ran %d times after returning an error at 2", n)
	}
}

func testListPrefixes(t *testing.T, ctx context.Context, s storage.Store) {
	for _, k := range []string{"root/cat/1.jpg", "root/cat/2.jpg", "root/cat-x/1.jpg", "root/dog/sub/1.jpg", "root/file.txt", "rootless/x", "other/y"} {
		put(t, ctx, s, k, []byte(k))
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"other/", "root/", "rootless/"}},
		{"root/", []string{"root/cat-x/", "root/cat/", "root/dog/"}},
		{"root/c", []string{"root/cat-x/", "root/cat/"}},
		{"root/dog/", []string{"root/dog/sub/"}},
		{"root/cat/", nil},
		{"missing/", nil},
	} {
		got, err := storage.ListPrefixes(ctx, s, tc.prefix)
		if err != nil {
			t.Fatalf("ListPrefixes(%q): %v", tc.prefix, err)
		}
		if len(got) != 0 || len(tc.want) != 0 {
			if !slices.Equal(got, tc.want) {
				t.Errorf("ListPrefixes(%q) = %q, want %q", tc.prefix, got, tc.want)
			}
		}
	}
}

func testGet(t *testing.T, ctx context.Context, s storage.Store) {
	big := make([]byte, 1<<20+17)
	for i := range big {
		big[i] = byte(i * 7)
	}
	for _, tc := range []struct {
		key  string
		data []byte
	}{
		{"empty", []byte{}},
		{"small", []byte("hello")},
		{"binary", []byte{0, 1, 2, 0, 255}},
		{"dir/deep/big", big},
	} {
		put(t, ctx, s, tc.key, tc.data)
		for _, dst := range [][]byte{nil, make([]byte, 3, 3), make([]byte, 0, len(tc.data)), make([]byte, 10, 2*len(tc.data)+10)} {
			got, err := s.Get(ctx, tc.key, dst)
			if err != nil {
				t.Fatalf("Get(%q): %v", tc.key, err)
			}
			if !bytes.Equal(got, tc.data) {
				t.Fatalf("Get(%q) with cap(dst)=%d: got %d bytes, want %d (or different content)", tc.key, cap(dst), len(got), len(tc.data))
			}
		}
	}
}

func testGetReusedBuffer(t *testing.T, ctx context.Context, s storage.Store) {
	data := bytes.Repeat([]byte("0123456789"), 10_000)
	put(t, ctx, s, "obj", data)
	put(t, ctx, s, "other", data[:500])
	buf := make([]byte, 0, 2*len(data))
	for _, key := range []string{"obj", "other", "obj"} {
		got, err := s.Get(ctx, key, buf)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 || &got[0] != &buf[:1][0] {
			t.Fatalf("Get(%q) did not read into dst's backing array although cap(dst)=%d >= %d", key, cap(buf), len(got))
		}
		buf = got
	}
	got, err := s.GetRange(ctx, "obj", 10, 1000, buf)
	if err != nil {
		t.Fatal(err)
	}
	if &got[0] != &buf[:1][0] {
		t.Fatalf("GetRange did not read into dst's backing array")
	}
	if !bytes.Equal(got, data[10:1010]) {
		t.Fatalf("GetRange into reused buffer: wrong content")
	}
}

// testGetAllocations checks that Get with a big enough dst does not copy
// the object through freshly allocated memory: the bytes allocated per Get
// of a 1 MiB object must be a small fraction of it (S3 pays for HTTP, not
// for the payload).
func testGetAllocations(t *testing.T, ctx context.Context, s storage.Store) {
	const size = 1 << 20
	data := bytes.Repeat([]byte{7}, size)
	put(t, ctx, s, "big", data)
	buf := make([]byte, 0, size)
	if _, err := s.Get(ctx, "big", buf); err != nil { // warm up connections and caches
		t.Fatal(err)
	}
	const runs = 5
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		if _, err := s.Get(ctx, "big", buf); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	perGet := (after.TotalAlloc - before.TotalAlloc) / runs
	if perGet > size/4 {
		t.Fatalf("Get of a %d-byte object into a buffer with room allocated %d bytes per call; want well under the object size", size, perGet)
	}
	t.Logf("%d bytes allocated per Get of %d bytes", perGet, size)
}

func testGetRange(t *testing.T, ctx context.Context, s storage.Store) {
	data := []byte("0123456789abcdef")
	n := int64(len(data))
	put(t, ctx, s, "r", data)
	for _, tc := range []struct {
		off, length int64
		want        string // "" with ok means empty
		ok          bool
	}{
		{0, 4, "0123", true},
		{3, -1, "3456789abcdef", true},
		{0, -1, string(data), true},
		{n - 2, 2, "ef", true},
		{n, -1, "", true},
		{n, 0, "", true},
		{5, 0, "", true},
		{0, n, string(data), true},
		{n + 1, -1, "", false},
		{n - 1, 5, "", false},
		{0, n + 1, "", false},
		{-1, 2, "", false},
		{n + 1, 0, "", false},
		{100, 3, "", false},
	} {
		got, err := s.GetRange(ctx, "r", tc.off, tc.length, make([]byte, 2, 8))
		if tc.ok {
			if err != nil {
				t.Errorf("GetRange(%d, %d): %v", tc.off, tc.length, err)
			} else if string(got) != tc.want {
				t.Errorf("GetRange(%d, %d) = %q, want %q", tc.off, tc.length, got, tc.want)
			}
			continue
		}
		if !errors.Is(err, storage.ErrRange) {
			t.Errorf("GetRange(%d, %d) = %q, %v; want ErrRange", tc.off, tc.length, got, err)
		}
	}
	if _, err := s.GetRange(ctx, "nope", 0, 1, nil); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("GetRange of a missing key: %v, want ErrNotFound", err)
	}
}

func testMissingKey(t *testing.T, ctx context.Context, s storage.Store) {
	put(t, ctx, s, "dir/present", []byte("x"))
	for _, key := range []string{"absent", "dir/absent", "dir", "absent/deeper", "dir/present/below"} {
		if _, err := s.Get(ctx, key, nil); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("Get(%q) = %v, want ErrNotFound", key, err)
		}
		if _, err := s.Stat(ctx, key); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("Stat(%q) = %v, want ErrNotFound", key, err)
		}
	}
}

func testStat(t *testing.T, ctx context.Context, s storage.Store) {
	data := []byte("some bytes for stat")
	before := time.Now().Add(-time.Hour)
	etag := put(t, ctx, s, "k/s", data)
	if etag != etagOf(data) {
		t.Errorf("Put returned ETag %q, want hex MD5 %q", etag, etagOf(data))
	}
	info, err := s.Stat(ctx, "k/s")
	if err != nil {
		t.Fatal(err)
	}
	if info.Key != "k/s" || info.Size != int64(len(data)) || info.ETag != etag {
		t.Errorf("Stat = %+v, want key k/s, size %d, ETag %q", info, len(data), etag)
	}
	if info.ModTime.Before(before) {
		t.Errorf("Stat ModTime %v is implausible", info.ModTime)
	}
	err = s.List(ctx, "k/", func(li storage.ObjectInfo) error {
		if li.ETag != "" && li.ETag != etag {
			t.Errorf("List ETag %q, want %q or empty", li.ETag, etag)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func testPutOverwrite(t *testing.T, ctx context.Context, s storage.Store) {
	e1 := put(t, ctx, s, "o", []byte("first version"))
	e2 := put(t, ctx, s, "o", []byte("second"))
	if e1 == e2 {
		t.Errorf("overwrite kept ETag %q", e1)
	}
	got, err := s.Get(ctx, "o", nil)
	if err != nil || string(got) != "second" {
		t.Fatalf("Get after overwrite = %q, %v", got, err)
	}
	if keys := listKeys(t, ctx, s, ""); !slices.Equal(keys, []string{"o"}) {
		t.Fatalf("List after overwrite = %q, want [o] (no temporary files)", keys)
	}
}

func testIfAbsentRace(t *testing.T, ctx context.Context, s storage.Store) {
	const n = 8
	for round := range 3 {
		key := fmt.Sprintf("ckpt/%d/manifest", round)
		var wg sync.WaitGroup
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				_, errs[i] = s.Put(ctx, key, []byte(fmt.Sprintf("writer %d", i)), storage.Cond{IfAbsent: true})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: writers %d and %d both won an IfAbsent put", round, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, storage.ErrPrecondition):
				t.Fatalf("round %d: writer %d: %v, want ErrPrecondition", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no writer won", round)
		}
		got, err := s.Get(ctx, key, nil)
		if err != nil || string(got) != fmt.Sprintf("writer %d", winner) {
			t.Fatalf("round %d: object holds %q (%v), want the winner's", round, got, err)
		}
	}
}

func testIfMatch(t *testing.T, ctx context.Context, s storage.Store) {
	e1 := put(t, ctx, s, "c", []byte("v1"))
	e2, err := s.Put(ctx, "c", []byte("v2"), storage.Cond{IfMatch: e1})
	if err != nil {
		t.Fatalf("IfMatch with the current ETag: %v", err)
	}
	if e2 != etagOf([]byte("v2")) {
		t.Errorf("IfMatch put returned ETag %q", e2)
	}
	if _, err := s.Put(ctx, "c", []byte("v3"), storage.Cond{IfMatch: e1}); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("IfMatch with a stale ETag: %v, want ErrPrecondition", err)
	}
	if got, _ := s.Get(ctx, "c", nil); string(got) != "v2" {
		t.Fatalf("failed IfMatch changed the object to %q", got)
	}
	if _, err := s.Put(ctx, "absent", []byte("x"), storage.Cond{IfMatch: e1}); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("IfMatch on a missing key: %v, want ErrPrecondition", err)
	}
	if _, err := s.Stat(ctx, "absent"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("failed IfMatch created the object: %v", err)
	}
	if _, err := s.Put(ctx, "c", []byte("v4"), storage.Cond{IfAbsent: true}); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("IfAbsent on an existing key: %v, want ErrPrecondition", err)
	}
	if _, err := s.Put(ctx, "fresh", []byte("x"), storage.Cond{IfAbsent: true}); err != nil {
		t.Fatalf("IfAbsent on a missing key: %v", err)
	}
}

func testIfMatchRace(t *testing.T, ctx context.Context, s storage.Store) {
	const n = 8
	etag := put(t, ctx, s, "cas", []byte("base"))
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			_, errs[i] = s.Put(ctx, "cas", []byte(fmt.Sprintf("next %d", i)), storage.Cond{IfMatch: etag})
		})
	}
	close(start)
	wg.Wait()
	wins := 0
	for i, err := range errs {
		if err == nil {
			wins++
		} else if !errors.Is(err, storage.ErrPrecondition) {
			t.Fatalf("writer %d: %v, want ErrPrecondition", i, err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d writers won a compare-and-swap on the same ETag, want exactly 1", wins)
	}
}

func testDelete(t *testing.T, ctx context.Context, s storage.Store) {
	put(t, ctx, s, "d/1", []byte("x"))
	put(t, ctx, s, "d/2", []byte("y"))
	if err := s.Delete(ctx, "d/1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "d/1", nil); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "d/1"); err != nil {
		t.Fatalf("Delete of a missing key: %v, want nil", err)
	}
	if err := s.Delete(ctx, "never/was"); err != nil {
		t.Fatalf("Delete of a never-existing key: %v, want nil", err)
	}
	if keys := listKeys(t, ctx, s, ""); !slices.Equal(keys, []string{"d/2"}) {
		t.Fatalf("List after Delete = %q, want [d/2]", keys)
	}
	if err := s.Delete(ctx, "d/2"); err != nil {
		t.Fatal(err)
	}
	if keys := listKeys(t, ctx, s, ""); len(keys) != 0 {
		t.Fatalf("List after deleting everything = %q", keys)
	}
	if p, err := storage.ListPrefixes(ctx, s, ""); err != nil || len(p) != 0 {
		t.Fatalf("ListPrefixes after deleting everything = %q, %v; want none", p, err)
	}
}

func testInvalidKeys(t *testing.T, ctx context.Context, s storage.Store) {
	for _, key := range []string{"", "../escape", "a/../../b", "/abs", "a//b", "a/./b", "trailing/", ".longshore-tmp-x", "a/.longshore-lock-1", "nul\x00byte"} {
		if _, err := s.Put(ctx, key, []byte("x"), storage.Cond{}); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("Put(%q) = %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.Get(ctx, key, nil); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("Get(%q) = %v, want ErrInvalidKey", key, err)
		}
		if err := s.Delete(ctx, key); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("Delete(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
	if err := s.List(ctx, "../", func(storage.ObjectInfo) error { return nil }); !errors.Is(err, storage.ErrInvalidKey) {
		t.Errorf("List(\"../\") = %v, want ErrInvalidKey", err)
	}
}

func testCanceled(t *testing.T, ctx context.Context, s storage.Store) {
	put(t, ctx, s, "k", []byte("v"))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Get(cctx, "k", nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a canceled context: %v, want context.Canceled", err)
	}
	if _, err := s.Put(cctx, "k2", []byte("v"), storage.Cond{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with a canceled context: %v, want context.Canceled", err)
	}
	if err := s.List(cctx, "", func(storage.ObjectInfo) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("List with a canceled context: %v, want context.Canceled", err)
	}
}
