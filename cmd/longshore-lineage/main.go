// Command longshore-lineage answers "what went into rank r, step t of
// epoch e" of a standalone job from the job's flags alone, and of a
// cluster job from its journal (--checkpoint): each sample's
// dataset index, key, label and source object, and the transform it got
// (crop box and flip, or a clip's frame times, recomputed from the
// sample's seed as the decoder computes them), for one step or a range
// of steps; and the
// reverse, --key K: every (epoch, rank, step, slot) where a key appeared.
//
//	longshore-lineage --dataset DIR --seed 1 --batch-size 32 --ranks 2 --epochs 3 \
//	    --epoch 1 --rank 0 --step 17
//	longshore-lineage --config node.yaml --epoch 1 --rank 0 --steps 10-20 --json
//	longshore-lineage --config node.yaml --key n01440764/x.JPEG
//
//	longshore-lineage --checkpoint s3://bucket/jobs/j1 --dataset s3://bucket/train \
//	    --epoch 3 --rank n2/0 --steps 100-110
//
// It takes the node's job flags (and its --config file, whose other keys
// it ignores), --mixture (a standalone mixture job: each sample's source)
// and --dtype (the pixel digest of a float job) among them. A cluster job's order and batch size come from its
// journal, and each step's positions from what the journal records of
// each rank session's commits (cluster.Trail; docs/lineage.md).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/longshore/longshore/cmd/internal/version"
)

func main() {
	version.Exit("longshore-lineage")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command; its exit status: 0 answered, 1 failed, 2 a usage
// error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "longshore-lineage: %v\n", err)
		return 2
	}
	if o.checkpoint != "" && o.key == "" && !o.stepsSet {
		return checkpoint(ctx, o, stdout, stderr)
	}
	var ans *Answer
	if o.checkpoint != "" {
		ans, err = answerCluster(ctx, o)
	} else {
		ans, err = answer(ctx, o)
	}
	if err != nil {
		fmt.Fprintf(stderr, "longshore-lineage: %v\n", err)
		if errors.As(err, new(usageError)) {
			return 2
		}
		return 1
	}
	if err := write(stdout, o.json, ans); err != nil {
		fmt.Fprintf(stderr, "longshore-lineage: %v\n", err)
		return 1
	}
	return 0
}
