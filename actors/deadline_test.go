package actors

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/storage"
)

// hangDecoder decodes like fakeDecoder but blocks on objects starting
// with "HANG" until the test releases that object, and then scribbles
// over its dst: were the abandoned decode writing into the slot, the
// batch's pixels would show it.
type hangDecoder struct {
	fakeDecoder
	release func(data []byte) <-chan struct{}
	onHang  func() // if set, called as a hanging decode starts
}

func (d *hangDecoder) Decode(data []byte, seed uint64, dst []byte) error {
	if bytes.HasPrefix(data, []byte("HANG")) {
		if d.onHang != nil {
			d.onHang()
		}
		<-d.release(data)
		for i := range dst {
			dst[i] = 0xAA
		}
		return nil
	}
	return d.fakeDecoder.Decode(data, seed, dst)
}

// hangs holds one release channel per hanging object.
type hangs struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

func (h *hangs) of(data []byte) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := string(data)
	if h.ch[k] == nil {
		h.ch[k] = make(chan struct{})
	}
	return h.ch[k]
}

func (h *hangs) releaseAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, c := range h.ch {
		close(c)
		delete(h.ch, k)
	}
}

// TestDecodeDeadline: a decode that hangs fails its sample as
// decode/timeout after the deadline and the run goes on with a fresh
// decoder; the abandoned decode, released while the run goes on, writes
// only its own buffer (every delivered sample has its own pixels), and
// its goroutine ends once it returns.
func TestDecodeDeadline(t *testing.T) {
	checkNoLeaks(t)
	mem, ds := makeDataset(t, 64, 4, 32)
	ctx := context.Background()
	hung := []int{5, 30, 31}
	h := &hangs{ch: map[string]chan struct{}{}}
	objects := map[string][]byte{}
	for _, i := range hung {
		data := []byte("HANG " + ds.Samples[i].Key)
		mem.Put(ctx, ds.Samples[i].Key, data, storage.Cond{})
		objects[ds.Samples[i].Key] = data
	}
	cfg := smallConfig()
	cfg.MaxFailures = MaxFailureCount(3)
	cfg.DecodeDeadline = 50 * time.Millisecond
	// One decoder, so one deadline is armed at a time, on a fake clock
	// that moves only when a hanging decode has started: no decode that
	// is merely slow on a loaded machine can time out.
	cfg.Decoders = 1
	deadlines := clock.NewFake(time.Unix(0, 0))
	fire := func() {
		if err := deadlines.BlockUntil(ctx, 1); err == nil {
			deadlines.Advance(cfg.DecodeDeadline)
		}
	}
	var made int
	var mu sync.Mutex
	deps := testDeps(mem, func() (SampleDecoder, error) {
		mu.Lock()
		made++
		mu.Unlock()
		return &hangDecoder{release: func(data []byte) <-chan struct{} { return h.of(data) }, onHang: fire}, nil
	})
	deps.DeadlineClock = deadlines
	var failures []Failure
	deps.OnFailure = func(f Failure) {
		failures = append(failures, f) // the rank actor's goroutine: no lock needed
		close(h.of(objects[f.Key]))    // the abandoned decode returns while the run goes on
	}
	p, err := NewLoader(cfg, ds, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	recs, err := drainAll(t, mem, cfg, p)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("run: %v", err)
	}
	delivered := 0
	for _, r := range recs {
		delivered += r.samples()
	}
	rep := p.Failures()
	if delivered != 61 || rep.Failed != 3 || len(rep.Groups) != 1 || rep.Groups[0].Stage != StageDecode || rep.Groups[0].Class != "timeout" {
		t.Fatalf("delivered %d; report %v; want 61 delivered and 3 decode/timeout", delivered, rep)
	}
	if !strings.Contains(rep.Records[0].Reason, "decode deadline") {
		t.Errorf("reason %q does not name the deadline", rep.Records[0].Reason)
	}
	if len(failures) != 3 {
		t.Errorf("OnFailure saw %d failures; want 3", len(failures))
	}
	mu.Lock()
	if made != cfg.Decoders+3 {
		t.Errorf("%d decoders made; want %d and one per abandoned decode", made, cfg.Decoders)
	}
	mu.Unlock()
	p.Close()
	deadline := time.Now().Add(time.Minute)
	for p.abandoned.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // waits on the abandoned workers' exit
	}
	if n := p.abandoned.Load(); n != 0 {
		t.Errorf("%d abandoned decoders never ended", n)
	}
}

