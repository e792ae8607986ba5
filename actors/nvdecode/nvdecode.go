// Package nvdecode decodes the node's JPEGs on the GPU's own engines
// (--decode-device cuda): nvJPEG's hardware engine in batches, its hybrid
// backend for what the engine does not take (progressive JPEGs), and the
// CPU path for the rest (CMYK, 12-bit, tiny, huge, not a JPEG), each
// sample's route counted with its reason.
//
// Two ways in. Node (stage.go) is the pipeline's batch stage and what the
// node runs: the decoders leave GPU-routed JPEGs compressed in their rows
// and the stage hands the Device each whole batch, crop, resize and flip
// on the device (resize.go), two engine calls in flight. Service and
// Decoder (below) are the per-sample path, kept for transforms with pixel
// ops (the device resize applies none):
//
// A Decoder is the pipeline's SampleDecoder: it probes a sample's header
// (gpu/nvjpeg.Probe, Route), hands a GPU-routed one to the device's
// Service and transforms the full-size RGB it gets back with the CPU
// decoder's own geometry, filter and layout (decode.Decoder.TransformRGB),
// so a sample's crop and pixels are the CPU path's up to the decoders'
// IDCT and chroma upsampling (docs/performance.md measures the
// difference). A sample the GPU fails on is decoded by the CPU path,
// counted as gpu_error: the CPU decoder then reports a corrupt file as
// it always does.
//
// A Service gathers the concurrent calls of every decoder actor into
// batches for the JPEG engine on one goroutine (locked to its OS thread,
// where the device's context and nvJPEG's handles live): it takes one
// request, then every request already waiting, up to Batch, without
// waiting for more (no timer: a batch is what the decoders had queued).
// Hybrid-backend decodes run on threads of their own. The device side is a
// Backend: CUDA's in a `cuda` build (backend_cuda.go), and any fake in
// tests, so the batching, routing and fallbacks are tested on a CPU.
package nvdecode

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/actors/ffdecode"
	"github.com/longshore/longshore/decode"
	"github.com/longshore/longshore/gpu/nvjpeg"
)

// Request is one image for the device: its bytes, its size (from Probe), the
// backend Route chose, and where the full-size interleaved RGB goes (3*W
// bytes a row, at least 3*W*H bytes).
type Request struct {
	Data []byte
	W, H int
	Path nvjpeg.Path
	RGB  []byte
}

// Backend is a device's decoders, used by one goroutine (the Service's,
// locked to its OS thread).
type Backend interface {
	// Hardware says whether the JPEG engine is there (else every
	// GPU-routed image goes to the hybrid backend), and why not.
	Hardware() (bool, string)
	// DecodeBatch decodes jobs (all PathHardware) in one batched call.
	// An error fails the whole batch; the Service then retries each job
	// alone on the hybrid backend.
	DecodeBatch(jobs []*Request) error
	// DecodeOne decodes one job on the hybrid backend.
	DecodeOne(job *Request) error
	Close() error
}

// Stats counts a Service's and its Decoders' work.
type Stats struct {
	Hardware int64 `json:"hardware"` // samples decoded by the JPEG engine
	Hybrid   int64 `json:"hybrid"`   // by the hybrid backend
	CPU      int64 `json:"cpu"`      // by the CPU path, Reasons says why
	// Reasons counts the CPU path's samples by reason: Route's (cmyk,
	// not_jpeg, precision, too_small, ...), too_large (over the decode
	// configuration's MaxPixels) and gpu_error (the device failed on it;
	// the CPU path decoded it).
	Reasons map[string]int64 `json:"cpu_reasons,omitempty"`
	// Batches and Retried: batched calls, and images of failed batches
	// retried alone.
	Batches  int64 `json:"batches"`
	Retried  int64 `json:"retried"`
	MaxBatch int   `json:"max_batch"`
	// MaxInFlight: the most engine batches in flight at once (the
	// batch stage keeps up to Streams; the per-sample Service one).
	MaxInFlight int `json:"max_in_flight,omitempty"`
	// NoHardware says why the JPEG engine is not used ("" when it is).
	NoHardware string `json:"no_hardware,omitempty"`
}

