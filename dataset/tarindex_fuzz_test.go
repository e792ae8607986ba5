package dataset_test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/longshore/longshore/dataset"
)

// FuzzIndexTar indexes arbitrary bytes as a tar archive, read as a stream
// and through a seeker (both ways the packer reads): neither may panic,
// both must agree, and every member found must lie inside the input and
// hold exactly the bytes archive/tar reads for it.
func FuzzIndexTar(f *testing.F) {
	var shard bytes.Buffer
	dataset.WriteTarShard(&shard, []string{"a/1.jpg", "a/1.cls", "b/2.png"}, [][]byte{[]byte("jpeg"), []byte("3"), []byte("png!")})
	f.Add(shard.Bytes())
	var pax bytes.Buffer
	tw := tar.NewWriter(&pax)
	tw.WriteHeader(&tar.Header{Name: strings.Repeat("long/", 40) + "x.jpg", Mode: 0o644, Size: 3, Format: tar.FormatPAX})
	tw.Write([]byte("abc"))
	tw.WriteHeader(&tar.Header{Name: "dir/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "x.jpg"})
	tw.Close()
	f.Add(pax.Bytes())
	f.Add(shard.Bytes()[:700])
	f.Fuzz(func(t *testing.T, data []byte) {
		var streamed []dataset.TarMember
		errStream := dataset.IndexTar(io.MultiReader(bytes.NewReader(data)), func(m dataset.TarMember) error {
			streamed = append(streamed, m)
			return nil
		})
		seeked, errSeek := dataset.ReadTarIndex(bytes.NewReader(data))
		if (errStream == nil) != (errSeek == nil) {
			t.Fatalf("streamed: %v; seeked: %v", errStream, errSeek)
		}
		for _, err := range []error{errStream, errSeek} {
			if err != nil && !errors.Is(err, dataset.ErrBadTar) {
				t.Fatalf("error %v does not wrap ErrBadTar", err)
			}
		}
		if errStream != nil {
			return
		}
		if len(streamed) != len(seeked) {
			t.Fatalf("%d members streamed, %d seeked", len(streamed), len(seeked))
		}
		tr := tar.NewReader(bytes.NewReader(data))
		i := 0
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			if h.Typeflag != tar.TypeReg {
				continue
			}
			m := streamed[i]
			if m != seeked[i] || m.Name != h.Name || m.Offset < 0 || m.Size < 0 || m.Offset+m.Size > int64(len(data)) {
				t.Fatalf("member %d: streamed %+v, seeked %+v, tar says %q of %d bytes, in %d bytes", i, m, seeked[i], h.Name, h.Size, len(data))
			}
			body, err := io.ReadAll(tr)
			if err == nil && !bytes.Equal(body, data[m.Offset:m.Offset+m.Size]) {
				t.Fatalf("member %q: its range does not hold its bytes", m.Name)
			}
			i++
		}
	})
}

// FuzzReadExclusions: any input is read or refused with the line named,
// never a panic; what is read, written back as quarantine lines, reads
// the same.
func FuzzReadExclusions(f *testing.F) {
	f.Add([]byte("\xef\xbb\xbf# q\r\n{\"key\":\"a b.jpg\",\"reason\":\"corrupt\"}\r\nc/ü.png\n"))
	f.Add([]byte("{\"key\": 3}\n"))
	f.Add([]byte("{\"key\":\"x\"}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ex, err := dataset.ReadExclusions(bytes.NewReader(data))
		if err != nil {
			if !strings.Contains(err.Error(), "line") {
				t.Fatalf("error %v does not name a line", err)
			}
			return
		}
		var back bytes.Buffer
		for k, why := range ex {
			if k == "" {
				t.Fatal("an empty key was read")
			}
			b, _ := jsonLine(dataset.ExclusionLine{Key: k, Reason: why})
			back.Write(b)
		}
		again, err := dataset.ReadExclusions(&back)
		if err != nil || len(again) != len(ex) {
			t.Fatalf("written back: %d keys, %v; want %d", len(again), err, len(ex))
		}
		for k, why := range ex {
			if w, ok := again[k]; !ok || w != why {
				t.Fatalf("key %q: %q read back as %q, %v", k, why, w, ok)
			}
		}
	})
}

func jsonLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	return append(b, '\n'), err
}
