package coord

import (
	"errors"

	"github.com/longshore/longshore/cluster"
)

// StartChoice is how a coordinator is asked to start a job: with a
// journal at a checkpoint or without, over it afresh, from a resume
// token, or from the journal's newest generation (falling back to the
// previous readable one if asked). The journal decides where exactly
// (journal.Journal.Start); Check refuses the choices that contradict
// each other before anything is opened.
type StartChoice struct {
	Checkpoint bool   // a journal location is given (--checkpoint)
	Fresh      bool   // start over although a journal exists (--fresh)
	Resume     string // a resume token (--resume)
	Force      bool   // accept a dataset, batch size or epoch count that differ (--force-resume)
	Fallback   bool   // continue from the previous generation if the newest is corrupt (--journal-fallback)
}

// Check returns what is wrong with c, each problem once, in the words of
// the coordinator's flags.
func (c StartChoice) Check() []error {
	var errs []error
	if !c.Checkpoint && (c.Fresh || c.Resume != "") {
		errs = append(errs, errors.New("--fresh and --resume need --checkpoint"))
	}
	if c.Fresh && c.Resume != "" {
		errs = append(errs, errors.New("--fresh and --resume contradict each other: choose one"))
	}
	if !c.Checkpoint && (c.Force || c.Fallback) {
		errs = append(errs, errors.New("--force-resume and --journal-fallback need --checkpoint"))
	}
	if c.Fresh && (c.Force || c.Fallback) {
		errs = append(errs, errors.New("--fresh starts the job over: --force-resume and --journal-fallback, which continue it, contradict it"))
	}
	return errs
}

// Given says which of the job's order settings the operator chose
// (a flag or its environment variable), whatever value they chose.
type Given struct {
	Block, Window, Shard bool
}

// Shape decides the job's order block, window and shard size for a
// dataset, packed or not, from c (the settings, defaults where not
// given) and the state restored from the journal (nil: a fresh job). A
// setting given wins. Else a restored job keeps the block and window it
// started with (a coordinator of another version may default otherwise,
// and the order must not change under a running job); else the
// dataset's defaults, the standalone node's too: cluster.DefaultBlock,
// cluster.DefaultWindow. For a packed dataset read through windows, the
// shard size defaults to a window's positions, so a lease holds whole
// windows and no two nodes fetch one chunk.
func Shape(c cluster.Config, given Given, packed bool, restore *cluster.State) (block, window, shard int) {
	block, window, shard = c.Block, c.Window, c.ShardSize
	switch {
	case given.Block:
	case restore != nil:
		block = restore.Block
	default:
		block = cluster.DefaultBlock(packed)
	}
	if !given.Window && restore != nil {
		window = max(restore.Window, 1)
	}
	if w := cluster.EffectiveWindow(block, window); packed && w > 1 && !given.Shard {
		shard = block * w
	}
	return block, window, shard
}
