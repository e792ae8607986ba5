package dataset_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/dataset"
)

// tarFile is one member to write into a test archive.
type tarFile struct {
	name string
	data []byte
	typ  byte // 0: regular file
}

// tarMembers are names and contents that exercise every header form:
// ustar, a name over ustar's 100 bytes (prefix field), one over 255 (PAX
// or GNU long name), non-ASCII (PAX), an empty file, sizes around the
// 512-byte block.
func tarMembers() []tarFile {
	long := strings.Repeat("d", 120) + "/" + strings.Repeat("e", 90) + ".jpg"
	longer := strings.Repeat("x/", 150) + "deep.jpg"
	return []tarFile{
		{name: "a/", typ: tar.TypeDir},
		{name: "a/1.jpg", data: bytes.Repeat([]byte{1}, 511)},
		{name: "a/2.jpg", data: bytes.Repeat([]byte{2}, 512)},
		{name: "a/empty.jpg", data: nil},
		{name: "a/link.jpg", typ: tar.TypeSymlink},
		{name: long, data: bytes.Repeat([]byte{3}, 513)},
		{name: longer, data: bytes.Repeat([]byte{4}, 7000)},
		{name: "b/ünïcødé.jpg", data: []byte("unicode")},
		{name: "b/last.cls", data: []byte("7\n")},
	}
}

