package decode

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The hostile corpus, testdata/hostile/images (scripts/hostile/make.py
// writes it; the large cases are made here): every file is decoded by
// both decoder entries (the libjpeg-turbo fast path and FFmpeg only) and
// either matches PIL's decoding of the same file (scripts/hostile/pil_ref.py:
// Image.open(f).convert("RGB"), no EXIF transpose) within hostileMeanTol
// and hostileShareTol, or fails with the class and reason the table says.
// Like the fidelity tests it needs /usr/bin/python3 with PIL and numpy,
// and fails, not skips, without them.
//
// EXIF orientation is not applied, as PIL's Image.open and torchvision's
// ImageFolder loader do not apply it: jpeg_exif_orientation_1..8 all
// decode to the stored pixels.
//
//	go test ./decode/ -run Hostile -v   # prints the hostile table

// Bounds for a legal file: the mean |ours - PIL| over all values (8-bit
// levels) and the share of values off by more than 8. Both decoders
// convert colour in integer arithmetic of their own (FFmpeg's swscale,
// libwebp vs FFmpeg's VP8, chroma upsampling), hence not 0.
const (
	hostileMeanTol  = 2.0
	hostileShareTol = 0.02
)

const hostileDir = "../testdata/hostile/images"

// outcome is what a file must do: match PIL ("" class), or fail with a
// class and a reason containing the text.
type outcome struct {
	class  string // "", "corrupt", "unsupported", "too_large"
	reason string
	// ref: for a legal file PIL cannot read, the expected pixels.
	ref func(w, h int) []byte
	// ffmpegDiffers: the FFmpeg entry decodes the file to other colours
	// than PIL, for this reason; only the fast path is held to PIL.
	ffmpegDiffers string
}

var hostileOutcomes = map[string]outcome{
	"legal/jpeg_12bit_gray.jpg": {ref: jpeg12Levels},
	// Legal, and PIL decodes it; FFmpeg's mjpeg has no arithmetic decoder
	// and the fast path refuses it too, so that which samples decode
	// does not depend on --decoder.
	"legal/jpeg_arithmetic.jpg":             {class: "unsupported", reason: "arithmetic coding"},
	"legal/jpeg_progressive_2080_scans.jpg": {class: "too_large", reason: "2080 scans"},
	"legal/webp_animated.webp":              {class: "unsupported", reason: "animated WebP"},
	// YCCK data with its Adobe marker removed: nothing says how to read
	// the four components. libjpeg, PIL and the fast path read inverted
	// CMYK; FFmpeg reads them otherwise (mean |diff| 65 from PIL, and 93
	// from the file with its marker). Only --decoder ffmpeg differs.
	"legal/jpeg_ycck_no_adobe.jpg":      {ffmpegDiffers: "a 4-component JPEG without an Adobe marker: FFmpeg and libjpeg guess differently"},
	"bad/empty.jpg":                     {class: "corrupt", reason: "empty input"},
	"bad/empty.png":                     {class: "corrupt", reason: "empty input"},
	"bad/random.jpg":                    {class: "unsupported", reason: "no JPEG, PNG or WebP signature"},
	"bad/random.png":                    {class: "unsupported", reason: "no JPEG, PNG or WebP signature"},
	"bad/random.webp":                   {class: "unsupported", reason: "no JPEG, PNG or WebP signature"},
	"bad/text.jpg":                      {class: "unsupported", reason: "no JPEG, PNG or WebP signature"},
	"bad/truncated_jpeg_header.jpg":     {class: "corrupt", reason: "JPEG"},
	"bad/truncated_jpeg_middle.jpg":     {class: "corrupt", reason: "no EOI"},
	"bad/truncated_jpeg_before_end.jpg": {class: "corrupt", reason: "no EOI"},
	"bad/truncated_png_header.png":      {class: "corrupt", reason: "PNG"},
	"bad/truncated_png_middle.png":      {class: "corrupt", reason: "png"},
	"bad/truncated_png_before_end.png":  {class: "corrupt", reason: "png decoder"}, // PIL decodes it: its IEND is cut

	"bad/truncated_webp_header.webp":     {class: "corrupt", reason: "WebP"},
	"bad/truncated_webp_middle.webp":     {class: "corrupt", reason: "webp"},
	"bad/truncated_webp_before_end.webp": {class: "corrupt", reason: "webp"},
	"bad/jpeg_header_60000x60000.jpg":    {class: "too_large", reason: "3600000000 pixels"},
	"bad/png_header_100000x100000.png":   {class: "too_large", reason: "10000000000 pixels"},
	"bad/png_idat_crc.png":               {class: "corrupt", reason: "png decoder"},
}

// jpeg12Levels is the 12-bit JPEG's content (make.py jpeg12): flat 8x8
// blocks at 256 + 448*bx + 64*by of 4095, in 8 bits.
func jpeg12Levels(w, h int) []byte {
	out := make([]byte, 3*w*h)
	for y := range h {
		for x := range w {
			v := 256 + 448*(x/8) + 64*(y/8)
			l := byte(math.Round(float64(v) * 255 / 4095))
			out[3*(y*w+x)], out[3*(y*w+x)+1], out[3*(y*w+x)+2] = l, l, l
		}
	}
	return out
}

func classOf(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrTooLarge):
		return "too_large"
	case errors.Is(err, ErrUnsupported):
		return "unsupported"
	case errors.Is(err, ErrCorrupt):
		return "corrupt"
	}
	return "unclassified"
}

