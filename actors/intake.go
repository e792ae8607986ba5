package actors

import "fmt"

// Intake checks a Source's answers to Want against the rules a rank's
// pipeline enforces, and follows the stream they describe. The pipeline
// uses one per rank and fails the rank on the first error; a Source's
// tests can use one to check that what it gives would be taken.
//
// The rules: no more items than asked; items or an end in every Work;
// epochs (pipeline epoch numbers, not negative) in increasing order, a
// new one only after the previous one ended (EpochEnd); within an epoch,
// Work.Start and the items' positions continue exactly where the last
// Work stopped, from 0; nothing after Last.
//
// The zero value is ready to use.
type Intake struct {
	started, ended, last bool
	epoch                int
	pos                  int64
}

// Take checks w, the answer to a Want of asked items, and records it.
// On error, Take may have recorded part of w.
func (c *Intake) Take(w Work, asked int) error {
	switch {
	case c.last:
		return fmt.Errorf("work after the last")
	case len(w.Items) > asked:
		return fmt.Errorf("%d items, %d asked for", len(w.Items), asked)
	case len(w.Items) == 0 && !w.EpochEnd && !w.Last:
		return fmt.Errorf("no items and no end")
	case w.Epoch < 0:
		return fmt.Errorf("negative epoch")
	}
	if !c.started {
		c.started = true
		c.epoch = w.Epoch
	} else if w.Epoch != c.epoch {
		if !c.ended || w.Epoch < c.epoch {
			return fmt.Errorf("epoch %d while epoch %d is open", w.Epoch, c.epoch)
		}
		c.epoch, c.pos, c.ended = w.Epoch, 0, false
	} else if c.ended {
		return fmt.Errorf("epoch %d already ended", w.Epoch)
	}
	if len(w.Items) > 0 && w.Start != c.pos {
		return fmt.Errorf("starts at %d, expected %d", w.Start, c.pos)
	}
	for i, it := range w.Items {
		if it.Pos != c.pos {
			return fmt.Errorf("item %d at position %d, expected %d", i, it.Pos, c.pos)
		}
		c.pos++
	}
	c.ended = c.ended || w.EpochEnd || w.Last
	c.last = c.last || w.Last
	return nil
}

// Last reports whether the Work marked Last was taken.
func (c *Intake) Last() bool { return c.last }

// Pos returns the position in the current epoch's stream after the items
// taken so far.
func (c *Intake) Pos() int64 { return c.pos }
