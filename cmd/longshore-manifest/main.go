// Command longshore-manifest makes the manifest of an ImageFolder, and the
// manifest index that lets nodes and the coordinator use a manifest
// without reading all of it (docs/scale.md).
//
// List an ImageFolder once, class prefixes side by side, and write its
// manifest and index, so that no job lists it again:
//
//	longshore-manifest --dataset LOC [--concurrency 16] [--every 1024] [--force]
//
// writes LOC/manifest.jsonl (keys relative to LOC, labels the sorted
// class names, as the ImageFolder reads) and LOC/manifest.jsonl.index.
//
// Index a manifest that exists (any made before indexes, or by hand):
//
//	longshore-manifest --index LOC [--manifest KEY] [--every 1024]
//
// writes KEY.index beside it (default: LOC's manifest.csv or
// manifest.jsonl), reading the manifest a piece at a time.
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
	"time"

	"github.com/longshore/longshore/cmd/internal/version"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
	"github.com/longshore/longshore/storage/stores"
)

type options struct {
	dataset     string
	index       string
	manifest    string
	every       int
	concurrency int
	force       bool
	s3Endpoint  string
	s3Creds     s3.CredentialsFlag
	media       string
}

const usage = `longshore-manifest makes manifests and manifest indexes (docs/scale.md).

List an ImageFolder once and write its manifest and index:

  longshore-manifest --dataset LOC [--concurrency 16] [--every 1024] [--force]

Index an existing manifest (reads it a piece at a time):

  longshore-manifest --index LOC [--manifest KEY] [--every 1024]

Flags:
`

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("longshore-manifest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.dataset, "dataset", "", "an ImageFolder (directory, file://DIR or s3://bucket/prefix) to list and write manifest.jsonl and its index for")
	fs.StringVar(&o.index, "index", "", "a dataset location whose manifest to index")
	fs.StringVar(&o.manifest, "manifest", "", "with --index: the manifest's key relative to the location; default manifest.csv or manifest.jsonl, whichever exists")
	fs.IntVar(&o.every, "every", dataset.DefaultIndexEvery, "samples per piece of the index: a node reads the manifest a piece at a time; a multiple of the order's --block keeps each block in one piece")
	fs.IntVar(&o.concurrency, "concurrency", 16, "with --dataset: class prefixes listed at once")
	fs.BoolVar(&o.force, "force", false, "with --dataset: write over an existing manifest.jsonl")
	fs.StringVar(&o.media, "media", "image", "with --dataset: what the samples are, image, video or audio (the nodes' --media): which files of the ImageFolder are samples")
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
	case (o.dataset == "") == (o.index == ""):
		errs = append(errs, errors.New("want --dataset LOC (list an ImageFolder) or --index LOC (index its manifest); see --help"))
	case o.index != "":
		for _, name := range []string{"concurrency", "force"} {
			if set[name] {
				errs = append(errs, fmt.Errorf("--%s goes with --dataset, not --index", name))
			}
		}
	case set["manifest"]:
		errs = append(errs, errors.New("--manifest goes with --index (--dataset writes manifest.jsonl)"))
	}
	if o.every < 1 {
		errs = append(errs, fmt.Errorf("--every %d: need at least 1", o.every))
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
	version.Exit("longshore-manifest")
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "longshore-manifest: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.index != "" {
		err = indexManifest(ctx, o, stdout, stderr)
	} else {
		err = listDataset(ctx, o, stdout, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "longshore-manifest: %v\n", err)
		return 1
	}
	return 0
}

func (o options) open(ctx context.Context, raw string, stderr io.Writer) (storage.Store, error) {
	sopts := s3.DefaultOptions()
	if o.s3Endpoint != "" {
		sopts.Endpoint = o.s3Endpoint
	}
	sopts.Credentials = string(o.s3Creds)
	s, err := stores.Open(ctx, raw, sopts)
	if line := s3.CredentialLine(s); err == nil && line != "" {
		fmt.Fprintf(stderr, "longshore-manifest: %s\n", line)
	}
	return s, err
}

