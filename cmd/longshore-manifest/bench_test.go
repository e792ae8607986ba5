package main

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/miniotest"
	"github.com/longshore/longshore/storage/stores"
)

// BenchmarkListing measures listing an ImageFolder in a real MinIO with
// N class prefixes listed at once (what --dataset does): keys/s. 64
// classes of 400 objects; run with -benchtime 3x.
func BenchmarkListing(b *testing.B) {
	const classes, per = 64, 400
	ctx := context.Background()
	srv := miniotest.Start(b)
	bucket := srv.NewBucket(b)
	s, err := stores.Open(ctx, srv.URL(bucket, "train"), srv.Options())
	if err != nil {
		b.Fatal(err)
	}
	defer storage.Close(s)
	keys := make(chan string)
	var wg sync.WaitGroup
	var putErr error
	var mu sync.Mutex
	for range 32 {
		wg.Go(func() {
			for k := range keys {
				if _, err := s.Put(ctx, k, []byte("x"), storage.Cond{}); err != nil {
					mu.Lock()
					putErr = err
					mu.Unlock()
				}
			}
		})
	}
	for c := range classes {
		for i := range per {
			keys <- fmt.Sprintf("c%03d/%05d.jpg", c, i)
		}
	}
	close(keys)
	wg.Wait()
	if putErr != nil {
		b.Fatal(putErr)
	}
	for _, conc := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("prefixes=%d", conc), func(b *testing.B) {
			opts := dataset.DefaultDiscoverOptions()
			opts.Layout, opts.Concurrency = dataset.LayoutImageFolder, conc
			for b.Loop() {
				ds, err := dataset.Discover(ctx, s, opts)
				if err != nil {
					b.Fatal(err)
				}
				if len(ds.Samples) != classes*per {
					b.Fatalf("%d samples", len(ds.Samples))
				}
			}
			b.ReportMetric(float64(classes*per*b.N)/b.Elapsed().Seconds(), "keys/s")
		})
	}
}
