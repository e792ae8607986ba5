package delivery

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/longshore/longshore/feed"
)

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
