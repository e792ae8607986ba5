package nvdecode

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/ffdecode"
	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/gpu/nvjpeg"
)

// The batch decode stage (--decode-device cuda as an actors.BatchStage):
//
//   - The decoder actors (BatchDecoder) probe each sample and route it.
//     A CPU-routed one is decoded into its row as on the CPU path,
//     counted by reason. A GPU-routed one is left compressed: its bytes
//     are copied into the node's Pending table under a fresh handle, and
//     the row gets a marker (a magic, the handle and its check) in place
//     of pixels. The marker travels with the row wherever the pipeline
//     copies it (a decode deadline's scratch, a filled or compacted row).
//   - The stage (Stage.Process) is handed the assembled batch, finds the
//     marked rows, and hands the Device the whole batch's jobs at once.
//     The device's engine thread cuts the hardware jobs into the engine's
//     batches (up to Batch, 64) and keeps two in flight on two streams:
//     submit (decode, crop, resize and flip into the rows on the device,
//     the rows copied out in one transfer per batch), submit the next on
//     the other stream, then wait for the first. Progressive JPEGs go to
//     the hybrid threads meanwhile. A failed engine batch is retried
//     image by image on the hybrid backend; an image the device fails on
//     is decoded by the CPU path into its row, counted as gpu_error.
//   - Process returns only when every stream it used has been waited on:
//     no device work writes into the slot after it (slot lifetime), and a
//     stream's buffers are reused only after its wait (stream order).
//
// The device side is an Engine (CUDA's in a `cuda` build,
// backend_cuda.go; the Twin here, which decodes with the CPU decoder and
// resizes with ResizePlan.Resize, checks the order of calls), so the
// batching, the streams, the slot lifetimes and the fallbacks are tested
// on a CPU.

// Job is one image for the device: its compressed bytes, its size and
// route, the resize into its sample, and the sample's row (host memory;
// the device writes 3·Size² bytes there).
type Job struct {
	Data []byte
	W, H int
	Path nvjpeg.Path
	Plan ResizePlan
	Row  []byte
}

// Engine is a device's decoders and resize, used by one goroutine (the
// Device's engine thread, locked to its OS thread; a hybrid thread has an
// Engine of its own and calls DecodeOne only).
type Engine interface {
	// Hardware says whether the JPEG engine is there, and why not.
	Hardware() (bool, string)
	// Submit enqueues on stream s (0 or 1) the batched decode of jobs
	// (all PathHardware, at most the Device's Batch), each job's resize
	// into its sample and the samples' copy into their rows, and returns
	// without waiting. The caller waits for s before submitting on it
	// again and before the rows are read.
	Submit(s int, jobs []*Job) error
	// Wait blocks until the work submitted on s is done, and reports
	// its error (the whole submission failed).
	Wait(s int) error
	// DecodeOne decodes, resizes and copies out one job on the hybrid
	// backend, synchronously.
	DecodeOne(job *Job) error
	Close() error
}

// Streams is how many engine batches a Device keeps in flight.
const Streams = 2

// marker: the first markerLen bytes of a row whose sample waits for the
// stage: magic, handle, handle ^ check.
const (
	markerLen   = 24
	markerMagic = 0x6e76_6a70_6567_3338 // "nvjpeg38"
	markerCheck = 0x9e37_79b9_7f4a_7c15
)

func putMarker(dst []byte, h uint64) {
	binary.LittleEndian.PutUint64(dst, markerMagic)
	binary.LittleEndian.PutUint64(dst[8:], h)
	binary.LittleEndian.PutUint64(dst[16:], h^markerCheck)
}

func readMarker(row []byte) (uint64, bool) {
	if len(row) < markerLen || binary.LittleEndian.Uint64(row) != markerMagic {
		return 0, false
	}
	h := binary.LittleEndian.Uint64(row[8:])
	return h, binary.LittleEndian.Uint64(row[16:]) == h^markerCheck
}

// pendingSample is a GPU-routed sample waiting for the stage.
type pendingSample struct {
	data []byte
	seed uint64
	w, h int
	path nvjpeg.Path
}

// Pending holds the compressed samples the decoders left for the stage,
// by handle. A handle is taken by the stage that delivers its batch; a
// sample whose batch never reaches a stage (a decode abandoned past its
// deadline, a batch dropped) is evicted once Limit newer ones exist
// (oldest first), so the table stays bounded.
type Pending struct {
	mu    sync.Mutex
	next  uint64
	m     map[uint64]pendingSample
	order []uint64 // handles in the order they were put (with taken ones)
	limit int
}

// NewPending makes a table holding at most limit samples (at least the
// samples of every slot of every rank, plus the decoders').
func NewPending(limit int) *Pending {
	return &Pending{m: map[uint64]pendingSample{}, limit: max(limit, 1), next: 1}
}