// String is the summary's line.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hardware %d, hybrid %d, cpu %d", s.Hardware, s.Hybrid, s.CPU)
	if len(s.Reasons) > 0 {
		keys := make([]string, 0, len(s.Reasons))
		for k := range s.Reasons {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", k, s.Reasons[k]))
		}
		fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "; %d batches (largest %d), %d retried alone", s.Batches, s.MaxBatch, s.Retried)
	if s.MaxInFlight > 1 {
		fmt.Fprintf(&b, ", up to %d in flight", s.MaxInFlight)
	}
	if s.NoHardware != "" {
		fmt.Fprintf(&b, "; no JPEG engine: %s", s.NoHardware)
	}
	return b.String()
}

type request struct {
	job  *Request
	done chan error
}

// ErrClosed: Decode after Close.
var ErrClosed = errors.New("nvdecode: service closed")

// Service batches decodes for one device: one goroutine feeds the JPEG
// engine in batches, Hybrid goroutines decode what goes to the hybrid
// backend (and what a failed batch hands over), each on its own locked
// thread with its own backend, so the engine's thread does nothing else.
type Service struct {
	threads
	reqs  chan *request // for the engine
	hq    chan *request // for the hybrid workers
	batch int

	hardware, hybrid, cpu, batches, retried atomic.Int64
	mu                                      sync.Mutex
	reasons                                 map[string]int64
	maxBatch                                int
}

// DefaultBatch is the most images a batched call takes by default.
const DefaultBatch = 64

// DefaultHybrid is how many threads decode on the hybrid backend.
const DefaultHybrid = 2

// NewService starts the service's goroutines, each locked to its OS
// thread with a backend newBackend made there (engine: the one that feeds
// the JPEG engine; the others decode on the hybrid backend only); batch
// bounds a batched call (0: DefaultBatch), hybrid is the hybrid threads
// (0: DefaultHybrid).
func NewService(newBackend func(engine bool) (Backend, error), batch, hybrid int) (*Service, error) {
	if batch <= 0 {
		batch = DefaultBatch
	}
	if hybrid <= 0 {
		hybrid = DefaultHybrid
	}
	s := &Service{threads: newThreads(), reqs: make(chan *request, batch), hq: make(chan *request, batch),
		batch: batch, reasons: map[string]int64{}}
	if err := startThreads(&s.threads, newBackend, hybrid, s.run, s.runHybrid); err != nil {
		return nil, err
	}
	return s, nil
}

// run is the engine's thread: it gathers the requests into batches.
func (s *Service) run(b Backend) {
	var batch []*request
	for {
		select {
		case r := <-s.reqs:
			batch = append(batch[:0], r)
		case <-s.stop:
			s.closed(b)
			return
		}
	gather:
		for len(batch) < s.batch {
			select {
			case r := <-s.reqs:
				batch = append(batch, r)
			default:
				break gather
			}
		}
		s.serve(b, batch)
	}
}

func (s *Service) runHybrid(b Backend) {
	for {
		select {
		case r := <-s.hq:
			r.done <- b.DecodeOne(r.job)
		case <-s.stop:
			s.closed(b)
			return
		}
	}
}

// serve decodes one gathered batch in one call, and hands each job of a
// batch that failed to the hybrid workers.
func (s *Service) serve(b Backend, batch []*request) {
	jobs := make([]*Request, len(batch))
	for i, r := range batch {
		jobs[i] = r.job
	}
	s.batches.Add(1)
	s.mu.Lock()
	s.maxBatch = max(s.maxBatch, len(batch))
	s.mu.Unlock()
	if err := b.DecodeBatch(jobs); err == nil {
		for _, r := range batch {
			r.done <- nil
		}
		return
	}
	for _, r := range batch {
		s.retried.Add(1)
		r.job.Path = nvjpeg.PathHybrid
		select {
		case s.hq <- r:
		case <-s.stop:
			r.done <- ErrClosed
		}
	}
}

// Decode decodes job on the device and returns when it is done: a
// PathHardware job in the engine's next batch, a PathHybrid one on a
// hybrid thread. Safe for concurrent use: concurrent calls share batches.
func (s *Service) Decode(job *Request) error {
	return s.decode(&request{job: job, done: make(chan error, 1)})
}

// decode is Decode with the caller's request (a Decoder reuses its own:
// no channel a sample).
func (s *Service) decode(r *request) error {
	q := s.hq
	if r.job.Path == nvjpeg.PathHardware && s.caps.Hardware {
		q = s.reqs
	}
	select {
	case q <- r:
	case <-s.finished:
		return ErrClosed
	}
	select {
	case err := <-r.done:
		return err
	case <-s.finished: // stopped with r still queued, or just after answering it
		select {
		case err := <-r.done:
			return err
		default:
			return ErrClosed
		}
	}
}

