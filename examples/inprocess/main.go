// Command inprocess is the in-process trainer of docs/trainers.md, compiled so the
// snippet cannot rot: it loads a dataset (directory or s3://) through the
// pipeline in this process and prints what a trainer would see.
//
//	go run ./examples/inprocess --dataset "$(scripts/dataset.sh 512)"
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/ffdecode"
	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
	"github.com/longshore/longshore/storage/stores"
)

func main() {
	datasetDir := flag.String("dataset", "", "directory or s3://bucket/prefix")
	epochs := flag.Int("epochs", 1, "epochs")
	flag.Parse()
	ctx := context.Background()

	// Tar shards (longshore-pack) are read through a PackedStore: a block's
	// samples in a tar are one read, a window of blocks at once.
	packed := dataset.DefaultPackedConfig() // blocks of 16, windows of 128, as the order below
	s, err := stores.Open(ctx, *datasetDir, s3.DefaultOptions())
	if err != nil {
		log.Fatal(err)
	}
	store, ds, err := dataset.Open(ctx, s, *datasetDir, dataset.DefaultDiscoverOptions(), &packed)
	if err != nil {
		log.Fatal(err)
	}
	defer storage.Close(store)

	cfg := actors.DefaultConfig() // batch 32, 4 slots, 16 fetches, a decoder per core, 1% failure budget
	cfg.Seed, cfg.Epochs = 1, *epochs
	block := cluster.DefaultBlock(ds.Packed()) // 1 (a full shuffle), or 16 for tar shards
	deps := actors.Deps{Store: store, Order: func(seed uint64, epoch int, n int64) actors.Order {
		return cluster.NewOrder(seed, epoch, n, block, cluster.DefaultWindow) // the same order the cluster uses
	}}
	if err := ffdecode.Use(&cfg, &deps, decode.DefaultConfig()); err != nil { // train transform, 224, NCHW
		log.Fatal(err)
	}

	loader, err := actors.NewLoader(cfg, ds, deps)
	if err != nil {
		log.Fatal(err)
	}
	defer loader.Close()
	images := 0
	for {
		b, err := loader.Next(ctx) // io.EOF after the last epoch; a *actors.BudgetError carries the failure report
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		// b.Images: uint8 [N,3,224,224] over the batch slot; b.Labels, b.Keys, b.Epoch, b.Step
		images += b.Len()
		b.Release() // gives the slot back: the trainer's pace is the pipeline's back-pressure
	}
	fmt.Printf("%d images in %d epoch(s)\n", images, *epochs)
}