func (p *Pending) put(s pendingSample) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.next
	p.next++
	p.m[h] = s
	p.order = append(p.order, h)
	for len(p.m) > p.limit {
		delete(p.m, p.order[0])
		p.order = p.order[1:]
	}
	if len(p.order) > 2*p.limit+64 { // drop taken handles from the queue
		live := p.order[:0]
		for _, o := range p.order {
			if _, ok := p.m[o]; ok {
				live = append(live, o)
			}
		}
		p.order = live
	}
	return h
}

func (p *Pending) get(h uint64) (pendingSample, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.m[h]
	return s, ok
}

func (p *Pending) drop(hs []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range hs {
		delete(p.m, h)
	}
}

// Len is the number of samples held.
func (p *Pending) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}

// deviceBatch is one Process's jobs for the engine thread.
type deviceBatch struct {
	jobs []*Job
	errs []error // by job: nil, or the device's failure (the CPU path decodes it)
	done chan struct{}
}

// Device is one GPU's decode stage side: an engine thread that feeds the
// JPEG engine whole batches, two in flight, and hybrid threads.
type Device struct {
	threads
	batches chan *deviceBatch
	hq      chan hybridReq
	batch   int

	hardware, hybrid, cpu, calls, retried atomic.Int64
	mu                                    sync.Mutex
	reasons                               map[string]int64
	maxBatch, maxInFlight                 int
}

type hybridReq struct {
	job  *Job
	done chan error
}

// NewDevice starts a device's threads, each locked to its OS thread with
// an Engine newEngine made there (engine: the JPEG engine's thread);
// batch bounds an engine call (0: DefaultBatch), hybrid is the hybrid
// threads (0: DefaultHybrid).
func NewDevice(newEngine func(engine bool) (Engine, error), batch, hybrid int) (*Device, error) {
	if batch <= 0 {
		batch = DefaultBatch
	}
	if hybrid <= 0 {
		hybrid = DefaultHybrid
	}
	d := &Device{threads: newThreads(), batches: make(chan *deviceBatch), hq: make(chan hybridReq),
		batch: batch, reasons: map[string]int64{}}
	if err := startThreads(&d.threads, newEngine, hybrid, d.runEngine, d.runHybrid); err != nil {
		return nil, err
	}
	return d, nil
}

// runEngine is the JPEG engine's thread: it serves each Process's batch.
func (d *Device) runEngine(e Engine) {
	for {
		select {
		case b := <-d.batches:
			d.serve(e, b)
			close(b.done)
		case <-d.stop:
			d.closed(e)
			return
		}
	}
}

func (d *Device) runHybrid(e Engine) {
	for {
		select {
		case r := <-d.hq:
			r.done <- e.DecodeOne(r.job)
		case <-d.stop:
			d.closed(e)
			return
		}
	}
}

// serve runs one Process's hardware jobs on the engine: cut into calls
// of at most d.batch, call k on stream k % Streams, at most Streams in
// flight; a stream is waited on before it is used again, and every
// stream used is waited on before serve returns. A failed call's jobs
// are retried alone on the hybrid threads.
func (d *Device) serve(e Engine, b *deviceBatch) {
	type call struct {
		lo, hi int
		err    error
	}
	var inFlight [Streams]*call
	busy := 0
	var failed []*call
	finish := func(s int) {
		c := inFlight[s]
		if c == nil {
			return
		}
		inFlight[s] = nil
		busy--
		if c.err == nil {
			c.err = e.Wait(s)
		}
		if c.err != nil {
			failed = append(failed, c)
		}
	}
	k := 0
	for lo := 0; lo < len(b.jobs); lo += d.batch {
		hi := min(lo+d.batch, len(b.jobs))
		s := k % Streams
		k++
		finish(s) // its buffers are free once its last call is done
		c := &call{lo: lo, hi: hi}
		d.calls.Add(1)
		d.mu.Lock()
		d.maxBatch = max(d.maxBatch, hi-lo)
		d.mu.Unlock()
		c.err = e.Submit(s, b.jobs[lo:hi])
		inFlight[s] = c
		busy++
		d.mu.Lock()
		d.maxInFlight = max(d.maxInFlight, busy)
		d.mu.Unlock()
	}
	for s := range Streams {
		finish(s)
	}
	for _, c := range failed {
		for i := c.lo; i < c.hi; i++ {
			d.retried.Add(1)
			b.jobs[i].Path = nvjpeg.PathHybrid
			b.errs[i] = d.decodeHybrid(b.jobs[i])
		}
	}
}

func (d *Device) decodeHybrid(j *Job) error {
	r := hybridReq{job: j, done: make(chan error, 1)}
	select {
	case d.hq <- r:
	case <-d.stop:
		return ErrClosed
	}
	return <-r.done
}

