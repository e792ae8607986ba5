package actors

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/longshore/longshore/storage"
)

// TestCountersAreTheStats: the counters a pipeline exports say what its
// summary says (the same figures, failures by stage and class as the
// failure book groups them), the histogram is cumulative and complete,
// and the window between two snapshots adds back up to the whole.
func TestCountersAreTheStats(t *testing.T) {
	checkNoLeaks(t)
	mem, ds := makeDataset(t, 64, 4, 32)
	ctx := context.Background()
	fail := map[string]error{ds.Samples[3].Key: storage.ErrNotFound, ds.Samples[20].Key: storage.ErrNotFound}
	for _, i := range []int{10, 11, 12} {
		mem.Put(ctx, ds.Samples[i].Key, []byte("BAD"), storage.Cond{})
	}
	cfg := smallConfig()
	cfg.MaxFailures = MaxFailureCount(10)
	p, err := NewLoader(cfg, ds, testDeps(&faultStore{Store: mem, fail: fail}, fakeDecoders(0, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var mid Counters
	for n := 0; ; n++ {
		b, err := p.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 3 {
			mid = p.Counters()
			if u := mid.SlotsInUse(); u < 1 || u > int64(cfg.Slots) {
				t.Errorf("slots in use %d with a batch held, of %d", u, cfg.Slots)
			}
			if d := mid.Delivered(); !d.Delivering || d.LastStep != 3 || d.LastEpoch != 0 {
				t.Errorf("last delivered %+v, want epoch 0 step 3", d)
			}
		}
		b.Release()
	}
	end := p.Counters()
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	if got, want := js(end.Stats()), js(p.Stats()); got != want {
		t.Errorf("Counters().Stats() differs from Stats():\n%s\n%s", got, want)
	}
	got := map[string]int64{}
	for _, f := range end.Failures() {
		got[f.Stage.String()+"/"+f.Class] = f.Count
	}
	want := map[string]int64{}
	for _, g := range p.Failures().Groups {
		want[g.Stage.String()+"/"+g.Class] = g.Count
	}
	if !reflect.DeepEqual(got, want) || got["fetch/not_found"] != 2 || got["decode/corrupt"] != 3 {
		t.Errorf("failures by class %v, the book's %v", got, want)
	}
	if d := end.Delivered(); d.Samples != 59 || d.Batches != 8 {
		t.Errorf("delivered %+v, want 59 samples in 8 batches", d)
	}
	bounds := []float64{1e-6, 1e-4, 1e-2, 1, 100}
	for _, s := range Stages() {
		cum, n, sum := end.Histogram(s, bounds)
		for i := 1; i < len(cum); i++ {
			if cum[i] < cum[i-1] {
				t.Errorf("%s: histogram not cumulative: %v", s, cum)
			}
		}
		if sc := end.Stage(s); n != uint64(sc.Items) || cum[len(cum)-1] != n || sum < 0 {
			t.Errorf("%s: histogram n %d sum %v cum %v, items %d", s, n, sum, cum, sc.Items)
		}
	}

	// The window after mid plus mid is the whole run.
	win := end.Since(mid)
	if win.Elapsed() <= 0 || win.Elapsed() >= end.Elapsed() {
		t.Errorf("window %v of a run of %v", win.Elapsed(), end.Elapsed())
	}
	sum := mid.Add(win)
	for _, s := range Stages() {
		a, b := sum.Stage(s), end.Stage(s)
		if a.Items != b.Items || a.Failures != b.Failures || a.Busy != b.Busy {
			t.Errorf("%s: mid + window = %+v, whole = %+v", s, a, b)
		}
	}
	if sum.Delivered().Samples != end.Delivered().Samples || sum.Elapsed() != end.Elapsed() {
		t.Errorf("mid + window delivered %+v in %v, whole %+v in %v", sum.Delivered(), sum.Elapsed(), end.Delivered(), end.Elapsed())
	}
	if got := len(end.Since(end).Failures()); got != 0 {
		t.Errorf("an empty window has %d failure classes", got)
	}
}

// TestTallyAddsPipelinesUp: a rank served by two pipelines in turn
// counts both, with the failures of both books.
func TestTallyAddsPipelinesUp(t *testing.T) {
	checkNoLeaks(t)
	mem, ds := makeDataset(t, 32, 2, 32)
	mem.Put(context.Background(), ds.Samples[5].Key, []byte("BAD"), storage.Cond{})
	cfg := smallConfig()
	cfg.MaxFailures = MaxFailureCount(10)
	tally := NewTally(0)
	if c := tally.Counters(); c.Rank() != 0 || c.Delivered().Samples != 0 {
		t.Errorf("empty tally: rank %d, %+v", c.Rank(), c.Delivered())
	}
	var each []Counters
	for range 2 {
		p, err := NewLoader(cfg, ds, testDeps(mem, fakeDecoders(0, 1)))
		if err != nil {
			t.Fatal(err)
		}
		tally.Use(p)
		if _, err := drainAll(t, mem, cfg, p); !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		each = append(each, p.Counters())
		p.Close()
	}
	tally.Use(nil)
	c := tally.Counters()
	if d := c.Delivered(); d.Samples != 62 || d.Batches != 8 {
		t.Errorf("tally delivered %+v, want 62 samples in 8 batches", d)
	}
	if d := c.Delivered(); d.LastAt <= each[0].Elapsed() || d.LastAt > c.Elapsed() {
		t.Errorf("tally's last batch at %v, pipelines ran %v + %v", d.LastAt, each[0].Elapsed(), each[1].Elapsed())
	}
	if c.Elapsed() != each[0].Elapsed()+each[1].Elapsed() {
		t.Errorf("tally elapsed %v, pipelines %v + %v", c.Elapsed(), each[0].Elapsed(), each[1].Elapsed())
	}
	if f := c.Failures(); len(f) != 1 || f[0].Count != 2 || f[0].Class != "corrupt" {
		t.Errorf("tally failures %+v", f)
	}
	rep := tally.Failures()
	if rep.Failed != 2 || rep.Attempted != 64 || len(rep.Groups) != 1 || rep.Groups[0].Count != 2 || len(rep.Records) != 2 {
		t.Errorf("tally report %+v", rep)
	}
	if st := c.Stats(); st.Samples != 62 || st.Stage(StageDecode).Workers != cfg.Decoders {
		t.Errorf("tally stats %+v", st)
	}
}
