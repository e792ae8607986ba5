package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/longshore/longshore/cmd/internal/procmem"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/storage"
)

// ceilingMain decodes and transforms the dataset's files from memory with
// one goroutine (and one decoder) per core, nothing else: what the machine
// can do at best with this decoder.
func ceilingMain(args []string) error {
	fset := flag.NewFlagSet("ceiling", flag.ContinueOnError)
	dataset := fset.String("dataset", "", "directory of images")
	epochs := fset.Int("epochs", 1, "passes over the files")
	out := fset.String("json", "", "write {images, seconds, failed, peak_rss_bytes} here")
	workers := fset.Int("workers", runtime.NumCPU(), "goroutines, one decoder each")
	if err := fset.Parse(args); err != nil {
		return err
	}
	files, _, err := listFiles(*dataset)
	if err != nil {
		return err
	}
	data := make([][]byte, len(files))
	for i, f := range files {
		if data[i], err = os.ReadFile(filepath.Join(*dataset, f)); err != nil {
			return err
		}
	}
	cfg := decode.DefaultConfig()
	total := int64(len(data) * *epochs)
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, *workers)
	start := time.Now()
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := decode.NewDecoder(cfg)
			if err != nil {
				errc <- err
				return
			}
			defer d.Close()
			dst := make([]byte, cfg.SampleBytes())
			for {
				i := next.Add(1) - 1
				if i >= total {
					return
				}
				epoch, idx := int(i)/len(data), i%int64(len(data))
				if _, err := d.Decode(data[idx], decode.SampleSeed(1, epoch, idx), dst); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	select {
	case err := <-errc:
		return err
	default:
	}
	res := map[string]any{"images": total - failed.Load(), "seconds": secs, "failed": failed.Load(), "peak_rss_bytes": procmem.PeakRSS()}
	b, _ := json.Marshal(res)
	if *out == "" {
		fmt.Println(string(b))
		return nil
	}
	return os.WriteFile(*out, b, 0o644)
}

// listFiles lists the dataset's samples exactly as the node discovers them
// (dataset.Discover over the directory), with their total size, so the
// ceiling and the pipeline decode the same files.
func listFiles(dir string) ([]string, int64, error) {
	ctx := context.Background()
	store, err := storage.NewDirStore(dir)
	if err != nil {
		return nil, 0, err
	}
	ds, err := dataset.Discover(ctx, store, dataset.DefaultDiscoverOptions())
	if err != nil {
		return nil, 0, err
	}
	files := make([]string, len(ds.Samples))
	var total int64
	for i, smp := range ds.Samples {
		files[i] = smp.Key
		info, err := os.Stat(filepath.Join(dir, filepath.FromSlash(smp.Key)))
		if err != nil {
			return nil, 0, err
		}
		total += info.Size()
	}
	return files, total, nil
}

func (s *minioServer) env() []string {
	return []string{"AWS_ENDPOINT_URL=" + s.Endpoint, "AWS_ACCESS_KEY_ID=" + s.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s.SecretKey, "AWS_REGION=us-east-1"}
}

// walkFiles lists every regular file under dir, as slash-separated paths
// relative to it (a packed dataset: its tars and manifest).
func walkFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err == nil && !strings.HasPrefix(path.Base(rel), ".") {
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	return files, err
}

// upload copies files of dir below prefix in the bench bucket (made if
// missing) and returns the s3:// URL of the copy.
func upload(ctx context.Context, s *minioServer, dir, prefix string, files []string) (string, error) {
	c, err := minio.New(strings.TrimPrefix(s.Endpoint, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
	})
	if err != nil {
		return "", err
	}
	const bucket = "bench"
	// MinIO answers /minio/health/live before it can serve requests
	// ("Server not initialized yet"), more so on a loaded machine: ask
	// again for a while.
	var ok bool
	for deadline := time.Now().Add(60 * time.Second); ; {
		if ok, err = c.BucketExists(ctx, bucket); err == nil || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err != nil {
		return "", err
	} else if !ok {
		if err := c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
			return "", err
		}
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return "", err
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(key string, b []byte) {
			defer func() { <-sem; wg.Done() }()
			_, err := c.PutObject(ctx, bucket, prefix+"/"+key, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{})
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}(f, b)
	}
	wg.Wait()
	if firstErr != nil {
		return "", firstErr
	}
	return "s3://" + bucket + "/" + prefix, nil
}
