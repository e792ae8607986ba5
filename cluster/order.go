package cluster

import (
	"fmt"
	"math/bits"
)

// Order is the sample order of one epoch: a permutation of [0, N) fixed by
// (seed, epoch) alone. It does not depend on how many nodes or ranks exist,
// so a run is reproducible across cluster sizes and a resume with a
// different world size continues the same sequence.
//
// Locality is kept the way Mosaic Streaming does it: the sample index space
// is cut into blocks of Block consecutive indices (objects next to each
// other in the manifest, often in the same tar shard or prefix), the blocks
// are shuffled, then the samples within each block are shuffled.
//
// Mixing comes from windows: the shuffled blocks are grouped, in block
// order, into windows of at most Window blocks, and the positions of each
// window are shuffled once more, so that a run of positions (a batch)
// draws from every block of its window at once rather than from one or
// two. A manifest sorted by class (ImageFolder) would otherwise give
// batches of the few classes of one or two blocks. A window's samples are
// still consumed together: its positions are one contiguous run, so a
// reader holds the window's blocks (a packed dataset's chunks) at once and
// no others.
// Windows are balanced: ceil(blocks/Window) of them, each of
// floor(blocks/windows) or one more consecutive block slots, so the last
// one is not a small leftover that mixes poorly. Window 1 (and any window
// with Block 1, a full shuffle already) is the order without windows.
//
// All three shuffles are keyed bijections (a balanced Feistel network with
// cycle walking), evaluated on demand: an Order is a few words whatever N
// is, and At costs O(1) time and memory. The zero Order is the empty
// epoch.
//
// An Order is an immutable value, safe for concurrent use.
type Order struct {
	n         int64
	block     int64
	nBlocks   int64
	lastLen   int64 // length of block nBlocks-1, in (0, block]
	shortSlot int64 // slot where the last (possibly short) block lands
	blocks    feistel
	key       uint64 // per-epoch key; within-block and window keys derive from it
	window    int64  // blocks per window, as asked (normalized: 1 when block is 1)
	nWindows  int64  // ceil(nBlocks/window)
}

// NewOrder returns the order of epoch epoch of an n-sample dataset cut
// into blocks of block samples, interleaved window blocks at a time. It
// panics if n < 0, block < 1, window < 1 or epoch < 0: those are
// configuration errors that Config.Validate reports first.
func NewOrder(seed uint64, epoch int, n int64, block, window int) Order {
	if n < 0 || block < 1 || window < 1 || epoch < 0 {
		panic(fmt.Sprintf("cluster: NewOrder(n=%d, block=%d, window=%d, epoch=%d): need n >= 0, block >= 1, window >= 1, epoch >= 0", n, block, window, epoch))
	}
	if block == 1 {
		window = 1 // a full shuffle has nothing to interleave
	}
	if n == 0 {
		return Order{block: int64(block), window: int64(window)}
	}
	o := Order{n: n, block: int64(block), window: int64(window)}
	o.nBlocks = (n + o.block - 1) / o.block
	o.lastLen = n - (o.nBlocks-1)*o.block
	o.key = mix64(mix64(seed^0x6c6f6e6773686f72) ^ uint64(epoch)) // "longshor"
	o.blocks = newFeistel(uint64(o.nBlocks), mix64(o.key^0xb10c))
	// The short block may land anywhere among the slots; the positions
	// after it shift back by block-lastLen. Find its slot once here.
	o.shortSlot = int64(o.blocks.invert(uint64(o.nBlocks - 1)))
	o.nWindows = (o.nBlocks-1)/o.window + 1 // ceil, without overflow for a huge window
	return o
}

// Len returns N, the number of positions (and samples) in the epoch.
func (o Order) Len() int64 { return o.n }

// Block returns the block size the order was built with.
func (o Order) Block() int { return int(o.block) }

// Window returns the most blocks a window interleaves: the window the
// order was built with, or 1 when its block is 1.
func (o Order) Window() int { return int(o.window) }

