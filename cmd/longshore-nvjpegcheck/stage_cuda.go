//go:build cuda && cgo

package main

import (
	"context"
	"sync"
	"time"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/nvdecode"
	"github.com/longshore/longshore/decode"
)

// StagePath is the batch decode stage's pass (actors/nvdecode's Node, as
// --decode-device cuda runs it under the pipeline): decoders probe and
// route each image into its batch row (the CPU-routed ones decoded
// there), the stage hands each whole batch to the device (engine calls
// of up to 64, two in flight, crop, resize and flip on the device, the
// samples copied out in one transfer a call), the next batch's rows
// decoded meanwhile (three slots, as the node's). Timed over every
// image; then epoch 0's samples against the CPU path's, untimed.
type StagePath struct {
	Pass      Pass           `json:"pass"`
	Stats     nvdecode.Stats `json:"stats"`
	BatchSize int            `json:"batch_size"`
	// Compared, WorstMean, MeanMean, ShareOver8, MaxDiff and
	// WithinTolerance: as NodePath's, against the CPU path as the node
	// runs it (Lowres: 1/2-1/8-scale decodes where the crop allows).
	Compared        int     `json:"compared"`
	WorstMean       float64 `json:"worst_image_mean"`
	MeanMean        float64 `json:"mean_image_mean"`
	ShareOver8      float64 `json:"share_over_8"`
	MaxDiff         int     `json:"max_diff"`
	WithinTolerance bool    `json:"within_tolerance"`
	// The same against the CPU path without Lowres (whole decodes, as
	// the device's): what the device resize itself adds.
	WorstMeanWhole       float64 `json:"worst_image_mean_whole"`
	ShareOver8Whole      float64 `json:"share_over_8_whole"`
	WithinToleranceWhole bool    `json:"within_tolerance_whole"`
}

type stageSlot struct {
	b    *actors.Batch
	n    int
	base int64 // the batch's first image index (over epochs)
}

