package dataset

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/longshore/longshore/storage"
)

// parseBoth parses data with the streaming parser, in the configuration
// small picks (tiny buffers, blocks of keys and reads, to reach their
// edges) and with a prefix, and with the reference parser, and fails t
// unless both give the same Dataset (the prefix before each key) or the
// same error.
func parseBoth(t *testing.T, data []byte, format ManifestFormat, small bool, prefix string) (*Dataset, error) {
	t.Helper()
	want, wantErr := refParseManifest(bytes.NewReader(data), format)
	if wantErr == nil {
		for i := range want.Samples {
			want.Samples[i].Key = prefix + want.Samples[i].Key
		}
	}
	var r io.Reader = bytes.NewReader(data)
	block, buf := keyBlockSize, csvBufferSize
	if small {
		r, block, buf = iotest.HalfReader(r), 1, 16
	}
	got, err := parseManifestSized(r, format, newManifestBuilder(prefix, block), buf)
	switch {
	case (err == nil) != (wantErr == nil):
		t.Fatalf("%s manifest %q (small %v, prefix %q):\ngot error %v\nwant %v", format, data, small, prefix, err, wantErr)
	case err != nil:
		var me, wantMe *ManifestError
		if err.Error() != wantErr.Error() || errors.As(err, &me) != errors.As(wantErr, &wantMe) || errors.Is(err, ErrEmptyDataset) != errors.Is(wantErr, ErrEmptyDataset) {
			t.Fatalf("%s manifest %q (small %v, prefix %q):\ngot error  %v\nwant error %v", format, data, small, prefix, err, wantErr)
		}
	case !sameDataset(got, want) || (got.Objects == nil) != (want.Objects == nil):
		t.Fatalf("%s manifest %q (small %v, prefix %q):\ngot  %+v\nwant %+v", format, data, small, prefix, got, want)
	}
	return got, err
}

// FuzzManifestReference holds the streaming parser to the one that read
// every row before checking any (manifest_ref_test.go): the same Dataset
// or the same error, for every input, with buffers of every size.
func FuzzManifestReference(f *testing.F) {
	for _, seed := range manifestSeeds {
		f.Add([]byte(seed.data), seed.jsonl, false, false)
		f.Add([]byte(seed.data), seed.jsonl, true, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, jsonl, small, prefixed bool) {
		format := ManifestCSV
		if jsonl {
			format = ManifestJSONL
		}
		prefix := ""
		if prefixed {
			prefix = "data/set/"
		}
		parseBoth(t, data, format, small, prefix)
	})
}

// TestManifestMatchesReference generates manifests of many rows — keys
// that repeat, bad keys and labels, quoting, blank lines, packed samples,
// escapes — which random bytes rarely make, and holds the streaming
// parser to the reference on each.
func TestManifestMatchesReference(t *testing.T) {
	for seed := range uint64(1000) {
		rng := rand.New(rand.NewPCG(seed, 1))
		jsonl := seed%2 == 1
		data := randomManifest(rng, jsonl)
		format := ManifestCSV
		if jsonl {
			format = ManifestJSONL
		}
		for _, small := range []bool{false, true} {
			for _, prefix := range []string{"", "d/"} {
				parseBoth(t, data, format, small, prefix)
			}
		}
	}
}

