package decode

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/longshore/longshore/internal/jpegcolour"
)

// This file reads just enough of each format's header to know the format,
// the image size and whether FFmpeg may decode it at reduced resolution. It
// is pure Go, allocation-free on success, and runs before FFmpeg sees a
// byte, so that decompression bombs are refused without decoding.

type format int

const (
	formatJPEG format = iota + 1
	formatPNG
	formatWebP
)

func (f format) String() string {
	switch f {
	case formatJPEG:
		return "jpeg"
	case formatPNG:
		return "png"
	case formatWebP:
		return "webp"
	}
	return "unknown"
}

// header is what parseHeader learned.
type header struct {
	format        format
	width, height int
	// maxArea is the largest width*height any frame header in the file
	// declares (JPEG may carry several SOFs, WebP a VP8X canvas and a
	// bitstream size): the figure the bomb check uses.
	maxArea int64
	// lowresOK: FFmpeg's mjpeg lowres applies (8-bit DCT JPEG).
	lowresOK bool
	// scans: a JPEG's SOS segments. Each scan of a progressive JPEG
	// walks the whole image again, so thousands of them (each a few
	// bytes) make a small file decode for minutes (checkBomb).
	scans int
	// idat and idatMax: a PNG's IDAT bytes, and the most an image of its
	// IHDR's size, depth, colour type and interlacing can need even
	// stored uncompressed (0: unknown). More is data beyond the image
	// that the decoder inflates anyway (checkBomb).
	idat, idatMax int64
	// colour: a JPEG's component colour space as libjpeg-turbo decides
	// it from the markers before the first scan (jpegcolour.Space). The
	// fast path decides the same itself; FFmpeg is made to agree.
	colour jpegcolour.Space
}

// maxScans is the most scans a JPEG may have. Encoders write 1 (baseline)
// to about 10 (libjpeg's and mozjpeg's progressive scripts); libjpeg-turbo
// advises a limit of 500 against the many-scans denial of service, and
// that is ours.
const maxScans = 500

// checkBomb refuses, with ErrTooLarge, what the header shows would cost
// far more than its pixels: more than MaxPixels, more than maxScans scans,
// or PNG image data beyond what its IHDR can need.
func (h *header) checkBomb(maxPixels int64) error {
	switch {
	case h.maxArea > maxPixels:
		return fmt.Errorf("%w: %s header declares %d pixels (%dx%d), limit %d",
			ErrTooLarge, h.format, h.maxArea, h.width, h.height, maxPixels)
	case h.scans > maxScans:
		return fmt.Errorf("%w: JPEG with %d scans, limit %d (a progressive decompression bomb: each scan decodes the whole image again)",
			ErrTooLarge, h.scans, maxScans)
	case h.idatMax > 0 && h.idat > h.idatMax:
		return fmt.Errorf("%w: PNG with %d bytes of image data, more than a %dx%d image can need even stored uncompressed (%d): a decompression bomb",
			ErrTooLarge, h.idat, h.width, h.height, h.idatMax)
	}
	return nil
}

var pngMagic = []byte("\x89PNG\r\n\x1a\n")

