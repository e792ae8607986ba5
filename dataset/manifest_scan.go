package dataset

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/maphash"
	"io"
	"path"
	"slices"
	"strconv"

	"github.com/longshore/longshore/storage"
)

// ScanOptions configure ScanManifest. The zero value scans for the totals
// only (no pieces), without checking for duplicate keys out of order.
type ScanOptions struct {
	// Every is the samples per piece of the index made; 0 records no
	// pieces (the totals only, in O(1) memory: what a coordinator
	// without an index needs).
	Every int
	// CheckDuplicates finds a key listed twice even when the keys are
	// not sorted, at 8 bytes a sample and a second pass if two keys'
	// hashes collide. Without it, only a key equal to the one before it
	// is found (all duplicates, when the keys are sorted: a manifest
	// written from a listing), in O(1) memory.
	CheckDuplicates bool
	// Progress, if set, is called from ScanManifest's goroutine after
	// each piece: how far the scan has got.
	Progress func(ScanProgress)
}

// ScanProgress says how far a scan has got.
type ScanProgress struct {
	Pass    int   // 1, or 2 for the second pass of class-name labels or duplicates
	Bytes   int64 // of the manifest read in this pass
	Size    int64 // the manifest's size
	Samples int64 // read in this pass
}

// scanUnit is how many samples ScanManifest parses at a time when it
// records no pieces: its memory, a few hundred KiB.
const scanUnit = 4096

