package dataset

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// parseCSV reads a CSV manifest into b. A line without a double quote,
// nearly every line of a manifest, is split on its commas where it lies
// in the read buffer; a record with quotes is read by encoding/csv, which
// defines the format (and its errors) for both: such a line holds a
// record the way encoding/csv reads it when it has no quote in it (it
// splits on commas, drops a "\r" before the "\n" or before the end of
// the input, and skips empty lines).
func parseCSV(r io.Reader, b *manifestBuilder, bufSize int) error {
	p := csvParser{b: b, br: bufio.NewReaderSize(r, bufSize), first: !b.continued, fields: make([][]byte, 0, 5)}
	if b.continued && b.csvHeader != nil {
		l, header, err := parseCSVHeader(b.csvHeader)
		if err != nil || !header {
			return fmt.Errorf("%w: the CSV header %q the piece is read with: %v", ErrStaleIndex, b.csvHeader, err)
		}
		p.layout = l
	}
	return p.parse()
}

// csvBufferSize is the read buffer of parseCSV: lines longer are copied
// out of it.
const csvBufferSize = 64 << 10

type csvParser struct {
	b     *manifestBuilder
	br    *bufio.Reader
	long  []byte // a line longer than br's buffer
	line  int    // of the last line read
	first bool   // no record read yet

	// Records with quotes: cr reads them from feed, which hands it br's
	// lines one at a time, as it asks for them.
	cr   *csv.Reader
	feed csvFeed

	fields [][]byte
	row    manifestRow
	layout *csvLayout // of a header with field columns; nil: none
}

func (p *csvParser) parse() error {
	for {
		raw, err := p.br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			p.long = append(p.long[:0], raw...)
			for err == bufio.ErrBufferFull {
				if len(p.long) > maxManifestLine+len("\r\n") {
					return lineTooLong(p.line + 1)
				}
				raw, err = p.br.ReadSlice('\n')
				p.long = append(p.long, raw...)
			}
			raw = p.long
		}
		if len(raw) == 0 {
			if err == io.EOF {
				return nil
			}
			return err
		}
		p.line++
		if len(bytes.TrimSuffix(bytes.TrimSuffix(raw, []byte("\n")), []byte("\r"))) > maxManifestLine {
			return lineTooLong(p.line)
		}
		if bytes.IndexByte(raw, '"') >= 0 {
			if err := p.quoted(raw, err); err != nil {
				return err
			}
			continue
		}
		if err != nil && err != io.EOF {
			return err // encoding/csv drops the partial record for the read error
		}
		text := raw
		switch n := len(text); {
		case text[n-1] == '\n' && n >= 2 && text[n-2] == '\r':
			text = text[:n-2]
		case text[n-1] == '\n' || err == io.EOF && text[n-1] == '\r':
			text = text[:n-1]
		}
		if len(text) == 0 {
			continue // an empty line
		}
		p.fields = p.fields[:0]
		for {
			i := bytes.IndexByte(text, ',')
			if i < 0 {
				p.fields = append(p.fields, text)
				break
			}
			p.fields = append(p.fields, text[:i])
			text = text[i+1:]
		}
		if err := p.record(p.line, p.fields, len(p.fields)); err != nil {
			return err
		}
	}
}

// quoted reads the record that starts with raw, a line with a quote that
// ended with readErr, with encoding/csv.
func (p *csvParser) quoted(raw []byte, readErr error) error {
	if p.cr == nil {
		p.cr = csv.NewReader(&p.feed)
		p.cr.FieldsPerRecord = -1
		p.cr.ReuseRecord = true
	}
	// Lines are counted the same way here and in cr, from different
	// starts.
	before := p.feed.lines
	p.feed.hand(p.br, raw, readErr)
	shift := p.line - (before + 1)
	start := p.line
	rec, err := p.cr.Read()
	p.line = p.feed.lines + shift
	if errors.Is(err, errRecordTooLong) {
		return badLine(start, "record longer than %d bytes (a quoted field left open?)", maxManifestLine)
	}
	if err != nil {
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			return badLine(pe.Line+shift, "%v", pe.Err)
		}
		return err
	}
	line, _ := p.cr.FieldPos(0)
	p.fields = p.fields[:0]
	for _, f := range rec {
		p.fields = append(p.fields, []byte(f))
	}
	if len(p.fields) == 0 {
		p.fields = append(p.fields, nil) // only the count matters: an error
	}
	return p.record(line+shift, p.fields, len(rec))
}

