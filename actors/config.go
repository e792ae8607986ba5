package actors

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/longshore/longshore/decode/spec"
)

// The sample spec is package spec's, defined once for the decoders and the
// pipeline; these names are the pipeline's for it.
type (
	// Layout is the memory order of a batch's pixels (spec.Layout).
	Layout = spec.Layout
	// Kind is what a sample is (spec.Kind).
	Kind = spec.Kind
	// DType is the element type of a sample's array (spec.DType).
	DType = spec.DType
	// Shape is the sample spec (spec.Shape).
	Shape = spec.Shape
)

const (
	NCHW      = spec.NCHW
	NHWC      = spec.NHWC
	KindImage = spec.KindImage
	KindVideo = spec.KindVideo
	KindAudio = spec.KindAudio
	KindRaw   = spec.KindRaw
	// RawHeader is the bytes of a raw row before its sample's (spec.PutRaw).
	RawHeader = spec.RawHeader
	Uint8     = spec.Uint8
	Float32   = spec.Float32
	Float16   = spec.Float16
	BFloat16  = spec.BFloat16
	// Channels is the channels of a pixel (RGB).
	Channels = spec.Channels
)

// Config is one rank pipeline's configuration. Every field has a unit and a
// zero-value meaning: zero means "the default" (DefaultConfig's value), so
// the zero Config is valid. Flags and config files fill it.
type Config struct {
	// BatchSize is samples per batch. 0: 32, the ImageNet ResNet/ViT per-GPU
	// batch most recipes use.
	BatchSize int
	// Slots is how many batch buffers each rank owns: the final bound on
	// memory and on how far the loader runs ahead of the trainer. 0: 4, one
	// held by the trainer, one being uploaded, two being assembled, so
	// decoders never wait for a slot while the trainer computes.
	Slots int
	// FetchConcurrency is the number of object reads in flight per rank
	// (one fetcher actor each). 0: 16, enough to hide ~20 ms S3 latency
	// at ~800 objects/s; a local disk needs fewer but is not hurt.
	FetchConcurrency int
	// FetchAuto makes FetchConcurrency the most reads in flight, not a
	// fixed number: the rank picks how many from the fetches it measures
	// (in flight = fetchHeadroom × rate × latency, Little's law; tune.go),
	// starting at 16, so a store far away gets the reads in flight it
	// needs and a local disk few.
	FetchAuto bool
	// Decoders is the number of decoder actors per rank, each with its own
	// decoder. 0: runtime.NumCPU(), decoding is CPU-bound (NewNode divides
	// this among ranks).
	Decoders int
	// DecodeQueue is the credit each decoder grants: tasks queued at a
	// decoder including the one it is decoding. 0: 2, SPDL's queue depth:
	// one decoding, one waiting, so a decoder never idles for a round trip.
	DecodeQueue int
	// FetchBytes bounds the bytes of fetched objects one rank holds: its
	// fetch buffers, in reads in flight, in samples waiting for a decoder
	// and kept for reuse. The rank keeps as many buffers in use as
	// FetchBytes holds at the mean object size it has read (at least one,
	// at most FetchConcurrency + Decoders×DecodeQueue), and frees a buffer
	// it gets back while it holds more. 0: no byte bound (the count
	// bounds them). Whatever the bound, a buffer grown past twice the
	// mean object size is freed when its sample is decoded, so the
	// buffers do not all grow to the largest object of the dataset.
	FetchBytes int64
	// ReadAhead is how many work items the rank takes from its Source
	// beyond those it is fetching (it asks for more once it holds half).
	// 0: Slots*BatchSize, so the fetchers never wait for the Source. A
	// cluster node asks for less: what a rank has taken cannot be given
	// to an idle rank when this one falls behind.
	ReadAhead int
	// ReadAheadAuto lets the read-ahead grow past ReadAhead, to cover
	// the store's slowest fetch at the rate the rank consumes: a packed
	// dataset's rank reads a chunk a round trip away when its order
	// enters a window, and the window's first work items are what
	// prefetch that chunk, so they must arrive that long before the
	// fetchers need them (readAheadFor). Items taken ahead are indices,
	// not bytes; what they prefetch stays within the store's own
	// bounds. A cluster node leaves it off: what a rank has taken
	// cannot be handed to an idle rank.
	ReadAheadAuto bool
	// StoreOutage is how long a fetch keeps trying a store that does not
	// answer (refused or timed-out connections, 5xx, after the store's
	// own retries) before the sample counts as failed: an outage is not
	// bad data and must not use up the failure budget. Answers about the
	// object (not found, access denied, invalid key) fail at once. 0: 5
	// minutes; negative: no retries beyond the store's own.
	StoreOutage time.Duration
	// DropLast drops an epoch's final short batch instead of delivering it
	// (PyTorch's drop_last). Default false: every sample is delivered.
	DropLast bool
	// ShortBatches leaves a failed sample out of its batch, which then
	// shrinks. Default false: its row is filled with a copy of another
	// sample of the batch and marked (Batch.Filled), so batches keep one
	// shape (torch.compile and cudnn.benchmark recompile or re-tune for
	// every new shape).
	ShortBatches bool
	// Seed fixes the epoch order and every random transform. 0 is a seed
	// like any other.
	Seed uint64
	// Epochs is how many epochs to run, starting at FirstEpoch. 0: 1.
	Epochs int
	// FirstEpoch is the first epoch's number (to resume at an epoch
	// boundary). Default 0.
	FirstEpoch int
	// Sample is the decoded sample spec. Zero Kind is an image. Zero
	// Height/Width (images, video): 224, the ImageNet training crop; zero
	// Layout is NCHW, what PyTorch takes. Zero Frames (video): 16, the
	// clip length of most video recognition recipes. Zero AudioChannels:
	// 1 (mono); zero AudioSamples: 16000, one second at 16 kHz, the rate
	// speech models take.
	Sample Shape
	// MaxFailures is the failure budget (a count, or a fraction of the
	// run's samples). Zero value: 1%, a few bad objects in a large dataset
	// are normal, more than 1% means the dataset or the store is broken.
	MaxFailures FailureBudget
	// MaxFailureRecords caps the per-sample failure records kept for the
	// report (counts by reason stay exact). 0: 1000; negative: keep none.
	MaxFailureRecords int
	// MaxObjectBytes is the largest object a fetch reads, in bytes; a
	// larger one fails as fetch/too_large before its body is read
	// (storage.GetLimit), so one huge object cannot take a buffer of its
	// size. 0: 256 MiB, far above any image under decode's pixel limit in
	// a sane encoding, and what (F + D x DecodeQueue) buffers may each
	// hold at worst; negative: no limit.
	MaxObjectBytes int64
	// DecodeDeadline is how long one sample's decode may take before it
	// fails as decode/timeout. The decoder stuck in it is abandoned (it
	// decodes into a buffer of its own, so it can no longer touch the
	// batch) and replaced; more than a few abandoned at once stop the
	// run. 0: 30 s, a hundred times a large photo's decode on a loaded
	// core; negative: no deadline (and no copy of each sample).
	DecodeDeadline time.Duration
}

