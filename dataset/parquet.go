package dataset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding"
	"github.com/parquet-go/parquet-go/format"

	"github.com/longshore/longshore/storage"
)

// ErrBadParquet: a Parquet file could not be read as a dataset (a
// footer that does not parse, a column chunk outside the file, files
// whose schemas differ, no media column, a page that does not decode).
var ErrBadParquet = errors.New("dataset: unusable parquet file")

// parquetFormat is a dataset of Parquet files: every *.parquet object
// below the root, in key order (Hugging Face's data/train-00000-of-00004.parquet
// layout), each row a sample (docs/parquet.md).
//
// Discovery reads each file's footer (one ranged GET of its last
// parquetFooterRead bytes, a second one for a bigger footer) and the
// label column's chunks (one ranged GET per row group); the samples are
// packed: a sample's range is its row group's media column chunk, and
// Dataset.Unpacker decodes it (parquetUnpacker), so a PackedStore reads a
// row group's media once per block of the order and serves every row of
// the block in it from that read.
type parquetFormat struct{}

func (parquetFormat) Name() string { return "parquet" }

// parquetDetectKeys bounds how many keys Detect looks at: a listing's
// first page.
const parquetDetectKeys = 1000

var errStopListing = errors.New("stop listing")

// Detect lists the root until the first *.parquet key (Parquet) or the
// first file of the dataset's media extensions (not Parquet: an
// ImageFolder), at most a listing page.
func (parquetFormat) Detect(ctx context.Context, s storage.Store, root string, opts DiscoverOptions) (*Found, error) {
	media := extensionSet(opts.Extensions)
	var found *Found
	n := 0
	err := s.List(ctx, root, func(info storage.ObjectInfo) error {
		ext := strings.ToLower(path.Ext(info.Key))
		switch {
		case ext == ".parquet":
			found = &Found{Key: info.Key, Size: info.Size}
			return errStopListing
		case media[ext]:
			return errStopListing
		}
		if n++; n >= parquetDetectKeys {
			return errStopListing
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopListing) {
		return nil, err
	}
	return found, nil
}

// extensionSet is exts (nil: DefaultExtensions) as lower-case ".ext".
func extensionSet(exts []string) map[string]bool {
	if exts == nil {
		exts = DefaultExtensions
	}
	want := make(map[string]bool, len(exts))
	for _, e := range exts {
		want["."+strings.ToLower(strings.TrimPrefix(e, "."))] = true
	}
	return want
}

// parquetFooterRead is how much of a file's end discovery reads at
// once: a footer of a few hundred row groups fits, so a file costs one
// ranged GET.
const parquetFooterRead = 256 << 10

func (parquetFormat) Discover(ctx context.Context, s storage.Store, root string, _ *Found, opts DiscoverOptions) (*Dataset, error) {
	var infos []storage.ObjectInfo
	err := s.List(ctx, root, func(info storage.ObjectInfo) error {
		if strings.EqualFold(path.Ext(info.Key), ".parquet") {
			infos = append(infos, info)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(infos) == 0 {
		return nil, fmt.Errorf("no *.parquet files under %q: %w", root, ErrEmptyDataset)
	}
	slices.SortFunc(infos, func(a, b storage.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	files := make([]*parquetFile, len(infos))
	keys := make([]string, len(infos))
	for i, info := range infos {
		keys[i] = info.Key
	}
	_, err = listConcurrently(ctx, keys, opts.Concurrency, func(ctx context.Context, i int) ([]Sample, error) {
		f, err := indexParquet(ctx, s, infos[i].Key, infos[i].Size, opts)
		if err != nil {
			return nil, fmt.Errorf("parquet %s: %w", infos[i].Key, err)
		}
		files[i] = f
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	return parquetDataset(files)
}

// parquetFile is what discovery knows of one file: its footer, the
// columns read, and where each row group's media lies.
type parquetFile struct {
	key    string
	file   *parquet.File
	schema string // the file's schema, as parquet-go prints it
	media  int    // leaf index of the media bytes
	// mediaDef is the media leaf's maximum definition level: a row
	// whose level is lower has no media (null).
	mediaDef int
	mediaName,
	labelName string // "" for none
	groups []parquetGroup
	labels []int32 // one a row; nil without a label column
	// textLabels are the labels of a text label column, one a row:
	// parquetDataset numbers them as a manifest numbers class names.
	textLabels []string
	names      []string
	// fields are the other columns, each a field (parquetFields);
	// values their values, by row, until parquetDataset takes them.
	fields []parquetField
	values *Fields
}

// parquetField is a column of a Parquet dataset read as a field.
type parquetField struct {
	name string
	leaf int
	typ  FieldType
	kind parquet.Kind
}

// parquetGroup is one row group of a file: its rows [first, first+rows)
// of the file, and its media column chunk's byte range.
type parquetGroup struct {
	index       int // in the file's row groups
	first, rows int64
	off, size   int64
}

// indexParquet reads the footer of the Parquet object key, of size
// bytes, and its label column.
func indexParquet(ctx context.Context, s storage.Store, key string, size int64, opts DiscoverOptions) (*parquetFile, error) {
	r := &storeReaderAt{ctx: ctx, s: s, key: key, size: size}
	f, err := openParquetFooter(r, size)
	if err != nil {
		return nil, err
	}
	pf, err := parquetColumns(f, opts)
	if err != nil {
		return nil, err
	}
	pf.key = key
	if err := pf.indexGroups(size); err != nil {
		return nil, err
	}
	if pf.labelName != "" || len(pf.fields) > 0 {
		if err := pf.readColumns(ctx, s); err != nil {
			return nil, err
		}
	}
	return pf, nil
}

// openParquetFooter parses the footer of a Parquet file of size bytes
// read through r: the end of the file in one read (parquetFooterRead
// bytes), a second read for a footer bigger than that. The page index
// and bloom filters are not read.
//
// The file is opened with the library's small default read buffer, not
// one the size of that first read: the page readers of the file's
// column chunks (FileColumnChunk.PagesFrom) read through a buffer of
// that size, and one bigger than a page copies every page's bytes into
// it before copying them out.
func openParquetFooter(r io.ReaderAt, size int64) (f *parquet.File, err error) {
	if size < 12 { // "PAR1", a footer length, "PAR1"
		return nil, fmt.Errorf("%d bytes: too short for a parquet file: %w", size, ErrBadParquet)
	}
	defer func() {
		// The footer is thrift from the store: a damaged one must fail
		// the dataset, not the process.
		if p := recover(); p != nil {
			f, err = nil, fmt.Errorf("footer: %v: %w", p, ErrBadParquet)
		}
	}()
	tail := &tailReaderAt{r: r, at: size - min(parquetFooterRead, size)}
	tail.tail = make([]byte, size-tail.at)
	if n, err := r.ReadAt(tail.tail, tail.at); n != len(tail.tail) {
		var se *storeError
		if errors.As(err, &se) {
			return nil, se.err // the store's, as it said it
		}
		return nil, fmt.Errorf("the file's last %d bytes: %d read: %v: %w", len(tail.tail), n, err, ErrBadParquet)
	}
	defer func() { tail.tail = nil }() // the File keeps its reader: not the tail
	f, err = parquet.OpenFile(tail, size,
		parquet.SkipMagicBytes(true), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		var se *storeError
		if errors.As(err, &se) {
			return nil, se.err // the store's, as it said it (ErrNotFound, a context error)
		}
		return nil, fmt.Errorf("%v: %w", err, ErrBadParquet)
	}
	return f, nil
}

// tailReaderAt reads the bytes [at, at+len(tail)) of a file from tail,
// read before, and any others through r.
type tailReaderAt struct {
	r    io.ReaderAt
	at   int64
	tail []byte
}

func (t *tailReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if t.tail != nil && off >= t.at && off-t.at+int64(len(p)) <= int64(len(t.tail)) {
		return copy(p, t.tail[off-t.at:]), nil
	}
	return t.r.ReadAt(p, off)
}

// parquetColumns finds the media and label columns of f.
func parquetColumns(f *parquet.File, opts DiscoverOptions) (*parquetFile, error) {
	pf := &parquetFile{file: f, schema: f.Schema().String(), media: -1}
	var candidates []string
	leaves := map[string]*parquet.Column{}
	for _, c := range f.Root().Columns() {
		leaf, ok := mediaLeaf(c)
		if !ok {
			continue
		}
		leaves[c.Name()] = leaf
		candidates = append(candidates, c.Name())
	}
	var media *parquet.Column
	switch {
	case opts.MediaColumn != "":
		leaf, ok := leaves[opts.MediaColumn]
		if !ok {
			if f.Root().Column(opts.MediaColumn) == nil {
				return nil, fmt.Errorf("no column %q (the media column asked for): %w", opts.MediaColumn, ErrBadParquet)
			}
			return nil, fmt.Errorf("column %q is not binary nor a struct with binary \"bytes\": it cannot hold the media: %w", opts.MediaColumn, ErrBadParquet)
		}
		media, pf.mediaName = leaf, opts.MediaColumn
	case len(candidates) == 1:
		media, pf.mediaName = leaves[candidates[0]], candidates[0]
	case len(candidates) == 0:
		return nil, fmt.Errorf("no column holds binary media (binary, or a struct with binary \"bytes\"): %w", ErrBadParquet)
	default:
		return nil, fmt.Errorf("columns %q could each hold the media: name one (the media column): %w", candidates, ErrBadParquet)
	}
	pf.media, pf.mediaDef = media.Index(), media.MaxDefinitionLevel()
	label := opts.LabelColumn
	if label == "" {
		if c := f.Root().Column("label"); c != nil && (intColumn(c) || textColumn(c)) {
			label = "label"
		}
	}
	if label != "" {
		c := f.Root().Column(label)
		switch {
		case c == nil:
			return nil, fmt.Errorf("no column %q (the label column asked for): %w", label, ErrBadParquet)
		case !intColumn(c) && !textColumn(c):
			return nil, fmt.Errorf("label column %q is neither integers nor text: %w", label, ErrBadParquet)
		case label == pf.mediaName:
			return nil, fmt.Errorf("column %q is both media and label: %w", label, ErrBadParquet)
		}
		pf.labelName = label
		pf.names = classLabelNames(f, label)
	}
	fields, err := parquetFields(f, pf.mediaName, pf.labelName)
	if err != nil {
		return nil, err
	}
	pf.fields = fields
	return pf, nil
}

// parquetFields maps the columns of f other than media and label to
// fields, sorted by name: a flat column is a scalar (integers and
// booleans int, floating point float, annotated text string, other
// binary bytes), a list of numbers or text a list, a struct's flat
// members fields named "struct.member". Columns of other shapes (lists
// of structs, maps, lists of lists, INT96) are not read.
func parquetFields(f *parquet.File, media, label string) ([]parquetField, error) {
	var out []parquetField
	add := func(name string, leaf *parquet.Column, list bool) error {
		typ, ok := parquetFieldType(leaf.Type(), list)
		if !ok {
			return nil
		}
		if err := CheckFieldName(name); err != nil {
			return fmt.Errorf("column %q: %v: %w", name, err, ErrBadParquet)
		}
		out = append(out, parquetField{name: name, leaf: leaf.Index(), typ: typ, kind: leaf.Type().Kind()})
		return nil
	}
	for _, c := range f.Root().Columns() {
		if c.Name() == media || c.Name() == label {
			continue
		}
		var err error
		switch {
		case c.Leaf():
			err = add(c.Name(), c, c.Repeated())
		case c.MaxRepetitionLevel() == 0 && !c.Repeated():
			if leaf := listLeaf(c); leaf != nil {
				err = add(c.Name(), leaf, true)
				break
			}
			for _, m := range c.Columns() {
				if m.Leaf() && !m.Repeated() {
					if err = add(c.Name()+"."+m.Name(), m, false); err != nil {
						break
					}
				}
			}
		}
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b parquetField) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// listLeaf returns the element of a list column (LIST's three levels,
// group > repeated group > leaf), or nil.
func listLeaf(c *parquet.Column) *parquet.Column {
	if len(c.Columns()) != 1 {
		return nil
	}
	r := c.Columns()[0]
	if !r.Repeated() {
		return nil
	}
	if r.Leaf() {
		return r // two levels: group > repeated leaf
	}
	if len(r.Columns()) == 1 && r.Columns()[0].Leaf() && r.Columns()[0].MaxRepetitionLevel() == 1 {
		return r.Columns()[0]
	}
	return nil
}

// parquetFieldType is the field type of a Parquet leaf of type t (a
// list's element when list).
func parquetFieldType(t parquet.Type, list bool) (FieldType, bool) {
	var scalar FieldType
	switch t.Kind() {
	case parquet.Boolean, parquet.Int32, parquet.Int64:
		scalar = FieldInt
	case parquet.Float, parquet.Double:
		scalar = FieldFloat
	case parquet.ByteArray, parquet.FixedLenByteArray:
		scalar = FieldBytes
		if lt := t.LogicalType(); (lt != nil && lt.Value != nil) || t.ConvertedType() != nil {
			scalar = FieldString
		}
	default:
		return 0, false
	}
	if !list {
		return scalar, true
	}
	switch scalar {
	case FieldInt:
		return FieldInts, true
	case FieldFloat:
		return FieldFloats, true
	case FieldString:
		return FieldStrings, true
	}
	return 0, false // no lists of bytes
}

// fieldValue is the parquet value v of a leaf of kind as a field's
// scalar of type t.
func fieldValue(v parquet.Value, kind parquet.Kind, t FieldType) Value {
	switch t {
	case FieldInt, FieldInts:
		if kind == parquet.Boolean {
			if v.Boolean() {
				return IntValue(1)
			}
			return IntValue(0)
		}
		return IntValue(v.Int64())
	case FieldFloat, FieldFloats:
		if kind == parquet.Float {
			return FloatValue(float64(v.Float()))
		}
		return FloatValue(v.Double())
	case FieldString, FieldStrings:
		return StringValue(string(v.ByteArray()))
	}
	return BytesValue(slices.Clone(v.ByteArray()))
}

// mediaLeaf returns the leaf of the bytes of c if c can hold media: a
// binary column (no string, JSON or other annotation), or a struct whose
// "bytes" member is one (Hugging Face's Image and Audio features),
// neither repeated.
func mediaLeaf(c *parquet.Column) (*parquet.Column, bool) {
	if c.Repeated() {
		return nil, false
	}
	if c.Leaf() {
		if binaryLeaf(c) {
			return c, true
		}
		return nil, false
	}
	if b := c.Column("bytes"); b != nil && b.Leaf() && !b.Repeated() && binaryLeaf(b) {
		return b, true
	}
	return nil, false
}

// binaryLeaf: a BYTE_ARRAY leaf without a logical or converted type.
func binaryLeaf(c *parquet.Column) bool {
	t := c.Type()
	if t.Kind() != parquet.ByteArray {
		return false
	}
	if lt := t.LogicalType(); lt != nil && lt.Value != nil {
		return false
	}
	return t.ConvertedType() == nil
}

// intColumn: a flat INT32 or INT64 column.
func intColumn(c *parquet.Column) bool {
	if !c.Leaf() || c.Repeated() {
		return false
	}
	k := c.Type().Kind()
	return k == parquet.Int32 || k == parquet.Int64
}

// textColumn: a flat BYTE_ARRAY column annotated as text.
func textColumn(c *parquet.Column) bool {
	if !c.Leaf() || c.Repeated() {
		return false
	}
	t, ok := parquetFieldType(c.Type(), false)
	return ok && t == FieldString
}

// classLabelNames returns the class names Hugging Face's datasets
// library writes for a ClassLabel column into the file's "huggingface"
// metadata, or nil.
func classLabelNames(f *parquet.File, column string) []string {
	meta, ok := f.Lookup("huggingface")
	if !ok {
		return nil
	}
	var hf struct {
		Info struct {
			Features map[string]struct {
				Type  string   `json:"_type"`
				Names []string `json:"names"`
			} `json:"features"`
		} `json:"info"`
	}
	if json.Unmarshal([]byte(meta), &hf) != nil {
		return nil
	}
	if ft, ok := hf.Info.Features[column]; ok && ft.Type == "ClassLabel" && len(ft.Names) > 0 && len(ft.Names) <= MaxClasses {
		return ft.Names
	}
	return nil
}

// indexGroups records each row group's rows and media chunk range,
// checked to lie within the file's size bytes before the footer.
func (pf *parquetFile) indexGroups(size int64) error {
	md := pf.file.Metadata()
	var first int64
	for g, rg := range md.RowGroups {
		if rg.NumRows < 0 || first+rg.NumRows < first || first+rg.NumRows > MaxObjectRows {
			return fmt.Errorf("row group %d: %d rows: %w", g, rg.NumRows, ErrBadParquet)
		}
		if pf.media >= len(rg.Columns) {
			return fmt.Errorf("row group %d: no chunk for the media column: %w", g, ErrBadParquet)
		}
		off, n, err := chunkRange(&rg.Columns[pf.media].MetaData, size)
		if err != nil {
			return fmt.Errorf("row group %d: media column: %w", g, err)
		}
		if rg.NumRows > n*maxRowsPerByte {
			// The footer is the store's: a few bytes must not claim
			// billions of samples (and the memory for them).
			return fmt.Errorf("row group %d: %d rows in a media chunk of %d bytes: %w", g, rg.NumRows, n, ErrBadParquet)
		}
		if rg.NumRows > 0 {
			pf.groups = append(pf.groups, parquetGroup{index: g, first: first, rows: rg.NumRows, off: off, size: n})
		}
		first += rg.NumRows
	}
	if first != md.NumRows {
		return fmt.Errorf("row groups hold %d rows, the footer says %d: %w", first, md.NumRows, ErrBadParquet)
	}
	return nil
}

// maxRowsPerByte bounds a row group's rows by its media chunk's size:
// a sample's media costs at least a bit (a dictionary-encoded run of
// one repeated value), so eight rows a byte is more than any real file.
const maxRowsPerByte = 8

// MaxObjectRows bounds the rows of one Parquet file: what a Dataset can
// index.
const MaxObjectRows = 1<<31 - 1

// chunkRange is the byte range of a column chunk: from its dictionary
// page (if any) for its total compressed size, within a file of size
// bytes.
func chunkRange(md *format.ColumnMetaData, size int64) (int64, int64, error) {
	off := md.DataPageOffset
	if md.DictionaryPageOffset > 0 && md.DictionaryPageOffset < off {
		off = md.DictionaryPageOffset
	}
	n := md.TotalCompressedSize
	if off < 0 || n <= 0 || off > size || n > size-off {
		return 0, 0, fmt.Errorf("chunk [%d,+%d) outside the file's %d bytes: %w", off, n, size, ErrBadParquet)
	}
	return off, n, nil
}

// rows is how many rows the file's row groups hold (indexGroups checked
// them).
func (pf *parquetFile) rows() int64 {
	var n int64
	for _, g := range pf.groups {
		n += g.rows
	}
	return n
}

// readColumns reads the label column and the fields' columns: per row
// group, one ranged GET for each run of their chunks that lie together
// (in a row group written column after column, the ones before the
// media and the ones after it).
func (pf *parquetFile) readColumns(ctx context.Context, s storage.Store) error {
	md := pf.file.Metadata()
	size := pf.file.Size()
	labelLeaf := -1
	if pf.labelName != "" {
		lc := pf.file.Root().Column(pf.labelName)
		labelLeaf = lc.Index()
		if textColumn(lc) {
			pf.textLabels = make([]string, 0, pf.rows())
		} else {
			pf.labels = make([]int32, 0, pf.rows())
		}
	}
	leaves := make([]int, 0, len(pf.fields)+1)
	if labelLeaf >= 0 {
		leaves = append(leaves, labelLeaf)
	}
	schema := make(Schema, len(pf.fields))
	for i, f := range pf.fields {
		leaves = append(leaves, f.leaf)
		schema[i] = Field{Name: f.name, Type: f.typ}
	}
	var fb *FieldsBuilder
	if len(pf.fields) > 0 {
		fb = NewFieldsBuilderFor(schema)
	}
	var row0 int64
	for g, rg := range pf.file.RowGroups() {
		rows := md.RowGroups[g].NumRows
		if rows == 0 {
			continue
		}
		type chunk struct {
			leaf   int
			off, n int64
		}
		chunks := make([]chunk, len(leaves))
		for k, leaf := range leaves {
			if leaf >= len(md.RowGroups[g].Columns) || leaf >= len(rg.ColumnChunks()) {
				return fmt.Errorf("row group %d: no chunk for column %d: %w", g, leaf, ErrBadParquet)
			}
			off, n, err := chunkRange(&md.RowGroups[g].Columns[leaf].MetaData, size)
			if err != nil {
				return fmt.Errorf("row group %d: column %d: %w", g, leaf, err)
			}
			chunks[k] = chunk{leaf, off, n}
		}
		// Runs of chunks that touch (or nearly): one GET each.
		order := make([]int, len(chunks))
		for k := range order {
			order[k] = k
		}
		slices.SortFunc(order, func(a, b int) int { return cmpInt64(chunks[a].off, chunks[b].off) })
		readers := make([]io.ReaderAt, len(chunks))
		for k := 0; k < len(order); {
			lo, hi := chunks[order[k]].off, chunks[order[k]].off+chunks[order[k]].n
			e := k + 1
			for e < len(order) && chunks[order[e]].off <= hi+parquetGap {
				hi = max(hi, chunks[order[e]].off+chunks[order[e]].n)
				e++
			}
			data, err := s.GetRange(ctx, pf.key, lo, hi-lo, nil)
			if err != nil {
				return err
			}
			if int64(len(data)) != hi-lo {
				return fmt.Errorf("get range %s [%d,+%d): %d bytes: %w", pf.key, lo, hi-lo, len(data), io.ErrUnexpectedEOF)
			}
			for _, c := range order[k:e] {
				readers[c] = &sliceReaderAt{off: lo, data: data}
			}
			k = e
		}
		col := func(leaf int) *parquet.FileColumnChunk {
			cc, _ := rg.ColumnChunks()[leaf].(*parquet.FileColumnChunk)
			return cc
		}
		k := 0
		if labelLeaf >= 0 {
			cc := col(labelLeaf)
			if cc == nil {
				return fmt.Errorf("row group %d: label column chunk: %w", g, ErrBadParquet)
			}
			err := readColumnChunk(cc, readers[0], rows, func(row int64, v parquet.Value) error {
				if pf.textLabels != nil {
					if v.IsNull() {
						return fmt.Errorf("row %d: no label (a null text label): %w", row0+row, ErrBadParquet)
					}
					pf.textLabels = append(pf.textLabels, string(v.ByteArray()))
					return nil
				}
				l := int64(NoLabel)
				if !v.IsNull() {
					l = v.Int64()
				}
				if (l < 0 && l != NoLabel) || l >= MaxClasses {
					return fmt.Errorf("row %d: label %d outside [0, %d) and not %d (no label): %w", row0+row, l, MaxClasses, NoLabel, ErrBadParquet)
				}
				pf.labels = append(pf.labels, int32(l))
				return nil
			})
			if err != nil {
				return fmt.Errorf("row group %d: label column: %w", g, err)
			}
			k = 1
		}
		values := make([][]Value, len(pf.fields))
		for fi, f := range pf.fields {
			cc := col(f.leaf)
			if cc == nil {
				return fmt.Errorf("row group %d: column %s: %w", g, f.name, ErrBadParquet)
			}
			vals, err := readFieldChunk(cc, readers[k+fi], rows, f)
			if err != nil {
				return fmt.Errorf("row group %d: column %s: %w", g, f.name, err)
			}
			values[fi] = vals
		}
		if fb != nil {
			for r := range rows {
				for fi, f := range pf.fields {
					if err := fb.Set(f.name, values[fi][r]); err != nil {
						return fmt.Errorf("row %d: %w", row0+r, err)
					}
				}
				fb.EndSample()
			}
		}
		row0 += rows
	}
	if fb != nil {
		pf.values = fb.Finish()
	}
	return nil
}

// NoLabel is the label of a Parquet sample without one: Hugging Face's
// datasets library writes -1 for a ClassLabel of an unlabelled split
// (a test split), and a null integer label is none either. The sample is
// delivered with label -1 (docs/parquet.md); it names no class.
const NoLabel = -1

// parquetGap is the most bytes between two column chunks that
// discovery reads rather than make another request.
const parquetGap = 64 << 10

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// readFieldChunk decodes a field's column chunk into a value per row:
// absent for a null, a list for a list column (its rows start where
// the repetition level is 0).
func readFieldChunk(cc *parquet.FileColumnChunk, r io.ReaderAt, rows int64, f parquetField) ([]Value, error) {
	out := make([]Value, 0, rows) // rows: checked against the media chunk (indexGroups)
	if !f.typ.List() {
		err := readColumnChunk(cc, r, rows, func(_ int64, v parquet.Value) error {
			if v.IsNull() {
				out = append(out, Value{})
			} else {
				out = append(out, fieldValue(v, f.kind, f.typ))
			}
			return nil
		})
		return out, err
	}
	err := readValues(cc, r, func(v parquet.Value) error {
		if v.RepetitionLevel() == 0 {
			if int64(len(out)) >= rows {
				return fmt.Errorf("more than the row group's %d rows: %w", rows, ErrBadParquet)
			}
			out = append(out, Value{Type: f.typ})
		}
		if len(out) == 0 {
			return fmt.Errorf("a list's value before its row: %w", ErrBadParquet)
		}
		if v.IsNull() {
			return nil // an empty or null list, or a null element
		}
		cur := &out[len(out)-1]
		e := fieldValue(v, f.kind, f.typ)
		switch f.typ {
		case FieldInts:
			cur.Ints = append(cur.Ints, e.Int)
		case FieldFloats:
			cur.Floats = append(cur.Floats, e.Float)
		case FieldStrings:
			cur.Strings = append(cur.Strings, e.Str)
		}
		return nil
	})
	if err == nil && int64(len(out)) != rows {
		err = fmt.Errorf("%d lists for the row group's %d rows: %w", len(out), rows, ErrBadParquet)
	}
	return out, err
}

// readColumnChunk decodes the flat column chunk cc through r, calling
// each with every row's value; it fails unless there are exactly rows.
func readColumnChunk(cc *parquet.FileColumnChunk, r io.ReaderAt, rows int64, each func(row int64, v parquet.Value) error) error {
	var row int64
	err := readValues(cc, r, func(v parquet.Value) error {
		if row >= rows {
			return fmt.Errorf("more than the row group's %d values: %w", rows, ErrBadParquet)
		}
		if err := each(row, v); err != nil {
			return err
		}
		row++
		return nil
	})
	if err != nil {
		return err
	}
	if row != rows {
		return fmt.Errorf("%d values for the row group's %d rows: %w", row, rows, ErrBadParquet)
	}
	return nil
}

// readValues decodes every value of the column chunk cc through r.
func readValues(cc *parquet.FileColumnChunk, r io.ReaderAt, each func(v parquet.Value) error) (err error) {
	defer func() {
		if p := recover(); p != nil { // pages are the store's bytes: see openParquetFooter
			err = fmt.Errorf("pages: %v: %w", p, ErrBadParquet)
		}
	}()
	pages := cc.PagesFrom(r)
	defer pages.Close()
	buf := make([]parquet.Value, 256)
	for {
		p, err := pages.ReadPage()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%v: %w", err, ErrBadParquet)
		}
		vr := p.Values()
		for {
			n, err := vr.ReadValues(buf)
			for _, v := range buf[:n] {
				if err := each(v); err != nil {
					return err
				}
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("%v: %w", err, ErrBadParquet)
			}
		}
	}
	return nil
}

// parquetDataset makes the Dataset of the files indexed, in order.
func parquetDataset(files []*parquetFile) (*Dataset, error) {
	first := files[0]
	var total int64
	for _, pf := range files {
		if pf.schema != first.schema || pf.mediaName != first.mediaName || pf.labelName != first.labelName {
			return nil, fmt.Errorf("parquet %s: schema differs from %s's (every file of a dataset has one schema):\n%s\nvs\n%s: %w",
				pf.key, first.key, pf.schema, first.schema, ErrBadParquet)
		}
		total += pf.file.NumRows()
	}
	if total == 0 {
		return nil, fmt.Errorf("%d parquet files hold no rows: %w", len(files), ErrEmptyDataset)
	}
	if total > MaxObjectRows {
		return nil, fmt.Errorf("parquet: %d rows, more than %d: %w", total, MaxObjectRows, ErrBadParquet)
	}
	ds := &Dataset{Samples: make([]Sample, 0, total)}
	var byName map[string]int32
	if first.textLabels != nil {
		// Class names, labelled by their sorted order as a manifest's.
		byName = map[string]int32{}
		for _, pf := range files {
			for _, n := range pf.textLabels {
				byName[n] = 0
			}
		}
		if len(byName) > MaxClasses {
			return nil, fmt.Errorf("parquet: %d label names, more than %d: %w", len(byName), MaxClasses, ErrBadParquet)
		}
		names := make([]string, 0, len(byName))
		for n := range byName {
			names = append(names, n)
		}
		slices.Sort(names)
		for i, n := range names {
			byName[n] = int32(i)
		}
		for _, pf := range files {
			pf.labels = make([]int32, len(pf.textLabels))
			for i, n := range pf.textLabels {
				pf.labels[i] = byName[n]
			}
			pf.textLabels = nil
		}
		first.names = names
	}
	u := &parquetUnpacker{files: make(map[string]*parquetFile, len(files))}
	maxLabel := int32(0)
	for _, pf := range files {
		id := ds.AddObject(pf.key)
		u.files[pf.key] = pf
		for _, g := range pf.groups {
			for r := g.first; r < g.first+g.rows; r++ {
				var label int32
				if pf.labels != nil {
					label = pf.labels[r]
					maxLabel = max(maxLabel, label)
				}
				ds.Samples = append(ds.Samples, Sample{Key: pf.key + "/" + strconv.FormatInt(r, 10), Label: label, Object: id, Offset: g.off, Size: g.size})
			}
		}
		pf.labels = nil // in the samples now
	}
	if len(first.fields) > 0 {
		ds.Fields = first.values
		if len(files) > 1 {
			schema := first.values.Schema()
			fb := NewFieldsBuilderFor(schema)
			for _, pf := range files {
				for r := range pf.values.Len() {
					for c, f := range schema {
						if err := fb.Set(f.Name, pf.values.Value(r, c)); err != nil {
							return nil, fmt.Errorf("parquet %s: row %d: %w", pf.key, r, err)
						}
					}
					fb.EndSample()
				}
				pf.values = nil
			}
			ds.Fields = fb.Finish()
		}
	}
	switch names := first.names; {
	case names != nil && int(maxLabel) < len(names):
		ds.Classes = slices.Clone(names)
	default:
		ds.Classes = make([]string, maxLabel+1)
		for i := range ds.Classes {
			ds.Classes[i] = strconv.Itoa(i)
		}
	}
	ds.Unpacker = u
	ds.FormatDigest = "parquet\x00media=" + first.mediaName + "\x00label=" + first.labelName + "\x00" + first.schema
	return ds, nil
}

// parquetUnpacker serves a Parquet dataset's samples out of their row
// groups' media column chunks.
type parquetUnpacker struct {
	files map[string]*parquetFile
}

func (u *parquetUnpacker) Unpack(object string, off int64, data []byte) Members {
	return &parquetMembers{u: u, object: object, off: off, data: data, groups: map[int64]*parquetRows{}}
}

// parquetMembers decodes each row group's chunk in its range once.
type parquetMembers struct {
	u        *parquetUnpacker
	object   string
	off      int64
	data     []byte
	mu       sync.Mutex
	groups   map[int64]*parquetRows // by the chunk's offset
	errs     map[int64]error
	released bool
}

// parquetRows are a row group's media decoded: each row's bytes, which
// lie in pages (the library's buffers) until they are released.
type parquetRows struct {
	rows  [][]byte
	pages []parquet.Page
}

func (m *parquetMembers) Member(s Sample) ([]byte, error) {
	pf := m.u.files[m.object]
	if pf == nil {
		return nil, fmt.Errorf("parquet: %s is not a file of the dataset: %w", m.object, storage.ErrInvalidKey)
	}
	row, err := parquetRow(s.Key, m.object)
	if err != nil {
		return nil, err
	}
	g, ok := slices.BinarySearchFunc(pf.groups, row, func(g parquetGroup, row int64) int {
		switch {
		case row < g.first:
			return 1
		case row >= g.first+g.rows:
			return -1
		}
		return 0
	})
	if !ok {
		return nil, fmt.Errorf("parquet %s: row %d (sample %s) not in the file: %w", m.object, row, s.Key, storage.ErrInvalidKey)
	}
	grp := pf.groups[g]
	if grp.off != s.Offset || grp.size != s.Size || grp.off < m.off || grp.off+grp.size > m.off+int64(len(m.data)) {
		return nil, fmt.Errorf("parquet %s: sample %s: chunk [%d,+%d) not in the range read [%d,+%d): %w", m.object, s.Key, grp.off, grp.size, m.off, len(m.data), storage.ErrInvalidKey)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.released {
		// A bug of the caller: the bytes handed out may be reused.
		return nil, fmt.Errorf("parquet %s: sample %s asked for after its rows were released: %w", m.object, s.Key, storage.ErrInvalidKey)
	}
	if err := m.errs[grp.off]; err != nil {
		return nil, err
	}
	rows, ok := m.groups[grp.off]
	if !ok {
		rows, err = pf.decodeMedia(g, grp, m.data[grp.off-m.off:grp.off-m.off+grp.size])
		if err != nil {
			if m.errs == nil {
				m.errs = map[int64]error{}
			}
			m.errs[grp.off] = err
			return nil, err
		}
		m.groups[grp.off] = rows
	}
	b := rows.rows[row-grp.first]
	if b == nil {
		return nil, fmt.Errorf("parquet %s: row %d has no media (null): %w", m.object, row, ErrBadParquet)
	}
	return b, nil
}

// Release gives the decoded pages back to the library's pools.
func (m *parquetMembers) Release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.released = true
	for _, g := range m.groups {
		g.release()
	}
	clear(m.groups)
}

func (r *parquetRows) release() {
	for _, p := range r.pages {
		parquet.Release(p)
	}
	r.pages, r.rows = nil, nil
}

// parquetRow is the row of the file object that sample key names
// (object + "/" + row).
func parquetRow(key, object string) (int64, error) {
	rest, ok := strings.CutPrefix(key, object+"/")
	if ok {
		if row, err := strconv.ParseInt(rest, 10, 64); err == nil && row >= 0 {
			return row, nil
		}
	}
	return 0, fmt.Errorf("parquet: sample key %q is not %s/<row>: %w", key, object, storage.ErrInvalidKey)
}

// decodeMedia decodes row group g's media chunk, data, into each row's
// bytes (nil for a null). A page of plain (or delta) encoded values is
// decompressed and decoded by the library into one buffer of its own,
// and the rows are that buffer's values, not copied again: the pages are
// kept, and given back to the library's pools by release once no row is
// read any more. Only a dictionary-encoded page's values are copied out
// (they lie in the dictionary, which the page reader owns).
func (pf *parquetFile) decodeMedia(g int, grp parquetGroup, data []byte) (*parquetRows, error) {
	cc, _ := pf.file.RowGroups()[grp.index].ColumnChunks()[pf.media].(*parquet.FileColumnChunk)
	if cc == nil {
		return nil, fmt.Errorf("parquet %s: row group %d: media column chunk: %w", pf.key, g, ErrBadParquet)
	}
	out := &parquetRows{rows: make([][]byte, 0, grp.rows)}
	if err := pf.readMediaPages(cc, &sliceReaderAt{off: grp.off, data: data}, grp.rows, out); err != nil {
		out.release()
		return nil, fmt.Errorf("parquet %s: rows [%d,+%d): media: %w", pf.key, grp.first, grp.rows, err)
	}
	if int64(len(out.rows)) != grp.rows {
		n := len(out.rows)
		out.release()
		return nil, fmt.Errorf("parquet %s: rows [%d,+%d): media: %d values for the row group's %d rows: %w", pf.key, grp.first, grp.rows, n, grp.rows, ErrBadParquet)
	}
	return out, nil
}

// readMediaPages appends the rows of the media column chunk cc, read
// through r, to out (at most rows of them), keeping the pages they lie
// in.
func (pf *parquetFile) readMediaPages(cc *parquet.FileColumnChunk, r io.ReaderAt, rows int64, out *parquetRows) (err error) {
	defer func() {
		if p := recover(); p != nil { // pages are the store's bytes: see openParquetFooter
			err = fmt.Errorf("pages: %v: %w", p, ErrBadParquet)
		}
	}()
	pages := cc.PagesFrom(r)
	defer pages.Close()
	var buf []parquet.Value
	for {
		p, err := pages.ReadPage()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%v: %w", err, ErrBadParquet)
		}
		out.pages = append(out.pages, p)
		n := p.NumValues()
		if n > rows-int64(len(out.rows)) {
			return fmt.Errorf("more than the row group's %d values: %w", rows, ErrBadParquet)
		}
		vals := p.Data()
		if p.Dictionary() == nil && vals.Kind() == encoding.ByteArray {
			values, offsets := vals.ByteArray()
			defs := p.DefinitionLevels()
			if defs != nil && int64(len(defs)) != n || defs == nil && int64(len(offsets)) != n+1 {
				return fmt.Errorf("a page of %d values with %d levels and %d offsets: %w", n, len(defs), len(offsets), ErrBadParquet)
			}
			k := 0
			for i := range n {
				if defs != nil && int(defs[i]) != pf.mediaDef {
					out.rows = append(out.rows, nil)
					continue
				}
				if k+1 >= len(offsets) {
					return fmt.Errorf("a page's values end before its rows: %w", ErrBadParquet)
				}
				lo, hi := offsets[k], offsets[k+1]
				if lo > hi || int(hi) > len(values) {
					return fmt.Errorf("a page's value [%d,%d) outside its %d bytes: %w", lo, hi, len(values), ErrBadParquet)
				}
				if lo == hi {
					out.rows = append(out.rows, []byte{}) // empty, not null
				} else {
					out.rows = append(out.rows, values[lo:hi:hi])
				}
				k++
			}
			if k != len(offsets)-1 {
				return fmt.Errorf("a page of %d values for %d rows: %w", len(offsets)-1, k, ErrBadParquet)
			}
			continue
		}
		if buf == nil {
			buf = make([]parquet.Value, 64)
		}
		vr := p.Values()
		for {
			m, err := vr.ReadValues(buf)
			for _, v := range buf[:m] {
				if int64(len(out.rows)) >= rows {
					return fmt.Errorf("more than the row group's %d values: %w", rows, ErrBadParquet)
				}
				if v.IsNull() {
					out.rows = append(out.rows, nil)
				} else {
					out.rows = append(out.rows, append(make([]byte, 0, len(v.ByteArray())), v.ByteArray()...))
				}
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("%v: %w", err, ErrBadParquet)
			}
		}
	}
}

// storeReaderAt reads an object of a store with ranged GETs: what the
// footer is read through.
type storeReaderAt struct {
	ctx  context.Context
	s    storage.Store
	key  string
	size int64
}

// storeError carries a store's error through the Parquet library.
type storeError struct{ err error }

func (e *storeError) Error() string { return e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

func (r *storeReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= r.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), r.size-off)
	b, err := r.s.GetRange(r.ctx, r.key, off, n, p[:0])
	if err != nil {
		return 0, &storeError{err}
	}
	if len(b) > 0 && &b[0] != &p[0] {
		copy(p, b)
	}
	if int64(len(b)) < int64(len(p)) {
		return len(b), io.EOF
	}
	return len(b), nil
}

// sliceReaderAt reads the bytes [off, off+len(data)) of a file from
// memory: a column chunk read before.
type sliceReaderAt struct {
	off  int64
	data []byte
}

func (r *sliceReaderAt) ReadAt(p []byte, off int64) (int, error) {
	at := off - r.off
	if at < 0 || at >= int64(len(r.data)) {
		return 0, io.EOF
	}
	n := copy(p, r.data[at:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