// record reads one record of nf fields, found on line.
func (p *csvParser) record(line int, fields [][]byte, nf int) error {
	first := p.first
	p.first = false
	if first {
		fields[0] = bytes.TrimPrefix(fields[0], []byte("\ufeff")) // a UTF-8 byte order mark
		rec := make([]string, nf)
		for i, f := range fields {
			rec[i] = string(f)
		}
		l, header, err := parseCSVHeader(rec)
		if err != nil {
			return badLine(line, "%v", err)
		}
		if header {
			p.layout = l
			return nil
		}
	}
	if p.layout != nil {
		if nf != p.layout.columns {
			return badLine(line, "want %d fields, as the header has, got %d", p.layout.columns, nf)
		}
	} else if nf != 2 && nf != 5 {
		return badLine(line, "want 2 fields (key,label) or 5 (key,label,object,offset,size), got %d", nf)
	}
	row := &p.row
	*row = manifestRow{line: line, key: bytes.TrimSpace(fields[0]), label: bytes.TrimSpace(fields[1]), fields: row.fields[:0]}
	_, row.number = parseDecimal(row.label)
	if nf == 5 && p.layout == nil || p.layout != nil && p.layout.located {
		var loc [3][]byte
		var present [3]bool
		for i := range loc {
			loc[i] = bytes.TrimSpace(fields[2+i])
			present[i] = len(loc[i]) > 0
		}
		if err := row.setLocation(present, loc[0], loc[1], loc[2]); err != nil {
			return err
		}
	}
	if p.layout != nil {
		fs, err := p.layout.values(line, fields, row.fields)
		if err != nil {
			return err
		}
		row.fields = fs
	}
	p.b.add(row)
	return nil
}

// lineTooLong is the error for a CSV line over maxManifestLine bytes,
// as JSON lines have it: a manifest line is a sample's key and label, and
// a parser that held any line whole would hold whatever the manifest's
// writer (or whoever can write to its bucket) put in one.
func lineTooLong(line int) error {
	return badLine(line, "line longer than %d bytes", maxManifestLine)
}

// errRecordTooLong ends a quoted record (over several lines) longer than
// maxManifestLine bytes.
var errRecordTooLong = errors.New("record too long")

// csvFeed is the reader of the csv.Reader that reads records with quotes:
// it hands over the line it was given, then br's lines as the csv.Reader
// asks for more, one line a Read. encoding/csv reads through a
// bufio.Reader, which reads again only for a line that is not all there,
// so it never asks past the end of its record, and br reads on after it.
type csvFeed struct {
	br      *bufio.Reader
	pending []byte // of the line being handed over
	err     error  // what ended pending
	lines   int    // lines handed over, the partial last one counted
	midLine bool   // the last byte handed over was not a '\n'
	bytes   int    // handed over for the record being read
}

// hand makes raw, which ended with err, the next bytes Read returns.
func (f *csvFeed) hand(br *bufio.Reader, raw []byte, err error) {
	f.br, f.pending, f.err, f.midLine, f.bytes = br, nil, nil, false, 0
	f.take(raw, err)
}

func (f *csvFeed) take(piece []byte, err error) {
	if err == bufio.ErrBufferFull {
		err = nil // the line goes on
	}
	if f.bytes += len(piece); f.bytes > maxManifestLine+len("\r\n") {
		piece, err = nil, errRecordTooLong
	}
	f.pending, f.err = piece, err
	if len(piece) > 0 {
		if !f.midLine {
			f.lines++
		}
		f.midLine = piece[len(piece)-1] != '\n'
	}
}

func (f *csvFeed) Read(b []byte) (int, error) {
	if len(f.pending) == 0 {
		if err := f.err; err != nil {
			f.err = nil
			return 0, err
		}
		f.take(f.br.ReadSlice('\n'))
		if len(f.pending) == 0 {
			err := f.err
			f.err = nil
			return 0, err
		}
	}
	n := copy(b, f.pending)
	f.pending = f.pending[n:]
	if len(f.pending) == 0 && f.err != nil {
		err := f.err
		f.err = nil
		return n, err
	}
	return n, nil
}

// locationFields are the names of a packed sample's extra fields, in their
// CSV column order.
var locationFields = [3]string{"object", "offset", "size"}

// csvLayout is what a CSV header with field columns says: how many
// columns a record has, whether columns 2 to 4 are a packed sample's
// location, and the fields the columns after them hold.
type csvLayout struct {
	columns int
	located bool
	first   int         // the first field column
	fields  []csvColumn // of columns first, first+1, ...
	order   []int       // fields' indices sorted by name
}

type csvColumn struct {
	name string
	typ  FieldType
}

// csvFieldTypes are the types a CSV header's field column may name
// after a ':' (a column without one is a string).
var csvFieldTypes = map[string]FieldType{"str": FieldString, "string": FieldString, "int": FieldInt, "float": FieldFloat}

