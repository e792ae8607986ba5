package dataset_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/faulty"
	"github.com/longshore/longshore/storage/miniotest"
	"github.com/longshore/longshore/storage/stores"
)

func fill(t *testing.T, s storage.Store, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, err := s.Put(context.Background(), k, []byte("x"), storage.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
}

func fillData(t *testing.T, s storage.Store, key, data string) {
	t.Helper()
	if _, err := s.Put(context.Background(), key, []byte(data), storage.Cond{}); err != nil {
		t.Fatal(err)
	}
}

func discover(t *testing.T, s storage.Store, opts dataset.DiscoverOptions) *dataset.Dataset {
	t.Helper()
	ds, err := dataset.Discover(context.Background(), s, opts)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	return ds
}

func samplesString(ds *dataset.Dataset) string {
	var b strings.Builder
	for _, s := range ds.Samples {
		fmt.Fprintf(&b, "%s=%d ", s.Key, s.Label)
	}
	return strings.TrimSpace(b.String())
}

// freshStores returns the in-memory and directory stores, fresh.
func freshStores(t *testing.T) map[string]storage.Store {
	d, err := storage.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return map[string]storage.Store{"mem": storage.NewMemStore(t.Name()), "dir": d}
}

func TestDiscoverImageFolder(t *testing.T) {
	for name, s := range freshStores(t) {
		t.Run(name, func(t *testing.T) {
			fill(t, s,
				"train/dog/2.jpg", "train/dog/1.JPEG", "train/dog/notes.txt",
				"train/cat/a.png", "train/cat/sub/b.webp",
				"train/cat-b/x.jpg", // "cat-b" sorts after "cat", but "cat-b/" before "cat/"
				"train/README.md", "train/manifest.json",
				"val/dog/9.jpg",
			)
			ds := discover(t, s, dataset.DiscoverOptions{Root: "train"})
			if want := []string{"cat", "cat-b", "dog"}; !slices.Equal(ds.Classes, want) {
				t.Errorf("Classes = %q, want %q", ds.Classes, want)
			}
			want := "train/cat-b/x.jpg=1 train/cat/a.png=0 train/cat/sub/b.webp=0 train/dog/1.JPEG=2 train/dog/2.jpg=2"
			if got := samplesString(ds); got != want {
				t.Errorf("Samples =\n  %s\nwant\n  %s", got, want)
			}
			ds = discover(t, s, dataset.DiscoverOptions{Root: "train/", Extensions: []string{"TXT"}, AllowEmptyClasses: true})
			if got := samplesString(ds); got != "train/dog/notes.txt=2" || len(ds.Classes) != 3 {
				t.Errorf("Extensions [TXT] with empty classes allowed: %s, classes %q", got, ds.Classes)
			}
		})
	}
}

func TestDiscoverImageFolderErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		keys []string
		opts dataset.DiscoverOptions
		want error
		msg  string
	}{
		{"Nothing", nil, dataset.DiscoverOptions{}, dataset.ErrEmptyDataset, "no class directories"},
		{"OnlyLooseFiles", []string{"a.jpg", "b.jpg"}, dataset.DiscoverOptions{}, dataset.ErrEmptyDataset, "no class directories"},
		{"NoImages", []string{"c/a.txt", "d/b.csv"}, dataset.DiscoverOptions{}, dataset.ErrEmptyDataset, "no files with extensions"},
		{"EmptyClass", []string{"c/a.jpg", "d/b.txt"}, dataset.DiscoverOptions{}, dataset.ErrEmptyDataset, `["d"]`},
		{"ManifestAskedButMissing", []string{"c/a.jpg"}, dataset.DiscoverOptions{Layout: dataset.LayoutManifest}, storage.ErrNotFound, "no manifest.csv or manifest.jsonl"},
		{"ExplicitManifestMissing", []string{"c/a.jpg"}, dataset.DiscoverOptions{Manifest: "m.csv"}, storage.ErrNotFound, "m.csv"},
		{"BothManifests", []string{"manifest.csv", "manifest.jsonl"}, dataset.DiscoverOptions{}, nil, "both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := storage.NewMemStore(t.Name())
			fill(t, s, tc.keys...)
			_, err := dataset.Discover(ctx, s, tc.opts)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("Discover: %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("message %q should contain %q", err, tc.msg)
			}
		})
	}
	bad := dataset.DiscoverOptions{Root: "../x", Concurrency: -1, Extensions: []string{"."}, Manifest: "m.txt"}
	err := bad.Validate()
	for _, want := range []string{"Root", "Concurrency", `extension "."`, "unknown format"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %s", err, want)
		}
	}
}