// randomManifest writes a manifest of up to 60 rows, most of them fine.
func randomManifest(rng *rand.Rand, jsonl bool) []byte {
	rare := func(per1000 int) bool { return rng.IntN(1000) < per1000 }
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	names := rng.IntN(2) == 0 // class names, else integers
	var b bytes.Buffer
	// A CSV header with field columns: caption (string), n (int), score
	// (float), after the location columns or not.
	withFields, located := false, false
	if !jsonl && rng.IntN(2) == 0 {
		if rare(100) {
			b.WriteString("\ufeff")
		}
		header := pick("key,label\n", "path,class\n", "key,label,object,offset,size\n", "File , Target\r\n",
			"key,label,caption,n:int,score: float\n", "key,label,object,offset,size,caption:str,n:int,score:float\n")
		withFields = strings.Contains(header, "caption")
		located = strings.Contains(header, "object")
		if rare(30) {
			header = pick("key,label,caption,caption\n", "key,label,x:list\n", "key,label,size\n", "key,label,\n", "key,label,a,0,x\n")
		}
		b.WriteString(header)
	}
	rows := rng.IntN(60)
	for i := range rows {
		key := fmt.Sprintf("c%d/k%d.jpg", rng.IntN(5), rng.IntN(rows*40+1))
		switch {
		case rare(4):
			key = pick("", "../x", "a//b", "/abs", ".longshore-x", "a\xffb", strings.Repeat("k", 1100))
		case rare(10):
			key = fmt.Sprintf("c0/k%d.jpg", rng.IntN(3)) // a likely duplicate
		}
		label := strconv.Itoa(rng.IntN(7))
		if names {
			label = pick("cat", "dog", "ant", "zebra", "Émeu")
		}
		switch {
		case rare(4):
			label = pick("", "-1", "1048576", "99999999999", "2147483648", "x\xff", " 3 ", "cat")
		case rare(3) && !names:
			label = "cat" // CSV: names after all; JSON: mixed
		}
		packed := rare(300)
		object, offset, size := fmt.Sprintf("s/%d.tar", rng.IntN(3)), strconv.Itoa(rng.IntN(5000)), strconv.Itoa(rng.IntN(100))
		if packed && rare(10) {
			object, offset, size = pick(object, "", "../t", "s//t"), pick(offset, "", "-5", "x", "9223372036854775807"), pick(size, "", "-1", "1.5", "9")
		}
		if rare(40) {
			b.WriteString(pick("\n", "\r\n", "\n\n", "\n", "\r\n", "\n\n", "  \n"))
		}
		if jsonl {
			writeJSONRow(&b, rng, key, label, names, packed, object, offset, size)
		} else {
			writeCSVRow(&b, rng, key, label, packed, object, offset, size, withFields, located)
		}
		if i < rows-1 || rng.IntN(2) == 0 {
			b.WriteString(pick("\n", "\n", "\n", "\r\n"))
		}
	}
	if rare(30) {
		b.WriteString(pick("\"", "a,\"b", "{", ",,,", "x\r"))
	}
	return b.Bytes()
}

func writeCSVRow(b *bytes.Buffer, rng *rand.Rand, key, label string, packed bool, object, offset, size string, withFields, located bool) {
	field := func(s string) string {
		if rng.IntN(10) == 0 || strings.ContainsAny(s, ",\"\n") {
			return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
		}
		if rng.IntN(20) == 0 {
			return " " + s
		}
		return s
	}
	fields := []string{field(key), field(label)}
	if withFields {
		if located || rng.IntN(50) == 0 {
			if !packed {
				object, offset, size = "", "", ""
			}
			fields = append(fields, field(object), field(offset), field(size))
		}
		pick := func(s ...string) string { return s[rng.IntN(len(s))] }
		fields = append(fields,
			field(pick("a cat", "", " spaced ", "with, comma", `say "hi"`, "multi\nline", "Émeu", "x\xff")),
			field(pick("1", "-7", "", " 42 ", "9223372036854775807", "x", "1.5")),
			field(pick("0.5", "1", "", "-2e3", " 3.25 ", "nan", "1e400", "y")))
		if rng.IntN(100) == 0 {
			fields = fields[:len(fields)-1]
		}
		b.WriteString(strings.Join(fields, ","))
		return
	}
	if packed || rng.IntN(10) == 0 {
		if !packed {
			object, offset, size = "", "", ""
		}
		fields = append(fields, field(object), field(offset), field(size))
	}
	if rng.IntN(1000) == 0 {
		fields = fields[:1]
	}
	b.WriteString(strings.Join(fields, ","))
}

