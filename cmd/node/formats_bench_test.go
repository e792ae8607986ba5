package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/dataset/datasettest"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/miniotest"
	"github.com/longshore/longshore/storage/stores"
)

// benchJPEG is a 320x240 JPEG with some noise (about 23 KB), different
// for every i.
var benchJPEG = datasettest.PhotoJPEG

// benchBucket starts MinIO with a bucket for a node benchmark, its
// credentials in the environment the node reads, and returns how to
// open a store on a prefix of it and put an object into one.
func benchBucket(b *testing.B) (srv *miniotest.Server, bucket string, open func(prefix string) storage.Store, put func(s storage.Store, key string, data []byte)) {
	b.Helper()
	srv = miniotest.Start(b)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		b.Setenv(k, v)
	}
	ctx := context.Background()
	bucket = srv.NewBucket(b)
	open = func(prefix string) storage.Store {
		s, err := stores.Open(ctx, srv.URL(bucket, prefix), srv.Options())
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	put = func(s storage.Store, key string, data []byte) {
		if _, err := s.Put(ctx, key, data, storage.Cond{}); err != nil {
			b.Fatal(err)
		}
	}
	return srv, bucket, open, put
}

// indexTars writes the manifest and index of the tar shards in s, as
// longshore-pack --index does: they are then a packed dataset.
func indexTars(b *testing.B, s storage.Store) {
	b.Helper()
	ctx := context.Background()
	ds, _, err := dataset.IndexWebDataset(ctx, s, "", dataset.DiscoverOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var manifest bytes.Buffer
	if err := dataset.WriteManifestJSONL(&manifest, ds); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Put(ctx, dataset.ManifestJSONLName, manifest.Bytes(), storage.Cond{}); err != nil {
		b.Fatal(err)
	}
	if _, err := dataset.WriteManifestIndex(ctx, s, dataset.ManifestJSONLName, 1024, nil); err != nil {
		b.Fatal(err)
	}
}

// benchSize is a node benchmark's samples and repetitions: n and reps,
// or LONGSHORE_BENCH_SAMPLES and LONGSHORE_BENCH_REPS where set.
func benchSize(n, reps int) (int, int) {
	if v, err := strconv.Atoi(os.Getenv("LONGSHORE_BENCH_SAMPLES")); err == nil && v > 0 {
		n = v
	}
	if v, err := strconv.Atoi(os.Getenv("LONGSHORE_BENCH_REPS")); err == nil && v > 0 {
		reps = v
	}
	return n, reps
}

// benchImages makes n photo-sized JPEGs (benchJPEG) and their bytes in all.
func benchImages(b *testing.B, n int) (images [][]byte, bytesIn int) {
	images = make([][]byte, n)
	for i := range images {
		images[i] = benchJPEG(b, i)
		bytesIn += len(images[i])
	}
	return images, bytesIn
}

// BenchmarkFormatsMinIO reads the same samples from MinIO as Parquet
// files (Hugging Face's layout, row groups of 16), as WebDataset tars
// read in place, and as the same tars with the manifest longshore-pack
// --index writes (the packed path), with a standalone node, one epoch
// each, the three interleaved LONGSHORE_BENCH_REPS times (default 2):
// images/s, S3 requests a sample and media GETs a sample.
//
//	go test ./cmd/node -run '^$' -bench FormatsMinIO -benchtime 1x
func BenchmarkFormatsMinIO(b *testing.B) {
	n, reps := benchSize(1024, 2)
	const perShard, perGroup = 256, 16
	srv, bucket, open, put := benchBucket(b)
	images, bytesIn := benchImages(b, n)
	// Parquet: files of perShard rows, row groups of perGroup.
	pq := open("parquet")
	files, _ := datasettest.HFDataset(b, images, nil, perShard, perGroup, parquet.Compression(&parquet.Snappy))
	for _, f := range files {
		put(pq, f.Key, f.Data)
	}
	// WebDataset: shards of perShard samples (.jpg, .cls, .txt), in
	// place and indexed.
	wds, packed := open("webdataset"), open("packed")
	for sh := 0; sh*perShard < n; sh++ {
		var names []string
		var datas [][]byte
		for i := sh * perShard; i < min((sh+1)*perShard, n); i++ {
			names = append(names, fmt.Sprintf("%06d.jpg", i), fmt.Sprintf("%06d.cls", i), fmt.Sprintf("%06d.txt", i))
			datas = append(datas, images[i], []byte(strconv.Itoa(i%3)), []byte(fmt.Sprintf("a picture number %d", i)))
		}
		var t bytes.Buffer
		if _, err := dataset.WriteTarShard(&t, names, datas); err != nil {
			b.Fatal(err)
		}
		key := fmt.Sprintf("shard-%06d.tar", sh)
		put(wds, key, t.Bytes())
		put(packed, key, t.Bytes())
	}
	indexTars(b, packed)

	type result struct{ ips, reqs, gets, cpu []float64 }
	names := []string{"packed", "webdataset", "parquet"}
	res := map[string]*result{}
	for _, name := range names {
		res[name] = &result{}
	}
	dir := b.TempDir()
	for i := 0; i < b.N; i++ {
		for rep := range reps {
			for _, name := range names {
				stats := filepath.Join(dir, fmt.Sprintf("%s-%d-%d.json", name, i, rep))
				var out, errb bytes.Buffer
				args := []string{"--standalone", "--dataset", srv.URL(bucket, name), "--epochs", "1", "--batch-size", "32",
					"--size", "64", "--seed", strconv.Itoa(rep), "--sink", "null", "--stats-json", stats, "--progress", "never"}
				c0 := processCPU()
				if code := run(args, &out, &errb); code != 0 {
					b.Fatalf("%s: exit %d\n%s", name, code, errb.String())
				}
				s := readSummary(b, stats)
				if s.Images != int64(n) || s.Failures.Total != 0 || s.Store == nil || s.Pack == nil {
					b.Fatalf("%s: %d images (want %d), failures %+v", name, s.Images, n, s.Failures)
				}
				r := res[name]
				r.ips = append(r.ips, s.ImagesPerSecond)
				r.reqs = append(r.reqs, float64(s.Store.Requests)/float64(n))
				r.gets = append(r.gets, float64(s.Pack.Chunks+s.Pack.ReadAlone)/float64(n))
				r.cpu = append(r.cpu, 1000*(processCPU()-c0).Seconds()/float64(n))
			}
		}
	}
	base := median(res["packed"].ips)
	b.Logf("%d samples of %.1f KB (320x240 JPEGs), shards/files of %d, Parquet row groups of %d, one epoch, --size 64, %d reps interleaved; MinIO on this machine",
		n, float64(bytesIn)/float64(n)/1000, perShard, perGroup, reps)
	b.Logf("%-11s %10s %8s %14s %16s %14s", "format", "images/s", "×packed", "S3 req/sample", "media GET/sample", "CPU ms/image")
	for _, name := range names {
		r := res[name]
		b.Logf("%-11s %10.0f %8.2f %14.3f %16.3f %14.3f   (images/s of each rep: %.0f)", name, median(r.ips), median(r.ips)/base, median(r.reqs), median(r.gets), median(r.cpu), r.ips)
		b.ReportMetric(median(r.ips), name+"-images/s")
		b.ReportMetric(median(r.reqs), name+"-req/sample")
		b.ReportMetric(median(r.cpu), name+"-cpu-ms/image")
	}
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
