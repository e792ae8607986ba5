package gpu

import "fmt"

// slotState is where one slot's device buffer stands. A slot's host
// memory and device buffer go round together:
//
//	idle --begin--> copying --copied--> held --release--> idle
//	                   |
//	                 gaveUp (Upload's ctx ended; the copy goes on)
//	                   v
//	               copying, orphaned --previousDone--> idle
//
// While copying, the DMA engine reads the host slot: nobody may write it.
// While held, a consumer (the feed's trainer, over IPC, or a Go trainer)
// reads the device buffer: no copy may write it.
type slotState uint8

const (
	slotIdle    slotState = iota // no copy in flight, no consumer: may be written
	slotCopying                  // a copy is in flight; its event not yet seen complete
	slotHeld                     // copy complete; a consumer holds the device buffer
)

func (s slotState) String() string {
	return [...]string{"idle", "copying", "held"}[s]
}

// beginVerdict is what begin decided.
type beginVerdict uint8

const (
	beginCopy         beginVerdict = iota // enqueue the copy now
	beginWaitPrevious                     // an orphaned copy into this slot is in flight: wait for its event, then previousDone, then begin again
)

// slotBook is the pure bookkeeping of a DeviceUploader's slots: no
// device, no locks, no time (its owner holds the lock and does the
// device calls the verdicts ask for). Decide here, do in uploader.go.
type slotBook struct {
	st     []slotState
	orphan []bool // copying, but the Upload that started it gave up
}

func newSlotBook(n int) slotBook {
	return slotBook{st: make([]slotState, n), orphan: make([]bool, n)}
}

// begin decides an upload into slot i.
func (b *slotBook) begin(i int) (beginVerdict, error) {
	switch b.st[i] {
	case slotIdle:
		b.st[i] = slotCopying
		return beginCopy, nil
	case slotCopying:
		if b.orphan[i] {
			return beginWaitPrevious, nil
		}
		return 0, fmt.Errorf("gpu: slot %d: upload while its previous copy is in flight (one uploader goroutine at a time)", i)
	default:
		return 0, fmt.Errorf("gpu: slot %d: %w (release the batch before refilling its slot)", i, ErrSlotHeld)
	}
}

// notStarted undoes begin when nothing was enqueued (the copy call failed).
func (b *slotBook) notStarted(i int) {
	if b.st[i] == slotCopying && !b.orphan[i] {
		b.st[i] = slotIdle
	}
}

// copied: the copy's event completed; the consumer may read the buffer.
func (b *slotBook) copied(i int) { b.st[i], b.orphan[i] = slotHeld, false }

// gaveUp: Upload stopped waiting; the copy may still run.
func (b *slotBook) gaveUp(i int) {
	if b.st[i] == slotCopying {
		b.orphan[i] = true
	}
}

// previousDone: an orphaned copy's event completed.
func (b *slotBook) previousDone(i int) {
	if b.st[i] == slotCopying && b.orphan[i] {
		b.st[i], b.orphan[i] = slotIdle, false
	}
}

// release: the consumer is done with the device buffer. Releasing a slot
// that is not held is an error (a double release, or a release of a batch
// never uploaded) and changes nothing.
func (b *slotBook) release(i int) error {
	if b.st[i] != slotHeld {
		return fmt.Errorf("gpu: slot %d: release of a %s slot", i, b.st[i])
	}
	b.st[i] = slotIdle
	return nil
}

// count is how many slots are in state s.
func (b *slotBook) count(s slotState) int {
	n := 0
	for _, t := range b.st {
		if t == s {
			n++
		}
	}
	return n
}
