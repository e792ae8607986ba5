// Command feed_server serves a standalone pipeline over a dataset
// directory to trainers through the feed (package feed), without the
// node binary: for tests, examples and benchmarks.
//
//	go run ./examples/feed_server --dataset ~/.cache/longshore/datasets/imagenet-like-n512-s1 --dir /tmp/lsfeed
//	LONGSHORE_FEED_DIR=/tmp/lsfeed python3 examples/pytorch_train.py
//
// It serves until SIGINT or SIGTERM. --checksums writes, before serving,
// the crc32 of every sample an in-process run of the same configuration
// produces (JSON lines: rank, epoch, step, i, crc), so tests can check the
// trainer saw exactly the pipeline's pixels. --bench instead drains every
// rank in process and prints batches/s and GB/s (the in-process Go
// consumer baseline for the feed benchmark).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"log"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/ffdecode"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/delivery"
	"github.com/longshore/longshore/feed"
	"github.com/longshore/longshore/gpu"
	"github.com/longshore/longshore/storage"
)

func main() {
	var (
		datasetDir = flag.String("dataset", "", "ImageFolder or manifest dataset directory (required)")
		dir        = flag.String("dir", "", "socket directory (default: $LONGSHORE_FEED_DIR or a per-user run dir)")
		ranks      = flag.Int("ranks", 1, "ranks (trainers) to serve")
		batch      = flag.Int("batch-size", 32, "samples per batch")
		size       = flag.Int("size", 224, "output crop size (pixels)")
		transform  = flag.String("transform", "train", "train, eval or resize")
		epochs     = flag.Int("epochs", 1, "epochs")
		slots      = flag.Int("slots", 4, "batch slots per rank")
		decoders   = flag.Int("decoders", 0, "decoders for the node (0: NumCPU)")
		seed       = flag.Uint64("seed", 1, "seed for order and transforms")
		job        = flag.String("job", "standalone", "job name (in resume tokens)")
		sums       = flag.String("checksums", "", "write per-sample checksums of an in-process run here first")
		ready      = flag.String("ready", "", "create this file once the sockets are listening")
		bench      = flag.Bool("bench", false, "drain every rank in process, print throughput, exit")
	)
	flag.Parse()
	if *datasetDir == "" {
		log.Fatal("feed_server: --dataset is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	store, err := storage.NewDirStore(*datasetDir)
	if err != nil {
		log.Fatal(err)
	}
	ds, err := dataset.Discover(ctx, store, dataset.DefaultDiscoverOptions())
	if err != nil {
		log.Fatal(err)
	}
	if ds.Packed() {
		log.Fatal("feed_server: packed datasets (tar shards) are served by longshore-node --standalone --sink feed, which reads them a chunk at a time")
	}
	cfg := actors.Config{BatchSize: *batch, Slots: *slots, Decoders: *decoders, Epochs: *epochs, Seed: *seed}
	deps := actors.Deps{Store: store, Order: func(seed uint64, epoch int, n int64) actors.Order {
		return cluster.NewOrder(seed, epoch, n, cluster.DefaultBlock(false), cluster.DefaultWindow) // the node's order
	}}
	dc := decode.DefaultConfig()
	if dc.Transform, err = decode.ParseTransform(*transform); err != nil {
		log.Fatal(err)
	}
	dc.Transform.Size = *size
	if dc.Transform.ResizeShort < *size {
		dc.Transform.ResizeShort = *size
	}
	if err := ffdecode.Use(&cfg, &deps, dc); err != nil {
		log.Fatal(err)
	}
	open := delivery.Standalone(cfg, ds, *ranks, deps)

	if *bench {
		runBench(ctx, open, *ranks)
		return
	}
	if *sums != "" {
		if err := writeChecksums(ctx, *sums, open, *ranks); err != nil {
			log.Fatal(err)
		}
	}
	s, err := delivery.New(delivery.Config{Dir: *dir, Ranks: *ranks, Job: *job,
		EpochSteps: delivery.StandaloneSteps(cfg, dataset.DatasetCatalog(ds), *ranks)}, open)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("feed_server: %d samples, %d ranks, serving at %s", len(ds.Samples), *ranks, s.SocketPath(0))
	if *ready != "" {
		os.WriteFile(*ready, []byte(s.SocketPath(0)+"\n"), 0o644)
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		log.Fatal(err)
	}
}

func drain(ctx context.Context, open delivery.OpenFunc, rank int, fn func(*actors.Batch)) error {
	st, err := open(rank, feed.Cursor{}, gpu.DefaultAllocator())
	if err != nil {
		return err
	}
	defer st.Shutdown(context.Background())
	for {
		b, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		fn(b)
		b.Release()
	}
}

func writeChecksums(ctx context.Context, path string, open delivery.OpenFunc, ranks int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for r := 0; r < ranks; r++ {
		err := drain(ctx, open, r, func(b *actors.Batch) {
			n := b.Len()
			if n == 0 {
				return
			}
			sb := len(b.Images) / n
			for i := 0; i < n; i++ {
				fmt.Fprintf(w, "{\"rank\":%d,\"epoch\":%d,\"step\":%d,\"i\":%d,\"key\":%q,\"crc\":%d}\n",
					r, b.Epoch, b.Step, i, b.Keys[i], crc32.ChecksumIEEE(b.Images[i*sb:(i+1)*sb]))
			}
		})
		if err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

func runBench(ctx context.Context, open delivery.OpenFunc, ranks int) {
	var (
		mu             sync.Mutex
		batches, bytes int64
		wg             sync.WaitGroup
	)
	t0 := time.Now()
	for r := 0; r < ranks; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := drain(ctx, open, r, func(b *actors.Batch) {
				mu.Lock()
				batches++
				bytes += int64(len(b.Images))
				mu.Unlock()
			})
			if err != nil {
				log.Fatal(err)
			}
		}()
	}
	wg.Wait()
	s := time.Since(t0).Seconds()
	fmt.Printf("{\"consumer\":\"go-in-process\",\"batches\":%d,\"seconds\":%.3f,\"batches_per_s\":%.2f,\"gb_per_s\":%.4f}\n",
		batches, s, float64(batches)/s, float64(bytes)/s/1e9)
}
