package decode

import (
	"encoding/binary"
	"errors"
	"testing"
)

func TestParseHeaderFixtures(t *testing.T) {
	cases := []struct {
		name     string
		format   format
		w, h     int
		lowresOK bool
	}{
		{"jpeg_420.jpg", formatJPEG, 160, 160, true},
		{"jpeg_420_odd.jpg", formatJPEG, 161, 123, true},
		{"jpeg_progressive.jpg", formatJPEG, 160, 160, true},
		{"jpeg_cmyk.jpg", formatJPEG, 160, 160, true},
		{"jpeg_gray.jpg", formatJPEG, 160, 160, true},
		{"bench_470x390_q96_444.jpg", formatJPEG, 470, 390, true},
		{"large_1280x1024_q90_420.jpg", formatJPEG, 1280, 1024, true},
		{"png_rgb16.png", formatPNG, 160, 160, false},
		{"png_palette.png", formatPNG, 160, 160, false},
		{"webp_lossy.webp", formatWebP, 160, 160, false},
		{"webp_lossless.webp", formatWebP, 160, 160, false},
		{"webp_alpha.webp", formatWebP, 160, 160, false},
	}
	for _, c := range cases {
		h, err := parseHeader(readFixture(t, c.name))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if h.format != c.format || h.width != c.w || h.height != c.h || h.lowresOK != c.lowresOK ||
			h.maxArea != int64(c.w*c.h) {
			t.Errorf("%s: got %+v", c.name, h)
		}
	}
}

// jpegSegment builds marker m with payload p.
func jpegSegment(m byte, p []byte) []byte {
	return append([]byte{0xFF, m, byte((len(p) + 2) >> 8), byte(len(p) + 2)}, p...)
}

func sof(w, h int) []byte {
	return []byte{8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), 3, 1, 0x11, 0, 2, 0x11, 1, 3, 0x11, 1}
}

// craftJPEG: SOI, the given segments, a scan with stuffed bytes and RST, EOI.
func craftJPEG(segs ...[]byte) []byte {
	b := []byte{0xFF, 0xD8}
	for _, s := range segs {
		b = append(b, s...)
	}
	b = append(b, jpegSegment(0xDA, []byte{3, 1, 0, 2, 0x11, 3, 0x11, 0, 63, 0})...)
	b = append(b, 0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD0, 0x56, 0xFF, 0xFF, 0x00, 0x78)
	return append(b, 0xFF, 0xD9)
}

func pngHeader(w, h uint32) []byte {
	b := append([]byte{}, pngMagic...)
	b = binary.BigEndian.AppendUint32(b, 13)
	b = append(b, "IHDR"...)
	b = binary.BigEndian.AppendUint32(b, w)
	b = binary.BigEndian.AppendUint32(b, h)
	b = append(b, 8, 2, 0, 0, 0, 0, 0, 0, 0) // depth, colour, ..., CRC (not checked)
	return append(b, 0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82)
}

func riff(chunks ...[]byte) []byte {
	var body []byte
	for _, c := range chunks {
		body = append(body, c...)
	}
	b := []byte("RIFF")
	b = binary.LittleEndian.AppendUint32(b, uint32(4+len(body)))
	b = append(b, "WEBP"...)
	return append(b, body...)
}

func chunk(id string, p []byte) []byte {
	b := append([]byte(id), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(p)))
	b = append(b, p...)
	if len(p)%2 == 1 {
		b = append(b, 0)
	}
	return b
}

func vp8Chunk(w, h int) []byte {
	p := []byte{0x50, 0x01, 0x00, 0x9D, 0x01, 0x2A, byte(w), byte(w >> 8), byte(h), byte(h >> 8), 0, 0}
	return chunk("VP8 ", p)
}

func vp8lChunk(w, h int) []byte {
	v := uint32(w-1) | uint32(h-1)<<14
	return chunk("VP8L", []byte{0x2F, byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24), 0})
}

func vp8xChunk(flags byte, w, h int) []byte {
	w, h = w-1, h-1
	return chunk("VP8X", []byte{flags, 0, 0, 0, byte(w), byte(w >> 8), byte(w >> 16), byte(h), byte(h >> 8), byte(h >> 16)})
}