// TestDecodeDeadlineTooManyStuck: more decoders stuck at once than
// maxAbandoned stop the run with an error saying so, not a budget
// breach.
func TestDecodeDeadlineTooManyStuck(t *testing.T) {
	mem, ds := makeDataset(t, 64, 4, 32)
	ctx := context.Background()
	h := &hangs{ch: map[string]chan struct{}{}}
	for i := range maxAbandoned + 2 {
		mem.Put(ctx, ds.Samples[i*7].Key, []byte("HANG "+ds.Samples[i*7].Key), storage.Cond{})
	}
	defer h.releaseAll()
	cfg := smallConfig()
	cfg.MaxFailures = MaxFailureCount(100)
	cfg.DecodeDeadline = 20 * time.Millisecond
	deps := testDeps(mem, func() (SampleDecoder, error) {
		return &hangDecoder{release: func(data []byte) <-chan struct{} { return h.of(data) }}, nil
	})
	p, err := NewLoader(cfg, ds, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = drainAll(t, mem, cfg, p)
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, ErrFailureBudget) || !strings.Contains(err.Error(), "stuck past the decode deadline") {
		t.Fatalf("run: %v; want it stopped for stuck decoders", err)
	}
}

// TestMaxObjectBytes: an object over the limit fails as fetch/too_large,
// the rest are delivered.
func TestMaxObjectBytes(t *testing.T) {
	checkNoLeaks(t)
	mem, ds := makeDataset(t, 32, 2, 32)
	ctx := context.Background()
	mem.Put(ctx, ds.Samples[9].Key, bytes.Repeat([]byte("x"), 4096), storage.Cond{})
	cfg := smallConfig()
	cfg.MaxFailures = MaxFailureCount(1)
	cfg.MaxObjectBytes = 1024
	_, rep, err := runLoader(t, cfg, mem, ds, fakeDecoders(0, 1))
	if !errors.Is(err, io.EOF) {
		t.Fatalf("run: %v", err)
	}
	if rep.Failed != 1 || rep.Records[0].Key != ds.Samples[9].Key || rep.Records[0].Stage != StageFetch || rep.Records[0].Class != "too_large" {
		t.Fatalf("report %v; want %s as fetch/too_large", rep, ds.Samples[9].Key)
	}
}

// countingHang is a hangDecoder that also counts the decodes in C at
// once, over every decoder of a pipeline.
type countingHang struct {
	hangDecoder
	inflight, peak *atomic.Int64
}

func (d *countingHang) Decode(data []byte, seed uint64, dst []byte) error {
	n := d.inflight.Add(1)
	defer d.inflight.Add(-1)
	for {
		p := d.peak.Load()
		if n <= p || d.peak.CompareAndSwap(p, n) {
			break
		}
	}
	return d.hangDecoder.Decode(data, seed, dst)
}