func TestDiscoverManifest(t *testing.T) {
	for _, tc := range []struct {
		name, key, body string
		opts            dataset.DiscoverOptions
		classes         []string
		samples         string
	}{
		{"CSVIntegers", "ds/manifest.csv", "b.jpg,1\na.jpg,0\nsub/c.jpg,3\n", dataset.DiscoverOptions{Root: "ds"},
			[]string{"0", "1", "2", "3"}, "ds/b.jpg=1 ds/a.jpg=0 ds/sub/c.jpg=3"},
		{"CSVHeaderAndNames", "manifest.csv", "key,label\nx.jpg,zebra\ny.jpg,ant\n\"with,comma.jpg\", zebra\n", dataset.DiscoverOptions{},
			[]string{"ant", "zebra"}, "x.jpg=1 y.jpg=0 with,comma.jpg=1"},
		{"CSVMixedIsNames", "manifest.csv", "a,3\nb,cat\n", dataset.DiscoverOptions{},
			[]string{"3", "cat"}, "a=0 b=1"},
		{"JSONLIntegers", "d/manifest.jsonl", "{\"key\":\"a.png\",\"label\":2}\n\n{\"label\":0,\"key\":\"b.png\",\"extra\":[1]}\n", dataset.DiscoverOptions{Root: "d/"},
			[]string{"0", "1", "2"}, "d/a.png=2 d/b.png=0"},
		{"JSONLNames", "manifest.jsonl", `{"key":"a","label":"dog"}` + "\n" + `{"key":"b","label":"cat"}`, dataset.DiscoverOptions{},
			[]string{"cat", "dog"}, "a=1 b=0"},
		{"ExplicitElsewhere", "lists/val.csv", "img/1.jpg,0\n", dataset.DiscoverOptions{Manifest: "lists/val.csv"},
			[]string{"0"}, "lists/img/1.jpg=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := storage.NewMemStore(t.Name())
			fillData(t, s, tc.key, tc.body)
			fill(t, s, "cls/ignored.jpg") // an ImageFolder beside it loses to the manifest
			ds := discover(t, s, tc.opts)
			if !slices.Equal(ds.Classes, tc.classes) {
				t.Errorf("Classes = %q, want %q", ds.Classes, tc.classes)
			}
			if got := samplesString(ds); got != tc.samples {
				t.Errorf("Samples = %s, want %s", got, tc.samples)
			}
		})
	}
}

func TestDiscoverManifestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, key, body string
		line            int // 0: not a line error
		want            error
		msg             string
	}{
		{"CSVFields", "manifest.csv", "a,1\nb,2,3\n", 2, dataset.ErrBadManifest, "want 2 fields"},
		{"CSVQuote", "manifest.csv", "a,1\n\"b,2\n", 2, dataset.ErrBadManifest, ""},
		{"CSVDuplicate", "manifest.csv", "a,1\nb,1\na,2\n", 3, dataset.ErrBadManifest, "already on line 1"},
		{"CSVBadKey", "manifest.csv", "ok,1\n../escape,1\n", 2, dataset.ErrBadManifest, "invalid key"},
		{"CSVNegative", "manifest.csv", "a,1\nb,-1\n", 2, dataset.ErrBadManifest, "outside"},
		{"CSVEmptyLabel", "manifest.csv", "a,1\nb,\n", 2, dataset.ErrBadManifest, "empty label"},
		{"CSVEmpty", "manifest.csv", "", 0, dataset.ErrEmptyDataset, "no samples"},
		{"CSVHeaderOnly", "manifest.csv", "path,class\n", 0, dataset.ErrEmptyDataset, "no samples"},
		{"JSONLSyntax", "manifest.jsonl", "{\"key\":\"a\",\"label\":1}\n{\"key\":\"b\",\n", 2, dataset.ErrBadManifest, "not a JSON object"},
		{"JSONLMixed", "manifest.jsonl", "{\"key\":\"a\",\"label\":1}\n{\"key\":\"b\",\"label\":\"cat\"}\n", 2, dataset.ErrBadManifest, "mixes"},
		{"JSONLFloat", "manifest.jsonl", "{\"key\":\"a\",\"label\":1.5}\n", 1, dataset.ErrBadManifest, "not an integer"},
		{"JSONLNoKey", "manifest.jsonl", "{\"label\":1}\n", 1, dataset.ErrBadManifest, `no "key"`},
		{"JSONLNoLabel", "manifest.jsonl", "{\"key\":\"a\"}\n", 1, dataset.ErrBadManifest, `no "label"`},
		{"JSONLBool", "manifest.jsonl", "{\"key\":\"a\",\"label\":true}\n", 1, dataset.ErrBadManifest, "want an integer"},
		{"JSONLHuge", "manifest.jsonl", "{\"key\":\"a\",\"label\":2147483647}\n", 1, dataset.ErrBadManifest, "outside"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := storage.NewMemStore(t.Name())
			fillData(t, s, tc.key, tc.body)
			_, err := dataset.Discover(context.Background(), s, dataset.DiscoverOptions{})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Discover: %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), tc.key) {
				t.Errorf("message %q should name %s and contain %q", err, tc.key, tc.msg)
			}
			var me *dataset.ManifestError
			if tc.line > 0 && (!errors.As(err, &me) || me.Line != tc.line) {
				t.Errorf("want a ManifestError on line %d, got %v", tc.line, err)
			}
		})
	}
}

// naiveImageFolder is ImageFolder by the book: every key, grouped by hand.
func naiveImageFolder(keys []string, root string) ([]string, []dataset.Sample) {
	classSet := map[string]bool{}
	for _, k := range keys {
		rest, ok := strings.CutPrefix(k, root)
		if c, _, deeper := strings.Cut(rest, "/"); ok && deeper {
			classSet[c] = true
		}
	}
	classes := make([]string, 0, len(classSet))
	for c := range classSet {
		classes = append(classes, c)
	}
	slices.Sort(classes)
	var samples []dataset.Sample
	for i, c := range classes {
		for _, k := range keys {
			ext := strings.ToLower(path.Ext(k))
			if strings.HasPrefix(k, root+c+"/") && (ext == ".jpg" || ext == ".png") {
				samples = append(samples, dataset.Sample{Key: k, Label: int32(i)})
			}
		}
	}
	slices.SortFunc(samples, func(a, b dataset.Sample) int { return strings.Compare(a.Key, b.Key) })
	return classes, samples
}

// TestDiscoverMatchesNaive compares Discover with the naive version on
// random trees, on every store kind (S3 on MinIO included).
func TestDiscoverMatchesNaive(t *testing.T) {
	srv := miniotest.Start(t)
	words := []string{"a", "a-b", "a.b", "b", "B", "c0", "c", "é"}
	exts := []string{".jpg", ".JPG", ".png", ".txt"}
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var keys []string
		seen := map[string]bool{}
		for range 40 + rng.IntN(40) {
			depth := 1 + rng.IntN(3)
			parts := []string{"root"}
			for range depth {
				parts = append(parts, words[rng.IntN(len(words))])
			}
			k := strings.Join(parts, "/") + fmt.Sprint(rng.IntN(5)) + exts[rng.IntN(len(exts))]
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		wantClasses, wantSamples := naiveImageFolder(keys, "root/")
		all := freshStores(t)
		s3, err := stores.Open(context.Background(), srv.URL(srv.NewBucket(t), "pre"), srv.Options())
		if err != nil {
			t.Fatal(err)
		}
		all["s3"] = s3
		for name, s := range all {
			fill(t, s, keys...)
			ds, err := dataset.Discover(context.Background(), s, dataset.DiscoverOptions{
				Root: "root", Extensions: []string{"jpg", ".png"}, AllowEmptyClasses: true, Concurrency: 3})
			if err != nil {
				t.Fatalf("seed %d %s: %v", seed, name, err)
			}
			if !slices.Equal(ds.Classes, wantClasses) || !slices.Equal(ds.Samples, wantSamples) {
				t.Fatalf("seed %d %s: Discover\n  classes %q\n  samples %v\nnaive\n  classes %q\n  samples %v",
					seed, name, ds.Classes, ds.Samples, wantClasses, wantSamples)
			}
		}
	}
}

