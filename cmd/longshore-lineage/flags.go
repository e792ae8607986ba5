package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cmd/internal/config"
	"github.com/longshore/longshore/decode"
)

// options are the job's flags, as the node takes them, and the question.
type options struct {
	// The job: the node's flags of the same names and defaults.
	dataset, manifest, s3Endpoint, exclude, media string
	seed                                          uint64
	block, window, batchSize, ranks, epochs       int
	blockSet, dropLast, lowres                    bool
	transform, layout, decoder                    string
	dtype                                         string
	mixture, mixtureSchedule                      string
	mixtureRound                                  int
	mixtureRoundSet                               bool // --mixture-round given (not its default)
	size                                          int
	maxPixels                                     int64
	clipFrames                                    int
	clipFPS                                       float64
	clipSampling                                  string

	// The question.
	epoch, rank       int
	rankName          string // --rank as given: a cluster rank's name, n1/0
	epochSet, rankSet bool
	steps             stepRange
	stepsSet          bool
	key               string
	json              bool
	transforms        bool
	checkpoint        string
}

// stepRange is --step T or --steps A-B: steps [First, Last].
type stepRange struct{ First, Last int64 }

func parseSteps(s string) (stepRange, error) {
	a, b, isRange := strings.Cut(s, "-")
	first, err := strconv.ParseInt(a, 10, 64)
	if err != nil || first < 0 {
		return stepRange{}, fmt.Errorf("want a step (17) or a range of steps (10-20), got %q", s)
	}
	last := first
	if isRange {
		if last, err = strconv.ParseInt(b, 10, 64); err != nil || last < first {
			return stepRange{}, fmt.Errorf("want a range of steps A-B with A <= B, got %q", s)
		}
	}
	return stepRange{first, last}, nil
}

// maxSteps bounds a --steps range: each sample of each step is read and
// its header decoded.
const maxSteps = 10000

// jobFlags are the node's flags this command reads; a --config file's
// other keys (the node's own: decoders, sink, ...) are ignored.
var jobFlags = map[string]bool{
	"dataset": true, "mixture": true, "mixture-schedule": true, "mixture-round": true, "manifest": true, "s3-endpoint": true, "exclude": true, "media": true,
	"seed": true, "block": true, "mix-window": true, "batch-size": true, "ranks": true, "epochs": true,
	"drop-last": true, "transform": true, "size": true, "layout": true, "dtype": true, "decoder": true, "lowres": true,
	"max-pixels": true, "clip-frames": true, "clip-fps": true, "clip-sampling": true,
}

