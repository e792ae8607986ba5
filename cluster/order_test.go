package cluster

import (
	"fmt"
	"math"
	"testing"
	"testing/quick"
)

// checkPermutation fails t unless o is a permutation of [0, o.Len()) and
// Fill agrees with At.
func checkPermutation(t *testing.T, o Order) {
	t.Helper()
	n := o.Len()
	seen := make([]bool, n)
	for pos := int64(0); pos < n; pos++ {
		i := o.At(pos)
		if i < 0 || i >= n {
			t.Fatalf("At(%d) = %d outside [0, %d)", pos, i, n)
		}
		if seen[i] {
			t.Fatalf("At(%d) = %d repeats an earlier position", pos, i)
		}
		seen[i] = true
	}
	all := make([]int64, n)
	o.Fill(0, all)
	for pos, i := range all {
		if want := o.At(int64(pos)); i != want {
			t.Fatalf("Fill[%d] = %d, At = %d", pos, i, want)
		}
	}
}

func TestOrderIsPermutation(t *testing.T) {
	for _, tc := range []struct {
		n     int64
		block int
	}{
		{0, 1}, {0, 64}, {1, 1}, {1, 64}, {2, 1}, {2, 2}, {3, 2},
		{7, 64},       // n < block: one short block
		{64, 64},      // exactly one block
		{65, 64},      // a one-sample last block
		{97, 10},      // prime n
		{1009, 1},     // prime n, block 1: pure block shuffle
		{1009, 1009},  // one block: pure within-block shuffle
		{1009, 32},    // prime n, short last block
		{4096, 256},   // even
		{10007, 500},  // prime
		{65537, 4096}, // 2^16+1: domain just over a power of two
	} {
		for _, seed := range []uint64{0, 1, 42, 1 << 63} {
			for _, epoch := range []int{0, 1, 7} {
				for _, window := range []int{1, 3, 128} {
					t.Run(fmt.Sprintf("n=%d/block=%d/window=%d/seed=%d/epoch=%d", tc.n, tc.block, window, seed, epoch), func(t *testing.T) {
						checkPermutation(t, NewOrder(seed, epoch, tc.n, tc.block, window))
					})
				}
			}
		}
	}
}

// naiveOrder materializes the same order the obvious way: list the blocks
// in shuffled order, then each block's samples in shuffled order. It shares
// only the keyed bijections with Order, so it checks the position
// arithmetic around the short block.
func naiveOrder(o Order) []int64 {
	out := make([]int64, 0, o.n)
	for slot := int64(0); slot < o.nBlocks; slot++ {
		b := int64(o.blocks.permute(uint64(slot)))
		w := o.within(b)
		for off := uint64(0); off < w.m; off++ {
			out = append(out, b*o.block+int64(w.permute(off)))
		}
	}
	return out
}

func TestOrderMatchesNaive(t *testing.T) {
	f := func(seed uint64, epoch uint8, n uint16, block uint8) bool {
		n %= 3000 // enough for many blocks; keeps the naive side quick
		o := NewOrder(seed, int(epoch), int64(n), int(block)+1, 1)
		want := naiveOrder(o)
		got := make([]int64, o.Len())
		o.Fill(0, got)
		for pos := range want {
			if o.At(int64(pos)) != want[pos] || got[pos] != want[pos] {
				t.Logf("seed=%d epoch=%d n=%d block=%d: pos %d: At=%d Fill=%d naive=%d",
					seed, epoch, n, block+1, pos, o.At(int64(pos)), got[pos], want[pos])
				return false
			}
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 500}); err != nil {
		t.Fatal(err)
	}
}