// concurrencyStore records how many class listings (List calls below
// the root) run at once. The first ones wait until want of them run
// together (or a minute, a failure backstop), so the peak does not depend
// on how the scheduler interleaves them on a loaded machine.
type concurrencyStore struct {
	storage.Store
	want      int64
	now, peak atomic.Int64
	full      chan struct{} // closed once want calls ran at once
	once      sync.Once
}

func (c *concurrencyStore) List(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	if prefix == "" {
		return c.Store.List(ctx, prefix, fn) // the root: finding the classes
	}
	n := c.now.Add(1)
	defer c.now.Add(-1)
	for {
		p := c.peak.Load()
		if n <= p || c.peak.CompareAndSwap(p, n) {
			break
		}
	}
	if n >= c.want {
		c.once.Do(func() { close(c.full) })
	}
	select {
	case <-c.full:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Minute):
	}
	return c.Store.List(ctx, prefix, fn)
}

func TestDiscoverBoundedConcurrencyAndErrors(t *testing.T) {
	baseline := runtime.NumGoroutine()
	defer func() {
		// No listing goroutine outlives Discover.
		deadline := time.Now().Add(30 * time.Second) // a backstop: the loop ends as soon as they are gone
		for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > baseline {
			t.Errorf("%d goroutines left running after Discover returned (baseline %d)", n-baseline, baseline)
		}
	}()
	mem := storage.NewMemStore(t.Name())
	for c := range 40 {
		fill(t, mem, fmt.Sprintf("c%02d/1.jpg", c))
	}
	cs := &concurrencyStore{Store: mem, want: 4, full: make(chan struct{})}
	ds := discover(t, cs, dataset.DiscoverOptions{Concurrency: 4})
	if len(ds.Samples) != 40 || len(ds.Classes) != 40 {
		t.Fatalf("got %d samples, %d classes", len(ds.Samples), len(ds.Classes))
	}
	if p := cs.peak.Load(); p != 4 {
		t.Errorf("peak concurrent class listings %d, want 4", p)
	}

	// A failing class listing fails discovery and names the class.
	fs := faulty.Wrap(mem, faulty.Rule{Ops: faulty.OpList, Key: faulty.Equals("c17/")})
	_, err := dataset.Discover(context.Background(), fs, dataset.DiscoverOptions{Concurrency: 4})
	if !errors.Is(err, faulty.ErrInjected) || !strings.Contains(err.Error(), `class "c17"`) {
		t.Fatalf("Discover with a failing class: %v", err)
	}

	// Cancellation stops it: the class listings are held on a fake clock
	// that never moves, so Discover returns only if it honours ctx.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := clock.NewFake(time.Time{})
	slow := faulty.Wrap(mem, faulty.Rule{Ops: faulty.OpList, Delay: time.Second, NoError: true, Clock: fc})
	done := make(chan error, 1)
	go func() {
		_, err := dataset.Discover(ctx, slow, dataset.DiscoverOptions{})
		done <- err
	}()
	backstop, cancelBackstop := context.WithTimeout(context.Background(), time.Minute)
	defer cancelBackstop()
	if err := fc.BlockUntil(backstop, 1); err != nil {
		t.Fatalf("no class listing started: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled Discover: %v", err)
		}
	case <-backstop.Done():
		t.Fatal("canceled Discover did not return")
	}
}
