package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
)

// FuzzWebDataset groups the members of an arbitrary tar into WebDataset
// samples (stem.jpg + stem.cls) as --index does: no input may panic, and
// every sample it accepts has a valid key, an image member inside the
// object, a label in range, and a stem of its own.
func FuzzWebDataset(f *testing.F) {
	for _, set := range [][2][]string{
		{{"s/0001.jpg", "s/0001.cls", "s/0002.png", "s/0002.cls"}, {"jpeg", "3", "png!", " 7\n"}},
		{{"0001.jpg", "0001.JPG", "0001.cls"}, {"a", "b", "1"}},
		{{"./a.b.c.webp", "./a.cls", "meta.json"}, {"w", "99999999999", "{}"}},
		{{"x.cls"}, {"1"}},
	} {
		var b bytes.Buffer
		if _, err := dataset.WriteTarShard(&b, set[0], bytesOf(set[1])); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		m := storage.NewMemStore("fuzz")
		if _, err := m.Put(ctx, "shards/s.tar", data, storage.Cond{}); err != nil {
			t.Fatal(err)
		}
		ds, _, err := dataset.IndexWebDataset(ctx, m, "", dataset.DiscoverOptions{})
		if err != nil {
			return
		}
		stems := map[string]bool{}
		for _, s := range ds.Samples {
			name, ok := strings.CutPrefix(s.Key, "shards/s.tar/")
			if !ok || ds.ObjectOf(s) != "shards/s.tar" {
				t.Fatalf("sample %+v: not a member of shards/s.tar", s)
			}
			if s.Offset < 0 || s.Size < 0 || s.Offset+s.Size > int64(len(data)) {
				t.Fatalf("sample %+v lies outside the %d-byte object", s, len(data))
			}
			if err := storage.CheckKey(s.Key); err != nil {
				t.Fatalf("sample %+v: %v", s, err)
			}
			if s.Label < 0 || s.Label >= dataset.MaxClasses {
				t.Fatalf("sample %+v: label out of range", s)
			}
			stem := name[:strings.LastIndexByte(name, '/')+1] + strings.SplitN(name[strings.LastIndexByte(name, '/')+1:], ".", 2)[0]
			if stems[stem] {
				t.Fatalf("two samples of stem %q", stem)
			}
			stems[stem] = true
		}
	})
}

func bytesOf(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}
