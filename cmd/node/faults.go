package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/quarantine"
	"github.com/longshore/longshore/dataset"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/s3"
)

// faultFlags are the flags for a misbehaving object store and hostile
// data: the store's request budget and checks, the per-object and
// per-decode limits, and the quarantine list.
type faultFlags struct {
	maxRequestRate  float64
	adaptiveRate    bool
	verifyChecksums bool
	requestTimeout  time.Duration
	progressTimeout time.Duration
	hedgeQuantile   float64
	hedgeBudget     float64
	maxObjectBytes  byteSize
	decodeDeadline  time.Duration
	quarantine      string
	exclude         string
	// excludeKeys, if set, is --exclude as read already: a mixture
	// source's share of it (mixture.go), in place of the file.
	excludeKeys dataset.Exclusions
}

func (f *faultFlags) register(fs *flag.FlagSet) {
	so := s3.DefaultOptions()
	ac := actors.DefaultConfig()
	fs.Float64Var(&f.maxRequestRate, "max-request-rate", 0, "S3: this node's budget of requests per second, retries included (0: none)")
	fs.Float64Var(&f.maxRequestRate, "store-rps", 0, "S3: the same budget as --max-request-rate, by the name the scale docs use (the last one given wins)")
	fs.BoolVar(&f.adaptiveRate, "adaptive-rate", so.AdaptiveRate, "S3: halve the request rate when the store throttles (503 SlowDown, 429) and grow it back while it does not (AIMD, under --max-request-rate)")
	fs.BoolVar(&f.verifyChecksums, "verify-checksums", so.VerifyChecksums, "S3: check each object read whole against its ETag when that is an MD5 (single-part, no SSE-KMS/SSE-C) and retry a mismatch; ranged reads (packed chunks) are checked by length and Content-Range")
	fs.DurationVar(&f.requestTimeout, "request-timeout", so.RequestTimeout, "S3: one request's limit from sending to the last byte, plus a second per MiB of body; a slower one is retried on a fresh connection (0: none)")
	fs.DurationVar(&f.progressTimeout, "progress-timeout", so.ProgressTimeout, "S3: a response body that delivers no byte for this long is abandoned and read again on a fresh request, however much of --request-timeout is left (0: none)")
	fs.Float64Var(&f.hedgeQuantile, "hedge-quantile", so.HedgeQuantile, "S3: send a second GET for one still unanswered after this quantile of recent GETs' latencies (0.95: the p95 so far, after 20 GETs); the first good answer wins, the other is cancelled (0: no hedging)")
	fs.Float64Var(&f.hedgeBudget, "hedge-budget", s3.DefaultHedgeBudget, "S3: with --hedge-quantile, at most this share of GETs is hedged, and none while the store throttles")
	f.maxObjectBytes = byteSize(ac.MaxObjectBytes)
	fs.Var(&f.maxObjectBytes, "max-object-bytes", "refuse objects larger than this, like 256MiB, before reading them: the sample fails as fetch/too_large (0: no limit)")
	fs.DurationVar(&f.decodeDeadline, "decode-deadline", ac.DecodeDeadline, "a sample's decode that takes longer fails as decode/timeout and its decoder is replaced (0: none)")
	fs.StringVar(&f.quarantine, "quarantine", "", "append the keys of samples that fail for their data (not found, access denied, too large, corrupt, unsupported, decode timeout) to this file, one JSON line each with the reason; feed it back with --exclude")
	fs.StringVar(&f.exclude, "exclude", "", "leave out the samples this file lists (a --quarantine file, or one key a line): they are in no epoch. In a cluster, give the coordinator the same file (the dataset's digest covers what is left)")
}

func (f *faultFlags) validate() []error {
	var errs []error
	if f.maxRequestRate < 0 {
		errs = append(errs, fmt.Errorf("--max-request-rate (--store-rps) %v: need 0 (no budget) or more", f.maxRequestRate))
	}
	if f.requestTimeout < 0 {
		errs = append(errs, fmt.Errorf("--request-timeout %v: need 0 (none) or more", f.requestTimeout))
	}
	if f.progressTimeout < 0 {
		errs = append(errs, fmt.Errorf("--progress-timeout %v: need 0 (none) or more", f.progressTimeout))
	}
	if !(f.hedgeQuantile >= 0 && f.hedgeQuantile < 1) || !(f.hedgeBudget > 0 && f.hedgeBudget <= 1) {
		errs = append(errs, fmt.Errorf("--hedge-quantile %v, --hedge-budget %v: want a quantile in [0, 1) (0: off) and a share in (0, 1]", f.hedgeQuantile, f.hedgeBudget))
	}
	if f.maxObjectBytes < 0 {
		errs = append(errs, fmt.Errorf("--max-object-bytes %v: need 0 (no limit) or more", f.maxObjectBytes))
	}
	if f.decodeDeadline < 0 {
		errs = append(errs, fmt.Errorf("--decode-deadline %v: need 0 (none) or more", f.decodeDeadline))
	}
	return errs
}

func (f *faultFlags) s3Options(o *s3.Options) {
	o.MaxRequestRate = f.maxRequestRate
	o.AdaptiveRate = f.adaptiveRate
	o.VerifyChecksums = f.verifyChecksums
	o.RequestTimeout = f.requestTimeout
	o.ProgressTimeout = f.progressTimeout
	o.HedgeQuantile = f.hedgeQuantile
	o.HedgeBudget = f.hedgeBudget
}

func (f *faultFlags) actorsConfig(c *actors.Config) {
	c.MaxObjectBytes = int64(f.maxObjectBytes)
	if f.maxObjectBytes == 0 {
		c.MaxObjectBytes = -1
	}
	c.DecodeDeadline = f.decodeDeadline
	if f.decodeDeadline == 0 {
		c.DecodeDeadline = -1
	}
}

// exclusions reads --exclude.
func (f *faultFlags) exclusions() (dataset.Exclusions, error) {
	if f.excludeKeys != nil {
		return f.excludeKeys, nil
	}
	if f.exclude == "" {
		return nil, nil
	}
	file, err := os.Open(f.exclude)
	if err != nil {
		return nil, fmt.Errorf("--exclude: %w", err)
	}
	defer file.Close()
	ex, err := dataset.ReadExclusions(file)
	if err != nil {
		return nil, fmt.Errorf("--exclude %s: %w", f.exclude, err)
	}
	return ex, nil
}

// tellQuarantine says on w how to use what this run added to the
// --quarantine file q (nil: none), if anything.
func tellQuarantine(w io.Writer, q *quarantine.File) {
	if n := q.Added(); n > 0 {
		fmt.Fprintf(w, "longshore-node: %d failed samples added to %s: pass --exclude %s to leave them out of later runs\n", n, q.Path(), q.Path())
	}
}

// s3Stats returns the S3 client's counters under store (a PackedStore's
// and a CountingStore's inner one; a mixture's S3 sources' summed), or
// nil when the dataset is not on S3.
func s3Stats(store storage.Store) *s3.Stats {
	stats := s3StatsOf(store)
	if stats == nil {
		return nil
	}
	st := stats()
	return &st
}
