package nvdecode

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"image/jpeg"
	"sync"

	"github.com/longshore/longshore/gpu/nvjpeg"
)

// Twin is an Engine on the CPU for tests and dry runs: Go's image/jpeg
// stands in for nvJPEG and ResizePlan.Resize for the resize kernel (the
// kernel's arithmetic). It models the streams: Submit only queues, the
// rows are written when the stream is waited on (so a stage that reads
// its rows, or returns, before waiting sees markers, not pixels), and it
// records every call and each breach of the Engine's rules: a submit on
// a stream not yet waited on, a row written meanwhile by someone else,
// a hardware call larger than the batch, a call after Close.
//
// One TwinDevice is shared by the Engines of a Device's threads (its
// engine thread's and the hybrid ones'), as a GPU is.
type TwinDevice struct {
	// NoHardware, when set, is the engine's absence and why.
	NoHardware string
	// FailSubmit and FailWait fail the engine calls whose index (from
	// 0, in submit order) they hold; FailOne fails every hybrid decode
	// of an image that many bytes long.
	FailSubmit, FailWait map[int]bool
	FailOne              map[int]bool
	// Batch bounds a hardware call (0: DefaultBatch).
	Batch int

	mu         sync.Mutex
	calls      int
	log        []string // "submit s n", "wait s", "one"
	pending    [Streams]*twinCall
	inFlight   int
	maxFlight  int
	sizes      []int // each hardware call's size
	violations []string
	closed     int
}

type twinCall struct {
	index int
	jobs  []*Job
	marks [][]byte // each row's first bytes at submit
	err   error
}

// Engine returns an Engine of the device (for NewDevice).
func (t *TwinDevice) Engine(engine bool) (Engine, error) {
	return &twinEngine{t: t, engine: engine}, nil
}

type twinEngine struct {
	t      *TwinDevice
	engine bool
	closed bool
}

func (e *twinEngine) Hardware() (bool, string) {
	if !e.engine {
		return false, "not the engine's thread"
	}
	return e.t.NoHardware == "", e.t.NoHardware
}

func (e *twinEngine) Submit(s int, jobs []*Job) error {
	t := e.t
	t.mu.Lock()
	defer t.mu.Unlock()
	e.check("Submit")
	i := t.calls
	t.calls++
	t.log = append(t.log, fmt.Sprintf("submit %d %d", s, len(jobs)))
	t.sizes = append(t.sizes, len(jobs))
	if !e.engine {
		t.violate("Submit on a hybrid thread")
	}
	if s < 0 || s >= Streams {
		t.violate(fmt.Sprintf("Submit on stream %d", s))
		return errors.New("twin: no such stream")
	}
	if t.pending[s] != nil {
		t.violate(fmt.Sprintf("Submit on stream %d before its last call was waited on", s))
	}
	limit := t.Batch
	if limit <= 0 {
		limit = DefaultBatch
	}
	if len(jobs) > limit {
		t.violate(fmt.Sprintf("a hardware call of %d images", len(jobs)))
	}
	c := &twinCall{index: i, jobs: jobs}
	for _, j := range jobs {
		if j.Path != nvjpeg.PathHardware {
			t.violate("a hybrid job in a hardware call")
		}
		c.marks = append(c.marks, bytes.Clone(j.Row[:min(markerLen, len(j.Row))]))
	}
	if t.FailSubmit[i] {
		return fmt.Errorf("twin: call %d refused", i)
	}
	if t.FailWait[i] {
		c.err = fmt.Errorf("twin: call %d failed on the device", i)
	}
	t.pending[s] = c
	t.inFlight++
	t.maxFlight = max(t.maxFlight, t.inFlight)
	return nil
}

func (e *twinEngine) Wait(s int) error {
	t := e.t
	t.mu.Lock()
	e.check("Wait")
	t.log = append(t.log, fmt.Sprintf("wait %d", s))
	c := t.pending[s]
	t.pending[s] = nil
	if c != nil {
		t.inFlight--
	}
	t.mu.Unlock()
	if c == nil {
		return nil
	}
	if c.err != nil {
		return c.err
	}
	for k, j := range c.jobs {
		if !bytes.Equal(j.Row[:len(c.marks[k])], c.marks[k]) {
			t.violate(fmt.Sprintf("call %d: row %d was written while the device held it", c.index, k))
		}
	}
	for _, j := range c.jobs { // the copy lands: the whole call, or nothing
		if err := twinDecode(j, j.Row[:0:0]); err != nil {
			return err
		}
	}
	for _, j := range c.jobs {
		if err := twinDecode(j, j.Row); err != nil {
			return err
		}
	}
	return nil
}

func (e *twinEngine) DecodeOne(j *Job) error {
	t := e.t
	t.mu.Lock()
	e.check("DecodeOne")
	t.log = append(t.log, "one")
	fail := t.FailOne[len(j.Data)]
	t.mu.Unlock()
	if fail {
		return errors.New("twin: hybrid decode failed")
	}
	return twinDecode(j, j.Row)
}

func (e *twinEngine) Close() error {
	e.t.mu.Lock()
	defer e.t.mu.Unlock()
	e.check("Close")
	e.closed = true
	e.t.closed++
	return nil
}

// check records a call after Close (t.mu held).
func (e *twinEngine) check(what string) {
	if e.closed {
		e.t.violations = append(e.t.violations, what+" after Close")
	}
}

func (t *TwinDevice) violate(what string) { t.violations = append(t.violations, what) }

// twinDecode decodes j whole and resizes it into dst (nothing written
// when dst is empty: a check that it decodes).
func twinDecode(j *Job, dst []byte) error {
	img, err := jpeg.Decode(bytes.NewReader(j.Data))
	if err != nil {
		return fmt.Errorf("twin: %w", err)
	}
	if img.Bounds().Dx() != j.W || img.Bounds().Dy() != j.H {
		return fmt.Errorf("twin: a %v picture, the job says %dx%d", img.Bounds().Size(), j.W, j.H)
	}
	if len(dst) == 0 {
		return nil
	}
	rgb := TwinRGB(img)
	j.Plan.Resize(rgb, 3*j.W, dst)
	return nil
}

// TwinRGB is img as interleaved RGB, 3·W bytes a row.
func TwinRGB(img image.Image) []byte {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	rgba := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(rgba, rgba.Bounds(), img, b.Min, draw.Src)
	rgb := make([]byte, 3*w*h)
	for i := range w * h {
		copy(rgb[3*i:3*i+3], rgba.Pix[4*i:4*i+3])
	}
	return rgb
}

// TwinReport is what a TwinDevice saw.
type TwinReport struct {
	Log         []string
	CallSizes   []int
	MaxInFlight int
	Violations  []string
	Closed      int
}

// Report returns what the device saw so far.
func (t *TwinDevice) Report() TwinReport {
	t.mu.Lock()
	defer t.mu.Unlock()
	return TwinReport{Log: append([]string(nil), t.log...), CallSizes: append([]int(nil), t.sizes...),
		MaxInFlight: t.maxFlight, Violations: append([]string(nil), t.violations...), Closed: t.closed}
}
