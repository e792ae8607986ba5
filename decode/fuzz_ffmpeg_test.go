package decode

import (
	"os"
	"path/filepath"
	"testing"
)

// addHostileSeeds adds the small files of the hostile corpus
// (testdata/hostile) to a decoder fuzz target's seeds.
func addHostileSeeds(f *testing.F) {
	filepath.WalkDir(hostileDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if b, err := os.ReadFile(p); err == nil && len(b) <= 64<<10 {
			f.Add(b)
		}
		return nil
	})
}

// FuzzDecodeFFmpeg is FuzzDecode through the other decoder entry: every
// image to FFmpeg (Config.FastJPEG off, --decoder ffmpeg), with the
// same promises: no crash, only classified errors for bad data, and a
// crop inside the image on success.
func FuzzDecodeFFmpeg(f *testing.F) {
	for _, name := range []string{"jpeg_420.jpg", "jpeg_progressive.jpg", "jpeg_ycck.jpg", "png_rgb16.png", "webp_lossless.webp"} {
		f.Add(readFixture(f, name))
	}
	addHostileSeeds(f)
	c := DefaultConfig()
	c.FastJPEG = false
	c.MaxPixels = 1 << 20 // keep each input cheap
	var ds []*Decoder
	for _, kind := range []string{"train", "eval", "resize"} {
		c.Transform = mustTransform(f, kind)
		c.Transform.Size = 32
		d, err := NewDecoder(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { d.Close() })
		ds = append(ds, d)
	}
	dst := make([]byte, c.SampleBytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := ds[len(data)%len(ds)].Decode(data, uint64(len(data)), dst)
		if err != nil {
			if !isDataError(err) {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		if info.Path != PathFFmpeg || !inside(info.Crop, info.Width, info.Height) || info.Region.W < 1 || info.Region.H < 1 ||
			int64(info.Width)*int64(info.Height) > c.MaxPixels {
			t.Fatalf("bad info %+v", info)
		}
	})
}