func TestOrderFillRanges(t *testing.T) {
	o := NewOrder(3, 2, 1000, 37, 1)
	all := make([]int64, o.Len())
	o.Fill(0, all)
	f := func(from, length uint16) bool {
		a := int64(from) % o.Len()
		l := int64(length) % (o.Len() - a + 1)
		dst := make([]int64, l)
		o.Fill(a, dst)
		for i := range dst {
			if dst[i] != all[a+int64(i)] {
				return false
			}
		}
		return true
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
}

func TestFeistelInvert(t *testing.T) {
	f := func(m uint32, key uint64, x uint32) bool {
		if m == 0 {
			return true
		}
		fe := newFeistel(uint64(m), key)
		x %= m
		y := fe.permute(uint64(x))
		return y < uint64(m) && fe.invert(y) == uint64(x)
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
}

func TestOrderDeterministicAndEpochsDiffer(t *testing.T) {
	const n, block = 5000, 100
	seq := func(seed uint64, epoch int) []int64 {
		s := make([]int64, n)
		NewOrder(seed, epoch, n, block, 1).Fill(0, s)
		return s
	}
	a, b := seq(9, 0), seq(9, 0)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same (seed, epoch) differs at %d", i)
		}
	}
	for _, other := range [][]int64{seq(9, 1), seq(10, 0)} {
		same := 0
		for i := range a {
			if a[i] == other[i] {
				same++
			}
		}
		// A random permutation has about one fixed point relative to
		// another; allow plenty of slack, fail on "barely shuffled".
		if same > n/50 {
			t.Errorf("%d of %d positions agree between different keys", same, n)
		}
	}
	identity := 0
	for i := range a {
		if a[i] == int64(i) {
			identity++
		}
	}
	if identity > n/50 {
		t.Errorf("%d of %d positions unshuffled", identity, n)
	}
}

// TestOrderLocality checks the reason for blocks: a run of block positions
// touches at most two blocks of the manifest.
func TestOrderLocality(t *testing.T) {
	const n, block = 10000, 250
	o := NewOrder(1, 0, n, block, 1)
	buf := make([]int64, block)
	for from := int64(0); from+block <= n; from += 97 {
		o.Fill(from, buf)
		blocks := map[int64]bool{}
		for _, i := range buf {
			blocks[i/block] = true
		}
		if len(blocks) > 2 {
			t.Fatalf("positions [%d, %d) touch %d blocks", from, from+block, len(blocks))
		}
	}
}

// TestOrderGolden pins the order: a change here changes every job's data
// order and breaks resume of running jobs, so it must be deliberate.
func TestOrderGolden(t *testing.T) {
	o := NewOrder(42, 3, 20, 6, 1)
	got := make([]int64, 20)
	o.Fill(0, got)
	want := goldenOrder
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order changed:\n got %v\nwant %v", got, want)
		}
	}
}

var goldenOrder = []int64{1, 4, 0, 2, 3, 5, 8, 11, 7, 9, 6, 10, 19, 18, 16, 14, 13, 17, 15, 12}

func TestNewOrderPanics(t *testing.T) {
	for _, tc := range []struct {
		n      int64
		block  int
		epoch  int
		window int
	}{{-1, 1, 0, 1}, {1, 0, 0, 1}, {1, 1, -1, 1}, {1, 1, 0, 0}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewOrder(n=%d, block=%d, window=%d, epoch=%d) did not panic", tc.n, tc.block, tc.window, tc.epoch)
				}
			}()
			NewOrder(0, tc.epoch, tc.n, tc.block, tc.window)
		}()
	}
}

func BenchmarkOrderAt(b *testing.B) {
	o := NewOrder(1, 0, 10_000_000, 4096, 1)
	var sink int64
	pos := int64(0)
	for b.Loop() {
		sink += o.At(pos)
		pos += 7919
		if pos >= o.Len() {
			pos -= o.Len()
		}
	}
	_ = sink
}

func BenchmarkOrderFill(b *testing.B) {
	o := NewOrder(1, 0, 10_000_000, 4096, 1)
	dst := make([]int64, 256)
	from := int64(0)
	for b.Loop() {
		o.Fill(from, dst)
		from += 256
		if from+256 > o.Len() {
			from = 0
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(dst)), "ns/sample")
}

// TestOrderUniform checks a marginal of the shuffle: over many seeds,
// where a given sample lands (and which sample lands first) is close to
// uniform, for a small domain where a weak bijection would show.
func TestOrderUniform(t *testing.T) {
	const n, trials = 10, 20000
	var where, first [n]int
	for seed := range uint64(trials) {
		o := NewOrder(seed, 0, n, 1, 1)
		first[o.At(0)]++
		for pos := range int64(n) {
			if o.At(pos) == 3 {
				where[pos]++
			}
		}
	}
	// Expected 2000 each, sd ~42: 6 sd is a bias, not bad luck.
	for i := range n {
		for _, c := range []struct {
			name  string
			count int
		}{{"sample 3 at position", where[i]}, {"first sample is", first[i]}} {
			if c.count < 2000-250 || c.count > 2000+250 {
				t.Errorf("%s %d: %d of %d, want ~%d", c.name, i, c.count, trials, trials/n)
			}
		}
	}
}

