// Command longshore-lineage answers "what went into rank r, step t of
// epoch e" of a standalone job from the job's flags alone: each sample's
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
// It takes the node's job flags (and its --config file, whose other keys
// it ignores). A cluster job's steps are made of the leases the
// coordinator granted as ranks asked, which its journal does not keep:
// --checkpoint reads the journal, says what it holds, and refuses the
// question (docs/lineage.md).
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
// error, 3 refused (the question has no exact answer from what is given).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "longshore-lineage: %v\n", err)
		return 2
	}
	if o.checkpoint != "" {
		return checkpoint(ctx, o, stdout, stderr)
	}
	ans, err := answer(ctx, o)
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
