package actors

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// poolDispatcher runs mailbox activations on long-lived goroutines.
//
// protoactor's default dispatcher starts a goroutine per activation (each
// time an idle mailbox gets a message). Its call chain is deep, so every
// such goroutine grows its stack by copying: measured here, that was 40% of
// the pipeline's own CPU time. A pool keeps grown stacks. Schedule never
// blocks: it hands the activation to an idle worker, or starts one more.
// Since a mailbox runs at most one activation at a time, the pool never
// holds more goroutines than the pipeline has actors; they all exit on
// close.
type poolDispatcher struct {
	throughput int
	work       chan func() // unbuffered: a send succeeds only to an idle worker
	quit       chan struct{}
	closeOnce  sync.Once
}

var _ actor.Dispatcher = (*poolDispatcher)(nil)

func newPoolDispatcher(throughput int) *poolDispatcher {
	return &poolDispatcher{throughput: throughput, work: make(chan func()), quit: make(chan struct{})}
}

func (d *poolDispatcher) Schedule(fn func()) {
	select {
	case d.work <- fn:
	default:
		go d.worker(fn)
	}
}

func (d *poolDispatcher) Throughput() int { return d.throughput }

func (d *poolDispatcher) worker(fn func()) {
	for {
		fn()
		select {
		case fn = <-d.work:
		case <-d.quit:
			return
		}
	}
}

// close makes idle workers exit; busy ones exit when done. Activations
// scheduled afterwards still run, each on a goroutine that then exits.
func (d *poolDispatcher) close() { d.closeOnce.Do(func() { close(d.quit) }) }
