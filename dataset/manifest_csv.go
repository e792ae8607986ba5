package dataset

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"io"
	"strings"
)

// parseCSV reads a CSV manifest into b. A line without a double quote,
// nearly every line of a manifest, is split on its commas where it lies
// in the read buffer; a record with quotes is read by encoding/csv, which
// defines the format (and its errors) for both: such a line holds a
// record the way encoding/csv reads it when it has no quote in it (it
// splits on commas, drops a "\r" before the "\n" or before the end of
// the input, and skips empty lines).
func parseCSV(r io.Reader, b *manifestBuilder, bufSize int) error {
	p := csvParser{b: b, br: bufio.NewReaderSize(r, bufSize), first: !b.continued}
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

	fields [5][]byte
	row    manifestRow
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
		nf := 0
		for {
			i := bytes.IndexByte(text, ',')
			if nf < len(p.fields) {
				p.fields[nf] = text
				if i >= 0 {
					p.fields[nf] = text[:i]
				}
			}
			nf++
			if i < 0 {
				break
			}
			text = text[i+1:]
		}
		if err := p.record(p.line, p.fields[:min(nf, len(p.fields))], nf); err != nil {
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
	fields := p.fields[:0:0]
	if len(rec) <= len(p.fields) {
		fields = p.fields[:len(rec)]
	}
	for i := range fields {
		fields[i] = []byte(rec[i])
	}
	if len(fields) == 0 {
		fields = p.fields[:1] // only the count matters: an error
		fields[0] = nil
	}
	return p.record(line+shift, fields, len(rec))
}

// record reads one record of nf fields, of which fields are the first
// (at most 5), found on line.
func (p *csvParser) record(line int, fields [][]byte, nf int) error {
	first := p.first
	p.first = false
	if first {
		fields[0] = bytes.TrimPrefix(fields[0], []byte("\ufeff")) // a UTF-8 byte order mark
	}
	if nf != 2 && nf != 5 {
		return badLine(line, "want 2 fields (key,label) or 5 (key,label,object,offset,size), got %d", nf)
	}
	if first {
		rec := make([]string, nf)
		for i, f := range fields {
			rec[i] = string(f)
		}
		if isHeader(rec) {
			return nil
		}
	}
	row := &p.row
	*row = manifestRow{line: line, key: bytes.TrimSpace(fields[0]), label: bytes.TrimSpace(fields[1])}
	_, row.number = parseDecimal(row.label)
	if nf == 5 {
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

func isHeader(rec []string) bool {
	k := strings.ToLower(strings.TrimSpace(rec[0]))
	l := strings.ToLower(strings.TrimSpace(rec[1]))
	if len(rec) == 5 {
		for i, name := range locationFields {
			if strings.ToLower(strings.TrimSpace(rec[2+i])) != name {
				return false
			}
		}
	}
	return (k == "key" || k == "path" || k == "file" || k == "filename") &&
		(l == "label" || l == "class" || l == "target")
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
