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
		samples, err := indexTar(ctx, m, storage.ObjectInfo{Key: "shards/s.tar", Size: int64(len(data))}, imageExts)
		if err != nil {
			return
		}
		stems := map[string]bool{}
		for _, s := range samples {
			im := s.image
			if im.Offset < 0 || im.Size < 0 || im.Offset+im.Size > int64(len(data)) {
				t.Fatalf("sample %+v lies outside the %d-byte object", s, len(data))
			}
			if err := storage.CheckKey("shards/s.tar/" + im.Name); err != nil {
				t.Fatalf("sample %+v: %v", s, err)
			}
			if s.label < 0 || s.label >= dataset.MaxClasses {
				t.Fatalf("sample %+v: label out of range", s)
			}
			stem := im.Name[:strings.LastIndexByte(im.Name, '/')+1] + strings.SplitN(im.Name[strings.LastIndexByte(im.Name, '/')+1:], ".", 2)[0]
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

var imageExts, _ = sampleExts("image")