// pilRef is PIL's decoding of the corpus.
type pilRef struct {
	File   string `json:"file"`
	OK     bool   `json:"ok"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	Mode   string `json:"mode"`
	Frames int    `json:"frames"`
	Error  string `json:"error"`
	rgb    []byte
}

var (
	pilOnce sync.Once
	pilRefs map[string]*pilRef
	pilErr  error
)

func hostileFiles(t testing.TB) []string {
	var files []string
	err := filepath.WalkDir(hostileDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(hostileDir, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil || len(files) < 40 {
		t.Fatalf("the hostile corpus (%s, scripts/hostile/make.py): %d files, %v", hostileDir, len(files), err)
	}
	sort.Strings(files)
	return files
}

func pilReference(t testing.TB, files []string) map[string]*pilRef {
	pilOnce.Do(func() {
		dir := t.TempDir()
		args := []string{"../scripts/hostile/pil_ref.py", dir}
		for _, f := range files {
			args = append(args, filepath.Join(hostileDir, f))
		}
		if out, err := exec.Command("/usr/bin/python3", args...).CombinedOutput(); err != nil {
			pilErr = fmt.Errorf("scripts/hostile/pil_ref.py (needs /usr/bin/python3 with PIL and numpy: scripts/deps.sh python): %v\n%s", err, out)
			return
		}
		b, err := os.ReadFile(filepath.Join(dir, "index.json"))
		if err != nil {
			pilErr = err
			return
		}
		var index []*pilRef
		if err := json.Unmarshal(b, &index); err != nil {
			pilErr = err
			return
		}
		pilRefs = map[string]*pilRef{}
		for i, r := range index {
			if r.OK {
				if r.rgb, err = os.ReadFile(filepath.Join(dir, fmt.Sprintf("%d.rgb", i))); err != nil {
					pilErr = err
					return
				}
			}
			pilRefs[files[i]] = r
		}
	})
	if pilErr != nil {
		t.Fatal(pilErr)
	}
	return pilRefs
}

// compareRGB returns the mean |a-b|, the share of values off by more
// than 8 and the largest difference.
func compareRGB(a, b []byte) (mean, share float64, worst int) {
	var sum, off int
	for i := range a {
		d := int(a[i]) - int(b[i])
		if d < 0 {
			d = -d
		}
		sum += d
		if d > 8 {
			off++
		}
		worst = max(worst, d)
	}
	return float64(sum) / float64(len(a)), float64(off) / float64(len(a)), worst
}

// TestHostileCorpus decodes every file of the corpus with both decoder
// entries and checks it against the table and PIL; it logs the hostile
// table (input, outcome, reason).
func TestHostileCorpus(t *testing.T) {
	files := hostileFiles(t)
	refs := pilReference(t, files)
	type key struct {
		size int
		fast bool
	}
	decoders := map[key]*Decoder{}
	decoder := func(size int, fast bool) *Decoder {
		k := key{size, fast}
		if decoders[k] == nil {
			decoders[k], _ = newDecoderPath(t, "resize", size, NHWC, false, fast)
		}
		return decoders[k]
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(hostileDir, f))
		if err != nil {
			t.Fatal(err)
		}
		want, listed := hostileOutcomes[f]
		if !listed && !strings.HasPrefix(f, "legal/") && !strings.HasPrefix(f, "odd keys/") {
			t.Errorf("%s: not in the table of outcomes", f)
			continue
		}
		ref := refs[f]
		for _, fast := range []bool{true, false} {
			path := map[bool]string{true: "turbo", false: "ffmpeg"}[fast]
			// A legal file is decoded at its own size (Resize to itself:
			// the identity geometry), so only decoding is compared.
			size := 64
			if ref != nil && ref.OK && ref.Width == ref.Height {
				size = ref.Width
			}
			d := decoder(size, fast)
			dst := make([]byte, 3*size*size)
			info, err := d.Decode(data, 1, dst)
			got := classOf(err)
			if got == "unclassified" {
				t.Errorf("%s [%s]: unclassified error %v", f, path, err)
				continue
			}
			if got != want.class {
				t.Errorf("%s [%s]: outcome %q (%v); want %q", f, path, got, err, want.class)
				continue
			}
			if err != nil {
				if !strings.Contains(err.Error(), want.reason) {
					t.Errorf("%s [%s]: reason %q does not say %q", f, path, err, want.reason)
				}
				if fast {
					t.Logf("HOSTILE | %-40s | %-9s | %s", f, got, err)
				}
				continue
			}
			var expect []byte
			switch {
			case want.ref != nil:
				expect = want.ref(info.Width, info.Height)
			case ref == nil || !ref.OK:
				t.Errorf("%s [%s]: decoded, but PIL cannot read it (%v): put it in the table", f, path, ref)
				continue
			default:
				expect = ref.rgb
			}
			if info.Width != size || info.Height != size || len(expect) != len(dst) {
				t.Errorf("%s [%s]: %dx%d, reference %d bytes; want %dx%d", f, path, info.Width, info.Height, len(expect), size, size)
				continue
			}
			mean, share, worst := compareRGB(dst, expect)
			if !fast && want.ffmpegDiffers != "" {
				t.Logf("HOSTILE | %-40s | decoded   | [ffmpeg] differs from PIL (mean %.2f, max %d): %s", f, mean, worst, want.ffmpegDiffers)
				continue
			}
			if mean > hostileMeanTol || share > hostileShareTol {
				t.Errorf("%s [%s]: mean |ours - PIL| %.2f, %.2f%% off by > 8 (max %d); want <= %.1f and <= %.0f%%",
					f, path, mean, 100*share, worst, hostileMeanTol, 100*hostileShareTol)
			}
			if fast || info.Path == PathFFmpeg {
				t.Logf("HOSTILE | %-40s | decoded   | [%s] mean |ours-PIL| %.2f, %.2f%% > 8, max %d", f, info.Path, mean, 100*share, worst)
			}
		}
	}
}

// TestHostileTruncations cuts each legal JPEG, PNG and WebP of the corpus
// at many offsets (every byte of the first 64 and the last 64, and 64
// points between): each cut either fails as corrupt or unsupported (never
// unclassified, never a crash) or, where the cut lost only what decoders
// ignore, decodes.
func TestHostileTruncations(t *testing.T) {
	for _, fast := range []bool{true, false} {
		d, c := newDecoderPath(t, "resize", 32, NHWC, false, fast)
		dst := make([]byte, c.SampleBytes())
		for _, f := range []string{"legal/jpeg_baseline_444.jpg", "legal/jpeg_progressive.jpg", "legal/jpeg_cmyk_adobe.jpg",
			"legal/png_rgb.png", "legal/png_interlaced.png", "legal/png_palette.png", "legal/webp_lossy.webp", "legal/webp_lossless.webp"} {
			data, err := os.ReadFile(filepath.Join(hostileDir, f))
			if err != nil {
				t.Fatal(err)
			}
			var cuts []int
			for i := range min(64, len(data)) {
				cuts = append(cuts, i, len(data)-1-i)
			}
			for i := range 64 {
				cuts = append(cuts, len(data)*i/64)
			}
			slices.Sort(cuts)
			cuts = slices.Compact(cuts)
			counts := map[string]int{}
			for _, n := range cuts {
				_, err := d.Decode(data[:n], 1, dst)
				cls := classOf(err)
				if cls == "unclassified" {
					t.Errorf("%s cut at %d: unclassified error %v", f, n, err)
				}
				if cls == "" {
					cls = "decoded"
				}
				counts[cls]++
			}
			if !fast {
				continue
			}
			t.Logf("HOSTILE | %-40s | %d cuts: %v", f+" truncated", len(cuts), counts)
		}
	}
}

// deflateZeros is a raw deflate stream of n zero bytes, as one block of
// fixed Huffman codes: a literal 0, then back-references of 258 bytes at
// distance 1 (13 bits each, so 1,032:1, deflate's limit), then literals
// for the rest. A gigabyte is 5 MB of it, made in a blink.
func deflateZeros(n int64) []byte {
	var out []byte
	var acc uint64
	var nbits uint
	put := func(v uint64, bits uint) { // LSB first
		acc |= v << nbits
		nbits += bits
		for nbits >= 8 {
			out = append(out, byte(acc))
			acc >>= 8
			nbits -= 8
		}
	}
	code := func(c uint64, bits uint) { // Huffman codes go MSB first
		var r uint64
		for i := uint(0); i < bits; i++ {
			r |= (c >> i & 1) << (bits - 1 - i)
		}
		put(r, bits)
	}
	put(1, 1) // BFINAL
	put(1, 2) // BTYPE 01: fixed codes
	if n > 0 {
		code(0x30, 8) // literal 0
		n--
	}
	for ; n >= 258; n -= 258 {
		code(0xC5, 8) // length 258 (symbol 285)
		code(0, 5)    // distance 1
	}
	for ; n > 0; n-- {
		code(0x30, 8)
	}
	code(0, 7) // end of block
	if nbits > 0 {
		out = append(out, byte(acc))
	}
	return out
}

// zlibZeros wraps deflateZeros in zlib's header and Adler-32.
func zlibZeros(n int64) []byte {
	out := append([]byte{0x78, 0x01}, deflateZeros(n)...)
	adler := uint32(n%65521)<<16 | 1
	return binary.BigEndian.AppendUint32(out, adler)
}

// pngOf is a PNG of a w x h 8-bit RGB image whose IDAT is data, cut into
// chunks of a MiB.
func pngOf(w, h int, data []byte) []byte {
	out := append([]byte(nil), pngMagic...)
	chunk := func(kind string, body []byte) {
		out = binary.BigEndian.AppendUint32(out, uint32(len(body)))
		start := len(out)
		out = append(out, kind...)
		out = append(out, body...)
		out = binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(out[start:]))
	}
	ihdr := binary.BigEndian.AppendUint32(nil, uint32(w))
	ihdr = binary.BigEndian.AppendUint32(ihdr, uint32(h))
	chunk("IHDR", append(ihdr, 8, 2, 0, 0, 0))
	for len(data) > 0 {
		n := min(len(data), 1<<20)
		chunk("IDAT", data[:n])
		data = data[n:]
	}
	chunk("IEND", nil)
	return out
}

const rssChildEnv = "LONGSHORE_HOSTILE_RSS_FILE"

// TestHostileRSSChild decodes one file in a process of its own and
// prints its outcome and peak RSS, for TestHostileBombs.
func TestHostileRSSChild(t *testing.T) {
	path := os.Getenv(rssChildEnv)
	if path == "" {
		t.Skip("run by TestHostileBombs")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d, c := newDecoderPath(t, "train", 224, NCHW, true, true)
	dst := make([]byte, c.SampleBytes())
	start := time.Now()
	_, err = d.Decode(data, 1, dst)
	fmt.Printf("RESULT\t%s\t%d\t%.3f\t%v\n", classOf(err), peakRSS(), time.Since(start).Seconds(), err)
}

// peakRSS is this process's VmHWM in bytes.
func peakRSS() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb)
			return kb << 10
		}
	}
	return 0
}

// TestHostileBombs decodes each bomb in a child process and checks its
// outcome and peak resident memory (VmHWM), which it states: a refused
// bomb costs what the process costs idle plus the file; a legal image at
// the pixel limit costs its pixels a few times over (FFmpeg's frame,
// the RGB conversion of the region read), not more.
func TestHostileBombs(t *testing.T) {
	dir := t.TempDir()
	baseline, err := os.ReadFile(filepath.Join(hostileDir, "legal/jpeg_baseline_444.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	scans, err := os.ReadFile(filepath.Join(hostileDir, "legal/jpeg_progressive_2080_scans.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	const side = 9000 // 81 M pixels: under DefaultMaxPixels (89.5 M)
	const mib = 1 << 20
	for _, tc := range []struct {
		name    string
		data    []byte
		class   string
		maxRSS  int64 // bytes above the idle process and the file
		comment string
	}{
		{"a 64x64 JPEG (the baseline)", baseline, "", 16 * mib, ""},
		{"PNG 100x100 whose IDAT inflates to 4 GiB", pngOf(100, 100, zlibZeros(4<<30)), "too_large", 16 * mib, "refused by its IDAT size"},
		{"PNG 9000x9000 (at the pixel limit), 243 MB of zeros", pngOf(side, side, zlibZeros(side*(1+3*side))), "", 4 * side * side * 3, "legal: decoded"},
		{"JPEG header 60000x60000", mustRead(t, "bad/jpeg_header_60000x60000.jpg"), "too_large", 16 * mib, "refused by its header"},
		{"PNG header 100000x100000", mustRead(t, "bad/png_header_100000x100000.png"), "too_large", 16 * mib, "refused by its header"},
		{"progressive JPEG of 2080 scans", scans, "too_large", 16 * mib, "refused by its scan count"},
	} {
		path := filepath.Join(dir, "bomb")
		if err := os.WriteFile(path, tc.data, 0o644); err != nil {
			t.Fatal(err)
		}
		res := rssChild(t, path)
		idle := rssChild(t, filepath.Join(hostileDir, "bad/empty.jpg"))
		if res.class != tc.class {
			t.Errorf("%s: outcome %q (%s); want %q", tc.name, res.class, res.err, tc.class)
		}
		over := res.rss - idle.rss - int64(len(tc.data))
		limit := tc.maxRSS
		if raceEnabled {
			// Under -race each byte read costs shadow memory too (52 MiB
			// over for a 26 MiB file in one run): allow twice the file.
			limit += 2 * int64(len(tc.data))
		}
		if over > limit {
			t.Errorf("%s: peak RSS %d MiB, %d MiB over the idle process and the file; want at most %d MiB over",
				tc.name, res.rss>>20, over>>20, limit>>20)
		}
		t.Logf("HOSTILE | %-52s | %-9s | %6.1f MiB file | peak RSS %6.1f MiB (idle %5.1f) | %.2fs | %s",
			tc.name, or(res.class, "decoded"), float64(len(tc.data))/mib, float64(res.rss)/mib, float64(idle.rss)/mib, res.secs, or(res.err, tc.comment))
	}
}

func mustRead(t *testing.T, rel string) []byte {
	b, err := os.ReadFile(filepath.Join(hostileDir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func or(a, b string) string {
	if a == "" || a == "<nil>" {
		return b
	}
	return a
}

type rssResult struct {
	class, err string
	rss        int64
	secs       float64
}

func rssChild(t *testing.T, path string) rssResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostileRSSChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), rssChildEnv+"="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.SplitN(line, "\t", 5); len(f) == 5 && f[0] == "RESULT" {
			var r rssResult
			r.class, r.err = f[1], f[4]
			fmt.Sscan(f[2], &r.rss)
			fmt.Sscan(f[3], &r.secs)
			return r
		}
	}
	t.Fatalf("child said nothing:\n%s", out)
	return rssResult{}
}
