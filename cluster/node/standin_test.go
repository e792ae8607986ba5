package node

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/longshore/longshore/actors"
	"github.com/longshore/longshore/cluster"
)

// scriptRank is an inRank that returns a script of batches and errors,
// then io.EOF, and records the calls made on it and on its sink in one
// log.
type scriptRank struct {
	script []any // *Batch or error
	log    *[]string
}

func (r *scriptRank) Next(context.Context) (*Batch, error) {
	if len(r.script) == 0 {
		return nil, io.EOF
	}
	x := r.script[0]
	r.script = r.script[1:]
	if err, ok := x.(error); ok {
		return nil, err
	}
	return x.(*Batch), nil
}

func (r *scriptRank) Commit(epoch int, step int64) error {
	*r.log = append(*r.log, fmt.Sprintf("commit %d/%d", epoch, step))
	return nil
}

type logSink struct{ log *[]string }

func (s logSink) Session(rank string, f cluster.Fence) error {
	*s.log = append(*s.log, fmt.Sprintf("session %s %d", rank, f.Seq))
	return nil
}

func (s logSink) Batch(b *Batch) error {
	*s.log = append(*s.log, fmt.Sprintf("batch %d/%d", b.Epoch, b.Step))
	return nil
}

func (s logSink) Flush() error {
	*s.log = append(*s.log, "flush")
	return nil
}

// TestStandInCommits: the in-process sink's stand-in trainer (what
// --sink log: is in a cluster) says each session before its batches,
// commits every `every` steps and at the end of its epoch stream, always
// after a flush (a committed step's lines survive a crash), goes on
// after a rollback, and commits nothing for a standalone source.
func TestStandInCommits(t *testing.T) {
	batch := func(session uint64, epoch int, step int64, end bool) *Batch {
		b := &Batch{Batch: &actors.Batch{Epoch: epoch, Step: step, EndOfStream: end}, RankName: "n/0"}
		if session > 0 { // 0: a standalone rank's, which has no session
			b.Session = cluster.Fence{Incarnation: 1, Seq: session}
		}
		return b
	}
	script := func() []any {
		return []any{batch(1, 0, 0, false), batch(1, 0, 1, false), batch(1, 0, 2, true), ErrRolledBack, batch(2, 0, 2, false), batch(2, 0, 3, true)}
	}
	var log []string
	st := standIn{rank: &scriptRank{script: script(), log: &log}, sink: logSink{&log}, every: 2, commits: true}
	if err := st.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := "session n/0 1, batch 0/0, batch 0/1, flush, commit 0/1, batch 0/2, flush, commit 0/2, " +
		"session n/0 2, batch 0/2, batch 0/3, flush, commit 0/3"
	if got := strings.Join(log, ", "); got != want {
		t.Errorf("cluster stand-in:\n got %s\nwant %s", got, want)
	}

	log = nil
	st = standIn{rank: &scriptRank{script: []any{batch(0, 0, 0, false), batch(0, 0, 1, true)}, log: &log}, sink: logSink{&log}, every: 1}
	if err := st.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(log, ", "); got != "batch 0/0, batch 0/1" {
		t.Errorf("standalone stand-in: %s; want the batches, no session line, no commit", got)
	}
}
