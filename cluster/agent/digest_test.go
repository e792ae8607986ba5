package agent

import (
	"testing"

	"github.com/longshore/longshore/storage"
)

func TestManifestDigest(t *testing.T) {
	plain := &storage.Dataset{Classes: []string{"a", "b"}, Samples: []storage.Sample{{Key: "a/1.jpg", Label: 0}, {Key: "b/2.jpg", Label: 1}}}
	// The digest of a dataset without packed samples is what it was
	// before packing existed: old nodes and new coordinators agree.
	if got, want := ManifestDigest(plain), "2:6fc2b8460fd2ec34"; got != want {
		t.Errorf("plain digest = %s, want %s", got, want)
	}
	packed := func(off1 int64, obj string) *storage.Dataset {
		return &storage.Dataset{Classes: plain.Classes, Samples: []storage.Sample{
			{Key: "s/0.tar/a/1.jpg", Label: 0, Object: obj, Offset: 512, Size: 100},
			{Key: "s/0.tar/b/2.jpg", Label: 1, Object: obj, Offset: off1, Size: 200},
		}}
	}
	base := ManifestDigest(packed(1024, "s/0.tar"))
	for name, ds := range map[string]*storage.Dataset{
		"other offset": packed(1536, "s/0.tar"),
		"other object": packed(1024, "s/1.tar"),
		"unpacked":     {Classes: plain.Classes, Samples: []storage.Sample{{Key: "s/0.tar/a/1.jpg"}, {Key: "s/0.tar/b/2.jpg", Label: 1}}},
	} {
		if ManifestDigest(ds) == base {
			t.Errorf("%s: same digest %s as the original packing", name, base)
		}
	}
	if again := ManifestDigest(packed(1024, "s/0.tar")); again != base {
		t.Errorf("digest not deterministic: %s then %s", base, again)
	}
}
