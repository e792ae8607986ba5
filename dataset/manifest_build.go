package dataset

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/longshore/longshore/storage"
)

// A manifest is parsed straight into what its Dataset keeps: the parsers
// (parseCSV, parseJSONL) hand each row to a manifestBuilder, which copies
// the key into a block of keys and keeps 12 bytes more per sample until
// finish lays out the Samples. Nothing holds the manifest's text, a row
// per line, or a map over the keys, so parsing peaks near what the
// Dataset retains: every process parses the manifest, and a ten-million
// sample one costs gigabytes the other way.
//
// The errors are those of checking the rows in file order after parsing
// them all: a parse error (syntax, a field that is not an integer, a
// packed sample's missing field, mixed JSON label types) wins over any
// check of the rows; of the checks, the first row that fails one reports
// it, a duplicate key counting as failing after the key's own checks and
// before the label's; then too many objects; then, with integer labels,
// the first label out of range.

// manifestRow is one parsed row. Its byte slices belong to the parser and
// are only valid during manifestBuilder.add.
type manifestRow struct {
	line   int
	key    []byte
	label  []byte
	number bool // the label was written as a number (JSON), or parses as one (CSV)

	// A packed sample's location (packed false: none given).
	packed       bool
	object       []byte
	offset, size int64

	fields []NamedValue // the row's fields, sorted by name
}

// keyBlockSize is the size of the blocks keys are copied into: big enough
// that the last page of each (the waste of a large allocation) is a few
// percent, small enough that the block being filled is a small part of
// any manifest worth worrying about.
const keyBlockSize = 256 << 10

// recChunk is the number of sampleRecs per chunk: the chunks are never
// copied to grow, as an appended slice would be.
const recChunk = 1 << 15

// sampleRec is what a sample needs until finish, besides its key's
// block: the end of its key in its block (the start is the previous
// sample's end, or 0), the provisional label (an index into the
// builder's labelTexts) and the object.
type sampleRec struct {
	keyEnd uint32
	label  int32
	object ObjectID
}

// keyBlock is a block of keys and the first sample whose key is in it.
type keyBlock struct {
	first int
	keys  string // set when the block is full (the last: at finish)
}

// lineMark says that sample `sample` is on line `line`, and the samples
// after it on the lines after, up to the next mark.
type lineMark struct{ sample, line int }

type manifestBuilder struct {
	prefix    string // put before every key (Discover: the manifest's directory)
	blockSize int    // of a block of keys: keyBlockSize but in tests

	// Keys are copied into strings.Builders, which never move or change
	// what they have written: a key is a substring of what the builder
	// holds, and a full builder is kept as its block's string.
	keys   strings.Builder
	blocks []keyBlock
	recs   [][]sampleRec
	n      int              // samples kept
	locs   []sampleLocation // of each packed sample, in order
	marks  []lineMark

	labels       map[string]int32 // label text → provisional label
	labelTexts   []string         // provisional label → its text
	labelNumbers []bool           // provisional label → whether it is a number

	objects    map[string]ObjectID
	objectKeys []string
	objectErrs []error // CheckKey of each object, by ID-1
	full       error   // the first sample past MaxObjects, if any

	rows int // rows parsed, kept or not

	fields *FieldsBuilder // of the samples kept

	// resolve, when set, gives each label text its final label (a piece
	// of a manifest, whose classes are the whole manifest's: see
	// IndexedManifest), instead of numbering the labels this builder saw.
	resolve func(text string, number bool) (int32, error)
	// continued: the text parsed is a piece that does not start the
	// manifest, so its first line is neither a header nor after a byte
	// order mark.
	continued bool
	// recHint, if > 0, is about how many samples there are: a piece's
	// parse allocates for that many, not recChunk.
	recHint int

	// bad is the first problem of a row of its own (not a duplicate key).
	// Samples after it are not kept: only the parse errors after it, and a
	// duplicate key before it, come first. The row itself is kept when
	// its key passed its checks, so a duplicate key of it is found.
	bad error
}

