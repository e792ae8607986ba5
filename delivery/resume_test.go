package delivery

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/feed"
)

// serveWith is serve with a committer (nil: the server's default).
func (e testEnv) serveWith(t testing.TB, ranks int, c Committer) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "lsf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s, err := New(Config{Dir: dir, Ranks: ranks, Job: "test", Committer: c}, Standalone(e.cfg, e.ds, ranks, e.deps))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a failure backstop only
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return s
}

// TestResumeOtherBatchSize: a standalone token resumes at the exact
// sample position it names when the node restarts with another
// --batch-size that the position allows (a multiple of the new size, or
// the epoch's end), and is refused naming the batch size when it falls
// inside a batch; never at step x the new size.
func TestResumeOtherBatchSize(t *testing.T) {
	e := newEnv(t, 50) // batch 8: steps 0-6 per epoch, the last 2 samples
	const job = "test"
	commitAt := func(steps ...int64) map[int64][]byte {
		s := e.serveWith(t, 1, nil)
		c := dial(t, s.SocketPath(0), nil)
		defer c.Close()
		toks := map[int64][]byte{}
		for i := int64(0); i <= steps[len(steps)-1]; i++ {
			b := next(t, c)
			for _, k := range steps {
				if b.Step == k {
					tok, err := c.Commit(context.Background(), b.Epoch, b.Step)
					if err != nil {
						t.Fatal(err)
					}
					toks[k] = tok
				}
			}
			b.Release()
		}
		return toks
	}
	toks := commitAt(3, 6) // after sample 32; after the epoch (50)

	for _, c := range []struct {
		batch     int
		tok       int64
		wantEpoch int
		wantPos   int64  // first position served
		refused   string // "": resumes
	}{
		{batch: 16, tok: 3, wantEpoch: 0, wantPos: 32},
		{batch: 4, tok: 3, wantEpoch: 0, wantPos: 32},
		{batch: 12, tok: 3, refused: "batch size"},
		{batch: 12, tok: 6, wantEpoch: 1, wantPos: 0},
	} {
		e2 := e
		e2.cfg.BatchSize = c.batch
		s := e2.serveWith(t, 1, LocalCommitter{Job: job, BatchSize: c.batch, StreamLen: 50})
		cl, err := feed.DialContext(context.Background(), s.SocketPath(0), feed.DialConfig{Token: toks[c.tok]})
		if c.refused != "" {
			if !isCode(err, feed.CodeBadToken) || !strings.Contains(err.Error(), c.refused) {
				t.Errorf("batch %d, token after step %d of 8: %v, want bad_token naming %q", c.batch, c.tok, err, c.refused)
			}
			if err == nil {
				cl.Close()
			}
			continue
		}
		if err != nil {
			t.Fatalf("batch %d, token after step %d of 8: %v", c.batch, c.tok, err)
		}
		b := next(t, cl)
		if b.Epoch != c.wantEpoch || b.Positions[0] != c.wantPos {
			t.Errorf("batch %d, token after step %d of 8: resumed at epoch %d position %d (step %d), want epoch %d position %d",
				c.batch, c.tok, b.Epoch, b.Positions[0], b.Step, c.wantEpoch, c.wantPos)
		}
		b.Release()
		cl.Close()
	}
}

// localTokenV1 is a token as version 1 made it: no batch size, no
// identity.
func localTokenV1(job string, rank, epoch int, step, offset int64) []byte {
	b := append([]byte(tokenMagic), 1)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(job)))
	b = append(b, job...)
	b = binary.LittleEndian.AppendUint32(b, uint32(rank))
	b = binary.LittleEndian.AppendUint32(b, uint32(epoch))
	b = binary.LittleEndian.AppendUint64(b, uint64(step))
	b = binary.LittleEndian.AppendUint64(b, uint64(offset))
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

// TestLocalTokenIdentity: a token carries the run's identity; one of
// another run is refused naming what differs, --force-resume (Force)
// accepts another dataset of the same size or epoch count, never another
// order; a version 1 token still resumes, at its sample position.
func TestLocalTokenIdentity(t *testing.T) {
	ctx := context.Background()
	id := RunIdentity{Digest: "50:0123456789abcdef", Seed: 7, Block: 1, Window: 1, Ranks: 2, Epochs: 2}
	c := LocalCommitter{Job: "j", BatchSize: 8, Ident: id}
	tok, err := c.Commit(ctx, 1, 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	if lt, err := DecodeLocalToken(tok); err != nil || lt.Ident != id || lt.BatchSize != 8 {
		t.Fatalf("%+v %v", lt, err)
	}
	for _, x := range []struct {
		change  func(*RunIdentity)
		says    string
		forcing bool // Force accepts it
	}{
		{func(r *RunIdentity) { r.Digest = "50:fedcba9876543210" }, "dataset digest 50:0123456789abcdef in the token, 50:fedcba9876543210 in this run", true},
		{func(r *RunIdentity) { r.Digest = "51:0123456789abcdef" }, "dataset digest", false},
		{func(r *RunIdentity) { r.Epochs = 3 }, "epochs 2 in the token, 3 in this run", true},
		{func(r *RunIdentity) { r.Seed = 8 }, "seed 7 in the token, 8 in this run", false},
		{func(r *RunIdentity) { r.Block = 4 }, "block 1", false},
		{func(r *RunIdentity) { r.Ranks = 4 }, "ranks 2", false},
	} {
		other := c
		x.change(&other.Ident)
		_, _, err := other.Resume(ctx, 1, tok)
		if !errors.Is(err, feed.ErrBadToken) || !strings.Contains(err.Error(), x.says) {
			t.Errorf("%s: %v", x.says, err)
		}
		other.Force = true
		if _, _, err := other.Resume(ctx, 1, tok); (err == nil) != x.forcing {
			t.Errorf("%s, forced: %v", x.says, err)
		}
	}
	// Version 1: no identity to check; its offset still places it.
	v1 := localTokenV1("j", 1, 0, 3, 32)
	if e, k, err := (LocalCommitter{Job: "j", BatchSize: 16, Ident: id}).Resume(ctx, 1, v1); err != nil || e != 0 || k != 1 {
		t.Fatalf("version 1 token with batch 16: %d %d %v, want after epoch 0 step 1", e, k, err)
	}
}
