package actors

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestParseFailureBudget(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    string
		allowed int64 // of 1000 total
		bad     bool
	}{
		{in: "100", want: "100", allowed: 100},
		{in: "0", want: "0", allowed: 0},
		{in: "0.01", want: "1%", allowed: 10},
		{in: "1%", want: "1%", allowed: 10},
		{in: " 2.5% ", want: "2.5%", allowed: 25},
		{in: "1e-3", want: "0.1%", allowed: 1},
		{in: "1.0", want: "100%", allowed: 1000},
		{in: "-1", bad: true},
		{in: "1.5", bad: true},
		{in: "150%", bad: true},
		{in: "", bad: true},
		{in: "lots", bad: true},
		{in: "NaN", bad: true},
	} {
		b, err := ParseFailureBudget(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("%q: accepted as %v", tc.in, b)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if b.String() != tc.want || b.Allowed(0, 1000) != tc.allowed {
			t.Errorf("%q: %v allowing %d; want %s allowing %d", tc.in, b, b.Allowed(0, 1000), tc.want, tc.allowed)
		}
		// Round trip through text.
		txt, _ := b.MarshalText()
		var b2 FailureBudget
		if err := b2.UnmarshalText(txt); err != nil || b2.Allowed(0, 1000) != b.Allowed(0, 1000) {
			t.Errorf("%q: round trip via %q: %v %v", tc.in, txt, b2, err)
		}
	}
	// Without a known total, a fraction judges the rate seen so far, and
	// allows 10 failures until 10/fraction samples have been attempted.
	for _, c := range []struct {
		fraction  float64
		attempted int64
		want      int64
	}{{0.1, 50, 10}, {0.1, 100, 10}, {0.1, 250, 25}, {0.3, 6, 10}, {0.01, 5000, 50}, {0, 1000, 0}} {
		if got := MaxFailureFraction(c.fraction).Allowed(c.attempted, 0); got != c.want {
			t.Errorf("%v of %d attempted, total unknown: %d allowed, want %d", c.fraction, c.attempted, got, c.want)
		}
	}
}

func TestConfigDefaultsAndValidate(t *testing.T) {
	var zero Config
	if err := zero.Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	d := zero.WithDefaults()
	if d.BatchSize != 32 || d.Slots != 4 || d.FetchConcurrency != 16 || d.DecodeQueue != 2 || d.Epochs != 1 ||
		d.Sample.Height != 224 || d.MaxFailures.String() != "1%" {
		t.Errorf("defaults: %+v", d)
	}
	if d.SlotBytes() != 32*3*224*224 {
		t.Errorf("SlotBytes %d", d.SlotBytes())
	}
	bad := Config{BatchSize: -1, Slots: -1, FetchConcurrency: -1, Decoders: -1, DecodeQueue: -1, Epochs: -1,
		FirstEpoch: -1, Sample: Shape{Height: -1, Layout: 9}, MaxFailures: MaxFailureFraction(2)}
	err := bad.Validate()
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, f := range []string{"BatchSize", "Slots", "FetchConcurrency", "Decoders", "DecodeQueue", "Epochs", "FirstEpoch", "Sample", "Layout", "MaxFailures"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("Validate does not report %s: %v", f, err)
		}
	}
	huge := Config{BatchSize: 1 << 20, Sample: Shape{Height: 4096, Width: 4096}}
	if err := huge.Validate(); err == nil || !strings.Contains(err.Error(), "slot limit") {
		t.Errorf("huge slot: %v", err)
	}
	var l Layout
	if err := json.Unmarshal([]byte(`"nhwc"`), &l); err != nil || l != NHWC {
		t.Errorf("layout from JSON: %v %v", l, err)
	}
	if got := (Shape{Height: 2, Width: 3, Layout: NHWC}).Dims(5); got != [4]int{5, 2, 3, 3} {
		t.Errorf("NHWC dims %v", got)
	}
}

// TestFeederIsDistributedSampler: the ranks' streams partition the epoch's
// order (padded with its start), every rank the same length.
func TestFeederIsDistributedSampler(t *testing.T) {
	for _, tc := range []struct{ n, world int }{{10, 3}, {9, 3}, {1, 4}, {0, 2}, {17, 1}} {
		_, ds := makeDataset(t, tc.n, 2, 1)
		cfg := Config{Epochs: 2, Seed: 5}
		order := testOrder(5, 1, int64(tc.n))
		counts := map[int64]int{}
		pads := 0
		for r := 0; r < tc.world; r++ {
			f, err := NewFeeder(ds, cfg, r, tc.world, testOrder)
			if err != nil {
				t.Fatal(err)
			}
			first := f.Next(3)
			if first.Epoch != 0 {
				t.Fatalf("first epoch %d", first.Epoch)
			}
			for !first.StreamEnd {
				first = f.Next(3)
			}
			var items []Item
			for {
				w := f.Next(3)
				if w.Epoch != 1 {
					t.Fatalf("epoch %d", w.Epoch)
				}
				items = append(items, w.Items...)
				if w.StreamEnd {
					if !w.Last {
						t.Fatal("last epoch's end is not Last")
					}
					break
				}
			}
			if int64(len(items)) != f.StreamLen() {
				t.Fatalf("n %d world %d rank %d: %d items, stream %d", tc.n, tc.world, r, len(items), f.StreamLen())
			}
			for p, it := range items {
				g := int64(r + p*tc.world)
				if it.Pos != int64(p) || it.Index != order.At(g%int64(tc.n)) || it.Pad != (g >= int64(tc.n)) {
					t.Fatalf("rank %d pos %d: %+v (global %d)", r, p, it, g)
				}
				if it.Pad {
					pads++
				} else {
					counts[it.Index]++
				}
			}
		}
		for i := int64(0); i < int64(tc.n); i++ {
			if counts[i] != 1 {
				t.Errorf("n %d world %d: sample %d %d times", tc.n, tc.world, i, counts[i])
			}
		}
		if tc.n > 0 {
			if want := (tc.n+tc.world-1)/tc.world*tc.world - tc.n; pads != want {
				t.Errorf("n %d world %d: %d pads, want %d", tc.n, tc.world, pads, want)
			}
		}
	}
}

// TestHistogramQuantiles against sorting, within the 1/16 bucket error.
func TestHistogramQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 20; trial++ {
		var h histogram
		var vals []float64
		n := 1 + rng.IntN(5000)
		for i := 0; i < n; i++ {
			v := time.Duration(math.Exp(rng.Float64() * 20)) // 1 ns .. 0.5 s
			h.record(v)
			vals = append(vals, float64(v))
		}
		sort.Float64s(vals)
		for _, q := range []float64{0.5, 0.9, 0.99, 1} {
			want := vals[max(0, int(math.Ceil(q*float64(n)))-1)]
			got := h.quantile(q)
			if math.Abs(got-want) > want/16+1 {
				t.Fatalf("n %d q %v: got %v want %v", n, q, got, want)
			}
		}
	}
}