type sampleLocation struct{ offset, size int64 }

func newManifestBuilder(prefix string, blockSize int) *manifestBuilder {
	return &manifestBuilder{
		prefix:    prefix,
		blockSize: blockSize,
		labels:    map[string]int32{},
		objects:   map[string]ObjectID{},
		fields:    NewFieldsBuilder(),
	}
}

// add checks row and keeps its sample.
func (b *manifestBuilder) add(row *manifestRow) {
	b.rows++
	if b.bad != nil {
		return
	}
	if len(row.key) == 0 {
		b.bad = badLine(row.line, "empty key")
		return
	}
	if len(row.key) > storage.MaxKeyLen {
		b.bad = badLine(row.line, "%v", storage.CheckKey(string(row.key)))
		return
	}
	keyEnd := b.putKey(row.key)
	key := b.keys.String()[keyEnd-len(b.prefix)-len(row.key) : keyEnd]
	if err := storage.CheckKey(key[len(b.prefix):]); err != nil {
		b.bad = badLine(row.line, "%v", err)
		return
	}
	label := b.label(row.label, row.number)
	object, objectErr := NoObject, error(nil)
	if row.packed {
		object, objectErr = b.object(row)
	}

	i := b.n
	if i%recChunk == 0 {
		c := recChunk
		if b.recHint > 0 {
			c = min(c, b.recHint) // a piece's few samples; append grows it past
		}
		b.recs = append(b.recs, make([]sampleRec, 0, c))
	}
	b.recs[i/recChunk] = append(b.recs[i/recChunk], sampleRec{keyEnd: uint32(keyEnd), label: label, object: object})
	if row.packed {
		b.locs = append(b.locs, sampleLocation{row.offset, row.size})
	}
	if k := len(b.marks) - 1; k < 0 || b.marks[k].line+(i-b.marks[k].sample) != row.line {
		b.marks = append(b.marks, lineMark{sample: i, line: row.line})
	}
	b.n++

	switch {
	case len(row.label) == 0:
		b.bad = badLine(row.line, "empty label")
	case !utf8.Valid(row.label):
		b.bad = badLine(row.line, "label %q is not valid UTF-8", row.label)
	case !row.packed:
	case objectErr != nil:
		b.bad = badLine(row.line, "object: %v", objectErr)
	case row.offset < 0:
		b.bad = badLine(row.line, "offset %d is negative", row.offset)
	case row.size < 0:
		// 0 is an empty member: a bad sample to the decoder, counted
		// like any other, not a bad manifest.
		b.bad = badLine(row.line, "size %d is negative", row.size)
	case row.offset > math.MaxInt64-row.size:
		b.bad = badLine(row.line, "offset %d + size %d overflows", row.offset, row.size)
	}
	// The fields last: a field of a type the samples before did not
	// have is the row's last check.
	if b.bad == nil {
		for _, f := range row.fields {
			if err := b.fields.Set(f.Name, f.Value); err != nil {
				b.bad = badLine(row.line, "%v", err)
				break
			}
		}
	}
	b.fields.EndSample()
}

// putKey copies prefix+key into the block of keys, starting a block if it
// does not fit, and returns the end of the copy in the block.
func (b *manifestBuilder) putKey(key []byte) int {
	need := len(b.prefix) + len(key)
	if len(b.blocks) == 0 || b.keys.Cap()-b.keys.Len() < need {
		if len(b.blocks) > 0 {
			b.blocks[len(b.blocks)-1].keys = b.keys.String()
		}
		b.keys = strings.Builder{}
		b.keys.Grow(max(b.blockSize, need))
		b.blocks = append(b.blocks, keyBlock{first: b.n})
	}
	b.keys.WriteString(b.prefix)
	b.keys.Write(key)
	return b.keys.Len()
}