// TestOrderShortBlock: ShortBlock places the short block; around it every
// run of Block positions on the grid holds exactly one block.
func TestOrderShortBlock(t *testing.T) {
	for _, tc := range []struct{ n, block int64 }{{100, 16}, {1000, 7}, {64, 16}, {5, 8}, {1, 1}, {33, 32}} {
		for e := range 5 {
			o := NewOrder(3, e, tc.n, int(tc.block), 1)
			at, n := o.ShortBlock()
			if want := tc.n % tc.block; n != want {
				t.Fatalf("n=%d block=%d: short block of %d, want %d", tc.n, tc.block, n, want)
			}
			lastBlock := (tc.n - 1) / tc.block
			for p := int64(0); p < tc.n; {
				end := p + tc.block
				if n > 0 && p == at {
					end = at + n
				}
				b := o.At(p) / tc.block
				for q := p; q < end; q++ {
					if o.At(q)/tc.block != b {
						t.Fatalf("n=%d block=%d epoch %d: positions [%d, %d) hold blocks %d and %d", tc.n, tc.block, e, p, end, b, o.At(q)/tc.block)
					}
				}
				if (n > 0 && p == at) != (b == lastBlock && n > 0) {
					t.Fatalf("n=%d block=%d epoch %d: short block at %d, block %d at %d", tc.n, tc.block, e, at, b, p)
				}
				p = end
			}
		}
	}
}

// naiveWindowOrder materializes a windowed order the obvious way: the
// order without windows, cut into windows of whole block slots (as many
// windows as ceil(blocks/window), their sizes in blocks as even as can
// be), each window's run of positions shuffled by its own bijection. It
// shares only the keyed bijections with Order, so it checks the window
// arithmetic around the short block.
func naiveWindowOrder(o Order) []int64 {
	plain := o
	plain.window = 1
	base := naiveOrder(plain)
	if o.window == 1 || o.n == 0 {
		return base
	}
	// Block slot lengths, in order: full except the short block's.
	lens := make([]int64, o.nBlocks)
	for s := range lens {
		lens[s] = o.block
		if int64(s) == o.shortSlot {
			lens[s] = o.lastLen
		}
	}
	k := (o.nBlocks + o.window - 1) / o.window
	out := make([]int64, 0, o.n)
	slot, start := int64(0), int64(0)
	for j := range k {
		next := (j + 1) * o.nBlocks / k // window j ends before this slot
		var l int64
		for ; slot < next; slot++ {
			l += lens[slot]
		}
		w := Range{start, start + l}
		f := o.shuffle(w)
		for u := range l {
			out = append(out, base[start+int64(f.permute(uint64(u)))])
		}
		start += l
	}
	return out
}

func TestOrderWindowsMatchNaive(t *testing.T) {
	f := func(seed uint64, epoch uint8, n uint16, block, window uint8) bool {
		n %= 3000
		o := NewOrder(seed, int(epoch), int64(n), int(block%40)+1, int(window%20)+1)
		want := naiveWindowOrder(o)
		got := make([]int64, o.Len())
		o.Fill(0, got)
		for pos := range want {
			if o.At(int64(pos)) != want[pos] || got[pos] != want[pos] {
				t.Logf("seed=%d epoch=%d n=%d block=%d window=%d: pos %d: At=%d Fill=%d naive=%d",
					seed, epoch, n, o.Block(), o.Window(), pos, o.At(int64(pos)), got[pos], want[pos])
				return false
			}
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 500}); err != nil {
		t.Fatal(err)
	}
}

