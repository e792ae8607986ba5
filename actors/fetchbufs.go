package actors

import "github.com/asynkron/protoactor-go/actor"

// fetchBufs is a rank's account of its fetch buffers' memory (the shell
// side of Config.FetchBytes): the bytes they hold (their capacity, which
// is what the heap keeps), the mean object size read, and the limit on
// buffers in use it asks the core for.
type fetchBufs struct {
	held  int64   // Σ cap(rankActor.bufs)
	mean  float64 // of the objects read (a moving mean); 0 before the first
	limit int     // the core's buffer limit last set; 0: none
}

// keepMin is the capacity a buffer may always keep, however small the
// mean object: below it reallocating costs more than it saves.
const keepMin = 16 << 10

// meanWeight is the moving mean's weight of one object: about the last
// 32 objects read.
const meanWeight = 1.0 / 32

// setBuf records that buffer i now holds b.
func (a *rankActor) setBuf(i int, b []byte) {
	a.fb.held += int64(cap(b)) - int64(cap(a.bufs[i]))
	a.bufs[i] = b
	a.p.fetchBufBytes.Store(a.fb.held)
	if a.fb.held > a.p.fetchBufPeak.Load() {
		a.p.fetchBufPeak.Store(a.fb.held)
	}
}

// fetched notes a read of n bytes (the moving mean) and, with
// Config.FetchBytes, sets the core's limit on buffers in use to what
// FetchBytes holds at that mean.
func (a *rankActor) fetched(c actor.Context, n int) {
	if a.fb.mean == 0 {
		a.fb.mean = float64(n)
	} else {
		a.fb.mean += meanWeight * (float64(n) - a.fb.mean)
	}
	budget := a.p.cfg.FetchBytes
	if budget <= 0 {
		return
	}
	lim := int(float64(budget) / max(a.fb.mean, 1))
	lim = min(max(lim, 1), a.core.maxBufs)
	if lim != a.fb.limit {
		a.fb.limit = lim
		a.run(c, a.core.setBufLimit(lim))
	}
}

// freeing is called for buffer i as the core is about to take it back:
// it is freed (the next read allocates one of its object's size) when
// it has grown past twice the mean object, or while the rank holds more
// than Config.FetchBytes.
func (a *rankActor) freeing(i int) {
	b := a.bufs[i]
	if b == nil {
		return
	}
	c := int64(cap(b))
	big := c > keepMin && float64(c) > 2*a.fb.mean
	over := a.p.cfg.FetchBytes > 0 && a.fb.held > a.p.cfg.FetchBytes
	if big || over {
		a.setBuf(i, nil)
	}
}