// DefaultConfig returns the defaults, each explained on its Config field.
func DefaultConfig() Config {
	return Config{
		BatchSize:         32,
		Slots:             4,
		FetchConcurrency:  16,
		Decoders:          runtime.NumCPU(),
		DecodeQueue:       2,
		StoreOutage:       5 * time.Minute,
		Epochs:            1,
		Sample:            Shape{Height: 224, Width: 224, Layout: NCHW},
		MaxFailures:       FailureBudget{kind: budgetFraction, fraction: 0.01},
		MaxFailureRecords: 1000,
		MaxObjectBytes:    256 << 20,
		DecodeDeadline:    30 * time.Second,
	}
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.BatchSize == 0 {
		c.BatchSize = d.BatchSize
	}
	if c.Slots == 0 {
		c.Slots = d.Slots
	}
	if c.FetchConcurrency == 0 {
		c.FetchConcurrency = d.FetchConcurrency
	}
	if c.Decoders == 0 {
		c.Decoders = d.Decoders
	}
	if c.DecodeQueue == 0 {
		c.DecodeQueue = d.DecodeQueue
	}
	if c.StoreOutage == 0 {
		c.StoreOutage = d.StoreOutage
	}
	if c.ReadAhead == 0 {
		c.ReadAhead = c.Slots * c.BatchSize
	}
	if c.Epochs == 0 {
		c.Epochs = d.Epochs
	}
	if c.Sample.Kind != KindAudio {
		if c.Sample.Height == 0 {
			c.Sample.Height = d.Sample.Height
		}
		if c.Sample.Width == 0 {
			c.Sample.Width = d.Sample.Width
		}
	}
	if c.Sample.Kind == KindVideo && c.Sample.Frames == 0 {
		c.Sample.Frames = 16
	}
	if c.Sample.Kind == KindAudio {
		if c.Sample.AudioChannels == 0 {
			c.Sample.AudioChannels = 1
		}
		if c.Sample.AudioSamples == 0 {
			c.Sample.AudioSamples = 16000
		}
	}
	if c.MaxFailures.kind == budgetUnset {
		c.MaxFailures = d.MaxFailures
	}
	if c.MaxFailureRecords == 0 {
		c.MaxFailureRecords = d.MaxFailureRecords
	}
	if c.MaxObjectBytes == 0 {
		c.MaxObjectBytes = d.MaxObjectBytes
	}
	if c.DecodeDeadline == 0 {
		c.DecodeDeadline = d.DecodeDeadline
	}
	return c
}