// questionFlags ask the question; a config file may not set them.
var questionFlags = map[string]bool{
	"epoch": true, "rank": true, "step": true, "steps": true, "key": true, "json": true, "transforms": true, "checkpoint": true,
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	var step, steps string
	fs := flag.NewFlagSet("longshore-lineage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// The job, as longshore-node --standalone takes it.
	fs.StringVar(&o.dataset, "dataset", "", "the job's --dataset: a directory, file://DIR or s3://bucket/prefix")
	fs.StringVar(&o.mixture, "mixture", "", "the job's --mixture (name=DATASET:WEIGHT,... or FILE.yaml, in place of --dataset): each sample's source, key (<source>/<key>) and fields")
	fs.StringVar(&o.mixtureSchedule, "mixture-schedule", "", "the job's --mixture-schedule")
	fs.IntVar(&o.mixtureRound, "mixture-round", 0, "the job's --mixture-round (0: --batch-size; a mixture file's round: N gives it: leave it out or give the same)")
	fs.StringVar(&o.manifest, "manifest", "", "the job's --manifest")
	fs.StringVar(&o.s3Endpoint, "s3-endpoint", "", "S3 endpoint URL (default $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS)")
	fs.StringVar(&o.exclude, "exclude", "", "the job's --exclude file (exclusions renumber the samples)")
	fs.StringVar(&o.media, "media", "image", "the job's --media: image, video or audio (transforms are recomputed for images)")
	fs.Uint64Var(&o.seed, "seed", 0, "the job's --seed")
	fs.IntVar(&o.block, "block", cluster.DefaultConfig().Block, fmt.Sprintf("the job's --block (the node's default: 1, or %d for a packed dataset)", cluster.PackedBlock))
	fs.IntVar(&o.window, "mix-window", cluster.DefaultWindow, "the job's --mix-window")
	fs.IntVar(&o.batchSize, "batch-size", 32, "the job's --batch-size")
	fs.IntVar(&o.ranks, "ranks", 1, "the job's --ranks (its world size)")
	fs.IntVar(&o.epochs, "epochs", 1, "the job's --epochs")
	fs.BoolVar(&o.dropLast, "drop-last", false, "the job's --drop-last")
	fs.StringVar(&o.transform, "transform", "train", "the job's --transform: train, eval or resize")
	fs.IntVar(&o.size, "size", 224, "the job's --size")
	fs.StringVar(&o.layout, "layout", "nchw", "the job's --layout (for the pixel digest)")
	fs.StringVar(&o.dtype, "dtype", "uint8", "the job's --dtype: uint8, float16, bfloat16 or float32 (for the pixel digest: the sample as the trainer got it, normalized by the transform's normalize)")
	fs.StringVar(&o.decoder, "decoder", "turbo", "the job's --decoder (for the pixel digest)")
	fs.BoolVar(&o.lowres, "lowres", true, "the job's --lowres (for the pixel digest)")
	fs.Int64Var(&o.maxPixels, "max-pixels", decode.DefaultMaxPixels, "the job's --max-pixels")
	fs.IntVar(&o.clipFrames, "clip-frames", 16, "the job's --clip-frames (--media video)")
	fs.Float64Var(&o.clipFPS, "clip-fps", 8, "the job's --clip-fps (--media video)")
	fs.StringVar(&o.clipSampling, "clip-sampling", "uniform", "the job's --clip-sampling (--media video)")
	fs.String(config.FlagConfig, "", "read the job's flags from this YAML file, the node's --config (keys are flag names; the node's other keys are ignored); the environment (LONGSHORE_*) and the command line override it")
	loadErr := loadConfig(fs, args)
	// The question: registered after the file and the environment were
	// applied, so neither sets it (LONGSHORE_CHECKPOINT is the
	// coordinator's).
	fs.IntVar(&o.epoch, "epoch", 0, "the epoch asked about (with --key: default every epoch)")
	fs.StringVar(&o.rankName, "rank", "0", "the rank asked about (standalone: 0..ranks-1; with --checkpoint the cluster rank's name, <node>/<i>)")
	fs.StringVar(&step, "step", "", "the step asked about")
	fs.StringVar(&steps, "steps", "", "a range of steps A-B (both included)")
	fs.StringVar(&o.key, "key", "", "the reverse question: every (epoch, rank, step, slot) where this sample key appeared")
	fs.BoolVar(&o.json, "json", false, "write the answer as JSON")
	fs.BoolVar(&o.transforms, "transforms", true, "read each sample's header to give its crop box and flip, and decode it for its pixel digest (false: indices, keys and labels only, nothing read but the listing)")
	fs.StringVar(&o.checkpoint, "checkpoint", "", "a cluster job: its coordinator's --checkpoint journal (a directory, file://DIR or s3://bucket/prefix), which fixes the order, the batch size and what each rank's steps held; without a question, say what it records")

	if err := fs.Parse(args); err != nil {
		return o, errors.Join(loadErr, err)
	}
	errs := []error{loadErr}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " ")))
	}
	sizeSet := false
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "size":
			sizeSet = true
		case "block":
			o.blockSet = true
		case "mixture-round":
			o.mixtureRoundSet = true
		case "epoch":
			o.epochSet = true
		case "rank":
			o.rankSet = true
		}
	})
	// center_crop(size=S) names the output side when --size is not given,
	// as the node takes it (its decodeConfig); given both, the decoder
	// refuses a disagreement, as the node does.
	if t, err := decode.ParseTransform(o.transform); err == nil && t.CropSize != 0 && !sizeSet {
		o.size = t.CropSize
	}
	switch {
	case step != "" && steps != "":
		errs = append(errs, errors.New("--step and --steps: give one"))
	case step != "":
		r, err := parseSteps(step)
		if err == nil && r.First != r.Last {
			err = fmt.Errorf("--step %s: one step; a range is --steps", step)
		}
		o.steps, o.stepsSet = r, true
		if err != nil {
			errs = append(errs, fmt.Errorf("--step: %w", err))
		}
	case steps != "":
		r, err := parseSteps(steps)
		o.steps, o.stepsSet = r, true
		if err != nil {
			errs = append(errs, fmt.Errorf("--steps: %w", err))
		} else if r.Last-r.First+1 > maxSteps {
			errs = append(errs, fmt.Errorf("--steps %s: at most %d steps at once", steps, maxSteps))
		}
	}
	if o.checkpoint == "" {
		if r, err := strconv.Atoi(o.rankName); err == nil {
			o.rank = r
		} else {
			errs = append(errs, fmt.Errorf("--rank %q: a standalone job's rank is a number (a cluster rank's name needs --checkpoint)", o.rankName))
		}
	}
	if o.key != "" && o.stepsSet {
		errs = append(errs, errors.New("--key asks where a key appeared; --step/--steps what a step held: give one question"))
	}
	if o.checkpoint != "" && (o.key != "" || o.stepsSet) && o.dataset == "" && o.mixture == "" {
		errs = append(errs, errors.New("--dataset is required (the job's, or its --mixture: the journal names samples by index)"))
	}
	if o.checkpoint != "" && o.stepsSet && !o.rankSet {
		errs = append(errs, errors.New("--checkpoint --step: name the rank (--rank <node>/<i>)"))
	}
	if o.checkpoint == "" {
		switch {
		case o.key == "" && !o.stepsSet:
			errs = append(errs, errors.New("ask a question: --epoch E --rank R --step T (or --steps A-B), or --key K"))
		}
		switch {
		case o.dataset == "" && o.mixture == "":
			errs = append(errs, errors.New("--dataset is required (the job's, or its --mixture)"))
		}
	}
	if o.mixture != "" && o.dataset != "" {
		errs = append(errs, errors.New("--mixture is in place of --dataset: give the job's one"))
	}
	if o.mixture == "" && (o.mixtureSchedule != "" || o.mixtureRound != 0) {
		errs = append(errs, errors.New("--mixture-schedule and --mixture-round need --mixture"))
	}
	if o.mixtureRound < 0 {
		errs = append(errs, fmt.Errorf("--mixture-round %d: need at least 1 (0: --batch-size)", o.mixtureRound))
	}
	if o.epochs < 1 {
		errs = append(errs, fmt.Errorf("--epochs %d: need at least 1", o.epochs))
	}
	if o.epochSet && o.checkpoint == "" && (o.epoch < 0 || o.epoch >= o.epochs) {
		errs = append(errs, fmt.Errorf("--epoch %d: the job has epochs 0..%d (--epochs %d)", o.epoch, o.epochs-1, o.epochs))
	}
	if o.ranks < 1 {
		errs = append(errs, fmt.Errorf("--ranks %d: need at least 1", o.ranks))
	}
	if o.checkpoint == "" && (o.rank < 0 || o.rank >= o.ranks) {
		errs = append(errs, fmt.Errorf("--rank %d: the job has ranks 0..%d (--ranks %d)", o.rank, o.ranks-1, o.ranks))
	}
	if o.batchSize < 1 {
		errs = append(errs, fmt.Errorf("--batch-size %d: need at least 1", o.batchSize))
	}
	if o.block < 1 {
		errs = append(errs, fmt.Errorf("--block %d: need at least 1", o.block))
	}
	if o.window < 1 {
		errs = append(errs, fmt.Errorf("--mix-window %d: need at least 1", o.window))
	}
	return o, errors.Join(errs...)
}

// loadConfig applies the --config file (and LONGSHORE_*) as the node
// does. The file is the node's: its keys this command does not take are
// registered as ignored flags first, so that one file serves both (the
// node checks its own keys); a key naming the question (--epoch, --step,
// ...) is an error, as the question is no configuration.
func loadConfig(fs *flag.FlagSet, args []string) error {
	if path := config.Path(args, os.LookupEnv); path != "" {
		if b, err := os.ReadFile(path); err == nil {
			var m map[string]any
			if yaml.Unmarshal(b, &m) == nil {
				for k := range m {
					if fs.Lookup(k) == nil && !jobFlags[k] && !questionFlags[k] && k != config.FlagConfig && k != config.FlagPrintConfig {
						fs.String(k, "", "the node's; ignored")
					}
				}
			}
		} // an unreadable file: config.Load says so
	}
	return config.Load(fs, args, os.LookupEnv)
}
