// Command longshore-pack makes packed datasets: samples stored as members
// of tar shards, listed by a manifest with each sample's object, offset and
// size, so that the node reads a chunk of samples with one ranged GET
// instead of one GET per sample (docs/packed-datasets.md).
//
// Pack any dataset the node can read (a directory or s3:// URL, ImageFolder
// or manifest) into tar shards and a manifest:
//
//	longshore-pack --dataset SRC --out DST [--per-shard 256] [--seed S | --shuffle=false]
//
// writes DST/shards/shard-000000.tar, ... (standard ustar/PAX tars, each
// member named by the sample's key in SRC) and then DST/manifest.jsonl.
//
// Index existing WebDataset-style tars in place:
//
//	longshore-pack --index SRC
//
// reads every *.tar under SRC (a sample is the members sharing a stem:
// an image .jpg/.jpeg/.png/.webp and a .cls holding its integer label)
// and writes SRC/manifest.jsonl.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/longshore/longshore/cmd/internal/version"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
	"github.com/longshore/longshore/storage/stores"
)

type options struct {
	dataset     string
	manifest    string
	out         string
	index       string
	perShard    int
	concurrency int
	shuffle     bool
	seed        uint64
	force       bool
	indexEvery  int
	s3Endpoint  string
	s3Creds     s3.CredentialsFlag
	media       string
}

const usage = `longshore-pack makes packed datasets: samples as members of tar shards,
read a chunk at a time (docs/packed-datasets.md).

Pack a dataset (directory or s3://, ImageFolder or manifest):

  longshore-pack --dataset SRC --out DST [--per-shard 256] [--seed S | --shuffle=false]

  writes DST/shards/shard-NNNNNN.tar and, last, DST/manifest.jsonl; point
  longshore-node and longshore-coordinator at DST.

Index existing WebDataset-style tars in place:

  longshore-pack --index SRC

  every *.tar under SRC; a sample is the members sharing a stem (the name
  up to the first '.' of its last component): one image (.jpg, .jpeg, .png,
  .webp) and a .cls holding its integer label. Writes SRC/manifest.jsonl.

Flags:
`

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("longshore-pack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.dataset, "dataset", "", "dataset to pack: a directory, file://DIR or s3://bucket/prefix (ImageFolder layout or a manifest)")
	fs.StringVar(&o.manifest, "manifest", "", "with --dataset: the manifest object relative to the dataset root; default: ImageFolder, or manifest.csv/manifest.jsonl if present")
	fs.StringVar(&o.out, "out", "", "with --dataset: where the packed dataset goes, a directory (created if missing) or s3://bucket/prefix")
	fs.StringVar(&o.index, "index", "", "index the WebDataset-style *.tar files under this directory or s3:// URL and write its manifest.jsonl")
	fs.IntVar(&o.perShard, "per-shard", 256, "samples per tar shard: best the epoch order's block (256 for a packed dataset unless the coordinator's --block says otherwise) or a multiple of it")
	fs.IntVar(&o.concurrency, "concurrency", 16, "objects read at once")
	fs.BoolVar(&o.shuffle, "shuffle", true, "write the samples in a random order (by --seed); --shuffle=false keeps the dataset's, whose blocks are then as varied as the source order (an ImageFolder's is sorted by class: each block would hold one class)")
	fs.Uint64Var(&o.seed, "seed", 0, "the seed of the shuffled order")
	fs.IntVar(&o.indexEvery, "index-every", dataset.DefaultIndexEvery, "samples per piece of the manifest index written beside the manifest (manifest.jsonl.index, docs/scale.md): a node reads the manifest a piece at a time; a multiple of the order's block")
	fs.BoolVar(&o.force, "force", false, "write over an existing manifest.jsonl (and shards, with --out)")
	fs.StringVar(&o.media, "media", "image", "what the samples are: image, video or audio (the nodes' --media): which files of an ImageFolder, and which members of a tar with --index, hold samples (storage's extensions for each: docs/media.md)")
	fs.StringVar(&o.s3Endpoint, "s3-endpoint", "", "S3 endpoint URL (default $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS)")
	o.s3Creds = s3.CredsAuto
	fs.Var(&o.s3Creds, "s3-credentials", s3.CredentialsUsage)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " ")))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case o.index != "":
		for _, name := range []string{"dataset", "out", "manifest", "per-shard", "shuffle", "seed"} {
			if set[name] {
				errs = append(errs, fmt.Errorf("--%s does not go with --index (which writes the manifest of tars as they are)", name))
			}
		}
	case o.dataset == "" && o.out == "":
		errs = append(errs, errors.New("want --dataset SRC --out DST (pack) or --index SRC (index tars); see --help"))
	default:
		if o.dataset == "" {
			errs = append(errs, errors.New("--dataset SRC is required with --out"))
		}
		if o.out == "" {
			errs = append(errs, errors.New("--out DST is required with --dataset"))
		}
		if o.perShard < 1 {
			errs = append(errs, fmt.Errorf("--per-shard %d: need at least 1", o.perShard))
		}
		if set["seed"] && !o.shuffle {
			errs = append(errs, errors.New("--seed with --shuffle=false has no effect"))
		}
	}
	if o.indexEvery < 1 {
		errs = append(errs, fmt.Errorf("--index-every %d: need at least 1", o.indexEvery))
	}
	if o.concurrency < 1 {
		errs = append(errs, fmt.Errorf("--concurrency %d: need at least 1", o.concurrency))
	}
	if _, err := dataset.MediaExtensions(o.media); err != nil {
		errs = append(errs, err)
	}
	return o, errors.Join(errs...)
}

func main() {
	version.Exit("longshore-pack")
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "longshore-pack: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.index != "" {
		err = indexTars(ctx, o, stdout, stderr)
	} else {
		err = pack(ctx, o, stdout, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "longshore-pack: %v\n", err)
		return 1
	}
	return 0
}

func (o options) storeOptions() s3.Options {
	sopts := s3.DefaultOptions()
	if o.s3Endpoint != "" {
		sopts.Endpoint = o.s3Endpoint
	}
	sopts.Credentials = string(o.s3Creds)
	sopts.FetchConcurrency = max(sopts.FetchConcurrency, o.concurrency)
	return sopts
}

// openStore opens a location; create makes a missing directory first (a
// bucket must exist: a typo must not scatter a dataset into a new one).
func openStore(ctx context.Context, raw string, sopts s3.Options, create bool, stderr io.Writer) (storage.Store, error) {
	loc, err := storage.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	if create && loc.Scheme == "file" {
		if err := os.MkdirAll(loc.Path, 0o755); err != nil {
			return nil, err
		}
	}
	s, err := stores.Open(ctx, raw, sopts)
	if line := s3.CredentialLine(s); err == nil && line != "" {
		fmt.Fprintf(stderr, "longshore-pack: %s\n", line)
	}
	return s, err
}

// checkKeyText refuses a sample key the node's logs and sinks could not
// carry: they are tab-separated lines.
func checkKeyText(key string) error {
	if strings.ContainsAny(key, "\t\n\r") {
		return fmt.Errorf("key %q contains a tab or newline, which the node's tab-separated logs cannot carry: rename it", key)
	}
	return nil
}