// maxSlotBytes keeps a misconfigured batch (say 4096 samples of 4K video
// frames) from asking the OS for terabytes.
const maxSlotBytes = 16 << 30

// Validate reports every problem with c (after WithDefaults) at once.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("actors: "+format, args...)) }
	if c.BatchSize < 1 {
		bad("BatchSize %d: need at least 1", c.BatchSize)
	}
	if c.Slots < 1 {
		bad("Slots %d: need at least 1 (2 or more lets the loader work while the trainer holds a batch)", c.Slots)
	}
	if c.FetchConcurrency < 1 {
		bad("FetchConcurrency %d: need at least 1", c.FetchConcurrency)
	}
	if c.Decoders < 1 {
		bad("Decoders %d: need at least 1", c.Decoders)
	}
	if c.DecodeQueue < 1 {
		bad("DecodeQueue %d: need at least 1", c.DecodeQueue)
	}
	if c.FetchBytes < 0 {
		bad("FetchBytes %d: need 0 (no bound) or more", c.FetchBytes)
	}
	if c.ReadAhead < 1 {
		bad("ReadAhead %d: need at least 1", c.ReadAhead)
	}
	if c.Epochs < 1 {
		bad("Epochs %d: need at least 1", c.Epochs)
	}
	if c.FirstEpoch < 0 {
		bad("FirstEpoch %d: need 0 or more", c.FirstEpoch)
	}
	switch c.Sample.Kind {
	case KindImage, KindVideo:
		if c.Sample.Height < 1 || c.Sample.Width < 1 {
			bad("Sample %dx%d: need positive height and width", c.Sample.Height, c.Sample.Width)
		}
		if c.Sample.Kind == KindVideo && c.Sample.Frames < 1 {
			bad("Sample.Frames %d: need at least 1 frame per clip", c.Sample.Frames)
		}
	case KindAudio:
		if c.Sample.AudioChannels < 1 || c.Sample.AudioSamples < 1 {
			bad("Sample: %d audio channels of %d samples: need at least 1 of each", c.Sample.AudioChannels, c.Sample.AudioSamples)
		}
	case KindRaw:
		if c.Sample.RawBytes < 1 {
			bad("Sample.RawBytes %d: need at least 1 byte a raw sample", c.Sample.RawBytes)
		}
	default:
		bad("Sample.Kind %d: want image, video, audio or raw", int(c.Sample.Kind))
	}
	if c.Sample.Layout != NCHW && c.Sample.Layout != NHWC {
		bad("Sample.Layout %d: want NCHW or NHWC", int(c.Sample.Layout))
	}
	if err := c.MaxFailures.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.BatchSize >= 1 && !slices.ContainsFunc(c.Sample.SampleDims(), func(d int) bool { return d < 1 }) {
		sb := float64(c.BatchSize) * float64(c.Sample.DType().Size())
		for _, d := range c.Sample.SampleDims() {
			sb *= float64(d)
		}
		if sb > maxSlotBytes {
			what := fmt.Sprintf("%dx%d", c.Sample.Height, c.Sample.Width)
			if c.Sample.Kind != KindImage {
				what = c.Sample.String()
			}
			bad("a batch of %d samples of %s is %.0f bytes, over the %d-byte slot limit: lower BatchSize or the sample size", c.BatchSize, what, sb, int64(maxSlotBytes))
		}
	}
	return errors.Join(errs...)
}