// parseHeader detects the format by magic bytes and reads the image size.
// Errors wrap ErrUnsupported (not an image, or an unsupported variant) or
// ErrCorrupt (a supported format whose header is damaged or truncated).
func parseHeader(b []byte) (header, error) {
	switch {
	case len(b) == 0:
		return header{}, fmt.Errorf("%w: empty input", ErrCorrupt)
	case len(b) >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF:
		return parseJPEG(b)
	case bytes.HasPrefix(b, pngMagic):
		return parsePNG(b)
	case len(b) >= 12 && string(b[0:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		return parseWebP(b)
	}
	return header{}, fmt.Errorf("%w: no JPEG, PNG or WebP signature", ErrUnsupported)
}

func area(w, h int) int64 { return int64(w) * int64(h) }

// parseJPEG walks the marker segments the way FFmpeg's mjpeg decoder does
// (resynchronising on the next 0xFF after garbage, skipping entropy-coded
// data after SOS, stopping at EOI), reads every SOF, and requires a scan and the EOI. Segment payloads
// (EXIF thumbnails, ICC profiles) are skipped by length, so a SOF-like byte
// pair inside them is not mistaken for one.
func parseJPEG(b []byte) (header, error) {
	h := header{format: formatJPEG}
	seen, scan, eoi := false, false, false
	var colour jpegcolour.Markers
	var ids [4]byte
	i := 2 // after SOI
	for i < len(b) {
		if b[i] != 0xFF {
			j := bytes.IndexByte(b[i:], 0xFF)
			if j < 0 {
				break
			}
			i += j
		}
		for i < len(b) && b[i] == 0xFF { // fill bytes
			i++
		}
		if i >= len(b) {
			break
		}
		m := b[i]
		i++
		switch {
		case m == 0xD9: // EOI: FFmpeg stops here too.
			eoi = true
			i = len(b)
			continue
		case m == 0x00, m == 0x01, m == 0xD8, m >= 0xD0 && m <= 0xD7:
			continue // no length field
		}
		if i+2 > len(b) {
			break
		}
		n := int(binary.BigEndian.Uint16(b[i:]))
		if n < 2 {
			return header{}, fmt.Errorf("%w: JPEG marker 0xFF%02X has length %d", ErrCorrupt, m, n)
		}
		seg := b[i+2 : min(i+n, len(b))]
		switch {
		case isSOF(m):
			if len(seg) < 6 {
				return header{}, fmt.Errorf("%w: truncated JPEG SOF", ErrCorrupt)
			}
			prec := int(seg[0])
			hh := int(binary.BigEndian.Uint16(seg[1:]))
			ww := int(binary.BigEndian.Uint16(seg[3:]))
			switch {
			case m == 0xC5 || m == 0xC6 || m == 0xC7 || m >= 0xC9 && m <= 0xCF:
				return header{}, fmt.Errorf("%w: JPEG SOF%d (hierarchical or arithmetic coding)", ErrUnsupported, m-0xC0)
			case hh == 0:
				return header{}, fmt.Errorf("%w: JPEG height defined by DNL", ErrUnsupported)
			case ww == 0:
				return header{}, fmt.Errorf("%w: JPEG width 0", ErrCorrupt)
			}
			if !seen {
				seen = true
				h.width, h.height = ww, hh
				if nc := int(seg[5]); nc <= len(ids) && len(seg) >= 6+3*nc {
					for c := range nc {
						ids[c] = seg[6+3*c]
					}
					colour.IDs = ids[:nc]
				}
				// lowres needs the DCT path at 8 bits: baseline,
				// extended or progressive; not lossless or JPEG-LS.
				h.lowresOK = prec == 8 && (m == 0xC0 || m == 0xC1 || m == 0xC2)
			}
			h.maxArea = max(h.maxArea, area(ww, hh))
		case m >= 0xE0 && m <= 0xEF && !scan:
			// libjpeg reads the colour markers up to the first scan.
			colour.Segment(m, seg)
		case m == 0xDA: // SOS: skip the scan header, then the entropy-coded data.
			if !seen {
				return header{}, fmt.Errorf("%w: JPEG scan before frame header", ErrCorrupt)
			}
			if !scan {
				h.colour = colour.Space()
			}
			scan = true
			h.scans++
			i = skipECS(b, i+n)
			continue
		}
		i += n
	}
	if !seen {
		return header{}, fmt.Errorf("%w: no JPEG frame header (SOF)", ErrCorrupt)
	}
	if !scan {
		// FFmpeg returns an uninitialised picture for SOF+EOI.
		return header{}, fmt.Errorf("%w: JPEG without image data (no SOS)", ErrCorrupt)
	}
	if !eoi {
		// FFmpeg would conceal the missing rows and return a picture; a
		// truncated object (a short read) must count as a bad sample, as
		// it does with PIL.
		return header{}, fmt.Errorf("%w: truncated JPEG (no EOI marker)", ErrCorrupt)
	}
	return h, nil
}

// isSOF reports whether m is a start-of-frame marker: 0xC0-0xCF except DHT
// (C4), JPG (C8) and DAC (CC), and JPEG-LS's SOF55 (F7), which FFmpeg's
// mjpeg decoder also reads.
func isSOF(m byte) bool {
	return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC || m == 0xF7
}

// skipECS returns the index of the 0xFF that starts the first marker at or
// after i, skipping entropy-coded data: stuffed 0xFF00 and RSTn are data.
func skipECS(b []byte, i int) int {
	for i < len(b) {
		j := bytes.IndexByte(b[i:], 0xFF)
		if j < 0 {
			return len(b)
		}
		i += j
		k := i + 1
		for k < len(b) && b[k] == 0xFF {
			k++
		}
		if k >= len(b) {
			return len(b)
		}
		if c := b[k]; c == 0x00 || c >= 0xD0 && c <= 0xD7 {
			i = k + 1
			continue
		}
		return k - 1
	}
	return len(b)
}

// parsePNG reads IHDR, which the PNG spec requires to be the first chunk.
func parsePNG(b []byte) (header, error) {
	// signature(8) length(4) "IHDR"(4) width(4) height(4)
	if len(b) < 24 || string(b[12:16]) != "IHDR" {
		return header{}, fmt.Errorf("%w: PNG without IHDR", ErrCorrupt)
	}
	w := binary.BigEndian.Uint32(b[16:])
	h := binary.BigEndian.Uint32(b[20:])
	if w == 0 || h == 0 || w > 1<<31-1 || h > 1<<31-1 {
		return header{}, fmt.Errorf("%w: PNG size %dx%d", ErrCorrupt, w, h)
	}
	hd := header{format: formatPNG, width: int(w), height: int(h), maxArea: int64(w) * int64(h)}
	if len(b) >= 29 {
		hd.idatMax = pngDataBound(int64(w), int64(h), b[24], b[25], b[28])
	}
	// Sum the IDAT chunks; a truncated file stops the walk (the decoder
	// reports it).
	for i := 8; i+8 <= len(b); {
		n := int64(binary.BigEndian.Uint32(b[i:]))
		if string(b[i+4:i+8]) == "IDAT" {
			hd.idat += n
		}
		if n > int64(len(b)) {
			break
		}
		i += 12 + int(n)
	}
	return hd, nil
}

// pngDataBound is the most IDAT data a PNG image can need: its filtered
// rows (a filter byte per row of each Adam7 pass, which are at most 2h
// rows and 7 rounded partial bytes more) stored in deflate's stored
// blocks (5 bytes per 65535) with the zlib header and checksum, and
// slack. 0 for a bit depth or colour type PNG does not have.
func pngDataBound(w, h int64, depth, color, interlace byte) int64 {
	channels := map[byte]int64{0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]
	if channels == 0 || (depth != 1 && depth != 2 && depth != 4 && depth != 8 && depth != 16) {
		return 0
	}
	raw := h * (1 + (w*channels*int64(depth)+7)/8)
	if interlace != 0 {
		raw += 2*h + 7*8
	}
	return raw + raw/65535*5 + 1024
}

// parseWebP walks the RIFF chunks and reads the VP8X canvas and the VP8 or
// VP8L bitstream sizes; all of them count for the bomb check.
func parseWebP(b []byte) (header, error) {
	h := header{format: formatWebP}
	var canvasW, canvasH, bitW, bitH int
	for i := 12; i+8 <= len(b); {
		n := int(binary.LittleEndian.Uint32(b[i+4:]))
		p := b[i+8 : i+8+min(n, len(b)-i-8)]
		switch string(b[i : i+4]) { // compared, not kept: no allocation
		case "VP8X":
			if len(p) < 10 {
				return header{}, fmt.Errorf("%w: truncated WebP VP8X", ErrCorrupt)
			}
			if p[0]&0x02 != 0 {
				return header{}, fmt.Errorf("%w: animated WebP", ErrUnsupported)
			}
			canvasW = int(uint32(p[4])|uint32(p[5])<<8|uint32(p[6])<<16) + 1
			canvasH = int(uint32(p[7])|uint32(p[8])<<8|uint32(p[9])<<16) + 1
			h.maxArea = max(h.maxArea, area(canvasW, canvasH))
		case "ANIM", "ANMF":
			return header{}, fmt.Errorf("%w: animated WebP", ErrUnsupported)
		case "VP8 ":
			// frame tag(3) start code 9D 01 2A, then 14-bit width and
			// height (the top 2 bits are upscaling hints).
			if len(p) < 10 || p[3] != 0x9D || p[4] != 0x01 || p[5] != 0x2A {
				return header{}, fmt.Errorf("%w: bad WebP VP8 header", ErrCorrupt)
			}
			bitW = int(binary.LittleEndian.Uint16(p[6:]) & 0x3FFF)
			bitH = int(binary.LittleEndian.Uint16(p[8:]) & 0x3FFF)
			h.maxArea = max(h.maxArea, area(bitW, bitH))
		case "VP8L":
			if len(p) < 5 || p[0] != 0x2F {
				return header{}, fmt.Errorf("%w: bad WebP VP8L header", ErrCorrupt)
			}
			v := binary.LittleEndian.Uint32(p[1:])
			bitW = int(v&0x3FFF) + 1
			bitH = int(v>>14&0x3FFF) + 1
			h.maxArea = max(h.maxArea, area(bitW, bitH))
		}
		if bitW != 0 || bitH != 0 {
			break // the image bitstream: what follows is metadata
		}
		i += 8 + n + n&1 // chunks are padded to even sizes
		if n < 0 || i < 0 {
			break
		}
	}
	switch {
	case bitW == 0 && bitH == 0:
		return header{}, fmt.Errorf("%w: WebP without VP8/VP8L bitstream", ErrCorrupt)
	case bitW == 0 || bitH == 0:
		return header{}, fmt.Errorf("%w: WebP size %dx%d", ErrCorrupt, bitW, bitH)
	}
	h.width, h.height = bitW, bitH
	if canvasW != 0 {
		h.width, h.height = canvasW, canvasH
	}
	return h, nil
}