// ShortBlock returns the block slot of the epoch's short block: with
// Window 1, the positions [start, start+n) hold the last block of the
// index space, whose n < Block() samples are fewer than a full block's
// (with a larger window they are spread over its window, WindowAt(start)).
// n is 0 when N is a multiple of the block (every block is full). Before
// start, block slot k covers positions [k*Block, (k+1)*Block); after it,
// slots start at start+n+k*Block.
func (o Order) ShortBlock() (start, n int64) {
	if o.n == 0 || o.lastLen == o.block {
		return 0, 0
	}
	return o.shortSlot * o.block, o.lastLen
}

// WindowAt returns the window that holds position pos (0 <= pos < Len()):
// the run of positions whose samples are the window's blocks', shuffled
// together. With Window 1 it is pos's block. It panics outside [0, Len()).
func (o Order) WindowAt(pos int64) Range {
	if pos < 0 || pos >= o.n {
		panic(fmt.Sprintf("cluster: Order.WindowAt(%d) outside [0, %d)", pos, o.n))
	}
	slot, _ := o.locate(pos)
	j := o.windowOf(slot)
	return Range{o.slotStart(o.firstSlot(j)), o.slotStart(o.firstSlot(j + 1))}
}

// At returns the sample index at position pos of the epoch.
// It panics if pos is outside [0, Len()).
func (o Order) At(pos int64) int64 {
	if pos < 0 || pos >= o.n {
		panic(fmt.Sprintf("cluster: Order.At(%d) outside [0, %d)", pos, o.n))
	}
	if o.window > 1 {
		w := o.WindowAt(pos)
		pos = w.Start + int64(o.shuffle(w).permute(uint64(pos-w.Start)))
	}
	return o.blockAt(pos)
}

// Fill sets dst[i] = At(from+i) for every i in dst. It is At for a batch:
// the per-window and per-block work is done once per window or block the
// range touches rather than once per position. It panics if the range
// leaves [0, Len()).
func (o Order) Fill(from int64, dst []int64) {
	if len(dst) == 0 {
		return
	}
	if from < 0 || from+int64(len(dst)) > o.n {
		panic(fmt.Sprintf("cluster: Order.Fill[%d, %d) outside [0, %d)", from, from+int64(len(dst)), o.n))
	}
	if o.window > 1 {
		for i := 0; i < len(dst); {
			pos := from + int64(i)
			w := o.WindowAt(pos)
			f := o.shuffle(w)
			for ; i < len(dst) && pos < w.End; i, pos = i+1, pos+1 {
				dst[i] = o.blockAt(w.Start + int64(f.permute(uint64(pos-w.Start))))
			}
		}
		return
	}
	for i := 0; i < len(dst); {
		slot, off := o.locate(from + int64(i))
		b := int64(o.blocks.permute(uint64(slot)))
		w := o.within(b)
		base := b * o.block
		for ; i < len(dst) && off < int64(w.m); i, off = i+1, off+1 {
			dst[i] = base + int64(w.permute(uint64(off)))
		}
	}
}

// blockAt is the order without windows: the sample at position pos of
// the shuffled blocks, each shuffled within.
func (o Order) blockAt(pos int64) int64 {
	slot, off := o.locate(pos)
	b := int64(o.blocks.permute(uint64(slot)))
	return b*o.block + int64(o.within(b).permute(uint64(off)))
}

// shuffle returns the permutation of window w's positions, keyed by
// (seed, epoch, the window's first position).
func (o Order) shuffle(w Range) feistel {
	return newFeistel(uint64(w.Len()), mix64(o.key^0x77696e646f77^uint64(w.Start)*0xd1b54a32d192ed03)) // "window"
}