// SlotBytes is the size of one batch slot: BatchSize decoded samples.
func (c Config) SlotBytes() int { return c.BatchSize * c.Sample.SampleBytes() }

type budgetKind uint8

const (
	budgetUnset budgetKind = iota
	budgetCount
	budgetFraction
)

// FailureBudget is how many samples may fail before a run stops: a count
// ("100"), or a fraction of the run's samples ("0.01" or "1%"). A run stops
// when failures exceed the budget: "0" tolerates none. The zero value means
// the default (1%). It implements encoding.TextUnmarshaler, so flag.TextVar
// and config files fill it.
type FailureBudget struct {
	kind     budgetKind
	count    int64
	fraction float64
}

// MaxFailureCount is a budget of n failed samples.
func MaxFailureCount(n int64) FailureBudget { return FailureBudget{kind: budgetCount, count: n} }

// MaxFailureFraction is a budget of fraction f (in [0, 1]) of the run's
// samples.
func MaxFailureFraction(f float64) FailureBudget {
	return FailureBudget{kind: budgetFraction, fraction: f}
}

// ParseFailureBudget reads "100" (a count), "0.01" (a fraction: any number
// with a point or an exponent) or "1%" (a percentage).
func ParseFailureBudget(s string) (FailureBudget, error) {
	var b FailureBudget
	err := b.UnmarshalText([]byte(s))
	return b, err
}

// UnmarshalText implements encoding.TextUnmarshaler; see ParseFailureBudget.
func (b *FailureBudget) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	fail := func(why string) error {
		return fmt.Errorf("actors: failure budget %q: %s (want a count like 100, a fraction like 0.01, or a percentage like 1%%)", s, why)
	}
	if s == "" {
		return fail("empty")
	}
	if p, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil {
			return fail("not a number")
		}
		nb := MaxFailureFraction(f / 100)
		if err := nb.validate(); err != nil {
			return fail("percentage outside [0%, 100%]")
		}
		*b = nb
		return nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return fail("negative count")
		}
		*b = MaxFailureCount(n)
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fail("not a number")
	}
	nb := MaxFailureFraction(f)
	if err := nb.validate(); err != nil {
		return fail("fraction outside [0, 1]")
	}
	*b = nb
	return nil
}

// MarshalText writes the budget the way UnmarshalText reads it.
func (b FailureBudget) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

func (b FailureBudget) String() string {
	switch b.kind {
	case budgetCount:
		return strconv.FormatInt(b.count, 10)
	case budgetFraction:
		return strconv.FormatFloat(b.fraction*100, 'g', -1, 64) + "%"
	}
	return "default"
}

func (b FailureBudget) validate() error {
	switch b.kind {
	case budgetCount:
		if b.count < 0 {
			return fmt.Errorf("actors: MaxFailures count %d: need 0 or more", b.count)
		}
	case budgetFraction:
		if math.IsNaN(b.fraction) || b.fraction < 0 || b.fraction > 1 {
			return fmt.Errorf("actors: MaxFailures fraction %v: need a value in [0, 1]", b.fraction)
		}
	}
	return nil
}

// Allowed is how many failures the budget allows. total is the number of
// samples the run will attempt when known (> 0), else attempted so far is
// used: a fraction budget then judges the rate seen so far, over at least
// fractionWarmup failures' worth of samples (10/fraction), so that the
// first few failures (one bad shard's samples, fetched together at a
// node's start) cannot breach a budget before there are samples enough
// to judge a rate by.
func (b FailureBudget) Allowed(attempted, total int64) int64 {
	switch b.kind {
	case budgetCount:
		return b.count
	case budgetFraction:
		base := total
		if base <= 0 {
			base = attempted
			if b.fraction > 0 {
				base = max(base, int64(math.Ceil(fractionWarmup/b.fraction)))
			}
		}
		return int64(math.Floor(b.fraction * float64(base)))
	}
	return math.MaxInt64
}

// fractionWarmup is how many failures a fraction budget allows, at
// least, while the run's total is unknown (cluster mode): see Allowed.
const fractionWarmup = 10