// TestOrderWindows checks what windows promise: the epoch is cut into
// ceil(blocks/Window) runs of positions (WindowAt), each holding exactly
// the samples of at most Window whole blocks, and their sizes in blocks
// differ by at most one, so no window is a small leftover.
func TestOrderWindows(t *testing.T) {
	for _, tc := range []struct {
		n             int64
		block, window int
	}{
		{3072, 16, 128}, {5000, 16, 128}, // the mixing sets, default window
		{1000, 7, 4}, {1001, 10, 3}, {64, 16, 8}, {65, 16, 2}, {5, 8, 4},
		{100, 10, 10}, {101, 10, 10}, {1, 2, 2}, {10007, 64, 16},
	} {
		for e := range 4 {
			o := NewOrder(9, e, tc.n, tc.block, tc.window)
			nBlocks := (tc.n + int64(tc.block) - 1) / int64(tc.block)
			wantWindows := (nBlocks + int64(tc.window) - 1) / int64(tc.window)
			var windows, minB, maxB int64 = 0, 1 << 62, 0
			inWindow := map[int64]int64{} // block -> the window holding it
			for p := int64(0); p < tc.n; {
				w := o.WindowAt(p)
				if w.Start != p || w.End <= p || w.End > tc.n {
					t.Fatalf("n=%d block=%d window=%d epoch %d: WindowAt(%d) = %v", tc.n, tc.block, tc.window, e, p, w)
				}
				blocks := map[int64]int64{}
				for q := w.Start; q < w.End; q++ {
					if got := o.WindowAt(q); got != w {
						t.Fatalf("WindowAt(%d) = %v inside %v", q, got, w)
					}
					b := o.At(q) / int64(tc.block)
					blocks[b]++
					if j, ok := inWindow[b]; ok && j != windows {
						t.Fatalf("n=%d block=%d window=%d epoch %d: block %d in windows %d and %d", tc.n, tc.block, tc.window, e, b, j, windows)
					}
					inWindow[b] = windows
				}
				for b, c := range blocks {
					if size := min(int64(tc.block), tc.n-b*int64(tc.block)); c != size {
						t.Fatalf("window %v holds %d of block %d's %d samples", w, c, b, size)
					}
				}
				nb := int64(len(blocks))
				minB, maxB = min(minB, nb), max(maxB, nb)
				windows++
				p = w.End
			}
			if windows != wantWindows || maxB > int64(tc.window) || maxB-minB > 1 {
				t.Errorf("n=%d block=%d window=%d epoch %d: %d windows of %d to %d blocks; want %d of at most %d, differing by at most one",
					tc.n, tc.block, tc.window, e, windows, minB, maxB, wantWindows, tc.window)
			}
		}
	}
}

// TestOrderWindowsMix checks the reason for windows: a run of positions
// the size of a batch draws from many blocks, not from one or two.
func TestOrderWindowsMix(t *testing.T) {
	const n, block, window, batch = 8192, 16, 128, 32
	o := NewOrder(1, 0, n, block, window)
	buf := make([]int64, batch)
	var blocks int
	for from := int64(0); from+batch <= n; from += batch {
		o.Fill(from, buf)
		seen := map[int64]bool{}
		for _, i := range buf {
			seen[i/block] = true
		}
		blocks += len(seen)
	}
	// Drawing 32 of 128 equally likely blocks: 128*(1-(127/128)^32),
	// about 28.4 distinct; a batch of the order without windows sees 2.
	if mean := float64(blocks) / (n / batch); mean < 26 {
		t.Errorf("a batch draws from %.1f blocks on average, want about 28", mean)
	}
}

// TestOrderWindowBlockOne: with Block 1 the order is a full shuffle
// whatever the window, the same as before windows existed.
func TestOrderWindowBlockOne(t *testing.T) {
	for _, window := range []int{2, 128} {
		a, b := NewOrder(5, 1, 1000, 1, 1), NewOrder(5, 1, 1000, 1, window)
		if b.Window() != 1 {
			t.Errorf("window %d with block 1: Window() = %d, want 1", window, b.Window())
		}
		for p := range int64(1000) {
			if a.At(p) != b.At(p) {
				t.Fatalf("window %d with block 1 changes position %d: %d, want %d", window, p, b.At(p), a.At(p))
			}
		}
	}
}

// TestOrderWindowArithmetic checks firstSlot and windowOf against each
// other for block counts where j*nBlocks overflows 64 bits.
func TestOrderWindowArithmetic(t *testing.T) {
	f := func(nBlocks uint64, window uint32, s uint64) bool {
		nBlocks = nBlocks>>2 + 2 // up to 2^62: n up to 2^63 with block 2
		o := Order{nBlocks: int64(nBlocks), window: int64(window%4096) + 2}
		o.nWindows = (o.nBlocks + o.window - 1) / o.window
		slot := int64(s % nBlocks)
		j := o.windowOf(slot)
		if j < 0 || j >= o.nWindows || o.firstSlot(j) > slot || o.firstSlot(j+1) <= slot {
			t.Logf("nBlocks=%d window=%d slot %d: window %d, slots [%d, %d)", o.nBlocks, o.window, slot, j, o.firstSlot(j), o.firstSlot(j+1))
			return false
		}
		return o.firstSlot(0) == 0 && o.firstSlot(o.nWindows) == o.nBlocks
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 5000}); err != nil {
		t.Fatal(err)
	}
}

