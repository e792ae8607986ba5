package actors

import (
	"fmt"
	"runtime"

	"github.com/asynkron/protoactor-go/actor"
)

// Run-time changes of a rank's reads in flight, decoders and slots: what
// the node's tuner (Tuner, AutoTuner) applies through Pipeline.Retune.
//
//   - Reads in flight: the fetch limit (core.setFetchLimit); fetchers
//     beyond those spawned at start are spawned, and the rank's own fetch
//     tuner (Config.FetchAuto) no longer sets the limit.
//   - Decoders: the first n decoders are given work; one beyond them
//     finishes what it queued, then its actor stops and closes its
//     decoder; one added is spawned with a fresh decoder
//     (Deps.NewDecoder). The core tokens that bound decodes in C
//     (Pipeline.cores, deadline.go) follow: the channel holds a token for
//     each decoder the rank may ever run (at most maxRankDecoders), and
//     those beyond the active decoders are held back in it.
//   - Slots: at most n of the slots allocated at start are used; a batch
//     in a slot beyond them finishes, and its slot is not refilled while
//     n are in use. The pool is not resized: Config.Slots is the most.

// maxRankDecoders is the most decoders a rank may run: the decoders it
// starts with, or the host's cores.
// (at least 4, so a small host's ranks can still be tried with more).
func maxRankDecoders(decoders int) int { return max(decoders, runtime.NumCPU(), 4) }

// newCores makes the core tokens of a rank starting with decoders: room
// for maxRankDecoders, the ones beyond decoders held back.
func newCores(decoders int) chan struct{} {
	ch := make(chan struct{}, maxRankDecoders(decoders))
	for range cap(ch) - decoders {
		ch <- struct{}{}
	}
	return ch
}

// activeDecoders is how many decoders are given work.
func (c *core) activeDecoders() int {
	if c.decLimit > 0 {
		return min(c.decLimit, len(c.decUsed))
	}
	return len(c.decUsed)
}

// slotsHeld says whether the slots in use reach the tuner's limit.
func (c *core) slotsHeld() bool {
	return c.slotLimit > 0 && c.cfg.slots-len(c.freeSlots) >= c.slotLimit
}

// addFetchers makes n fetchers (ids [0, n)) available, if more.
func (c *core) addFetchers(n int) {
	for f := c.cfg.fetchers; f < n; f++ {
		c.idleFetchers = append(c.idleFetchers, f)
		c.maxBufs++
	}
	c.cfg.fetchers = max(c.cfg.fetchers, n)
}

// setDecoders gives work to the first n decoders (at least 1), adding
// places for new ones (and their fetch buffers: maxBufs grows, so the
// shell grows its buffers before kick); decoders beyond n finish what
// they queued.
func (c *core) setDecoders(n int) {
	n = max(n, 1)
	for len(c.decUsed) < n {
		c.decUsed = append(c.decUsed, 0)
		c.maxBufs += c.cfg.decodeQueue
	}
	c.decLimit = n
	c.cfg.decoders = n // the fetched samples allowed to wait (haveBuf)
}

// kick schedules what the state allows now.
func (c *core) kick() []effect {
	c.pump()
	return c.take()
}

// setSlots uses at most n slots (at least 1, at most those allocated).
func (c *core) setSlots(n int) []effect {
	c.slotLimit = min(max(n, 1), c.cfg.slots)
	c.pump()
	return c.take()
}

// tuneMsg asks the rank actor for a setting; 0 leaves a knob as it is.
type tuneMsg struct{ fetchers, decoders, slots int }

// Retune sets the rank's reads in flight, decoders and slots at run
// time (0 leaves one as it is); see Tuning for what took effect. The
// decoders are at most the host's cores (or the decoders it started
// with, if more); the slots at most Config.Slots.
func (p *Pipeline) Retune(fetchers, decoders, slots int) {
	p.life.Lock()
	closed := p.life.closed
	p.life.Unlock()
	if !closed {
		p.root.Send(p.pid, &tuneMsg{fetchers: fetchers, decoders: decoders, slots: slots})
	}
}

// Tuning returns the rank's reads in flight allowed, decoders given work
// and slots usable now.
func (p *Pipeline) Tuning() (fetchers, decoders, slots int) {
	c := p.Counters()
	return c.Stage(StageFetch).Workers, c.Stage(StageDecode).Workers, c.Stage(StageBatch).Workers
}

func (a *rankActor) retune(c actor.Context, m *tuneMsg) {
	p := a.p
	if a.dead {
		return
	}
	if n := m.fetchers; n > 0 {
		for i := len(a.fetchers); i < n; i++ {
			a.fetchers = append(a.fetchers, c.Spawn(p.props("fetcher", func() actor.Actor { return &fetcherActor{p: p, id: i} })))
		}
		a.core.addFetchers(n)
		a.growBufs()
		a.tuned = true
		a.setFetchLimit(c, n)
	}
	if n := min(m.decoders, cap(p.cores)); n > 0 {
		a.setDecoders(c, n)
	}
	if n := m.slots; n > 0 {
		n = min(n, p.cfg.Slots)
		p.rec.setWorkers(StageBatch, n)
		a.run(c, a.core.setSlots(n))
	}
}

func (a *rankActor) setDecoders(c actor.Context, n int) {
	p := a.p
	if a.active == 0 {
		a.active = len(a.decoders)
	}
	for i := 0; i < n; i++ {
		if i < len(a.decoders) && a.decoders[i] != nil {
			continue
		}
		dec, err := p.deps.NewDecoder()
		if err != nil {
			p.deps.logf("actors: rank %d: a decoder for the tuner: %v: %d decoders", p.rank, err, i)
			n = i
			break
		}
		pid := c.Spawn(p.props("decoder", func() actor.Actor { return &decoderActor{p: p, id: i, dec: dec} }))
		if i < len(a.decoders) {
			a.decoders[i] = pid
		} else {
			a.decoders = append(a.decoders, pid)
		}
	}
	if n < 1 {
		return
	}
	// The core tokens: take back those held for decoders now active,
	// hold back those of decoders retired (once their decodes return).
	for ; a.active < n; a.active++ {
		<-p.cores
	}
	for ; a.active > n; a.active-- {
		select {
		case p.cores <- struct{}{}:
		default:
			go func() {
				select {
				case p.cores <- struct{}{}:
				case <-p.ctx.Done():
				}
			}()
		}
	}
	p.rec.setWorkers(StageDecode, n)
	a.core.setDecoders(n)
	a.growBufs()
	a.run(c, a.core.kick())
	a.retireIdle(c)
}

// growBufs makes room for the buffer ids the core may now hand out, in
// every table kept by buffer id.
func (a *rankActor) growBufs() {
	for len(a.bufs) < a.core.maxBufs {
		a.bufs = append(a.bufs, nil)
	}
	for len(a.sizes) < a.core.maxBufs {
		a.sizes = append(a.sizes, 0)
	}
}

// retireIdle stops the actors of decoders beyond the active ones once
// they have nothing queued; each closes its decoder.
func (a *rankActor) retireIdle(c actor.Context) {
	if a.core.decLimit == 0 {
		return
	}
	for i := a.core.decLimit; i < len(a.decoders); i++ {
		if a.decoders[i] != nil && a.core.decUsed[i] == 0 {
			c.Stop(a.decoders[i])
			a.decoders[i] = nil
		}
	}
}

// logf logs through Deps.Logger, if any.
func (d Deps) logf(format string, args ...any) {
	if d.Logger != nil {
		d.Logger.Warn(fmt.Sprintf(format, args...))
	}
}
