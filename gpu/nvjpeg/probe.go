package nvjpeg

import (
	"errors"
	"fmt"

	"github.com/longshore/longshore/internal/jpegcolour"
)

// Process is a JPEG's coding process, from its SOF marker.
type Process uint8

// Processes.
const (
	Baseline     Process = iota // SOF0: 8-bit Huffman, sequential
	Extended                    // SOF1: 8- or 12-bit Huffman, sequential
	Progressive                 // SOF2
	Lossless                    // SOF3
	Arithmetic                  // SOF9-SOF11: arithmetic coding
	Hierarchical                // SOF5-7, SOF13-15
)

var processNames = [...]string{"baseline", "extended", "progressive", "lossless", "arithmetic", "hierarchical"}

func (p Process) String() string {
	if int(p) < len(processNames) {
		return processNames[p]
	}
	return fmt.Sprintf("Process(%d)", uint8(p))
}

// Info is what Probe reads of a JPEG.
type Info struct {
	Process       Process
	Precision     int // bits per sample
	Width, Height int
	Components    int
	// Sampling is each component's horizontal and vertical sampling
	// factors (1..4), in frame order.
	Sampling [][2]int
	// Adobe says an APP14 Adobe marker came first (CMYK or YCCK when
	// Components is 4).
	Adobe bool
	// Colour is the components' colour space as libjpeg reads it from
	// the markers before the first scan. nvJPEG reads every
	// three-component JPEG as YCbCr: an RGB one would come out green.
	Colour jpegcolour.Space
}

// Subsampling names the chroma subsampling of a 3-component image
// ("444", "422", "420", "440", "411"), "gray" for 1 component, "" else.
func (in Info) Subsampling() string {
	if in.Components == 1 {
		return "gray"
	}
	if in.Components != 3 || len(in.Sampling) != 3 || in.Sampling[1] != in.Sampling[2] || in.Sampling[1] != [2]int{1, 1} {
		return ""
	}
	switch in.Sampling[0] {
	case [2]int{1, 1}:
		return "444"
	case [2]int{2, 1}:
		return "422"
	case [2]int{2, 2}:
		return "420"
	case [2]int{1, 2}:
		return "440"
	case [2]int{4, 1}:
		return "411"
	}
	return ""
}

// ErrNotJPEG: the data does not start with a JPEG SOI marker.
var ErrNotJPEG = errors.New("nvjpeg: not a JPEG")

// Probe reads a JPEG's markers up to its first scan header (the frame
// header and the colour markers; it skips the other segments by length)
// and never allocates more than the sampling table and the component ids.
func Probe(data []byte) (Info, error) {
	var in Info
	var colour jpegcolour.Markers
	seen := false
	if len(data) < 4 || data[0] != 0xFF || data[1] != 0xD8 {
		return in, ErrNotJPEG
	}
	i := 2
	for {
		for i < len(data) && data[i] == 0xFF && i+1 < len(data) && data[i+1] == 0xFF {
			i++ // fill bytes
		}
		if i+4 > len(data) || data[i] != 0xFF {
			if seen {
				return in, errors.New("nvjpeg: no scan header before the data ended")
			}
			return in, errors.New("nvjpeg: no frame header before the data ended")
		}
		m := data[i+1]
		n := int(data[i+2])<<8 | int(data[i+3])
		if n < 2 || i+2+n > len(data) {
			return in, fmt.Errorf("nvjpeg: marker %#x: segment of %d bytes past the end", m, n)
		}
		seg := data[i+4 : i+2+n]
		switch {
		case m >= 0xE0 && m <= 0xEF:
			colour.Segment(m, seg)
			if m == 0xEE && len(seg) >= 5 && string(seg[:5]) == "Adobe" {
				in.Adobe = true
			}
		case m == 0xDA && seen:
			in.Colour = colour.Space()
			return in, nil
		case seen && m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC:
			// A second frame header before the scan (hierarchical): the
			// first one describes the picture.
		case m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC:
			switch {
			case m == 0xC0:
				in.Process = Baseline
			case m == 0xC1:
				in.Process = Extended
			case m == 0xC2:
				in.Process = Progressive
			case m == 0xC3:
				in.Process = Lossless
			case m >= 0xC9 && m <= 0xCB:
				in.Process = Arithmetic
			default:
				in.Process = Hierarchical
			}
			if len(seg) < 6 {
				return in, errors.New("nvjpeg: short frame header")
			}
			in.Precision = int(seg[0])
			in.Height = int(seg[1])<<8 | int(seg[2])
			in.Width = int(seg[3])<<8 | int(seg[4])
			in.Components = int(seg[5])
			if in.Components < 1 || in.Components > 4 || len(seg) < 6+3*in.Components {
				return in, fmt.Errorf("nvjpeg: frame header of %d components in %d bytes", in.Components, len(seg))
			}
			for c := range in.Components {
				s := seg[6+3*c+1]
				in.Sampling = append(in.Sampling, [2]int{int(s >> 4), int(s & 15)})
				colour.IDs = append(colour.IDs, seg[6+3*c])
			}
			seen = true
		case m == 0xD9 && seen:
			return in, errors.New("nvjpeg: no scan after the frame header")
		case m == 0xD9 || m == 0xDA:
			return in, errors.New("nvjpeg: scan before any frame header")
		}
		i += 2 + n
	}
}
