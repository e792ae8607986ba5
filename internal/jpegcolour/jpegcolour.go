// Package jpegcolour decides which colour space a JPEG's components are
// in, by libjpeg-turbo's rule, for every decoder of the node: the
// libjpeg-turbo fast path applies it itself, FFmpeg's mjpeg decoder and
// the GPU's nvJPEG do not, so the node reads the markers, asks Space, and
// makes the others agree (or routes the sample elsewhere). One answer for
// one file, whatever path decodes it: an RGB JPEG read as YCbCr comes out
// green and pink, silently.
package jpegcolour

// Space is a JPEG's component colour space.
type Space uint8

// Spaces.
const (
	Unknown Space = iota // a component count no rule covers (2, or more than 4)
	Gray                 // one component
	YCbCr                // three components, the JFIF transform
	RGB                  // three components, stored untransformed
	CMYK                 // four components, Adobe transform 0 (or none)
	YCCK                 // four components, Adobe transform 2
)

var names = [...]string{"unknown", "gray", "ycbcr", "rgb", "cmyk", "ycck"}

func (s Space) String() string {
	if int(s) < len(names) {
		return names[s]
	}
	return "unknown"
}

// Markers is what a JPEG says of its colour before its first scan.
type Markers struct {
	// JFIF: an APP0 "JFIF\0" segment of at least 14 bytes of data.
	JFIF bool
	// Adobe: an APP14 "Adobe" segment of at least 12 bytes of data, and
	// its transform flag (its data's byte 11).
	Adobe          bool
	AdobeTransform byte
	// IDs are the first frame header's component identifiers.
	IDs []byte
}

// Space is libjpeg-turbo's choice (jdapimin.c, default_decompress_parms,
// checked against djpeg 2.1.5 on all twelve combinations of JFIF, Adobe
// transform 0/1/none and component ids 1,2,3 / 'R','G','B'): for three
// components a JFIF marker means YCbCr; else an Adobe marker means RGB
// for transform 0 and YCbCr otherwise; else ids 'R','G','B' mean RGB;
// else YCbCr. Four components are YCCK for Adobe transform 2, CMYK
// otherwise. FFmpeg differs (RGB whenever the Adobe transform is 0 or the
// ids are 'R','G','B', JFIF or not); so does Go's image/jpeg (ids 'R',
// 'G','B' win over an Adobe transform 1).
func (m Markers) Space() Space {
	switch len(m.IDs) {
	case 1:
		return Gray
	case 3:
		switch {
		case m.JFIF:
			return YCbCr
		case m.Adobe:
			if m.AdobeTransform == 0 {
				return RGB
			}
			return YCbCr
		case m.IDs[0] == 'R' && m.IDs[1] == 'G' && m.IDs[2] == 'B':
			return RGB
		}
		return YCbCr
	case 4:
		if m.Adobe && m.AdobeTransform == 2 {
			return YCCK
		}
		return CMYK
	}
	return Unknown
}

// Segment records what an APPn segment (marker m, payload seg after the
// length field) says of the colour: the JFIF and Adobe markers. Other
// segments are ignored. libjpeg takes only APP0 and APP14 for this, and
// only their first 14 and 12 bytes.
func (m *Markers) Segment(marker byte, seg []byte) {
	switch {
	case marker == 0xE0 && len(seg) >= 14 && string(seg[:5]) == "JFIF\x00":
		m.JFIF = true
	case marker == 0xEE && len(seg) >= 12 && string(seg[:5]) == "Adobe":
		m.Adobe = true
		m.AdobeTransform = seg[11]
	}
}
