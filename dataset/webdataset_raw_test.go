package dataset_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// textShard writes a WebDataset tar of text samples under key: sample i
// is i.txt ("document i") and, when withJSON, i.json ({"n": i}).
func textShard(t *testing.T, s storage.Store, key string, n int, withJSON bool) {
	t.Helper()
	var names []string
	var datas [][]byte
	for i := range n {
		names = append(names, fmt.Sprintf("d%03d.txt", i))
		datas = append(datas, []byte(fmt.Sprintf("document %d", i)))
		if withJSON {
			names = append(names, fmt.Sprintf("d%03d.json", i))
			datas = append(datas, []byte(fmt.Sprintf(`{"n": %d}`, i)))
		}
	}
	var b bytes.Buffer
	if _, err := dataset.WriteTarShard(&b, names, datas); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(context.Background(), key, b.Bytes(), storage.Cond{}); err != nil {
		t.Fatal(err)
	}
}

// Raw samples from WebDataset tars of text: --media raw takes a sample's
// one member as its bytes, whatever its extension; a sample of several
// members needs --media raw:EXT to say which is the data (the others
// become fields, as for images). Before, a tar of text alone held no
// sample at all ("hold no samples").
func TestWebDatasetRawMembers(t *testing.T) {
	ctx := context.Background()
	exts := func(media string) []string {
		e, err := dataset.MediaExtensions(media)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	s := storage.NewMemStore("raw")
	textShard(t, s, "plain/a.tar", 4, false)
	ds := discover(t, s, dataset.DiscoverOptions{Root: "plain", Extensions: exts("raw")})
	if len(ds.Samples) != 4 || ds.Samples[2].Key != "plain/a.tar/d002.txt" {
		t.Fatalf("--media raw over text-only samples: %d samples (%+v)", len(ds.Samples), ds.Samples)
	}

	textShard(t, s, "both/a.tar", 4, true)
	_, err := dataset.Discover(ctx, s, dataset.DiscoverOptions{Root: "both", Extensions: exts("raw")})
	if !errors.Is(err, dataset.ErrBadTar) || !strings.Contains(err.Error(), "--media raw:") || !strings.Contains(err.Error(), "d000.json") {
		t.Fatalf("--media raw over samples of two members: %v, want it to ask which (--media raw:EXT)", err)
	}
	ds = discover(t, s, dataset.DiscoverOptions{Root: "both", Extensions: exts("raw:txt")})
	if len(ds.Samples) != 4 || ds.Samples[3].Key != "both/a.tar/d003.txt" {
		t.Fatalf("--media raw:txt: %d samples (%+v)", len(ds.Samples), ds.Samples)
	}
	if got := ds.Fields.Schema().String(); got != "json.n:int" {
		t.Fatalf("--media raw:txt fields %s, want the .json member's", got)
	}
	ps, err := dataset.NewPackedStore(s, ds, dataset.PackedConfig{Block: 4, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	for i, smp := range ds.Samples {
		b, err := ps.GetSample(ctx, int64(i), smp.Key, nil)
		n, _ := ds.Fields.Get(i, "json.n")
		if err != nil || string(b) != fmt.Sprintf("document %d", i) || n.Int != int64(i) {
			t.Errorf("sample %d: %q (%v), json.n %v", i, b, err, n)
		}
	}

	for media, want := range map[string]string{
		"raw:":        "names no member",
		"raw:txt,":    "names no member",
		"raw:a/b":     "a/b",
		"image:jpg":   "only raw",
		"raw:txt,TXT": "twice",
	} {
		if _, err := dataset.MediaExtensions(media); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--media %q: %v, want an error saying %q", media, err, want)
		}
	}
	if got := exts("raw:.TXT,seg.npy"); strings.Join(got, " ") != ".txt .seg.npy" {
		t.Errorf("raw:.TXT,seg.npy: %q", got)
	}
}