// Caps is what the device takes (Route's input).
func (d *Device) Caps() nvjpeg.Caps { return d.caps }

// Stats returns the counts so far (Batches: engine calls).
func (d *Device) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := Stats{Hardware: d.hardware.Load(), Hybrid: d.hybrid.Load(), CPU: d.cpu.Load(), Batches: d.calls.Load(),
		Retried: d.retried.Load(), MaxBatch: d.maxBatch, MaxInFlight: d.maxInFlight, NoHardware: d.noHardware}
	if len(d.reasons) > 0 {
		st.Reasons = make(map[string]int64, len(d.reasons))
		for k, v := range d.reasons {
			st.Reasons[k] = v
		}
	}
	return st
}

func (d *Device) countCPU(reason string) {
	d.cpu.Add(1)
	d.mu.Lock()
	d.reasons[reason]++
	d.mu.Unlock()
}

// Close stops the device's threads and closes their engines.
func (d *Device) Close() error { return d.close() }

// run hands a Process's jobs to the device: the hardware ones to the
// engine thread as one batch, the hybrid ones to the hybrid threads at
// the same time; it returns when all are done, with each job's error.
func (d *Device) run(ctx context.Context, jobs []*Job) ([]error, error) {
	errs := make([]error, len(jobs))
	var hw []*Job
	var hwAt []int
	var hy []chan error
	var hyAt []int
	for i, j := range jobs {
		if j.Path == nvjpeg.PathHardware && d.caps.Hardware {
			hw = append(hw, j)
			hwAt = append(hwAt, i)
			continue
		}
		j.Path = nvjpeg.PathHybrid
		done := make(chan error, 1)
		hy = append(hy, done)
		hyAt = append(hyAt, i)
		go func() { done <- d.decodeHybrid(j) }()
	}
	var b *deviceBatch
	if len(hw) > 0 {
		b = &deviceBatch{jobs: hw, errs: make([]error, len(hw)), done: make(chan struct{})}
		select {
		case d.batches <- b:
		case <-d.stop:
			b = nil
			for _, i := range hwAt {
				errs[i] = ErrClosed
			}
		}
	}
	// Every call handed over is waited for whatever ctx says: the device
	// writes into the rows until it is done.
	for k, done := range hy {
		errs[hyAt[k]] = <-done
	}
	if b != nil {
		<-b.done
		for k, i := range hwAt {
			errs[i] = b.errs[k]
		}
	}
	return errs, ctx.Err()
}

// Node is what --decode-device cuda gives the pipeline on a GPU: the
// decoders' factory and the batch stage's, over one Device per GPU and
// one Pending table.
type Node struct {
	dc      decode.Config
	devices []*Device
	pending *Pending
	next    atomic.Int64
}

// NewNode makes the factories over devices (decoder i of the node and
// rank r's stage use devices[i % n] and devices[r % n]); pending bounds
// the compressed samples waiting (NewPending).
func NewNode(dc decode.Config, devices []*Device, pending int) (*Node, error) {
	if len(devices) == 0 {
		return nil, errors.New("nvdecode: no device")
	}
	if len(dc.Transform.Pixel) > 0 {
		return nil, fmt.Errorf("nvdecode: the batch stage resizes on the device and applies no pixel ops (%d in the transform)", len(dc.Transform.Pixel))
	}
	return &Node{dc: dc, devices: devices, pending: NewPending(pending)}, nil
}

// Pending is the node's table of compressed samples.
func (n *Node) Pending() *Pending { return n.pending }

// Decoders is actors.Deps.NewDecoder.
func (n *Node) Decoders() actors.DecoderFactory {
	return func() (actors.SampleDecoder, error) {
		cpu, err := decode.NewDecoder(n.dc)
		if err != nil {
			return nil, err
		}
		dev := n.devices[int(n.next.Add(1)-1)%len(n.devices)]
		return &BatchDecoder{cpu: cpu, dev: dev, pending: n.pending, maxPixels: n.dc.MaxPixels}, nil
	}
}

// Stages is actors.Deps.NewBatchStage.
func (n *Node) Stages() func(rank int, spec actors.Shape) (actors.BatchStage, error) {
	return func(rank int, spec actors.Shape) (actors.BatchStage, error) {
		if want := n.dc.Spec(); spec != want {
			return nil, fmt.Errorf("nvdecode: rank %d's samples are %v, the decode configuration's %v", rank, spec, want)
		}
		cpu, err := decode.NewDecoder(n.dc)
		if err != nil {
			return nil, err
		}
		return &Stage{dev: n.devices[rank%len(n.devices)], pending: n.pending, cpu: cpu, dc: n.dc}, nil
	}
}