// Caps is what the service's device takes (Route's input).
func (s *Service) Caps() nvjpeg.Caps { return s.caps }

// Stats returns the counts so far.
func (s *Service) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Hardware: s.hardware.Load(), Hybrid: s.hybrid.Load(), CPU: s.cpu.Load(), Batches: s.batches.Load(),
		Retried: s.retried.Load(), MaxBatch: s.maxBatch, NoHardware: s.noHardware}
	if len(s.reasons) > 0 {
		st.Reasons = make(map[string]int64, len(s.reasons))
		for k, v := range s.reasons {
			st.Reasons[k] = v
		}
	}
	return st
}

func (s *Service) countCPU(reason string) {
	s.cpu.Add(1)
	s.mu.Lock()
	s.reasons[reason]++
	s.mu.Unlock()
}

// Close stops the service once the calls in flight are answered and
// closes the backends.
func (s *Service) Close() error { return s.close() }

// ReasonGPUError: the device failed on a sample; the CPU path decoded it.
const ReasonGPUError = "gpu_error"

// ReasonNoEOI: the JPEG does not end with its end-of-image marker
// (truncated): the CPU path decodes it, or reports it corrupt per
// sample, before the batch stage could meet it.
const ReasonNoEOI = "no_eoi"

// lockThread locks the calling goroutine to its OS thread for good: the
// thread holds the device's handles.
func lockThread() { runtime.LockOSThread() }

// Factory makes, per decoder actor, a Decoder over a CPU decoder of dc
// and the services (decoder i of the node uses services[i % n]).
func Factory(dc decode.Config, services []*Service) actors.DecoderFactory {
	var next atomic.Int64
	return func() (actors.SampleDecoder, error) {
		if len(services) == 0 {
			return nil, errors.New("nvdecode: no device service")
		}
		cpu, err := decode.NewDecoder(dc)
		if err != nil {
			return nil, err
		}
		svc := services[int(next.Add(1)-1)%len(services)]
		return &Decoder{cpu: cpu, svc: svc, maxPixels: dc.MaxPixels}, nil
	}
}

// Decoder is one decoder actor's SampleDecoder (not safe for concurrent
// use, as the pipeline wants).
type Decoder struct {
	cpu       *decode.Decoder
	svc       *Service
	maxPixels int64
	rgb       []byte
	job       Request
	req       request // for job, its done channel made once
}

// Decode routes the sample: the device's decoders and the CPU's
// transform, or the CPU path with a counted reason.
func (d *Decoder) Decode(data []byte, seed uint64, dst []byte) error {
	in, perr := nvjpeg.Probe(data)
	path, reason := nvjpeg.Route(in, perr, d.svc.Caps())
	if path != nvjpeg.PathCPU && d.maxPixels > 0 && int64(in.Width)*int64(in.Height) > d.maxPixels {
		path, reason = nvjpeg.PathCPU, nvjpeg.ReasonTooLarge // the CPU path reports the bomb
	}
	if path == nvjpeg.PathCPU {
		d.svc.countCPU(reason)
		return d.decodeCPU(data, seed, dst)
	}
	w, h := in.Width, in.Height
	need := 3*w*h + decode.RGBSlack
	if cap(d.rgb) < need {
		d.rgb = make([]byte, need)
	}
	d.rgb = d.rgb[:need]
	d.job = Request{Data: data, W: w, H: h, Path: path, RGB: d.rgb}
	if d.req.done == nil {
		d.req = request{job: &d.job, done: make(chan error, 1)}
	}
	if err := d.svc.decode(&d.req); err != nil {
		if errors.Is(err, ErrClosed) {
			return err
		}
		d.svc.countCPU(ReasonGPUError)
		return d.decodeCPU(data, seed, dst)
	}
	if d.job.Path == nvjpeg.PathHardware {
		d.svc.hardware.Add(1)
	} else {
		d.svc.hybrid.Add(1)
	}
	_, err := d.cpu.TransformRGB(d.rgb, w, h, 3*w, seed, dst)
	return err
}

func (d *Decoder) decodeCPU(data []byte, seed uint64, dst []byte) error {
	_, err := d.cpu.Decode(data, seed, dst)
	return ffdecode.ClassifyError(err)
}

// Close frees the CPU decoder (the service is the node's to close).
func (d *Decoder) Close() error { return d.cpu.Close() }