// parseCSVHeader reads rec, a CSV manifest's first record: header says
// whether it is a header (not a sample), and l, when it names field
// columns, what they are. A header's first two columns name the key
// (key, path, file or filename) and the label (label, class or target);
// then object, offset and size may follow; every column after is a
// field, named "name" (a string) or "name:type" (str, string, int,
// float). A record of 2 or 5 columns reads as it always has: with 5,
// columns 2 to 4 either name the location or the record is a sample
// unless it could not be one (its offset and size are not integers and
// not all three empty).
func parseCSVHeader(rec []string) (l *csvLayout, header bool, err error) {
	name := func(i int) string { return strings.ToLower(strings.TrimSpace(rec[i])) }
	if len(rec) < 2 {
		return nil, false, nil
	}
	k, lab := name(0), name(1)
	if !(k == "key" || k == "path" || k == "file" || k == "filename") || !(lab == "label" || lab == "class" || lab == "target") {
		return nil, false, nil
	}
	located := len(rec) >= 5
	for i := 0; located && i < len(locationFields); i++ {
		located = name(2+i) == locationFields[i]
	}
	switch {
	case len(rec) == 2 || len(rec) == 5 && located:
		return nil, true, nil
	case len(rec) == 5:
		_, offOK := parseDecimal([]byte(strings.TrimSpace(rec[3])))
		_, sizeOK := parseDecimal([]byte(strings.TrimSpace(rec[4])))
		empty := strings.TrimSpace(rec[2]) == "" && strings.TrimSpace(rec[3]) == "" && strings.TrimSpace(rec[4]) == ""
		if empty || offOK && sizeOK {
			return nil, false, nil // a sample, as it always was
		}
	}
	l = &csvLayout{columns: len(rec), located: located, first: 2}
	if located {
		l.first = 5
	}
	for i, col := range rec[l.first:] {
		c := csvColumn{name: strings.TrimSpace(col), typ: FieldString}
		if j := strings.LastIndexByte(c.name, ':'); j >= 0 {
			t, ok := csvFieldTypes[strings.TrimSpace(c.name[j+1:])]
			if !ok {
				return nil, true, fmt.Errorf("header column %d %q: unknown type %q (want str, int or float)", l.first+i+1, col, c.name[j+1:])
			}
			c.name, c.typ = strings.TrimSpace(c.name[:j]), t
		}
		if err := CheckFieldName(c.name); err != nil {
			return nil, true, fmt.Errorf("header column %d: %v", l.first+i+1, strings.TrimPrefix(err.Error(), "dataset: "))
		}
		for _, d := range l.fields {
			if d.name == c.name {
				return nil, true, fmt.Errorf("header column %d: field %q named twice", l.first+i+1, c.name)
			}
		}
		l.fields = append(l.fields, c)
		l.order = append(l.order, i)
	}
	slices.SortFunc(l.order, func(a, b int) int { return strings.Compare(l.fields[a].name, l.fields[b].name) })
	return l, true, nil
}

// values appends to fs the fields of a record's columns, sorted by
// name: an empty cell is absent; an int or float cell is read with its
// spaces trimmed; a string cell is kept as it is (it must be UTF-8).
func (l *csvLayout) values(line int, rec [][]byte, fs []NamedValue) ([]NamedValue, error) {
	for _, i := range l.order {
		c, cell := l.fields[i], rec[l.first+i]
		if len(cell) == 0 {
			continue
		}
		var v Value
		switch c.typ {
		case FieldString:
			if !utf8.Valid(cell) {
				return nil, badLine(line, "field %q: %q is not valid UTF-8", c.name, cell)
			}
			v = StringValue(string(cell))
		case FieldInt:
			n, err := strconv.ParseInt(string(bytes.TrimSpace(cell)), 10, 64)
			if err != nil {
				return nil, badLine(line, "field %q: %q is not an integer", c.name, cell)
			}
			v = IntValue(n)
		case FieldFloat:
			f, err := strconv.ParseFloat(string(bytes.TrimSpace(cell)), 64)
			if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				return nil, badLine(line, "field %q: %q is not a finite number", c.name, cell)
			}
			v = FloatValue(f)
		}
		fs = append(fs, NamedValue{Name: c.name, Value: v})
	}
	return fs, nil
}

// setLocation fills row's location from the text of the three fields, of
// which those not present are absent: all three or none.
func (row *manifestRow) setLocation(present [3]bool, object, offset, size []byte) error {
	n := 0
	for _, ok := range present {
		if ok {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if n < len(present) {
		var have, missing []string
		for i, ok := range present {
			if ok {
				have = append(have, locationFields[i])
			} else {
				missing = append(missing, locationFields[i])
			}
		}
		return badLine(row.line, "%s without %s: a packed sample needs object, offset and size together",
			strings.Join(have, " and "), strings.Join(missing, " and "))
	}
	off, ok := parseDecimal(offset)
	if !ok {
		return badLine(row.line, "offset %q is not an integer", offset)
	}
	sz, ok := parseDecimal(size)
	if !ok {
		return badLine(row.line, "size %q is not an integer", size)
	}
	row.packed, row.object, row.offset, row.size = true, object, off, sz
	return nil
}
