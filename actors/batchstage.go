package actors

import (
	"context"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
)

// BatchStage is an optional stage between assembly and upload: it is
// handed every assembled batch of the rank, one at a time and in
// delivery order ((epoch, step) order, as Next returns them), before the
// uploader sees it. It is where work on whole batches goes: batch GPU
// decoding (the decoders leave the compressed samples for it and it
// decodes the batch in one call) and batch augmentation (mixup, cutmix,
// a colour op on the device). Per-sample transforms belong in the
// decoder (decode's op lists), not here.
//
// Ownership: during Process the stage owns the batch's slot. It may
// rewrite b.Images in place (the samples, b.Spec's shape, each in the
// slot's region), and b.Labels and b.Short, but not their lengths; no
// decoder writes into the slot meanwhile (a slot is scheduled again
// only after its batch is released) and the consumer has not seen it.
// It must not keep b, or any slice of it, past its return, nor call
// Release: the slot goes on to the uploader and the consumer, and
// returns to the pool when the consumer releases it.
//
// Credits: the stage takes one batch at a time; the batches waiting
// for it are full slots, so at most Slots, and a slow stage stalls the
// pipeline with memory flat, exactly as a slow uploader or trainer does
// (its waiting batches count in the batch stage's queue of Stats, "full
// batches waiting for upload").
type BatchStage interface {
	// Process works on one batch. It may block (ctx is canceled when
	// the pipeline closes). An error ends the run: the consumer gets it
	// from Next after the batches before this one, as with an upload
	// error.
	Process(ctx context.Context, b *Batch) error
	// Close frees the stage. The pipeline calls it once, after every
	// actor has stopped (no Process runs or follows).
	Close() error
}

// stageActor runs the BatchStage, between the rank actor and the
// uploader: batches and the end go through it in order.
type stageActor struct {
	p        *Pipeline
	uploader *actor.PID
	dead     bool
}

func (s *stageActor) Receive(c actor.Context) {
	p := s.p
	switch m := c.Message().(type) {
	case *uploadMsg:
		if s.dead || p.ctx.Err() != nil {
			p.rec.queueAdd(StageBatch, -1) // dropped: it will never reach the uploader
			return
		}
		if err := p.stage.Process(p.ctx, m.b); err != nil {
			s.dead = true
			p.rec.queueAdd(StageBatch, -1)
			c.Send(c.Parent(), &fatalMsg{err: fmt.Errorf("actors: rank %d: batch stage, batch %d of epoch %d: %w", p.rank, m.b.Step, m.b.Epoch, err)})
			return
		}
		c.Send(s.uploader, m)
	case *endMsg:
		c.Send(s.uploader, m)
	}
}
