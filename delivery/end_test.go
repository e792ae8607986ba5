package delivery

import (
	"bufio"
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/longshore/longshore/feed"
)

// readThroughEnd speaks the protocol by hand at the given hello version:
// it reads (and releases) every batch of the stream and the End after
// them, and then leaves with a bye, without saying that it read the End.
// That is what the node sees from a trainer that stopped (a checkpoint,
// then an exit) while the rest of the stream and its End sat unread in
// its socket buffer.
func readThroughEnd(t *testing.T, path string, version int) (batches int) {
	t.Helper()
	tr := welcomed(t, path, version)
	defer tr.conn.Close()
	for {
		typ, p := tr.read()
		switch typ {
		case feed.MsgBatch:
			tr.release(p)
			batches++
		case feed.MsgEnd:
			tr.send(feed.MsgBye, struct{}{})
			return batches
		case feed.MsgError:
			t.Fatalf("error from the node: %s", p)
		}
	}
}

// welcomed is a hand-speaking trainer that said hello at version and
// got its welcome.
func welcomed(t *testing.T, path string, version int) *rawTrainer {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	tr := &rawTrainer{t: t, conn: conn, br: bufio.NewReader(conn)}
	tr.send(feed.MsgHello, feed.Hello{Version: version, Client: "test"})
	if typ, p := tr.read(); typ != feed.MsgWelcome {
		t.Fatalf("hello at version %d: got %s %s, want a welcome", version, typ, p)
	}
	return tr
}

// release gives back the batch whose descriptor is p.
func (r *rawTrainer) release(p []byte) {
	var bd feed.BatchDesc
	if err := json.Unmarshal(p, &bd); err != nil {
		r.t.Fatal(err)
	}
	r.send(feed.MsgRelease, feed.Release{IDs: []uint64{bd.ID}})
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A standalone node's rank is over only once its trainer read the End:
// the End being written to the socket is not enough, as the trainer may
// have stopped before it (the rest of the stream in its socket buffer)
// and restart from its checkpoint. A trainer of version 4 says that it
// read the End (the "ended" message); one that leaves without saying so
// leaves the rank open for the next, which resumes after the last commit
// and is served. (A Python trainer that checkpointed and exited while the
// node had already written the End found the node gone: its restart got
// "connection closed by the node", or no socket at all.)
func TestRankEndsWhenTheTrainerReadTheEnd(t *testing.T) {
	e := newEnv(t, 20) // 3 steps an epoch, 2 epochs
	s := e.serve(t, 1)
	path := s.SocketPath(0)

	if n := readThroughEnd(t, path, 4); n != 6 {
		t.Fatalf("the first trainer read %d batches, want 6", n)
	}
	sessionEnded(t, s, 0)
	if closed(s.Ended()) || closed(s.Finished()) {
		t.Fatal("the rank ended though its trainer never said it read the End")
	}

	// The trainer comes back: it resumes after the last commit (none:
	// from the start) and reads the stream again, to the End.
	c := dial(t, path, nil)
	if r := c.Welcome().Resume; r != (feed.Cursor{}) {
		t.Fatalf("the second trainer resumes at %+v, want the start", r)
	}
	if n := eachBatch(t, c, nil); n != 6 {
		t.Fatalf("the second trainer read %d batches, want 6", n)
	}
	// It said it read the End: the rank is over though it is still
	// connected (the node's grace for a trainer that stays starts here).
	select {
	case <-s.Ended():
	case <-time.After(time.Minute): // a failure backstop only
		t.Fatal("the rank did not end after its trainer read the End")
	}
	if closed(s.Finished()) {
		t.Fatal("finished while the trainer is still connected")
	}
	c.Close()
	select {
	case <-s.Finished():
	case <-time.After(time.Minute): // a failure backstop only
		t.Fatal("not finished after the trainer that read the End left")
	}
}

// A trainer of version 3 or older cannot say that it read the End: for
// it, the End written is the end of the rank, as before.
func TestRankEndsAtTheEndSentToOldTrainers(t *testing.T) {
	e := newEnv(t, 20)
	s := e.serve(t, 1)
	if n := readThroughEnd(t, s.SocketPath(0), 3); n != 6 {
		t.Fatalf("read %d batches, want 6", n)
	}
	select {
	case <-s.Finished():
	case <-time.After(time.Minute): // a failure backstop only
		t.Fatal("a version-3 trainer read the End and left, and the node did not finish")
	}
}

// The last epoch's end is marked (version 4): a trainer that stops there,
// as a DataLoader-style loop over one epoch does, says ended without
// reading the End behind it, and the rank is over. Epoch ends before it
// are not marked.
func TestRankEndsAtTheLastEpochEnd(t *testing.T) {
	e := newEnv(t, 20) // 3 steps an epoch, 2 epochs
	s := e.serve(t, 1)
	tr := welcomed(t, s.SocketPath(0), 4)
	conn := tr.conn
	var ends []feed.EpochEnd
	for len(ends) < 2 {
		typ, p := tr.read()
		switch typ {
		case feed.MsgBatch:
			tr.release(p)
		case feed.MsgEpochEnd:
			var ee feed.EpochEnd
			if err := json.Unmarshal(p, &ee); err != nil {
				t.Fatal(err)
			}
			ends = append(ends, ee)
		case feed.MsgEnd, feed.MsgError:
			t.Fatalf("%s before the last epoch's end: %s", typ, p)
		}
	}
	if ends[0] != (feed.EpochEnd{Epoch: 0}) || ends[1] != (feed.EpochEnd{Epoch: 1, Last: true}) {
		t.Fatalf("epoch ends %+v, want epoch 0 unmarked and epoch 1 marked last", ends)
	}
	tr.send(feed.MsgEnded, struct{}{}) // the End itself is left unread
	conn.Close()
	select {
	case <-s.Finished():
	case <-time.After(time.Minute): // a failure backstop only
		t.Fatal("a trainer that read the last epoch's end and said ended left, and the node did not finish")
	}
}