// label returns the provisional label of text: its index in labelTexts.
func (b *manifestBuilder) label(text []byte, number bool) int32 {
	if id, ok := b.labels[string(text)]; ok {
		return id
	}
	id := int32(len(b.labelTexts))
	s := string(text)
	b.labels[s] = id
	b.labelTexts = append(b.labelTexts, s)
	b.labelNumbers = append(b.labelNumbers, number)
	return id
}

// object returns the ID of row's object, numbering objects in order of
// first use, and whether its key is valid.
func (b *manifestBuilder) object(row *manifestRow) (ObjectID, error) {
	if id, ok := b.objects[string(row.object)]; ok {
		return id, b.objectErrs[id-1]
	}
	s := string(row.object)
	err := storage.CheckKey(s)
	if len(b.objectKeys) >= MaxObjects {
		if b.full == nil {
			b.full = badLine(row.line, "object %q: more than %d objects in one manifest: split the dataset", s, MaxObjects)
		}
		return NoObject, err
	}
	b.objectKeys = append(b.objectKeys, s)
	id := ObjectID(len(b.objectKeys))
	b.objects[s] = id
	b.objectErrs = append(b.objectErrs, err)
	return id, err
}

// line returns the line of sample i.
func (b *manifestBuilder) line(i int) int {
	k, _ := slices.BinarySearchFunc(b.marks, i+1, func(m lineMark, t int) int { return cmp.Compare(m.sample, t) })
	m := b.marks[k-1]
	return m.line + i - m.sample
}

// finish lays out the Dataset, or reports the first problem.
func (b *manifestBuilder) finish() (*Dataset, error) {
	if b.rows == 0 {
		return nil, fmt.Errorf("manifest has no samples: %w", ErrEmptyDataset)
	}
	if len(b.blocks) > 0 {
		b.blocks[len(b.blocks)-1].keys = b.keys.String()
	}
	ds := &Dataset{Samples: make([]Sample, b.n), Objects: b.objectKeys}
	blk, start, packed := 0, 0, 0
	for i := range ds.Samples {
		if blk+1 < len(b.blocks) && b.blocks[blk+1].first == i {
			blk, start = blk+1, 0
		}
		r := b.recs[i/recChunk][i%recChunk]
		s := &ds.Samples[i]
		s.Key = b.blocks[blk].keys[start:r.keyEnd]
		s.Label = r.label
		if r.object != NoObject {
			s.Object, s.Offset, s.Size = r.object, b.locs[packed].offset, b.locs[packed].size
			packed++
		}
		start = int(r.keyEnd)
	}
	b.recs, b.locs, b.blocks = nil, nil, nil
	ds.Fields = b.fields.Finish()

	if d, p := firstDuplicate(ds.Samples); d >= 0 {
		return nil, badLine(b.line(d), "key %q already on line %d", ds.Samples[d].Key[len(b.prefix):], b.line(p))
	}
	if b.bad != nil {
		return nil, b.bad
	}
	if b.full != nil {
		return nil, b.full
	}
	if b.resolve != nil {
		final := make([]int32, len(b.labelTexts))
		for id, text := range b.labelTexts {
			l, err := b.resolve(text, b.labelNumbers[id])
			if err != nil {
				for i := range ds.Samples {
					if ds.Samples[i].Label == int32(id) {
						return nil, badLine(b.line(i), "label %q: %v", text, err)
					}
				}
				return nil, badLine(0, "label %q: %v", text, err)
			}
			final[id] = l
		}
		for i := range ds.Samples {
			ds.Samples[i].Label = final[ds.Samples[i].Label]
		}
		return ds, nil
	}
	if !slices.Contains(b.labelNumbers, false) {
		return ds, b.integerLabels(ds)
	}
	// Class names, sorted, labelled by their index, as ImageFolder does.
	order := make([]int32, len(b.labelTexts))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(x, y int32) int { return strings.Compare(b.labelTexts[x], b.labelTexts[y]) })
	ds.Classes = make([]string, len(order))
	rank := make([]int32, len(order))
	for k, id := range order {
		ds.Classes[k] = b.labelTexts[id]
		rank[id] = int32(k)
	}
	for i := range ds.Samples {
		ds.Samples[i].Label = rank[ds.Samples[i].Label]
	}
	return ds, nil
}