// progress prints a scan's progress to w about every 5 s.
func progress(w io.Writer) func(dataset.ScanProgress) {
	last := time.Now()
	return func(p dataset.ScanProgress) {
		if time.Since(last) < 5*time.Second {
			return
		}
		last = time.Now()
		fmt.Fprintf(w, "longshore-manifest: pass %d: %d samples, %.0f/%.0f MiB\n", p.Pass, p.Samples, float64(p.Bytes)/(1<<20), float64(p.Size)/(1<<20))
	}
}

func indexManifest(ctx context.Context, o options, stdout, stderr io.Writer) error {
	s, err := o.open(ctx, o.index, stderr)
	if err != nil {
		return err
	}
	defer storage.Close(s)
	key := o.manifest
	if key == "" {
		for _, name := range []string{dataset.ManifestCSVName, dataset.ManifestJSONLName} {
			if _, err := s.Stat(ctx, name); err == nil {
				if key != "" {
					return fmt.Errorf("%s holds both %s and %s: pick one with --manifest", s, dataset.ManifestCSVName, dataset.ManifestJSONLName)
				}
				key = name
			} else if !errors.Is(err, storage.ErrNotFound) {
				return err
			}
		}
		if key == "" {
			return fmt.Errorf("%s holds no %s or %s: name the manifest with --manifest", s, dataset.ManifestCSVName, dataset.ManifestJSONLName)
		}
	}
	start := time.Now()
	x, err := dataset.WriteManifestIndex(ctx, s, key, o.every, progress(stderr))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "indexed %s: %d samples (%s), %d classes, digest %s, %d pieces of %d, in %.1fs; wrote %s\n",
		key, x.Samples, x.Layout(), len(x.Classes), x.Digest, x.Pieces(), x.Every, time.Since(start).Seconds(), dataset.IndexKey(key))
	return nil
}

func listDataset(ctx context.Context, o options, stdout, stderr io.Writer) error {
	s, err := o.open(ctx, o.dataset, stderr)
	if err != nil {
		return err
	}
	defer storage.Close(s)
	if !o.force {
		for _, name := range []string{dataset.ManifestJSONLName, dataset.ManifestCSVName} {
			if _, err := s.Stat(ctx, name); err == nil {
				return fmt.Errorf("%s already holds %s: jobs read it (index it with --index), or pass --force to list the ImageFolder again", s, name)
			} else if !errors.Is(err, storage.ErrNotFound) {
				return err
			}
		}
	} else if _, err := s.Stat(ctx, dataset.ManifestCSVName); err == nil {
		return fmt.Errorf("%s holds a %s, which would hide the new %s: remove it", s, dataset.ManifestCSVName, dataset.ManifestJSONLName)
	}
	start := time.Now()
	dopts := dataset.DefaultDiscoverOptions()
	dopts.Layout = dataset.LayoutImageFolder
	dopts.Concurrency = o.concurrency
	dopts.Extensions, _ = dataset.MediaExtensions(o.media) // checked in parseFlags
	ds, err := dataset.Discover(ctx, s, dopts)
	if err != nil {
		return err
	}
	listed := time.Since(start)
	fmt.Fprintf(stderr, "longshore-manifest: listed %d samples in %d classes in %.1fs (%.0f keys/s, %d prefixes at once)\n",
		len(ds.Samples), len(ds.Classes), listed.Seconds(), float64(len(ds.Samples))/listed.Seconds(), o.concurrency)
	x, err := dataset.WriteFolderManifest(ctx, s, ds, dataset.FolderManifestOptions{Every: o.every, Replace: o.force, Progress: progress(stderr)})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s at %s: %d samples, %d classes, digest %s (the ImageFolder's)\n",
		dataset.ManifestJSONLName, dataset.IndexKey(dataset.ManifestJSONLName), s, x.Samples, len(x.Classes), x.Digest)
	return nil
}
