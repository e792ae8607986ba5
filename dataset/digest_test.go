package dataset

import (
	"context"
	"testing"

	"github.com/longshore/longshore/storage"
)

func TestManifestDigest(t *testing.T) {
	plain := &Dataset{Classes: []string{"a", "b"}, Samples: []Sample{{Key: "a/1.jpg", Label: 0}, {Key: "b/2.jpg", Label: 1}}}
	// The digest of a dataset without packed samples is what it was
	// before packing existed: old nodes and new coordinators agree.
	if got, want := ManifestDigest(plain), "2:6fc2b8460fd2ec34"; got != want {
		t.Errorf("plain digest = %s, want %s", got, want)
	}
	packed := func(off1 int64, obj string) *Dataset {
		return &Dataset{Classes: plain.Classes, Objects: []string{obj}, Samples: []Sample{
			{Key: "s/0.tar/a/1.jpg", Label: 0, Object: 1, Offset: 512, Size: 100},
			{Key: "s/0.tar/b/2.jpg", Label: 1, Object: 1, Offset: off1, Size: 200},
		}}
	}
	base := ManifestDigest(packed(1024, "s/0.tar"))
	// Pinned before Sample held its object as an index into
	// Dataset.Objects: the layout must not change the digest.
	if want := "2:9f822eba43e5b9b0"; base != want {
		t.Errorf("packed digest = %s, want %s", base, want)
	}
	for name, ds := range map[string]*Dataset{
		"other offset": packed(1536, "s/0.tar"),
		"other object": packed(1024, "s/1.tar"),
		"unpacked":     {Classes: plain.Classes, Samples: []Sample{{Key: "s/0.tar/a/1.jpg"}, {Key: "s/0.tar/b/2.jpg", Label: 1}}},
	} {
		if ManifestDigest(ds) == base {
			t.Errorf("%s: same digest %s as the original packing", name, base)
		}
	}
	if again := ManifestDigest(packed(1024, "s/0.tar")); again != base {
		t.Errorf("digest not deterministic: %s then %s", base, again)
	}
	// The objects' keys count, not their IDs.
	renumbered := packed(1024, "s/0.tar")
	renumbered.Objects = []string{"s/9.tar", "s/0.tar"}
	for i := range renumbered.Samples {
		renumbered.Samples[i].Object = 2
	}
	if got := ManifestDigest(renumbered); got != base {
		t.Errorf("digest with the object at another ID = %s, want %s", got, base)
	}
}

// TestManifestDigestPinned pins digests computed before Sample held its
// object as an index into Dataset.Objects: nodes and coordinators of one
// job compare them, so a change of the Sample layout must not change
// them.
func TestManifestDigestPinned(t *testing.T) {
	const manifest = `{"key":"s/0.tar/a/1.jpg","label":"a","object":"s/0.tar","offset":512,"size":100}
{"key":"s/0.tar/b/2.jpg","label":"b","object":"s/0.tar","offset":1024,"size":0}
{"key":"plain/c.jpg","label":"a"}
{"key":"s/1.tar/b/3.jpg","label":"b","object":"s/1.tar","offset":9223372036854775000,"size":807}
{"key":"s/0.tar/a/4.jpg","label":"a","object":"s/0.tar","offset":2048,"size":7}
`
	for _, tc := range []struct {
		name, dir, want string
	}{
		{"root", "", "5:9e66089b9c140e6b"},
		{"below a directory", "sub/", "5:db698c16f2c436be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := storage.NewMemStore(t.Name())
			if _, err := s.Put(context.Background(), tc.dir+ManifestJSONLName, []byte(manifest), storage.Cond{}); err != nil {
				t.Fatal(err)
			}
			ds, err := Discover(context.Background(), s, DiscoverOptions{Root: tc.dir})
			if err != nil {
				t.Fatal(err)
			}
			if got := ManifestDigest(ds); got != tc.want {
				t.Errorf("digest = %s, want %s", got, tc.want)
			}
		})
	}
}
