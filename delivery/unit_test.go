package delivery

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/longshore/longshore/feed"
)

func TestLedger(t *testing.T) {
	l := newLedger(feed.Cursor{})
	if at, reopen := l.resume(nil); at != (feed.Cursor{}) || reopen {
		t.Fatalf("fresh resume %+v %v", at, reopen)
	}
	for k := int64(0); k < 5; k++ {
		l.delivered(0, k)
	}
	if err := l.checkCommit(0, 5); err == nil {
		t.Error("commit of undelivered step")
	}
	if err := l.checkCommit(1, 0); err == nil {
		t.Error("commit of undelivered epoch")
	}
	if err := l.checkCommit(0, 2); err != nil {
		t.Fatal(err)
	}
	l.commit(0, 2)
	if err := l.checkCommit(0, 1); err == nil {
		t.Error("commit going back")
	}
	if err := l.checkCommit(0, 2); err != nil {
		t.Errorf("recommit: %v", err)
	}
	at, reopen := l.resume(nil)
	if at != (feed.Cursor{Epoch: 0, Step: 3}) || !reopen {
		t.Fatalf("resume after crash %+v %v", at, reopen)
	}
	l.reopened(at)
	if err := l.checkCommit(0, 2); err != nil {
		t.Errorf("commit of the resume point's batch: %v", err)
	}
	l.delivered(0, 3)
	l.delivered(1, 0)
	l.commit(1, 0)
	if at, reopen := l.resume(nil); at != (feed.Cursor{Epoch: 1, Step: 1}) || reopen {
		t.Fatalf("clean reconnect %+v %v", at, reopen)
	}
	old := feed.Cursor{Epoch: 0, Step: 1}
	if at, reopen := l.resume(&old); at != old || !reopen {
		t.Fatalf("token resume %+v %v", at, reopen)
	}
	if l.committed != old {
		t.Fatal("token resume must reset the commit")
	}
}

func TestLocalToken(t *testing.T) {
	c := LocalCommitter{Job: "j", BatchSize: 32}
	tok, err := c.Commit(context.Background(), 3, 2, 41)
	if err != nil {
		t.Fatal(err)
	}
	lt, err := DecodeLocalToken(tok)
	if err != nil || lt != (LocalToken{Version: 2, Job: "j", Rank: 3, Epoch: 2, Step: 41, Offset: 42 * 32, BatchSize: 32}) {
		t.Fatalf("%+v %v", lt, err)
	}
	if e, k, err := c.Resume(context.Background(), 3, tok); err != nil || e != 2 || k != 41 {
		t.Fatalf("resume %d %d %v", e, k, err)
	}
	if _, _, err := c.Resume(context.Background(), 2, tok); !errors.Is(err, feed.ErrBadToken) {
		t.Errorf("other rank: %v", err)
	}
	if _, _, err := (LocalCommitter{Job: "k"}).Resume(context.Background(), 3, tok); !errors.Is(err, feed.ErrBadToken) {
		t.Errorf("other job: %v", err)
	}
	bad := bytes.Clone(tok)
	bad[10] ^= 1
	if _, err := DecodeLocalToken(bad); !errors.Is(err, feed.ErrBadToken) {
		t.Errorf("damaged: %v", err)
	}
}

func FuzzLocalToken(f *testing.F) {
	tok, _ := LocalCommitter{Job: "j", BatchSize: 8}.Commit(context.Background(), 0, 1, 2)
	f.Add(tok)
	f.Fuzz(func(t *testing.T, data []byte) { DecodeLocalToken(data) })
}
