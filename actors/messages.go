package actors

import (
	"time"
)

// Messages between the pipeline's actors. They carry slot and buffer
// references, never pixels. Each implements IgnoreDeadLetterLogging: during
// shutdown a late reply to a stopped actor is expected, not news.

// workMsg: a Source's answer, to the rank actor.
type workMsg struct{ w Work }

// releaseMsg: the consumer released a slot, to the rank actor.
type releaseMsg struct{ slot int }

// fetchMsg: rank actor -> fetcher. data is the reused buffer to read into.
type fetchMsg struct {
	buf, slot, idx int
	index          int64 // the sample's dataset index
	key            string
	data           []byte
}

// fetchedMsg: fetcher -> rank actor. data is the buffer, grown as needed.
type fetchedMsg struct {
	fetcher, buf, slot, idx int
	data                    []byte
	size                    int64 // the object's size (ranged: as stated)
	err                     error
	dur                     time.Duration
}

// decodeMsg: rank actor -> decoder. dst is the sample's region of the slot.
type decodeMsg struct {
	buf, slot, idx int
	data, dst      []byte
	seed           uint64
	key            string // for an ObjectDecoder
	size           int64  // for an ObjectDecoder: the object's size
}

// decodedMsg: decoder -> rank actor. abandoned: the decode passed its
// deadline and its decoder still holds the fetch buffer.
type decodedMsg struct {
	decoder, buf, slot, idx int
	err                     error
	dur                     time.Duration
	abandoned               bool
	short                   bool // the sample was shorter than its window (WindowDecoder)
}

// uploadMsg: rank actor -> uploader: a full batch, in delivery order.
type uploadMsg struct{ b *Batch }

// readyMsg: uploader -> feed.
type readyMsg struct{ b *Batch }

// endMsg: rank actor -> uploader -> feed, after the last batch: err is
// io.EOF or why the run stopped.
type endMsg struct{ err error }

// fatalMsg: a child -> rank actor: the pipeline cannot go on.
type fatalMsg struct{ err error }

func (*workMsg) IgnoreDeadLetterLogging()    {}
func (*releaseMsg) IgnoreDeadLetterLogging() {}
func (*fetchMsg) IgnoreDeadLetterLogging()   {}
func (*fetchedMsg) IgnoreDeadLetterLogging() {}
func (*decodeMsg) IgnoreDeadLetterLogging()  {}
func (*decodedMsg) IgnoreDeadLetterLogging() {}
func (*uploadMsg) IgnoreDeadLetterLogging()  {}
func (*readyMsg) IgnoreDeadLetterLogging()   {}
func (*endMsg) IgnoreDeadLetterLogging()     {}
func (*fatalMsg) IgnoreDeadLetterLogging()   {}
