package actors

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/longshore/longshore/actors/actorstest"
	"github.com/longshore/longshore/gpu"
)

// burnDecoder spends a fixed amount of CPU a sample (rounds of FNV over
// the object), as a JPEG decode does, then writes the sample. It yields
// its P between rounds, as a decode in C does (the runtime hands a
// goroutine's P on while it is in a cgo call): a pure-Go loop holding
// both Ps of a 2-core host starves the rank actor until preemption, and
// 2 decoders ran at half the rate of 1.
type burnDecoder struct{ rounds int }

func (d burnDecoder) Decode(data []byte, seed uint64, dst []byte) error {
	h := fnv.New64a()
	for range d.rounds {
		h.Write(data)
		runtime.Gosched()
	}
	v := h.Sum64()
	for i := range dst {
		dst[i] = byte(v >> (8 * (i % 8)))
	}
	return nil
}

func (burnDecoder) Close() error { return nil }

// benchRun runs a one-rank node of cfg for d as fast as a null sink
// takes batches, with the tuner if tune, and returns the samples/s over
// the last measure of it, and when (from the start) the rate over a
// window of measure first reached target (0: never; target 0: not
// looked for).
func benchRun(b *testing.B, cfg Config, rounds int, tune bool, d, measure time.Duration, target float64) (rate float64, reached time.Duration, at *AutoTuner) {
	st, ds := makeDataset(b, 2048, 4, 4096)
	deps := Deps{Store: st, NewDecoder: func() (SampleDecoder, error) { return burnDecoder{rounds}, nil },
		Allocator: gpu.HeapAllocator{}, SampleSeed: actorstest.SampleSeed, Order: testOrder}
	n, err := NewNode(cfg, ds, 1, deps)
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if tune {
		tc := AutoTuneConfig{Window: 500 * time.Millisecond}
		if os.Getenv("LONGSHORE_TUNE_LOG") != "" {
			tc.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
		}
		at = n.AutoTune(tc)
		go at.Run(ctx)
	}
	start := time.Now()
	type mark struct {
		at time.Duration
		n  int64
	}
	var marks []mark
	var got int64
	p := n.Rank(0)
	for {
		bt, err := p.Next(ctx)
		if err != nil {
			break
		}
		got += int64(bt.Len())
		bt.Release()
		now := time.Since(start)
		marks = append(marks, mark{now, got})
		if target > 0 && reached == 0 {
			for i := len(marks) - 1; i >= 0; i-- {
				if now-marks[i].at >= measure {
					if float64(got-marks[i].n)/(now-marks[i].at).Seconds() >= target {
						reached = now
					}
					break
				}
			}
		}
	}
	end := marks[len(marks)-1]
	for i := len(marks) - 1; i >= 0; i-- {
		if end.at-marks[i].at >= measure {
			return float64(end.n-marks[i].n) / (end.at - marks[i].at).Seconds(), reached, at
		}
	}
	return 0, reached, at
}

// BenchmarkAutoTune starts a node at a bad setting (1 decoder, decoders
// that spend CPU on every sample, a consumer that takes batches as fast
// as they come) with the tuner on, and compares the rate it reaches with
// the best hand-tuned decoder count, searched one by one, side by side:
//
//	go test -run '^$' -bench AutoTune -benchtime 1x ./actors/
//
// LONGSHORE_TUNE_SECONDS sets the tuned run's length (default 30);
// LONGSHORE_TUNE_LOG=1 logs the tuner's changes.
func BenchmarkAutoTune(b *testing.B) {
	secs := 30
	if s, err := strconv.Atoi(os.Getenv("LONGSHORE_TUNE_SECONDS")); err == nil && s > 0 {
		secs = s
	}
	cfg := Config{BatchSize: 32, Slots: 4, FetchConcurrency: 16, DecodeQueue: 2, DecodeDeadline: -1,
		Sample: Shape{Height: 16, Width: 16}, Epochs: 1000, MaxFailures: MaxFailureCount(0)}
	const rounds = 200 // about 1 ms of CPU a sample (4 KB objects)
	for range b.N {
		bestD, best := 0, 0.0
		hand := ""
		for d := 1; d <= runtime.NumCPU(); d++ {
			c := cfg
			c.Decoders = d
			r, _, _ := benchRun(b, c, rounds, false, 4*time.Second, 2*time.Second, 0)
			hand += fmt.Sprintf(" %d:%.0f", d, r)
			if r > best {
				bestD, best = d, r
			}
		}
		c := cfg
		c.Decoders = 1
		tuned, reached, at := benchRun(b, c, rounds, true, time.Duration(secs)*time.Second, 5*time.Second, 0.95*best)
		st := at.Stats()
		// The best again, right after: a shared host's speed drifts.
		c.Decoders = bestD
		again, _, _ := benchRun(b, c, rounds, false, 4*time.Second, 2*time.Second, 0)
		ref := (best + again) / 2
		fmt.Printf("autotune: host %d cores; hand-tuned samples/s by decoders:%s; best %d decoders %.0f/s, %.0f/s again after the tuned run\n", runtime.NumCPU(), hand, bestD, best, again)
		fmt.Printf("autotune: from 1 decoder, tuned %.0f/s over the last 5 s of %d s (%.2fx the best's mean), at %s (%d changes, %d put back); 0.95x of the first best reached after %.1f s\n",
			tuned, secs, tuned/ref, st.Setting, st.Changes["fetchers"]+st.Changes["decoders"]+st.Changes["slots"], st.Reverts, reached.Seconds())
		b.ReportMetric(tuned/ref, "x-best")
		b.ReportMetric(reached.Seconds(), "s-to-0.95x")
	}
}