func stagePath(ordinal int, src []byte, imgs []image, epochs, workers, batchSize int, cpu Pass) (*StagePath, error) {
	dev, err := nvdecode.NewDevice(nvdecode.CUDAEngine(ordinal), nvdecode.DefaultBatch, 0)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	cfg := decode.DefaultConfig()
	const slots = 3
	node, err := nvdecode.NewNode(cfg, []*nvdecode.Device{dev}, 4*slots*batchSize+4*workers)
	if err != nil {
		return nil, err
	}
	stage, err := node.Stages()(0, cfg.Spec())
	if err != nil {
		return nil, err
	}
	defer stage.Close()
	decs := make([]actors.SampleDecoder, workers)
	for i := range decs {
		if decs[i], err = node.Decoders()(); err != nil {
			return nil, err
		}
		defer decs[i].Close()
	}
	sb := cfg.SampleBytes()
	sample := func(i int64) ([]byte, uint64) {
		epoch, idx := int(i)/len(imgs), int(i%int64(len(imgs)))
		im := imgs[idx]
		return src[im.off : im.off+im.len], decode.SampleSeed(1, epoch, int64(idx))
	}
	// fill decodes rows [0, s.n) of s's batch on the workers.
	fill := func(s *stageSlot, t *tally) {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := w; j < s.n; j += workers {
					data, seed := sample(s.base + int64(j))
					if err := decs[w].Decode(data, seed, s.b.Images[j*sb:(j+1)*sb]); err != nil {
						t.fail(1, err)
						s.b.Images[j*sb] = 0 // not a marker: the stage leaves the row
					}
				}
			}()
		}
		wg.Wait()
	}
	newSlots := func() chan *stageSlot {
		free := make(chan *stageSlot, slots)
		for range slots {
			free <- &stageSlot{b: &actors.Batch{Images: make([]byte, batchSize*sb), Spec: cfg.Spec(),
				Labels: make([]int32, batchSize), Keys: make([]string, batchSize)}}
		}
		return free
	}
	// run pushes images [0, total) through fill and the stage, the stage
	// on its own goroutine a batch behind; check sees each processed
	// batch before its slot is reused.
	run := func(total int64, t *tally, check func(s *stageSlot)) error {
		free := newSlots()
		full := make(chan *stageSlot, slots)
		errc := make(chan error, 1)
		go func() {
			var first error
			for s := range full {
				if first == nil {
					s.b.Images = s.b.Images[:s.n*sb]
					if err := stage.Process(context.Background(), s.b); err != nil {
						first = err
					} else {
						t.ok(int64(s.n), 0)
						if check != nil {
							check(s)
						}
					}
					s.b.Images = s.b.Images[:cap(s.b.Images)]
				}
				free <- s
			}
			errc <- first
		}()
		for base := int64(0); base < total; base += int64(batchSize) {
			s := <-free
			s.base, s.n = base, int(min(int64(batchSize), total-base))
			s.b.Keys = s.b.Keys[:cap(s.b.Keys)][:s.n]
			s.b.Labels = s.b.Labels[:cap(s.b.Labels)][:s.n]
			for j := range s.n {
				s.b.Keys[j] = imgs[(s.base+int64(j))%int64(len(imgs))].name
			}
			fill(s, t)
			full <- s
		}
		close(full)
		return <-errc
	}

	sp := &StagePath{BatchSize: batchSize}
	p := Pass{Name: "stage-gpu", Threads: workers}
	var t tally
	start, cpu0 := time.Now(), cpuTime()
	if err := run(int64(len(imgs)*epochs), &t, nil); err != nil {
		return nil, err
	}
	p.Images, p.Failed = int(t.done.Load()), int(t.failed.Load())
	if e, ok := t.firstErr.Load().(string); ok {
		p.FirstError = e
	}
	finish(&p, start, cpu0, 0)
	if cpu.PerCore > 0 && p.PerCore > 0 {
		p.PerCoreVsCPU = p.PerCore / cpu.PerCore
	}
	sp.Pass = p
	sp.Stats = dev.Stats()

	// Pixels: epoch 0 against the CPU path, with and without Lowres,
	// each batch's rows spread over the workers.
	whole := cfg
	whole.Lowres = false
	type refs struct {
		lowres, whole *decode.Decoder
		want          []byte
	}
	rs := make([]refs, workers)
	for w := range rs {
		if rs[w].lowres, err = decode.NewDecoder(cfg); err != nil {
			return nil, err
		}
		defer rs[w].lowres.Close()
		if rs[w].whole, err = decode.NewDecoder(whole); err != nil {
			return nil, err
		}
		defer rs[w].whole.Close()
		rs[w].want = make([]byte, sb)
	}
	var mu sync.Mutex
	var sumMean, over8, over8Whole, values float64
	var tt tally
	err = run(int64(len(imgs)), &tt, func(s *stageSlot) {
		var wg sync.WaitGroup
		for w := range rs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := &rs[w]
				for j := w; j < s.n; j += len(rs) {
					data, seed := sample(s.base + int64(j))
					got := s.b.Images[j*sb : (j+1)*sb]
					if _, err := r.lowres.Decode(data, seed, r.want); err != nil {
						continue
					}
					mean, o8, mx := diff(got, r.want)
					meanW, o8W := -1.0, 0
					if _, err := r.whole.Decode(data, seed, r.want); err == nil {
						meanW, o8W, _ = diff(got, r.want)
					}
					mu.Lock()
					sp.Compared++
					sumMean += mean
					sp.WorstMean = max(sp.WorstMean, mean)
					sp.MaxDiff = max(sp.MaxDiff, mx)
					over8 += float64(o8)
					values += float64(sb)
					sp.WorstMeanWhole = max(sp.WorstMeanWhole, meanW)
					over8Whole += float64(o8W)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	})
	if err != nil {
		return nil, err
	}
	if sp.Compared > 0 {
		sp.MeanMean = sumMean / float64(sp.Compared)
		sp.ShareOver8 = over8 / values
		sp.ShareOver8Whole = over8Whole / values
	}
	sp.WithinTolerance = sp.Compared > 0 && sp.WorstMean <= 1.0 && sp.ShareOver8 <= 0.001
	sp.WithinToleranceWhole = sp.Compared > 0 && sp.WorstMeanWhole <= 1.0 && sp.ShareOver8Whole <= 0.001
	return sp, nil
}

// diff is the mean absolute difference of a and b, the values off by
// more than 8 and the largest difference.
func diff(a, b []byte) (mean float64, over8, maxDiff int) {
	var sum int
	for k := range a {
		d := int(a[k]) - int(b[k])
		if d < 0 {
			d = -d
		}
		sum += d
		if d > 8 {
			over8++
		}
		maxDiff = max(maxDiff, d)
	}
	return float64(sum) / float64(len(a)), over8, maxDiff
}
