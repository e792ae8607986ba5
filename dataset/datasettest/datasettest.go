// Package datasettest writes datasets for tests: Parquet files with
// parquet-go, as Hugging Face publishes image datasets (an image column
// holding {bytes, path}, a ClassLabel, a caption), and small JPEGs to put
// in them. dataset's tests and cmd/node's use the one writer.
package datasettest

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"math/rand/v2"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// HFImage is how Hugging Face's Image feature stores an image.
type HFImage struct {
	Bytes []byte  `parquet:"bytes,optional"`
	Path  *string `parquet:"path,optional"`
}

// HFRow is a row of an image-caption dataset as Hugging Face publishes
// it: the image, a ClassLabel, a caption, a score.
type HFRow struct {
	Image   *HFImage `parquet:"image,optional"`
	Label   int64    `parquet:"label"`
	Caption string   `parquet:"caption"`
	Score   float64  `parquet:"score"`
}

// HFMeta is the "huggingface" metadata of HFRow's files: the label is a
// ClassLabel of three names.
const HFMeta = `{"info": {"features": {"image": {"_type": "Image"}, "label": {"names": ["cat", "dog", "fox"], "_type": "ClassLabel"}, "caption": {"dtype": "string", "_type": "Value"}}}}`

// HFClasses are HFMeta's class names.
var HFClasses = []string{"cat", "dog", "fox"}

// JPEG is a small JPEG, different for every i (8+i%5 by 8 pixels).
func JPEG(t testing.TB, i int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 8+i%5, 8))
	for y := range 8 {
		for x := range img.Bounds().Dx() {
			img.Set(x, y, color.RGBA{uint8(i * 7), uint8(x * 30), uint8(y * 30), 255})
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// WriteParquet returns rows as a Parquet file of row groups of perGroup
// rows (the last one shorter), written with parquet-go and opts.
func WriteParquet[T any](t testing.TB, rows []T, perGroup int64, opts ...parquet.WriterOption) []byte {
	t.Helper()
	if perGroup < 1 {
		t.Fatalf("WriteParquet: row groups of %d rows", perGroup)
	}
	var b bytes.Buffer
	w := parquet.NewGenericWriter[T](&b, append([]parquet.WriterOption{parquet.MaxRowsPerRowGroup(perGroup)}, opts...)...)
	for i := 0; i < len(rows); i += int(perGroup) {
		if _, err := w.Write(rows[i:min(i+int(perGroup), len(rows))]); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// HFFile is a file of a Hugging Face layout: its key and its bytes.
type HFFile struct {
	Key  string
	Data []byte
}

// HFDataset returns len(images) rows in files of perFile rows, row
// groups of perGroup, named as Hugging Face names a split's files
// (data/train-00000-of-00003.parquet, ...), with HFMeta: row i holds
// images[i], path paths[i] (nil paths: "%05d.jpg"), label i%3, caption
// "a picture number i" and score i/4. It returns the files and the rows,
// in dataset order.
func HFDataset(t testing.TB, images [][]byte, paths []string, perFile int, perGroup int64, opts ...parquet.WriterOption) ([]HFFile, []HFRow) {
	t.Helper()
	var files []HFFile
	var all []HFRow
	n := (len(images) + perFile - 1) / perFile
	for f := range n {
		var rs []HFRow
		for i := f * perFile; i < min((f+1)*perFile, len(images)); i++ {
			p := fmt.Sprintf("%05d.jpg", i)
			if paths != nil {
				p = paths[i]
			}
			rs = append(rs, HFRow{Image: &HFImage{Bytes: images[i], Path: &p}, Label: int64(i % 3), Caption: fmt.Sprintf("a picture number %d", i), Score: float64(i) / 4})
		}
		all = append(all, rs...)
		key := fmt.Sprintf("data/train-%05d-of-%05d.parquet", f, n)
		files = append(files, HFFile{Key: key, Data: WriteParquet(t, rs, perGroup, append([]parquet.WriterOption{parquet.KeyValueMetadata("huggingface", HFMeta)}, opts...)...)})
	}
	return files, all
}

// PhotoJPEG is a 320x240 JPEG with some noise (about 23 KB at quality
// 85), different for every i: a photograph's size, for benchmarks.
func PhotoJPEG(t testing.TB, i int) []byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(i), 7))
	img := image.NewRGBA(image.Rect(0, 0, 320, 240))
	for y := range 240 {
		for x := range 320 {
			n := uint8(rng.IntN(24))
			img.Set(x, y, color.RGBA{uint8(x) + n, uint8(y) + n, uint8(i*13) + n, 255})
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 85}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
