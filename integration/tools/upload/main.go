// Command upload is the one-shot setup job of integration/docker-compose.yml:
// it waits for the S3 endpoint, creates the bucket if missing and uploads a
// dataset in ImageFolder layout (<prefix>/<class>/<file>) — either a local
// directory (--from) or --generate N synthetic JPEGs, so a fresh clone needs
// no data. With --keys-out it writes the uploaded keys, relative to the
// prefix and sorted, one a line (the chaos tests check deliveries against
// them). Uploading is idempotent: objects already present with the same
// size are skipped, so the job can run again.
//
//	upload --endpoint http://minio:9000 --dataset s3://data/train --generate 600
//
// Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (else
// MINIO_ROOT_USER / MINIO_ROOT_PASSWORD). It is built static (CGO_ENABLED=0).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "upload: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	endpoint := flag.String("endpoint", firstEnv("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"), "S3 endpoint URL (default $AWS_ENDPOINT_URL)")
	dataset := flag.String("dataset", "", "destination s3://bucket/prefix")
	from := flag.String("from", "", "upload this directory (ImageFolder layout)")
	generate := flag.Int("generate", 0, "upload N synthetic JPEGs in 10 classes instead of --from")
	side := flag.Int("side", 64, "with --generate: image side in pixels")
	keysOut := flag.String("keys-out", "", "write the uploaded keys (relative to the prefix) to this file")
	wait := flag.Duration("wait", 2*time.Minute, "how long to wait for the endpoint to answer")
	flag.Parse()
	if *endpoint == "" || *dataset == "" || (*from == "") == (*generate == 0) {
		return errors.New("need --endpoint, --dataset s3://bucket/prefix and one of --from DIR or --generate N")
	}
	bucket, prefix, err := parseS3(*dataset)
	if err != nil {
		return err
	}
	eu, err := url.Parse(*endpoint)
	if err != nil || eu.Host == "" {
		return fmt.Errorf("--endpoint %q: want http(s)://host:port", *endpoint)
	}
	user, pass := firstEnv("AWS_ACCESS_KEY_ID", "MINIO_ROOT_USER"), firstEnv("AWS_SECRET_ACCESS_KEY", "MINIO_ROOT_PASSWORD")
	cl, err := minio.New(eu.Host, &minio.Options{Creds: credentials.NewStaticV4(user, pass, ""), Secure: eu.Scheme == "https"})
	if err != nil {
		return err
	}
	ctx := context.Background()

	// The endpoint may still be starting (or restarting): retry until --wait.
	deadline := time.Now().Add(*wait)
	for {
		ok, err := cl.BucketExists(ctx, bucket)
		if err == nil && !ok {
			err = cl.MakeBucket(ctx, bucket, minio.MakeBucketOptions{})
			var er minio.ErrorResponse
			if errors.As(err, &er) && (er.Code == "BucketAlreadyOwnedByYou" || er.Code == "BucketAlreadyExists") {
				err = nil
			}
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bucket %s at %s: %w", bucket, *endpoint, err)
		}
		time.Sleep(500 * time.Millisecond)
	}

	objs, err := collect(*from, *generate, *side)
	if err != nil {
		return err
	}
	start, sent := time.Now(), 0
	for _, o := range objs {
		key := path.Join(prefix, o.key)
		if st, err := cl.StatObject(ctx, bucket, key, minio.StatObjectOptions{}); err == nil && st.Size == int64(len(o.data)) {
			continue
		}
		if _, err := cl.PutObject(ctx, bucket, key, bytes.NewReader(o.data), int64(len(o.data)),
			minio.PutObjectOptions{ContentType: "image/jpeg"}); err != nil {
			return fmt.Errorf("put s3://%s/%s: %w", bucket, key, err)
		}
		sent++
	}
	fmt.Printf("upload: s3://%s/%s holds %d objects (%d uploaded now) in %.1fs\n", bucket, prefix, len(objs), sent, time.Since(start).Seconds())
	if *keysOut != "" {
		var b strings.Builder
		for _, o := range objs {
			b.WriteString(o.key + "\n")
		}
		if err := os.WriteFile(*keysOut, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

type object struct {
	key  string
	data []byte
}

// collect returns the dataset's objects sorted by key.
func collect(dir string, n, side int) ([]object, error) {
	var out []object
	if dir != "" {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out = append(out, object{filepath.ToSlash(rel), b})
			return nil
		})
		if err != nil {
			return nil, err
		}
	} else {
		for i := range n {
			b, err := synthetic(i, side)
			if err != nil {
				return nil, err
			}
			out = append(out, object{fmt.Sprintf("class%02d/img%06d.jpg", i%10, i), b})
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].key < out[b].key })
	return out, nil
}

// synthetic is image i: a gradient tinted by its class, different for every i.
func synthetic(i, side int) ([]byte, error) {
	img := image.NewRGBA(image.Rect(0, 0, side, side))
	for y := range side {
		for x := range side {
			img.Set(x, y, color.RGBA{uint8(x*255/side + i), uint8(y*255/side + 3*i), uint8(i%10*25 + (x^y)&15), 255})
		}
	}
	var buf bytes.Buffer
	err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 85})
	return buf.Bytes(), err
}

func parseS3(u string) (bucket, prefix string, err error) {
	rest, ok := strings.CutPrefix(u, "s3://")
	if !ok || rest == "" {
		return "", "", fmt.Errorf("--dataset %q: want s3://bucket/prefix", u)
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	return bucket, strings.Trim(prefix, "/"), nil
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}