// TestDecodeDeadlineKeepsCoresBounded: a decode abandoned at its
// deadline keeps its core until its call returns, so its replacement
// waits for a core instead of decoding beside it: with one decoder, at
// most one decode is ever in C. The wait and the abandoned decode are
// counted (DecodeCores); once the stuck call returns, the run completes.
func TestDecodeDeadlineKeepsCoresBounded(t *testing.T) {
	checkNoLeaks(t)
	mem, ds := makeDataset(t, 32, 2, 32)
	ctx := context.Background()
	h := &hangs{ch: map[string]chan struct{}{}}
	hung := []byte("HANG " + ds.Samples[3].Key)
	mem.Put(ctx, ds.Samples[3].Key, hung, storage.Cond{})
	cfg := smallConfig()
	cfg.Decoders = 1
	cfg.MaxFailures = MaxFailureCount(1)
	cfg.DecodeDeadline = 50 * time.Millisecond
	var inflight, peak atomic.Int64
	// The deadline and the wait for a core are on a fake clock. The hung
	// decode, once started, fires its deadline; its replacement then
	// waits for the core it holds (the event this test is about: a timer
	// on the clock again), and only then does the hung decode return.
	deadlines := clock.NewFake(time.Unix(0, 0))
	waited := make(chan struct{})
	onHang := func() {
		defer close(h.of(hung))
		if deadlines.BlockUntil(ctx, 1) != nil {
			return
		}
		deadlines.Advance(cfg.DecodeDeadline)
		if deadlines.BlockUntil(ctx, 1) == nil {
			close(waited)
		}
	}
	deps := testDeps(mem, func() (SampleDecoder, error) {
		return &countingHang{hangDecoder: hangDecoder{release: func(data []byte) <-chan struct{} { return h.of(data) }, onHang: onHang}, inflight: &inflight, peak: &peak}, nil
	})
	deps.DeadlineClock = deadlines
	_, waits0 := DecodeCores()
	p, err := NewLoader(cfg, ds, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	recs, err := drainAll(t, mem, cfg, p)
	select {
	case <-waited:
	default:
		t.Error("the replacement decoder never waited for the abandoned decode's core")
	}
	if _, w := DecodeCores(); w <= waits0 {
		t.Errorf("DecodeCores counted no wait for a core (%d before, %d after)", waits0, w)
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("run: %v", err)
	}
	delivered := 0
	for _, r := range recs {
		delivered += r.samples()
	}
	if rep := p.Failures(); delivered != 31 || rep.Failed != 1 || rep.Records[0].Class != "timeout" {
		t.Errorf("delivered %d, failures %v: want 31 and one decode/timeout", delivered, rep)
	}
	if n := peak.Load(); n != 1 {
		t.Errorf("%d decodes were in C at once with 1 decoder: the abandoned one and its replacement oversubscribed the core", n)
	}
	p.Close()
	for deadline := time.Now().Add(time.Minute); p.abandoned.Load() != 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // waits on the abandoned worker's exit
	}
	if n := p.abandoned.Load(); n != 0 {
		t.Errorf("%d decodes abandoned and running after the stuck one returned, want 0", n)
	}
}

// TestDecodeDeadlineAllCoresStuck: when every core is held by a decode
// stuck past its deadline, the run stops saying so instead of waiting
// as long as they hang.
func TestDecodeDeadlineAllCoresStuck(t *testing.T) {
	mem, ds := makeDataset(t, 32, 2, 32)
	ctx := context.Background()
	h := &hangs{ch: map[string]chan struct{}{}}
	defer h.releaseAll()
	mem.Put(ctx, ds.Samples[3].Key, []byte("HANG "+ds.Samples[3].Key), storage.Cond{})
	cfg := smallConfig()
	cfg.Decoders = 1
	cfg.MaxFailures = MaxFailureCount(10)
	cfg.DecodeDeadline = 20 * time.Millisecond
	deps := testDeps(mem, func() (SampleDecoder, error) {
		return &hangDecoder{release: func(data []byte) <-chan struct{} { return h.of(data) }}, nil
	})
	p, err := NewLoader(cfg, ds, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = drainAll(t, mem, cfg, p)
	if err == nil || !strings.Contains(err.Error(), "decoder cores are held by decodes stuck") {
		t.Fatalf("run: %v; want it stopped for every core held by a stuck decode", err)
	}
}
