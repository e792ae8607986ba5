package dataset

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/longshore/longshore/storage"
)

// endlessLine is a manifest of one good line, then a line of filler that
// goes on for limit bytes (a line with no end, as far as a parser that
// holds a line before it looks at it is concerned), counting what was read.
type endlessLine struct {
	head   []byte
	filler byte
	every  int // > 0: a '\n' after every that many filler bytes
	left   int // filler bytes still to give
	n      int // filler given so far
	read   int // bytes read in all
}

func (r *endlessLine) Read(b []byte) (int, error) {
	if len(r.head) > 0 {
		n := copy(b, r.head)
		r.head = r.head[n:]
		r.read += n
		return n, nil
	}
	if r.left == 0 {
		return 0, io.EOF
	}
	n := min(len(b), r.left)
	for i := range n {
		r.n++
		b[i] = r.filler
		if r.every > 0 && r.n%r.every == 0 {
			b[i] = '\n'
		}
	}
	r.left -= n
	r.read += n
	return n, nil
}

// TestManifestLineLimit: a CSV line (or a quoted CSV record over many
// lines) longer than maxManifestLine is an error naming its line, as it
// is in JSON lines, and the parser stops reading soon after the limit
// instead of holding the whole line.
func TestManifestLineLimit(t *testing.T) {
	const total = 32 << 20 // what an unbounded parser would read and hold
	cases := []struct {
		name   string
		format ManifestFormat
		r      *endlessLine
	}{
		{"csv", ManifestCSV, &endlessLine{head: []byte("key,label\na,1\n"), filler: 'x', left: total}},
		{"csv quoted record", ManifestCSV, &endlessLine{head: []byte("key,label\na,1\n\"b"), filler: 'x', every: 100, left: total}},
		{"jsonl", ManifestJSONL, &endlessLine{head: []byte(`{"key":"a","label":1}` + "\n"), filler: 'x', left: total}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseManifest(c.r, c.format)
			var me *ManifestError
			if !errors.As(err, &me) || !strings.Contains(me.Msg, "line longer than") && !strings.Contains(me.Msg, "record longer than") {
				t.Fatalf("err = %v, want a ManifestError saying the line is too long", err)
			}
			wantLine := 2
			if c.format == ManifestCSV {
				wantLine = 3
			}
			if me.Line != wantLine {
				t.Errorf("error names line %d, want %d: %v", me.Line, wantLine, err)
			}
			if limit := maxManifestLine + 2*csvBufferSize + 64<<10; c.r.read > limit {
				t.Errorf("read %d bytes before refusing the line, want at most %d", c.r.read, limit)
			}
		})
	}
}

// TestScanManifestLineLimit: ScanManifest, which cuts a manifest into
// pieces before parsing them, refuses a line over the limit too, without
// reading on to its end.
func TestScanManifestLineLimit(t *testing.T) {
	for _, c := range []struct{ name, key, want string }{{"csv", "m.csv", "line longer than"}, {"jsonl", "m.jsonl", "line longer than"}, {"csv quoted record", "m.csv", "record longer than"}} {
		key := c.key
		t.Run(c.name, func(t *testing.T) {
			head := "a,1\n"
			if strings.HasSuffix(key, ".jsonl") {
				head = `{"key":"a","label":1}` + "\n"
			}
			mem := storage.NewMemStore("t")
			body := head + strings.Repeat("x", 16*maxManifestLine) + "\n" + head
			if c.want == "record longer than" {
				body = head + `"b` + strings.Repeat(strings.Repeat("x", 99)+"\n", 16*maxManifestLine/100) + "\",1\n" + head
			}
			if _, err := mem.Put(context.Background(), key, []byte(body), storage.Cond{}); err != nil {
				t.Fatal(err)
			}
			defer func(p int64) { manifestPiece = p }(manifestPiece)
			manifestPiece = 64 << 10
			s := storage.NewCountingStore(mem)
			_, err := ScanManifest(context.Background(), s, key, ScanOptions{})
			var me *ManifestError
			if !errors.As(err, &me) || !strings.Contains(me.Msg, c.want) || me.Line != 2 {
				t.Fatalf("err = %v, want a ManifestError: line 2 longer than the limit", err)
			}
			if read, limit := s.Stats().BytesRead, int64(maxManifestLine+(2<<20)); read > limit {
				t.Errorf("read %d bytes of the manifest before refusing the line, want at most %d", read, limit)
			}
		})
	}
}