func writeTar(t *testing.T, format tar.Format, files []tarFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: time.Unix(1700000000, 0), Format: format, Typeflag: tar.TypeReg}
		switch f.typ {
		case tar.TypeDir:
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
		case tar.TypeSymlink:
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, "1.jpg", 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("%v %s: %v", format, f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// checkIndex indexes raw both as a stream and through a seeker and checks
// that every regular member's range holds exactly its content.
func checkIndex(t *testing.T, raw []byte, want map[string][]byte, order []string) {
	t.Helper()
	stream, err := dataset.ReadTarIndex(io.MultiReader(bytes.NewReader(raw))) // no Seek
	if err != nil {
		t.Fatalf("index (stream): %v", err)
	}
	seeked, err := dataset.ReadTarIndex(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("index (seeker): %v", err)
	}
	if !slices.Equal(stream, seeked) {
		t.Fatalf("stream and seeker disagree:\n%v\n%v", stream, seeked)
	}
	var names []string
	for _, m := range stream {
		names = append(names, m.Name)
		data, ok := want[m.Name]
		if !ok {
			t.Errorf("member %q not expected", m.Name)
			continue
		}
		if m.Size != int64(len(data)) || m.Offset < 0 || m.Offset+m.Size > int64(len(raw)) {
			t.Errorf("%s: range [%d,+%d) in a %d-byte archive, want size %d", m.Name, m.Offset, m.Size, len(raw), len(data))
			continue
		}
		if got := raw[m.Offset : m.Offset+m.Size]; !bytes.Equal(got, data) {
			t.Errorf("%s: bytes at [%d,+%d) are not the member's", m.Name, m.Offset, m.Size)
		}
	}
	if !slices.Equal(names, order) {
		t.Errorf("members %q, want %q", names, order)
	}
}

func regular(files []tarFile) (map[string][]byte, []string) {
	want := map[string][]byte{}
	var order []string
	for _, f := range files {
		if f.typ == 0 {
			want[f.name] = f.data
			order = append(order, f.name)
		}
	}
	return want, order
}

func TestIndexTarGoWriter(t *testing.T) {
	for _, format := range []tar.Format{tar.FormatUnknown, tar.FormatPAX, tar.FormatGNU} {
		t.Run(format.String(), func(t *testing.T) {
			files := tarMembers()
			if format == tar.FormatGNU {
				files = slices.DeleteFunc(files, func(f tarFile) bool { return strings.ContainsRune(f.name, 'ü') })
			}
			raw := writeTar(t, format, files)
			want, order := regular(files)
			checkIndex(t, raw, want, order)
		})
	}
	t.Run("ustar", func(t *testing.T) {
		files := tarMembers()[:5] // short ASCII names only
		raw := writeTar(t, tar.FormatUSTAR, files)
		want, order := regular(files)
		checkIndex(t, raw, want, order)
	})
}

// TestIndexTarGNU indexes archives written by GNU tar in each of its
// formats, with long and non-ASCII names.
func TestIndexTarGNU(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("no tar command")
	}
	if out, _ := exec.Command("tar", "--version").Output(); !bytes.Contains(out, []byte("GNU tar")) {
		t.Skip("tar is not GNU tar")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	files := tarMembers()
	want, order := map[string][]byte{}, []string{}
	for _, f := range files {
		if f.typ != 0 {
			continue
		}
		p := filepath.Join(src, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.data, 0o644); err != nil {
			t.Fatal(err)
		}
		want[f.name] = f.data
		order = append(order, f.name)
	}
	for _, format := range []string{"gnu", "oldgnu", "posix", "ustar"} {
		t.Run(format, func(t *testing.T) {
			names := order
			if format == "ustar" || format == "oldgnu" {
				// ustar cannot hold names over 255 bytes; keep the short ones.
				names = slices.DeleteFunc(slices.Clone(order), func(n string) bool { return len(n) > 100 })
			}
			out := filepath.Join(dir, format+".tar")
			args := append([]string{"--format=" + format, "-C", src, "-cf", out}, names...)
			if b, err := exec.Command("tar", args...).CombinedOutput(); err != nil {
				t.Fatalf("tar %v: %v\n%s", args, err, b)
			}
			raw, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			sub := map[string][]byte{}
			for _, n := range names {
				sub[n] = want[n]
			}
			checkIndex(t, raw, sub, names)
		})
	}
	// A sparse file is refused: its data is not one range.
	t.Run("sparse", func(t *testing.T) {
		p := filepath.Join(dir, "holes.bin")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte("x"), 1<<20)
		f.Close()
		out := filepath.Join(dir, "sparse.tar")
		if b, err := exec.Command("tar", "--format=posix", "--sparse", "-C", dir, "-cf", out, "holes.bin").CombinedOutput(); err != nil {
			t.Fatalf("tar: %v\n%s", err, b)
		}
		raw, _ := os.ReadFile(out)
		_, err = dataset.ReadTarIndex(bytes.NewReader(raw))
		if !errors.Is(err, dataset.ErrBadTar) || !strings.Contains(err.Error(), "sparse") {
			t.Errorf("sparse member: err = %v, want ErrBadTar naming sparse", err)
		}
	})
}

func TestIndexTarErrors(t *testing.T) {
	raw := writeTar(t, tar.FormatPAX, tarMembers())
	// Truncated inside a member's data or header: ErrBadTar.
	for _, cut := range []int{100, 700, len(raw) / 2} {
		_, err := dataset.ReadTarIndex(bytes.NewReader(raw[:cut]))
		if !errors.Is(err, dataset.ErrBadTar) {
			t.Errorf("cut at %d: err = %v, want ErrBadTar", cut, err)
		}
	}
	// Not a tar at all.
	if _, err := dataset.ReadTarIndex(strings.NewReader(strings.Repeat("not a tar ", 100))); !errors.Is(err, dataset.ErrBadTar) {
		t.Errorf("garbage: err = %v, want ErrBadTar", err)
	}
	// fn's error stops the indexing and comes back as is.
	stop := errors.New("stop")
	n := 0
	err := dataset.IndexTar(bytes.NewReader(raw), func(dataset.TarMember) error {
		if n++; n == 2 {
			return stop
		}
		return nil
	})
	if err != stop || n != 2 {
		t.Errorf("err = %v after %d members, want stop after 2", err, n)
	}
	// An empty archive (just the end blocks) has no members.
	empty := writeTar(t, tar.FormatPAX, nil)
	if ms, err := dataset.ReadTarIndex(bytes.NewReader(empty)); err != nil || len(ms) != 0 {
		t.Errorf("empty archive: %v, %v", ms, err)
	}
}