// TestOrderWindowGolden pins the windowed order, as TestOrderGolden pins
// the one without windows.
func TestOrderWindowGolden(t *testing.T) {
	o := NewOrder(42, 3, 20, 3, 3)
	got := make([]int64, 20)
	o.Fill(0, got)
	want := goldenWindowOrder
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order changed:\n got %v\nwant %v", got, want)
		}
	}
}

var goldenWindowOrder = []int64{0, 2, 18, 19, 1, 8, 7, 15, 17, 16, 6, 10, 9, 11, 12, 14, 13, 4, 5, 3}

func BenchmarkOrderAtWindows(b *testing.B) {
	o := NewOrder(1, 0, 10_000_000, PackedBlock, DefaultWindow)
	var sink int64
	pos := int64(0)
	for b.Loop() {
		sink += o.At(pos)
		pos += 7919
		if pos >= o.Len() {
			pos -= o.Len()
		}
	}
	_ = sink
}

func BenchmarkOrderFillWindows(b *testing.B) {
	o := NewOrder(1, 0, 10_000_000, PackedBlock, DefaultWindow)
	dst := make([]int64, 256)
	from := int64(0)
	for b.Loop() {
		o.Fill(from, dst)
		from += 256
		if from+256 > o.Len() {
			from = 0
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(dst)), "ns/sample")
}

// BenchmarkOrderMixing prints how well orders mix a dataset sorted by
// class (ImageFolder order): per batch of 32 consecutive positions, the
// mean distinct classes (distinct/batch, and as a percentage of a full
// shuffle's, vs-full-%) and the most frequent class's count
// (max-class/batch), against the samples a reader holds at once
// (held-samples: block x window). The table in docs/packed-datasets.md
// comes from
//
//	go test ./cluster -run '^$' -bench OrderMixing -benchtime 1x
func BenchmarkOrderMixing(b *testing.B) {
	const batch = 32
	mix := func(classes, per int64, block, window int, seeds int) (distinct, most float64) {
		n := classes * per
		buf := make([]int64, batch)
		count := make([]int, classes)
		var batches int
		for seed := range uint64(seeds) {
			o := NewOrder(seed, 0, n, block, window)
			for from := int64(0); from+batch <= n; from += batch {
				o.Fill(from, buf)
				clear(count)
				d, m := 0, 0
				for _, i := range buf {
					c := i / per
					if count[c] == 0 {
						d++
					}
					count[c]++
					m = max(m, count[c])
				}
				distinct += float64(d)
				most += float64(m)
				batches++
			}
		}
		return distinct / float64(batches), most / float64(batches)
	}
	for _, set := range []struct {
		classes, per int64
		seeds        int
	}{{48, 64, 8}, {100, 50, 8}, {1000, 1300, 1}} {
		full, _ := mix(set.classes, set.per, 1, 1, set.seeds)
		for _, c := range []struct{ block, window int }{
			{1, 1}, {256, 1}, {256, 8}, {256, 16}, {64, 32}, {16, 64}, {PackedBlock, DefaultWindow}, {8, 128},
		} {
			b.Run(fmt.Sprintf("set=%dx%d/block=%d/window=%d", set.classes, set.per, c.block, c.window), func(b *testing.B) {
				var d, m float64
				for b.Loop() {
					d, m = mix(set.classes, set.per, c.block, c.window, set.seeds)
				}
				b.ReportMetric(d, "distinct/batch")
				b.ReportMetric(100*d/full, "vs-full-%")
				b.ReportMetric(m, "max-class/batch")
				b.ReportMetric(float64(c.block*c.window), "held-samples")
			})
		}
	}
}

// TestOrderHugeWindow: a window larger than the epoch is one window.
func TestOrderHugeWindow(t *testing.T) {
	o := NewOrder(1, 0, 1000, 16, math.MaxInt)
	if w := o.WindowAt(999); w != (Range{0, 1000}) {
		t.Fatalf("window %v, want the whole epoch", w)
	}
	checkPermutation(t, o)
}