// ScanManifest reads the manifest at key in s once (twice for class-name
// labels, whose numbering needs them all), a piece at a time, and returns
// its index: the count, layout, classes and digest of the Dataset that
// Discover would make of it (keys prefixed by the manifest's directory),
// and with opts.Every > 0 the pieces. It holds one piece, never the
// samples: a billion-sample manifest scans in a few MiB.
//
// A manifest ParseManifest accepts scans to the same samples, classes
// and digest; one it refuses is refused too (the message may name
// another of its problems first, and lines count from the manifest's
// start), except that duplicate keys out of order are found only with
// opts.CheckDuplicates.
func ScanManifest(ctx context.Context, s storage.Store, key string, opts ScanOptions) (*ManifestIndex, error) {
	if opts.Every < 0 {
		return nil, fmt.Errorf("dataset: scan manifest %s: Every %d is negative", key, opts.Every)
	}
	format, err := ManifestFormatOf(key)
	if err != nil {
		return nil, err
	}
	info, err := s.Stat(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("scan manifest %s: %w", key, err)
	}
	sc := &scan{ctx: ctx, s: s, key: key, size: info.Size, format: format, unit: opts.Every, progress: opts.Progress}
	if sc.unit == 0 {
		sc.unit = scanUnit
	}
	if dir := path.Dir(key); dir != "." {
		sc.prefix = dir + "/"
	}
	x := &ManifestIndex{Manifest: key, Format: format, Every: opts.Every}

	// Pass 1: the pieces, the labels' texts, the digest if the labels are
	// integers (they are unless a text is not, which only the end tells).
	texts := map[string]bool{} // label text → written as a number
	var firstText struct {
		seen   bool
		text   string
		number bool
	}
	maxLabel := int32(-1)
	var badLabel error
	resolve := func(text string, number bool) (int32, error) {
		if _, ok := texts[text]; !ok {
			if len(texts) >= MaxClasses {
				return 0, fmt.Errorf("more than %d distinct labels", MaxClasses)
			}
			texts[text] = number
			if !firstText.seen {
				firstText.seen, firstText.text, firstText.number = true, text, number
			} else if format == ManifestJSONL && number != firstText.number {
				return 0, fmt.Errorf("mixes integer and class-name labels (%q is the first label)", firstText.text)
			}
		}
		if !number {
			return 0, nil
		}
		v, _ := strconv.ParseInt(text, 10, 64)
		if v < 0 || v >= MaxClasses {
			// An error only if every label is an integer, which the end
			// tells (a CSV label that is not makes them all names).
			if badLabel == nil {
				badLabel = fmt.Errorf("%w: label %d outside [0, %d)", ErrBadManifest, v, MaxClasses)
			}
			return 0, nil
		}
		maxLabel = max(maxLabel, int32(v))
		return int32(v), nil
	}
	var d Digester
	var last string
	sorted := true
	widened := false // a piece's field type is not the manifest's: digest again
	var hashes []uint64
	seed := maphash.MakeSeed()
	err = sc.pass(1, resolve, func(p piece) error {
		if opts.Every > 0 {
			x.Offsets = append(x.Offsets, p.start)
			x.Sums = append(x.Sums, crc32.Checksum(p.raw, castagnoli))
		}
		if ps := p.ds.Fields.Schema(); len(ps) > 0 {
			merged, w, err := mergeSchema(x.Schema, ps)
			if err != nil {
				return fmt.Errorf("%w: %v", ErrBadManifest, err)
			}
			widened = widened || w
			x.Schema = merged
		}
		for i, smp := range p.ds.Samples {
			d.Add(smp, p.ds.ObjectOf(smp))
			if p.ds.Fields != nil {
				d.AddFields(p.ds.Fields.Schema(), p.ds.Fields.Row(i))
			}
			if smp.Packed() {
				x.PackedSamples++
			}
			if x.Samples > 0 && smp.Key == last {
				return fmt.Errorf("%w: sample %d: key %q listed twice", ErrBadManifest, x.Samples, smp.Key)
			}
			sorted = sorted && (x.Samples == 0 || smp.Key > last)
			last = smp.Key
			if opts.CheckDuplicates {
				hashes = append(hashes, maphash.String(seed, smp.Key))
			}
			x.Samples++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if opts.Every > 0 {
		x.Offsets = append(x.Offsets, sc.size)
	}
	if opts.CheckDuplicates && !sorted {
		// Keys of a sample listed earlier: before sorting, hashes[i] is
		// sample i's. A full-hash check needs a second pass only over the
		// (rare) hashes seen twice.
		if err := sc.duplicates(resolve, hashes, seed); err != nil {
			return nil, err
		}
	}
	names := false
	for _, number := range texts {
		names = names || !number
	}
	if !names && !widened {
		if badLabel != nil {
			return nil, fmt.Errorf("scan manifest %s: %w", key, badLabel)
		}
		x.IntegerLabels = true
		x.Classes = make([]string, maxLabel+1)
		for i := range x.Classes {
			x.Classes[i] = strconv.Itoa(int(i))
		}
		x.Digest = d.String()
		return x, nil
	}

	// Class names, sorted as ParseManifest sorts them, or fields whose
	// type one piece does not know: pass 2 digests the samples with their
	// final labels and field types.
	resolve2 := resolve
	if names {
		x.Classes = make([]string, 0, len(texts))
		for t := range texts {
			x.Classes = append(x.Classes, t)
		}
		slices.Sort(x.Classes)
		resolve2 = classResolver(x.Classes)
	} else {
		if badLabel != nil {
			return nil, fmt.Errorf("scan manifest %s: %w", key, badLabel)
		}
		x.IntegerLabels = true
		x.Classes = make([]string, maxLabel+1)
		for i := range x.Classes {
			x.Classes[i] = strconv.Itoa(int(i))
		}
	}
	d = Digester{}
	err = sc.pass(2, resolve2, func(p piece) error {
		for i, smp := range p.ds.Samples {
			d.Add(smp, p.ds.ObjectOf(smp))
			if len(x.Schema) > 0 {
				row, err := p.ds.Fields.RowIn(i, x.Schema)
				if err != nil {
					return fmt.Errorf("%w: sample %d: %v", ErrBadManifest, i, err)
				}
				d.AddFields(x.Schema, row)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	x.Digest = d.String()
	return x, nil
}

// classResolver labels a text by its place among the sorted class names.
func classResolver(classes []string) func(string, bool) (int32, error) {
	return func(text string, _ bool) (int32, error) {
		i, ok := slices.BinarySearch(classes, text)
		if !ok {
			return 0, fmt.Errorf("not one of the index's %d classes: %w", len(classes), ErrStaleIndex)
		}
		return int32(i), nil
	}
}

// duplicates finds a key listed twice among samples whose key hashes
// are hashes (in index order).
func (sc *scan) duplicates(resolve func(string, bool) (int32, error), hashes []uint64, seed maphash.Seed) error {
	sortedHashes := slices.Clone(hashes)
	slices.Sort(sortedHashes)
	twice := map[uint64]bool{}
	for i := 1; i < len(sortedHashes); i++ {
		if sortedHashes[i] == sortedHashes[i-1] {
			twice[sortedHashes[i]] = true
		}
	}
	if len(twice) == 0 {
		return nil
	}
	seen := map[string]int64{}
	var n int64
	return sc.pass(2, resolve, func(p piece) error {
		for _, smp := range p.ds.Samples {
			if twice[maphash.String(seed, smp.Key)] {
				if first, ok := seen[smp.Key]; ok {
					return fmt.Errorf("%w: sample %d: key %q already sample %d", ErrBadManifest, n, smp.Key, first)
				}
				seen[smp.Key] = n
			}
			n++
		}
		return nil
	})
}

// scan reads one manifest piece by piece.
type scan struct {
	ctx      context.Context
	s        storage.Store
	key      string
	size     int64
	format   ManifestFormat
	prefix   string
	unit     int
	progress func(ScanProgress)
}

// piece is a run of whole records of a manifest, parsed.
type piece struct {
	index int
	start int64  // its first byte in the manifest
	raw   []byte // its bytes (valid during the callback)
	ds    *Dataset
}

// pass reads the manifest's pieces of sc.unit samples each and calls fn
// with each, parsed with resolve giving the labels.
func (sc *scan) pass(n int, resolve func(string, bool) (int32, error), fn func(piece) error) error {
	r := &objectReader{ctx: sc.ctx, s: sc.s, key: sc.key, size: sc.size, piece: manifestPiece}
	sp := newSplitter(r, sc.format, sc.unit)
	var samples int64
	for k := 0; ; k++ {
		start, line, raw, records, err := sp.next()
		if err != nil {
			return fmt.Errorf("scan manifest %s: %w", sc.key, err)
		}
		if raw == nil {
			if k == 0 {
				return fmt.Errorf("scan manifest %s: manifest has no samples: %w", sc.key, ErrEmptyDataset)
			}
			return nil
		}
		ds, err := parsePiece(raw, sc.format, sc.prefix, k > 0, sc.unit, resolve)
		if err != nil {
			var me *ManifestError
			if errors.As(err, &me) && me.Line > 0 {
				me.Line += line - 1
			}
			return fmt.Errorf("scan manifest %s: %w", sc.key, err)
		}
		if len(ds.Samples) != records {
			return fmt.Errorf("scan manifest %s: %w", sc.key, badLine(line, "piece of %d records parsed to %d samples: a record the index cannot split at (a quoted header?)", records, len(ds.Samples)))
		}
		if err := fn(piece{index: k, start: start, raw: raw, ds: ds}); err != nil {
			return fmt.Errorf("scan manifest %s: %w", sc.key, err)
		}
		samples += int64(len(ds.Samples))
		if sc.progress != nil {
			sc.progress(ScanProgress{Pass: n, Bytes: start + int64(len(raw)), Size: sc.size, Samples: samples})
		}
		if err := sc.ctx.Err(); err != nil {
			return err
		}
	}
}

// parsePiece parses raw, whole records of a manifest, into a Dataset whose
// keys and objects have prefix before them and whose labels resolve
// gives. continued: raw does not start the manifest.
func parsePiece(raw []byte, format ManifestFormat, prefix string, continued bool, unit int, resolve func(string, bool) (int32, error)) (*Dataset, error) {
	b := newManifestBuilder(prefix, len(raw)+unit*len(prefix))
	b.continued, b.resolve, b.recHint = continued, resolve, unit+1
	ds, err := parseManifestSized(bytes.NewReader(raw), format, b, csvBufferSize)
	if err != nil {
		return nil, err
	}
	for i := range ds.Samples {
		if len(ds.Samples[i].Key) > storage.MaxKeyLen {
			return nil, fmt.Errorf("key %q: longer than %d bytes with the manifest's directory: %w", ds.Samples[i].Key, storage.MaxKeyLen, storage.ErrInvalidKey)
		}
	}
	if prefix != "" {
		for i, o := range ds.Objects {
			o = prefix + o
			if len(o) > storage.MaxKeyLen {
				return nil, fmt.Errorf("object %q: longer than %d bytes with the manifest's directory: %w", o, storage.MaxKeyLen, storage.ErrInvalidKey)
			}
			ds.Objects[i] = o
		}
	}
	return ds, nil
}

// splitter cuts a manifest into pieces of unit records (the first piece
// also holds a CSV header), at record boundaries: a JSON line is a record
// unless blank; a CSV record is a non-empty line and the lines after it
// while a quoted field is open (an odd count of '"' so far: RFC 4180
// doubles a quote inside a quoted field).
type splitter struct {
	br     *bufio.Reader
	format ManifestFormat
	unit   int

	off    int64 // bytes read
	lines  int   // lines read
	carry  []byte
	cLine  int // the carried line's number
	long   []byte
	buf    []byte
	inQ    bool
	first  bool // no record seen yet
	header bool // the first record is a CSV header
	// The record being read: its first line and bytes so far (CSV
	// records with quotes may run over several lines).
	recLine, recBytes int
}

func newSplitter(r io.Reader, format ManifestFormat, unit int) *splitter {
	return &splitter{br: bufio.NewReaderSize(r, 1<<20), format: format, unit: unit, first: true}
}

// readLine returns the next line with its '\n' (the last may lack it);
// empty at the end.
func (sp *splitter) readLine() ([]byte, error) {
	raw, err := sp.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		sp.long = append(sp.long[:0], raw...)
		for err == bufio.ErrBufferFull {
			if len(sp.long) > maxManifestLine+len("\r\n") { // the parsers refuse it: stop reading it
				return nil, badLine(sp.lines+1, "line longer than %d bytes", maxManifestLine)
			}
			raw, err = sp.br.ReadSlice('\n')
			sp.long = append(sp.long, raw...)
		}
		raw = sp.long
	}
	if err == io.EOF {
		err = nil
	}
	return raw, err
}

// next returns the next piece: its offset, first line number, bytes
// and how many samples it holds; raw nil at the end.
func (sp *splitter) next() (start int64, line int, raw []byte, records int, err error) {
	sp.buf = sp.buf[:0]
	start, line = sp.off-int64(len(sp.carry)), sp.lines+1-btoi(sp.carry != nil)
	if sp.carry != nil {
		sp.buf = append(sp.buf, sp.carry...)
		sp.carry = nil
		records = 1
	}
	for {
		l, err := sp.readLine()
		if err != nil {
			return 0, 0, nil, 0, err
		}
		if len(l) == 0 {
			if len(sp.buf) == 0 {
				return 0, 0, nil, 0, nil
			}
			return start, line, sp.buf, records, nil
		}
		sp.off += int64(len(l))
		sp.lines++
		starts := false
		switch sp.format {
		case ManifestCSV:
			if sp.inQ { // a quoted record goes on: bound it as parseCSV does
				if sp.recBytes += len(l); sp.recBytes > maxManifestLine+len("\r\n") {
					return 0, 0, nil, 0, badLine(sp.recLine, "record longer than %d bytes (a quoted field left open?)", maxManifestLine)
				}
			} else {
				sp.recLine, sp.recBytes = sp.lines, len(l)
			}
			if !sp.inQ {
				t := bytes.TrimRight(l, "\n")
				t = bytes.TrimSuffix(t, []byte("\r"))
				starts = len(t) > 0
			}
			if bytes.Count(l, []byte(`"`))%2 == 1 {
				sp.inQ = !sp.inQ
			}
		default:
			t := bytes.TrimSpace(l)
			if sp.lines == 1 {
				t = bytes.TrimPrefix(t, []byte("\ufeff"))
			}
			starts = len(t) > 0
		}
		if starts && sp.first {
			sp.first = false
			if sp.format == ManifestCSV && csvHeader(l) {
				sp.header = true
				sp.buf = append(sp.buf, l...)
				continue
			}
		}
		if starts && records == sp.unit {
			sp.carry = append(sp.carry[:0], l...)
			return start, line, sp.buf, records, nil
		}
		sp.buf = append(sp.buf, l...)
		if starts {
			records++
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// csvHeader reports whether line, the first record of a CSV manifest, is
// a header (isHeader).
func csvHeader(line []byte) bool {
	line = bytes.TrimPrefix(line, []byte("\ufeff"))
	r := csv.NewReader(bytes.NewReader(line))
	r.FieldsPerRecord = -1
	rec, err := r.Read()
	if err != nil || (len(rec) != 2 && len(rec) != 5) {
		return false
	}
	return isHeader(rec)
}