// BatchDecoder is a decoder actor's SampleDecoder under the batch stage.
type BatchDecoder struct {
	cpu       *decode.Decoder
	dev       *Device
	pending   *Pending
	maxPixels int64
}

// Decode decodes a CPU-routed sample into dst, and leaves a GPU-routed
// one for the stage: its bytes in the Pending table, a marker in dst.
func (d *BatchDecoder) Decode(data []byte, seed uint64, dst []byte) error {
	in, perr := nvjpeg.Probe(data)
	path, reason := nvjpeg.Route(in, perr, d.dev.Caps())
	if path != nvjpeg.PathCPU && d.maxPixels > 0 && int64(in.Width)*int64(in.Height) > d.maxPixels {
		path, reason = nvjpeg.PathCPU, nvjpeg.ReasonTooLarge
	}
	if path != nvjpeg.PathCPU && !endsWithEOI(data) {
		path, reason = nvjpeg.PathCPU, ReasonNoEOI
	}
	if path != nvjpeg.PathCPU && len(dst) < markerLen {
		path, reason = nvjpeg.PathCPU, nvjpeg.ReasonTooSmall
	}
	if path == nvjpeg.PathCPU {
		d.dev.countCPU(reason)
		_, err := d.cpu.Decode(data, seed, dst)
		return ffdecode.ClassifyError(err)
	}
	h := d.pending.put(pendingSample{data: append([]byte(nil), data...), seed: seed, w: in.Width, h: in.Height, path: path})
	putMarker(dst, h)
	return nil
}

// Close frees the CPU decoder.
func (d *BatchDecoder) Close() error { return d.cpu.Close() }

// endsWithEOI says whether data's last marker is EOI (0xFFD9), allowing
// a little padding after it (some writers add zeros or a newline).
func endsWithEOI(data []byte) bool {
	for i := len(data) - 2; i >= 0 && i >= len(data)-66; i-- {
		if data[i] == 0xff && data[i+1] == 0xd9 {
			return true
		}
	}
	return false
}

// Stage is one rank's batch decode stage.
type Stage struct {
	dev     *Device
	pending *Pending
	cpu     *decode.Decoder
	dc      decode.Config
	jobs    []*Job
	handles []uint64
	seeds   []uint64
	rows    []int // each job's row
}

// ErrEvicted: a row's compressed sample is no longer in the Pending
// table (its limit is below what the pipeline holds).
var ErrEvicted = errors.New("nvdecode: a sample left for the batch stage was evicted")

// Process decodes the batch's GPU-routed samples into their rows.
func (s *Stage) Process(ctx context.Context, b *actors.Batch) error {
	sb := b.Spec.SampleBytes()
	s.jobs, s.handles, s.seeds, s.rows = s.jobs[:0], s.handles[:0], s.seeds[:0], s.rows[:0]
	for j := range b.Len() {
		row := b.Images[j*sb : (j+1)*sb]
		h, ok := readMarker(row)
		if !ok {
			continue // decoded on the CPU
		}
		ps, ok := s.pending.get(h)
		if !ok {
			return fmt.Errorf("%w: row %d (%s)", ErrEvicted, j, b.Keys[j])
		}
		s.handles = append(s.handles, h)
		s.seeds = append(s.seeds, ps.seed)
		s.rows = append(s.rows, j)
		s.jobs = append(s.jobs, &Job{Data: ps.data, W: ps.w, H: ps.h, Path: ps.path, Row: row,
			Plan: PlanResize(s.dc.Transform, s.dc.Layout, ps.w, ps.h, ps.seed)})
	}
	if len(s.jobs) == 0 {
		return nil
	}
	errs, err := s.dev.run(ctx, s.jobs)
	s.pending.drop(s.handles)
	if err != nil {
		return err
	}
	for i, j := range s.jobs {
		switch {
		case errs[i] == nil && j.Path == nvjpeg.PathHardware:
			s.dev.hardware.Add(1)
		case errs[i] == nil:
			s.dev.hybrid.Add(1)
		case errors.Is(errs[i], ErrClosed):
			return errs[i]
		default:
			s.dev.countCPU(ReasonGPUError)
			if _, err := s.cpu.Decode(j.Data, s.seeds[i], j.Row); err != nil {
				// The device and the CPU refuse it: a corrupt file the
				// probe let through. The row cannot be failed here (the
				// batch is assembled), so the run reports it.
				return fmt.Errorf("nvdecode: batch %d of epoch %d, row %d (%s): %w", b.Step, b.Epoch, s.rows[i], b.Keys[s.rows[i]], ffdecode.ClassifyError(err))
			}
		}
	}
	return nil
}

// Close frees the stage's CPU decoder (the devices are the node's).
func (s *Stage) Close() error { return s.cpu.Close() }