// firstSlot returns the first block slot of window j, for j in [0,
// nWindows]: floor(j*nBlocks/nWindows), so windows differ in size by at
// most one block. (128-bit arithmetic: j*nBlocks may not fit 64 bits.)
func (o Order) firstSlot(j int64) int64 {
	hi, lo := bits.Mul64(uint64(j), uint64(o.nBlocks))
	q, _ := bits.Div64(hi, lo, uint64(o.nWindows)) // hi < nWindows: j <= nWindows
	return int64(q)
}

// windowOf returns the window holding block slot s: the largest j with
// firstSlot(j) <= s, which is floor(((s+1)*nWindows-1)/nBlocks).
func (o Order) windowOf(s int64) int64 {
	hi, lo := bits.Mul64(uint64(s+1), uint64(o.nWindows))
	lo, borrow := bits.Sub64(lo, 1, 0)
	hi -= borrow
	q, _ := bits.Div64(hi, lo, uint64(o.nBlocks)) // hi < nBlocks: s < nBlocks, nWindows <= nBlocks
	return int64(q)
}

// slotStart returns the first position of block slot s, for s in [0,
// nBlocks] (nBlocks: the end of the epoch).
func (o Order) slotStart(s int64) int64 {
	if s > o.shortSlot {
		return s*o.block - (o.block - o.lastLen)
	}
	return s * o.block
}

// locate maps a position to its block slot and the offset within the
// block that occupies the slot, accounting for the short block's slot.
func (o Order) locate(pos int64) (slot, off int64) {
	split := o.shortSlot * o.block
	switch {
	case pos < split:
		return pos / o.block, pos % o.block
	case pos < split+o.lastLen:
		return o.shortSlot, pos - split
	default:
		p := pos - split - o.lastLen
		return o.shortSlot + 1 + p/o.block, p % o.block
	}
}

// within returns the permutation of block b's offsets, keyed by
// (seed, epoch, b) so every block is shuffled differently.
func (o Order) within(b int64) feistel {
	m := o.block
	if b == o.nBlocks-1 {
		m = o.lastLen
	}
	return newFeistel(uint64(m), mix64(o.key^uint64(b)*0x9e3779b97f4a7c15))
}

// feistelRounds: 4 rounds make a Feistel network a pseudorandom
// permutation (Luby-Rackoff); 2 more cost little and mix small domains
// (a few bits per half) noticeably better.
const feistelRounds = 6

// feistel is a keyed bijection on [0, m): a balanced Feistel network on the
// smallest even-width bit domain 2^(2h) >= m, cycle-walked back into [0, m)
// (since 2^(2h) < 4m, on average fewer than 4 walks).
type feistel struct {
	m    uint64
	half uint   // bits per half
	mask uint64 // (1<<half)-1
	key  uint64
}

func newFeistel(m, key uint64) feistel {
	f := feistel{m: m, key: key}
	if m <= 1 {
		return f
	}
	w := uint(bits.Len64(m - 1))
	w += w & 1
	f.half = w / 2
	f.mask = 1<<f.half - 1
	return f
}

func (f feistel) round(r int, x uint64) uint64 {
	return mix64(x+f.key+uint64(r+1)*0x9e3779b97f4a7c15) & f.mask
}

func (f feistel) permute(x uint64) uint64 {
	if f.m <= 1 {
		return x
	}
	for {
		l, r := x>>f.half, x&f.mask
		for i := 0; i < feistelRounds; i++ {
			l, r = r, l^f.round(i, r)
		}
		x = l<<f.half | r
		if x < f.m {
			return x
		}
	}
}

func (f feistel) invert(y uint64) uint64 {
	if f.m <= 1 {
		return y
	}
	for {
		l, r := y>>f.half, y&f.mask
		for i := feistelRounds - 1; i >= 0; i-- {
			l, r = r^f.round(i, l), l
		}
		y = l<<f.half | r
		if y < f.m {
			return y
		}
	}
}

// mix64 is splitmix64's finalizer: a bijection on uint64 with full
// avalanche, cheap enough to call per Feistel round.
func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
