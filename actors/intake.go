package actors

import "fmt"

// Intake checks a Source's answers to Want against the rules a rank's
// pipeline enforces, and follows the runs they describe. The pipeline
// uses one per rank and fails the rank on the first error; a Source's
// tests can use one to check that what it gives would be taken.
//
// The rules: no more items than asked; items or an end (RunEnd,
// StreamEnd or Last) in every Work; epochs not negative; nothing after
// Last. A Work opens a run when it is the first or follows a run's end;
// a run may start at any stream offset and step, in any epoch, but not
// before where an earlier run of the same epoch ended (offset and, when
// BatchSize is set, step). Within a run, Work.Epoch stays the same and
// Work.Start and the items' positions continue exactly where the last
// Work stopped.
//
// The zero value is ready to use (without the step check).
type Intake struct {
	// BatchSize, if > 0, lets Take check that a run's first step does not
	// go back before the end of an earlier run of the same epoch.
	BatchSize int

	open, last bool // a run is open; Last was taken
	run        runEnd
	ends       map[int]runEnd // by epoch: where its latest closed run ended
}

// runEnd is where a run stands: the next stream offset and the step of
// its first batch (with its base, the steps it covers follow).
type runEnd struct {
	epoch int
	base  int64 // the run's first offset
	pos   int64 // the next offset
	step  int64 // the run's first step
}

// nextStep is the step after the run's last batch.
func (r runEnd) nextStep(batch int) int64 {
	n := int64(batch)
	return r.step + (r.pos-r.base+n-1)/n
}

// Take checks w, the answer to a Want of asked items, and records it.
// On error, Take may have recorded part of w.
func (c *Intake) Take(w Work, asked int) error {
	switch {
	case c.last:
		return fmt.Errorf("work after the last")
	case len(w.Items) > asked:
		return fmt.Errorf("%d items, %d asked for", len(w.Items), asked)
	case len(w.Items) == 0 && !w.ends():
		return fmt.Errorf("no items and no end")
	case w.Epoch < 0:
		return fmt.Errorf("negative epoch")
	case w.Start < 0 || w.Step < 0:
		return fmt.Errorf("negative start or step")
	}
	if !c.open {
		if err := c.openRun(w); err != nil {
			return err
		}
	} else if w.Epoch != c.run.epoch {
		return fmt.Errorf("epoch %d while a run of epoch %d is open", w.Epoch, c.run.epoch)
	}
	if len(w.Items) > 0 && w.Start != c.run.pos {
		return fmt.Errorf("starts at %d, expected %d", w.Start, c.run.pos)
	}
	for i, it := range w.Items {
		if it.Pos != c.run.pos {
			return fmt.Errorf("item %d at position %d, expected %d", i, it.Pos, c.run.pos)
		}
		c.run.pos++
	}
	if w.ends() {
		c.open = false
		if c.ends == nil {
			c.ends = map[int]runEnd{}
		}
		c.ends[c.run.epoch] = c.run
	}
	c.last = c.last || w.Last
	return nil
}

func (c *Intake) openRun(w Work) error {
	start := w.Start
	if len(w.Items) == 0 {
		start = 0 // an empty run (an end alone) has no place in the stream
	}
	if prev, ok := c.ends[w.Epoch]; ok && len(w.Items) > 0 {
		if start < prev.pos {
			return fmt.Errorf("a run of epoch %d starts at offset %d, before where the last one ended (%d)", w.Epoch, start, prev.pos)
		}
		if c.BatchSize > 0 && w.Step < prev.nextStep(c.BatchSize) {
			return fmt.Errorf("a run of epoch %d starts at step %d, before where the last one ended (step %d)", w.Epoch, w.Step, prev.nextStep(c.BatchSize))
		}
	}
	c.open = true
	c.run = runEnd{epoch: w.Epoch, base: start, pos: start, step: w.Step}
	return nil
}

// Last reports whether the Work marked Last was taken.
func (c *Intake) Last() bool { return c.last }

// Open reports whether a run is open: the next Work continues it.
func (c *Intake) Open() bool { return c.open }

// Pos returns the stream offset after the items taken so far in the
// current (or the last closed) run.
func (c *Intake) Pos() int64 { return c.run.pos }