func TestParseHeaderCrafted(t *testing.T) {
	// An EXIF-like APP1 whose payload holds a SOF-looking byte run claiming
	// a huge image: skipped by length, not mistaken for the frame header.
	app1 := jpegSegment(0xE1, append([]byte("Exif\x00\x00"), jpegSegment(0xC0, sof(60000, 60000))...))
	cases := []struct {
		name    string
		b       []byte
		w, h    int
		maxArea int64
		err     error
	}{
		{"jpeg baseline", craftJPEG(jpegSegment(0xC0, sof(640, 480))), 640, 480, 640 * 480, nil},
		// JPEG sides are 16-bit: 65535x65535 is the largest claim.
		{"jpeg progressive bomb", craftJPEG(jpegSegment(0xC2, sof(65535, 65535))), 65535, 65535, 65535 * 65535, nil},
		{"jpeg short SOF", craftJPEG(jpegSegment(0xC2, sof(10, 10)[:5])), 0, 0, 0, ErrCorrupt},
		{"jpeg app1 decoy", craftJPEG(app1, jpegSegment(0xC0, sof(320, 240))), 320, 240, 320 * 240, nil},
		{"jpeg fill bytes", craftJPEG([]byte{0xFF, 0xFF}, jpegSegment(0xC1, sof(9, 7))), 9, 7, 63, nil},
		{"jpeg second SOF larger", craftJPEG(jpegSegment(0xC0, sof(10, 10)), jpegSegment(0xC0, sof(65535, 65535))), 10, 10, 65535 * 65535, nil},
		{"jpeg arithmetic", craftJPEG(jpegSegment(0xC9, sof(10, 10))), 0, 0, 0, ErrUnsupported},
		{"jpeg DNL height", craftJPEG(jpegSegment(0xC0, sof(10, 0))), 0, 0, 0, ErrUnsupported},
		{"jpeg zero width", craftJPEG(jpegSegment(0xC0, sof(0, 10))), 0, 0, 0, ErrCorrupt},
		{"jpeg no SOF", craftJPEG(), 0, 0, 0, ErrCorrupt},
		{"jpeg no SOS", append(append([]byte{0xFF, 0xD8}, jpegSegment(0xC0, sof(16, 16))...), 0xFF, 0xD9), 0, 0, 0, ErrCorrupt},
		{"jpeg no EOI", craftJPEG(jpegSegment(0xC0, sof(10, 10)))[:40], 0, 0, 0, ErrCorrupt},
		{"jpeg bad length", []byte{0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x01}, 0, 0, 0, ErrCorrupt},
		{"jpeg SOI only", []byte{0xFF, 0xD8, 0xFF}, 0, 0, 0, ErrCorrupt},
		{"png", pngHeader(800, 600), 800, 600, 800 * 600, nil},
		{"png bomb", pngHeader(100000, 100000), 100000, 100000, 1e10, nil},
		{"png zero", pngHeader(0, 5), 0, 0, 0, ErrCorrupt},
		{"png huge", pngHeader(1<<31, 5), 0, 0, 0, ErrCorrupt},
		{"png short", pngHeader(5, 5)[:20], 0, 0, 0, ErrCorrupt},
		{"webp vp8", riff(vp8Chunk(300, 200)), 300, 200, 60000, nil},
		{"webp vp8 max", riff(vp8Chunk(16383, 16383)), 16383, 16383, 16383 * 16383, nil},
		{"webp vp8l", riff(vp8lChunk(16384, 16384)), 16384, 16384, 16384 * 16384, nil},
		{"webp vp8x bomb", riff(vp8xChunk(0x10, 100000, 100000), chunk("ALPH", []byte{0}), vp8Chunk(10, 10)), 100000, 100000, 1e10, nil},
		{"webp vp8x small canvas", riff(vp8xChunk(0, 10, 10), vp8lChunk(5000, 5000)), 10, 10, 25e6, nil},
		{"webp animated", riff(vp8xChunk(0x02, 10, 10), chunk("ANIM", make([]byte, 6))), 0, 0, 0, ErrUnsupported},
		{"webp anmf", riff(chunk("ANMF", make([]byte, 16))), 0, 0, 0, ErrUnsupported},
		{"webp no bitstream", riff(chunk("EXIF", []byte("x"))), 0, 0, 0, ErrCorrupt},
		{"webp bad vp8", riff(chunk("VP8 ", make([]byte, 10))), 0, 0, 0, ErrCorrupt},
		{"webp bad vp8l", riff(chunk("VP8L", make([]byte, 5))), 0, 0, 0, ErrCorrupt},
		{"webp huge chunk size", append(riff(), "VP8 \xff\xff\xff\xff"...), 0, 0, 0, ErrCorrupt},
		{"empty", nil, 0, 0, 0, ErrCorrupt},
		{"gif", []byte("GIF89a\x01\x00\x01\x00"), 0, 0, 0, ErrUnsupported},
		{"text", []byte("hello, world"), 0, 0, 0, ErrUnsupported},
		{"riff not webp", []byte("RIFF\x04\x00\x00\x00WAVE"), 0, 0, 0, ErrUnsupported},
	}
	for _, c := range cases {
		h, err := parseHeader(c.b)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("%s: got %v (%+v), want %v", c.name, err, h, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if h.width != c.w || h.height != c.h || h.maxArea != c.maxArea {
			t.Errorf("%s: got %dx%d max %d, want %dx%d max %d", c.name, h.width, h.height, h.maxArea, c.w, c.h, c.maxArea)
		}
	}
}

func TestParseHeaderNoAllocs(t *testing.T) {
	for _, name := range []string{"bench_470x390_q96_444.jpg", "png_rgb.png", "webp_alpha.webp"} {
		b := readFixture(t, name)
		if n := testing.AllocsPerRun(100, func() { _, _ = parseHeader(b) }); n != 0 {
			t.Errorf("%s: %v allocs", name, n)
		}
	}
}

func FuzzParseHeader(f *testing.F) {
	for _, name := range []string{"jpeg_420.jpg", "png_gray.png", "webp_alpha.webp"} {
		f.Add(readFixture(f, name))
	}
	f.Add(craftJPEG(jpegSegment(0xC0, sof(1, 1))))
	f.Add(riff(vp8xChunk(0, 3, 3), vp8lChunk(3, 3)))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHeader(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if h.width < 1 || h.height < 1 || h.maxArea < int64(h.width)*int64(h.height) {
			t.Fatalf("bad header %+v", h)
		}
	})
}