// integerLabels turns ds's provisional labels, all integers, into the
// integers, and makes Classes "0".."max".
func (b *manifestBuilder) integerLabels(ds *Dataset) error {
	values := make([]int32, len(b.labelTexts))
	var out map[int32]int64 // provisional label → its value, when out of range
	for id, text := range b.labelTexts {
		v, _ := strconv.ParseInt(text, 10, 64)
		if v < 0 || v >= MaxClasses || v > math.MaxInt32 {
			if out == nil {
				out = map[int32]int64{}
			}
			out[int32(id)] = v
			continue
		}
		values[id] = int32(v)
	}
	if out != nil {
		for i, s := range ds.Samples {
			if v, bad := out[s.Label]; bad {
				return badLine(b.line(i), "label %d outside [0, %d)", v, MaxClasses)
			}
		}
	}
	maxLabel := int32(-1)
	for i := range ds.Samples {
		v := values[ds.Samples[i].Label]
		ds.Samples[i].Label = v
		maxLabel = max(maxLabel, v)
	}
	ds.Classes = make([]string, maxLabel+1)
	for i := range ds.Classes {
		ds.Classes[i] = strconv.Itoa(i)
	}
	return nil
}

// firstDuplicate returns the first sample d whose key an earlier sample p
// has (the first such), or -1, -1. Keys sorted in file order (a manifest
// written from a listing) have none, which one pass tells; otherwise the
// keys' hashes are sorted with their indices, 8 bytes a sample where a
// map of the keys would take some 40, and only keys with equal hashes
// are compared.
func firstDuplicate(samples []Sample) (d, p int) {
	n := len(samples)
	sorted := true
	for i := 1; i < n && sorted; i++ {
		sorted = samples[i-1].Key < samples[i].Key
	}
	if sorted {
		return -1, -1
	}
	idxBits := bits.Len(uint(n - 1))
	mask := uint64(1)<<idxBits - 1
	seed := maphash.MakeSeed()
	words := make([]uint64, n)
	for i, s := range samples {
		words[i] = maphash.String(seed, s.Key)&^mask | uint64(i)
	}
	slices.Sort(words)
	d, p = -1, -1
	var run []int
	for lo := 0; lo < n; {
		hi := lo + 1
		for hi < n && words[hi]&^mask == words[lo]&^mask {
			hi++
		}
		// The run's indices ascend; its second index is the earliest a
		// duplicate in it can be.
		if hi-lo > 1 && (d < 0 || int(words[lo+1]&mask) < d) {
			run = run[:0]
			for _, w := range words[lo:hi] {
				run = append(run, int(w&mask))
			}
			slices.SortStableFunc(run, func(x, y int) int { return strings.Compare(samples[x].Key, samples[y].Key) })
			for k := 0; k < len(run); {
				j := k + 1
				for j < len(run) && samples[run[j]].Key == samples[run[k]].Key {
					j++
				}
				if j-k > 1 && (d < 0 || run[k+1] < d) {
					d, p = run[k+1], run[k]
				}
				k = j
			}
		}
		lo = hi
	}
	return d, p
}

// parseDecimal is strconv.ParseInt(string(s), 10, 64) without the string,
// reporting only whether it succeeds.
func parseDecimal(s []byte) (int64, bool) {
	neg := false
	if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if len(s) == 0 {
		return 0, false
	}
	var u uint64
	for _, c := range s {
		if c < '0' || c > '9' || u > (1<<63)/10 {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
		if u > 1<<63 {
			return 0, false
		}
	}
	if neg {
		return -int64(u), true // 1<<63 wraps to math.MinInt64, as it should
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}
