package actors

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/storage"
)

// gateDecoder decodes as fakeDecoder does, after telling started and
// waiting for gate to close; it counts decodes at once.
type gateDecoder struct {
	fakeDecoder
	started     chan<- struct{}
	gate        <-chan struct{}
	now, most   *atomic.Int64
	made, close *atomic.Int64
	closed      chan<- struct{}
}

func (d *gateDecoder) Decode(data []byte, seed uint64, dst []byte) error {
	n := d.now.Add(1)
	for {
		m := d.most.Load()
		if n <= m || d.most.CompareAndSwap(m, n) {
			break
		}
	}
	d.started <- struct{}{}
	<-d.gate
	d.now.Add(-1)
	return d.fakeDecoder.Decode(data, seed, dst)
}

func (d *gateDecoder) Close() error {
	d.close.Add(1)
	d.closed <- struct{}{}
	return nil
}

// TestRetuneDecoders: decoders added at run time decode alongside the
// first (three decodes at once after Retune to 3 from 1); decoders
// retired finish what they queued and are closed while the run goes on;
// every batch is still complete and in order.
func TestRetuneDecoders(t *testing.T) {
	checkNoLeaks(t)
	const n = 96
	st, ds := makeDataset(t, n, 3, 32)
	cfg := smallConfig()
	cfg.Decoders, cfg.DecodeQueue, cfg.DecodeDeadline = 1, 1, -1
	started := make(chan struct{}, 4*n)
	closed := make(chan struct{}, 4*n)
	gate := make(chan struct{})
	var now, most, made, closes atomic.Int64
	factory := func() (SampleDecoder, error) {
		made.Add(1)
		return &gateDecoder{started: started, gate: gate, now: &now, most: &most, made: &made, close: &closes, closed: closed}, nil
	}
	p, err := NewLoader(cfg, ds, testDeps(st, factory))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	<-started // the one decoder is decoding
	p.Retune(0, 3, 0)
	<-started
	<-started // two more at once: the new decoders run beside it
	if got := most.Load(); got != 3 {
		t.Fatalf("%d decodes at once after Retune to 3 decoders, want 3", got)
	}
	if got := made.Load(); got != 3 {
		t.Errorf("%d decoders made, want 3", got)
	}
	p.Retune(0, 1, 0)
	close(gate)
	<-closed
	<-closed // the two retired decoders closed while the run goes on
	recs, err := drainAll(t, st, cfg, p)
	if err == nil || len(recs) != n/cfg.BatchSize {
		t.Fatalf("%d batches (%v), want %d", len(recs), err, n/cfg.BatchSize)
	}
	if _, d, _ := p.Tuning(); d != 1 {
		t.Errorf("Tuning says %d decoders, want 1", d)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if m, c := made.Load(), closes.Load(); m != c {
		t.Errorf("%d decoders made, %d closed", m, c)
	}
}

// TestRetuneSlotsAndFetchers: a slot limit set at run time reaches the
// rank's core (the slots in use stay under it while the consumer holds
// batches); more reads in flight than the
// fetchers spawned at start spawns more, and the rank's own fetch tuner
// no longer moves the limit.
func TestRetuneSlotsAndFetchers(t *testing.T) {
	checkNoLeaks(t)
	st, ds := makeDataset(t, 64, 2, 32)
	cfg := smallConfig()
	cfg.Slots, cfg.FetchConcurrency, cfg.FetchAuto = 4, 2, true
	// The store holds every read until the limit has reached the rank's
	// core: until then the rank can open no slot but its first (a slot
	// opens as its batch's first read is sent, and the reads in flight
	// never cover more than one batch), so no slot is in use that the
	// limit did not see.
	gate := make(chan struct{})
	p, err := NewLoader(cfg, ds, testDeps(&heldStore{Store: st, gate: gate}, fakeDecoders(0, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Retune(6, 0, 2)
	for backstop := time.Now().Add(time.Minute); ; {
		if f, _, s := p.Tuning(); f == 6 && s == 2 {
			break
		}
		if time.Now().After(backstop) {
			t.Fatal("Retune never reached the rank")
		}
		time.Sleep(time.Millisecond) // polling the rank's state, not timing it
	}
	close(gate)
	ctx := context.Background()
	var held []*Batch
	for range 2 {
		b, err := p.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, b)
	}
	// Two batches held, two slots allowed. That nothing more is ever
	// assembled is the core's to prove, run until it is quiet
	// (TestCoreSlotLimit); here the shell shows the limit reached the
	// core. A third batch already waiting would be a failure too.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if b, err := p.Next(done); err == nil {
		t.Errorf("a third batch (step %d) with 2 slots allowed and 2 held", b.Step)
	}
	if used := p.Counters().SlotsInUse(); used > 2 {
		t.Errorf("%d slots in use, limit 2", used)
	}
	f, _, s := p.Tuning()
	if f != 6 || s != 2 {
		t.Errorf("Tuning: %d reads in flight, %d slots; want 6 and 2", f, s)
	}
	for _, b := range held {
		b.Release()
	}
	if _, err := drainAll(t, st, cfg, p); err == nil {
		t.Fatal("no end")
	}
	if f, _, _ := p.Tuning(); f != 6 {
		t.Errorf("after the run %d reads in flight: the fetch tuner moved the node tuner's limit", f)
	}
}

// tickDecoder takes cost on a fake clock: the pipeline measures its
// decode as that long.
type tickDecoder struct {
	fakeDecoder
	clk  *clock.Fake
	cost time.Duration
	done chan<- struct{}
}

func (d *tickDecoder) Decode(data []byte, seed uint64, dst []byte) error {
	d.clk.Advance(d.cost)
	select {
	case d.done <- struct{}{}:
	default:
	}
	return d.fakeDecoder.Decode(data, seed, dst)
}

// TestAutoTunerGrowsDecoders: one decoder, busy all the time on the
// pipeline's clock while the consumer waits: after judgeWindows windows
// the tuner gives the rank a second decoder, logs why, and counts it.
func TestAutoTunerGrowsDecoders(t *testing.T) {
	checkNoLeaks(t)
	st, ds := makeDataset(t, 4096, 2, 32)
	cfg := smallConfig()
	cfg.Decoders, cfg.Epochs = 1, 4
	clk := clock.NewFake(time.Unix(0, 0))
	done := make(chan struct{}, 64)
	made := make(chan struct{}, 8)
	deps := testDeps(st, func() (SampleDecoder, error) {
		made <- struct{}{}
		return &tickDecoder{clk: clk, cost: 5 * time.Millisecond, done: done}, nil
	})
	deps.Clock = clk
	n, err := NewNode(cfg, ds, 1, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	at := n.AutoTune(AutoTuneConfig{Cores: 4})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		p := n.Rank(0)
		for {
			b, err := p.Next(ctx)
			if err != nil {
				return
			}
			b.Release()
		}
	}()
	var d TuneDecision
	for i := 0; i < 3*judgeWindows && !d.Changed; i++ {
		// a window: 32 decodes of 5 ms on the pipeline's clock
		for range 32 {
			<-done
		}
		d = at.Step()
	}
	if !d.Changed || d.Knob != "decoders" || d.To.Decoders != 2 {
		t.Fatalf("one decoder busy all the time: %+v", d)
	}
	if st := at.Stats(); st.Changes["decoders"] != 1 || st.Setting.Decoders != 2 {
		t.Errorf("stats %+v", st)
	}
	<-made
	<-made // the second decoder, made by the rank for the tuner
}

// TestTallyTunerFollowsPipelines: the tuner of a rank whose pipelines
// come and go (a feed's rank reopened at a resume, a cluster rank's
// sessions) decides nothing before the rank has a pipeline, then tunes
// it as NewAutoTuner does (a second decoder for a decoder busy all the
// time), and gives a pipeline that replaces it the setting at the next
// window: the new pipeline, made with one decoder, makes a second.
func TestTallyTunerFollowsPipelines(t *testing.T) {
	checkNoLeaks(t)
	st, ds := makeDataset(t, 4096, 2, 32)
	cfg := smallConfig()
	cfg.Decoders, cfg.Epochs = 1, 4
	clk := clock.NewFake(time.Unix(0, 0))
	done := make(chan struct{}, 64)
	made := make(chan struct{}, 8)
	deps := testDeps(st, func() (SampleDecoder, error) {
		made <- struct{}{}
		return &tickDecoder{clk: clk, cost: 5 * time.Millisecond, done: done}, nil
	})
	deps.Clock = clk
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitMade := func(what string) {
		t.Helper()
		select {
		case <-made:
		case <-ctx.Done():
			t.Fatalf("no decoder made: %s", what)
		}
	}
	consume := func(p *Pipeline) {
		go func() {
			for {
				b, err := p.Next(ctx)
				if err != nil {
					return
				}
				b.Release()
			}
		}()
	}

	tally := NewTally(0)
	at := NewTallyTuner([]*Tally{tally}, AutoTuneConfig{Cores: 4})
	if d := at.Step(); d.Changed || at.Stats().Windows != 0 || at.Stats().Budget.Cores != 4 {
		t.Fatalf("no pipeline yet: decision %+v, stats %+v; want nothing decided, the budget known", d, at.Stats())
	}

	n1, err := NewNode(cfg, ds, 1, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer n1.Close()
	waitMade("the first pipeline's decoder")
	tally.Use(n1.Rank(0))
	at.Step() // starts the tuner over the pipeline
	if s := at.Stats().Setting; s.Decoders != 1 || s.Slots != cfg.Slots {
		t.Fatalf("start %+v; want the pipeline's 1 decoder and %d slots", s, cfg.Slots)
	}
	consume(n1.Rank(0))
	var d TuneDecision
	for i := 0; i < 3*judgeWindows && !d.Changed; i++ {
		for range 32 {
			select {
			case <-done:
			case <-ctx.Done():
				t.Fatal("no decodes")
			}
		}
		d = at.Step()
	}
	if !d.Changed || d.Knob != "decoders" || d.To.Decoders != 2 {
		t.Fatalf("one decoder busy all the time: %+v", d)
	}
	waitMade("the tuner's second decoder for the first pipeline")

	n2, err := NewNode(cfg, ds, 1, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	waitMade("the second pipeline's decoder")
	n1.Close()
	tally.Use(n2.Rank(0))
	consume(n2.Rank(0))
	at.Step()
	waitMade("the tuner's second decoder for the pipeline that replaced the first")
	if st := at.Stats(); st.Setting.Decoders != 2 || st.Windows < judgeWindows {
		t.Errorf("stats %+v", st)
	}
}

// heldStore holds every Get until gate is closed.
type heldStore struct {
	storage.Store
	gate <-chan struct{}
}

func (s *heldStore) Get(ctx context.Context, key string, dst []byte) ([]byte, error) {
	select {
	case <-s.gate:
	case <-ctx.Done():
		return dst[:0], ctx.Err()
	}
	return s.Store.Get(ctx, key, dst)
}