func writeJSONRow(b *bytes.Buffer, rng *rand.Rand, key, label string, names, packed bool, object, offset, size string) {
	str := func(s string) string {
		q := strconv.Quote(s)
		if rng.IntN(10) == 0 {
			q = strings.ReplaceAll(q, "/", `\/`) // an escape the plain scanner leaves to encoding/json
		}
		return q
	}
	var members []string
	if rng.IntN(1000) != 0 {
		members = append(members, `"key":`+str(key))
	}
	_, err := strconv.Atoi(label)
	lab := label
	if err != nil || (names && rng.IntN(30) != 0) || rng.IntN(100) == 0 {
		lab = str(label)
	}
	members = append(members, `"label":`+lab)
	if packed {
		members = append(members, `"object":`+str(object), `"offset":`+offset, `"size":`+size)
		if rng.IntN(200) == 0 {
			members = members[:len(members)-1]
		}
	}
	switch rng.IntN(200) {
	case 0:
		members = append(members, `"extra":[1,{"a":null}]`)
	case 1:
		members = append(members, `"object":null`)
	case 2:
		members = append(members, `"Label":3`)
	}
	rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	sep := ","
	if rng.IntN(10) == 0 {
		sep = " , "
	}
	b.WriteString("{" + strings.Join(members, sep) + "}")
}

// TestManifestLongLines: lines longer than the read buffer, quoted or
// not, and keys filling blocks of keys.
func TestManifestLongLines(t *testing.T) {
	long := strings.Repeat("x", 200<<10)
	for _, tc := range []struct {
		name, data string
		jsonl      bool
	}{
		{"CSVLongKey", "a,1\n" + long[:1000] + ",2\nb,3\n", false},
		{"CSVLongLabel", "a," + long + "\nb,3\n", false},
		{"CSVLongQuoted", "a,\"" + long + "\n" + long + "\"\nb,3\n\"c\",4\n", false},
		{"CSVLongKeyTooLong", "a,1\n" + long + ",2\n", false},
		{"JSONLLongLabel", `{"key":"a","label":"` + long + `"}` + "\n" + `{"key":"b","label":"c"}`, true},
		{"JSONLTooLong", `{"key":"a","label":1}` + "\n\n" + `{"key":"b","label":"` + strings.Repeat(long, 6) + `"}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			format := ManifestCSV
			if tc.jsonl {
				format = ManifestJSONL
			}
			for _, small := range []bool{false, true} {
				parseBoth(t, []byte(tc.data), format, small, "")
			}
		})
	}
}

// TestManifestManySamples: more samples than a chunk of sampleRecs and a
// block of keys, in order, shuffled (the hashed duplicate search), and
// with a duplicate near the end.
func TestManifestManySamples(t *testing.T) {
	const n = 2*recChunk + 17
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("train/c%03d/img%07d.jpg", i%100, i)
	}
	write := func(keys []string) []byte {
		var b bytes.Buffer
		b.WriteString("key,label\n")
		for i, k := range keys {
			fmt.Fprintf(&b, "%s,%d\n", k, i%100)
			if i%5000 == 0 {
				b.WriteString("\n") // blank lines move the line numbers
			}
		}
		return b.Bytes()
	}
	sorted := slices.Sorted(slices.Values(keys))
	rng := rand.New(rand.NewPCG(1, 2))
	shuffled := slices.Clone(keys)
	rng.Shuffle(n, func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	dup := slices.Clone(shuffled)
	dup[n-10] = dup[n/2]
	dup[n-5] = dup[7]
	for name, ks := range map[string][]string{"sorted": sorted, "shuffled": shuffled, "duplicate": dup} {
		t.Run(name, func(t *testing.T) {
			ds, err := parseBoth(t, write(ks), ManifestCSV, false, "")
			if name == "duplicate" {
				var me *ManifestError
				if !errors.As(err, &me) || !strings.Contains(err.Error(), "already on line") {
					t.Fatalf("err = %v, want a duplicate key", err)
				}
				return
			}
			if err != nil || len(ds.Samples) != n {
				t.Fatalf("%d samples, %v", len(ds.Samples), err)
			}
		})
	}
}

// TestFirstDuplicate against the obvious map, with colliding hashes
// forced by a tiny key space.
func TestFirstDuplicate(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		n := rng.IntN(40)
		samples := make([]Sample, n)
		space := 1 + rng.IntN(3*n+1)
		for i := range samples {
			samples[i].Key = strconv.Itoa(rng.IntN(space))
		}
		if rng.IntN(4) == 0 {
			slices.SortFunc(samples, func(a, b Sample) int { return strings.Compare(a.Key, b.Key) })
		}
		wantD, wantP := -1, -1
		seen := map[string]int{}
		for i, s := range samples {
			if p, ok := seen[s.Key]; ok {
				wantD, wantP = i, p
				break
			}
			seen[s.Key] = i
		}
		if d, p := firstDuplicate(samples); d != wantD || p != wantP {
			t.Fatalf("firstDuplicate(%v) = %d, %d; want %d, %d", samples, d, p, wantD, wantP)
		}
	}
}

// FuzzManifestDecimal: parseDecimal is strconv.ParseInt in base 10.
func FuzzManifestDecimal(f *testing.F) {
	for _, s := range []string{"0", "-0", "+7", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
		"-9223372036854775809", "", "-", "+", "1_000", "0x10", " 1", "18446744073709551616", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := strconv.ParseInt(s, 10, 64)
		got, ok := parseDecimal([]byte(s))
		if ok != (err == nil) || (ok && got != want) {
			t.Fatalf("parseDecimal(%q) = %d, %v; ParseInt: %d, %v", s, got, ok, want, err)
		}
	})
}

// FuzzManifestJSONLine: on every line scanPlain takes, encoding/json
// finds the same fields.
func FuzzManifestJSONLine(f *testing.F) {
	for _, s := range []string{`{"key":"a","label":1}`, `{ "label" : "x" , "key":"a/b"}`, `{"key":"a","label":-0,"object":"o","offset":1,"size":2}`,
		`{}`, `{"key":"a",}`, `{"key":"a\u0041"}`, `{"key":"é","label":"\t"}`, `{"key":"a","label":1.0}`, `{"key":"a","label":01}`,
		`{"key":"a","key":"b"}`, `{"key":"a"}x`, `{"key":1}`, `{"offset":"1"}`, "{\"key\":\"\xff\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		var plain, decoded jsonFields
		if !plain.scanPlain(text) {
			return
		}
		if err := decoded.decode(1, text); err != nil {
			t.Fatalf("scanPlain took %q, which encoding/json rejects: %v", text, err)
		}
		same := func(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }
		if plain.hasKey != decoded.hasKey || plain.hasObject != decoded.hasObject || !same(plain.key, decoded.key) ||
			!same(plain.object, decoded.object) || !same(plain.label, decoded.label) || !same(plain.offset, decoded.offset) || !same(plain.size, decoded.size) {
			t.Fatalf("%q: scanPlain %+v, encoding/json %+v", text, plain, decoded)
		}
	})
}

// TestObjectReader reads objects in pieces of every size, and stops at
// the store's error.
func TestObjectReader(t *testing.T) {
	ctx := context.Background()
	s := storage.NewMemStore(t.Name())
	data := make([]byte, 1000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if _, err := s.Put(ctx, "m", data, storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	for _, piece := range []int64{1, 7, 999, 1000, 4096} {
		got, err := io.ReadAll(iotest.HalfReader(&objectReader{ctx: ctx, s: s, key: "m", size: int64(len(data)), piece: piece}))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("piece %d: read %d bytes, %v", piece, len(got), err)
		}
	}
	empty := &objectReader{ctx: ctx, s: s, key: "m", size: 0, piece: 10}
	if n, err := empty.Read(make([]byte, 5)); n != 0 || err != io.EOF {
		t.Errorf("empty object: %d, %v", n, err)
	}
	fs := &pieceStore{Store: s, failRange: 3}
	_, err := io.ReadAll(&objectReader{ctx: ctx, s: fs, key: "m", size: int64(len(data)), piece: 100})
	if !errors.Is(err, errInjected) || fs.ranges != 3 {
		t.Errorf("a failing GetRange: %v", err)
	}
}

// TestDiscoverManifestStreams: Discover reads the manifest in pieces,
// none of them the whole object; an error of a piece fails Discover; a
// manifest whose Stat fails is read whole, as before, or fails as its
// Get does.
func TestDiscoverManifestStreams(t *testing.T) {
	ctx := context.Background()
	mem := storage.NewMemStore(t.Name())
	var b bytes.Buffer
	for i := range 300 {
		fmt.Fprintf(&b, "img/%04d.jpg,%d\n", i, i%3)
	}
	if _, err := mem.Put(ctx, "sub/manifest.csv", b.Bytes(), storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	defer func(p int64) { manifestPiece = p }(manifestPiece)
	manifestPiece = 1000
	cs := &pieceStore{Store: mem}
	ds, err := Discover(ctx, cs, DiscoverOptions{Root: "sub"})
	if err != nil || len(ds.Samples) != 300 || ds.Samples[299].Key != "sub/img/0299.jpg" || ds.Samples[299].Label != 2 {
		t.Fatalf("Discover: %v", err)
	}
	if want := (b.Len() + 999) / 1000; cs.gets != 0 || cs.ranges != want || cs.longest > 1000 {
		t.Errorf("%d Gets, %d GetRanges (longest %d), want 0 and %d of at most 1000 bytes", cs.gets, cs.ranges, cs.longest, want)
	}

	fs := &pieceStore{Store: mem, failRange: 3}
	if _, err := Discover(ctx, fs, DiscoverOptions{Root: "sub"}); !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "manifest sub/manifest.csv") {
		t.Errorf("Discover with a failing piece: %v", err)
	}

	noStat := &pieceStore{Store: mem, failStat: true}
	ds, err = Discover(ctx, noStat, DiscoverOptions{Manifest: "sub/manifest.csv"})
	if err != nil || len(ds.Samples) != 300 || noStat.gets != 1 {
		t.Errorf("Discover with Stat failing: %v, %d Gets", err, noStat.gets)
	}
	if _, err := Discover(ctx, mem, DiscoverOptions{Manifest: "sub/none.csv"}); !errors.Is(err, storage.ErrNotFound) || !strings.Contains(err.Error(), "get ") {
		t.Errorf("Discover of a missing manifest: %v, want Get's ErrNotFound", err)
	}
}

var errInjected = errors.New("injected")

// pieceStore counts reads, and fails the failRange'th GetRange, or every
// Stat.
type pieceStore struct {
	storage.Store
	gets, ranges int
	longest      int64
	failRange    int
	failStat     bool
}

func (c *pieceStore) Get(ctx context.Context, key string, dst []byte) ([]byte, error) {
	c.gets++
	return c.Store.Get(ctx, key, dst)
}

func (c *pieceStore) GetRange(ctx context.Context, key string, off, length int64, dst []byte) ([]byte, error) {
	c.ranges++
	c.longest = max(c.longest, length)
	if length < 0 {
		c.longest = math.MaxInt64
	}
	if c.ranges == c.failRange {
		return dst[:0], fmt.Errorf("get range %s: %w", key, errInjected)
	}
	return c.Store.GetRange(ctx, key, off, length, dst)
}

func (c *pieceStore) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	if c.failStat {
		return storage.ObjectInfo{}, fmt.Errorf("stat %s: %w", key, errInjected)
	}
	return c.Store.Stat(ctx, key)
}

// TestManifestReadError: a read error at any byte (a store failing mid
// manifest) ends the parse as it ended the reference's, a parse error
// before it included.
func TestManifestReadError(t *testing.T) {
	errRead := errors.New("connection reset")
	for _, tc := range []struct {
		format ManifestFormat
		data   string
	}{
		{ManifestCSV, "key,label\na,1\n\"b\nc\",2\r\nd\"x,3\n\"e\",x,s,1,2\nf,\"4\"\n"},
		{ManifestJSONL, `{"key":"a","label":1}` + "\n\n" + `{"key":"b\/c","label":2}` + "\n" + `{"key":"d","label":1.5}` + "\n"},
	} {
		for cut := range len(tc.data) + 1 {
			for _, small := range []bool{false, true} {
				reader := func() io.Reader {
					return io.MultiReader(strings.NewReader(tc.data[:cut]), iotest.ErrReader(errRead))
				}
				_, wantErr := refParseManifest(reader(), tc.format)
				b, buf := newManifestBuilder("", keyBlockSize), csvBufferSize
				if small {
					b, buf = newManifestBuilder("", 1), 16
				}
				_, err := parseManifestSized(reader(), tc.format, b, buf)
				if err == nil || wantErr == nil || err.Error() != wantErr.Error() || errors.Is(err, errRead) != errors.Is(wantErr, errRead) {
					t.Errorf("%s cut at %d (small %v): got %v, want %v", tc.format, cut, small, err, wantErr)
				}
			}
		}
	}
}
