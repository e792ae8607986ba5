package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/longshore/longshore/feed"
)

// feedNode is a standalone --sink feed node under test.
type feedNode struct {
	t     *testing.T
	sock  string
	errb  bytes.Buffer
	code  chan int
	ctx   context.Context
	close context.CancelFunc
}

func startFeedNode(t *testing.T, args ...string) *feedNode {
	t.Helper()
	feedDir := filepath.Join(t.TempDir(), "feed")
	r := &feedNode{t: t, sock: filepath.Join(feedDir, feed.SocketName(0)), code: make(chan int, 1)}
	r.ctx, r.close = context.WithTimeout(context.Background(), time.Minute) // a failure backstop only
	t.Cleanup(r.close)
	var out bytes.Buffer
	go func() {
		r.code <- run(append([]string{"--standalone", "--size", "32", "--sink", "feed", "--feed-dir", feedDir, "--progress", "never"}, args...), &out, &r.errb)
	}()
	return r
}

// dial connects with tok, waiting for the socket as TestStandaloneFeedEnds does.
func (r *feedNode) dial(tok []byte) (*feed.Client, error) {
	for {
		c, err := feed.DialContext(r.ctx, r.sock, feed.DialConfig{Token: tok})
		var re *feed.RemoteError
		if err == nil || errors.As(err, &re) {
			return c, err
		}
		select {
		case <-r.ctx.Done():
			r.t.Fatalf("no feed socket: %v\n%s", err, r.errb.String())
		case rc := <-r.code:
			r.t.Fatalf("node exited %d before serving:\n%s", rc, r.errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// drain takes every batch left, leaves, and waits for the node to exit.
func (r *feedNode) drain(c *feed.Client) {
	r.t.Helper()
	if _, err := trainer(r.ctx, c); err != nil {
		r.t.Fatal(err)
	}
	c.Close()
	waitExit(r.t, r.ctx, r.code, &r.errb)
}

// TestStandaloneResumeOtherRun: a trainer's token resumes a node
// restarted with another --batch-size at the exact sample it names, and
// a node started on another seed refuses it, naming the seed.
func TestStandaloneResumeOtherRun(t *testing.T) {
	root, _ := makeDataset(t, 30)
	common := []string{"--dataset", root, "--epochs", "2", "--seed", "3"}
	r := startFeedNode(t, append(common, "--batch-size", "4")...)
	c, err := r.dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	var tok []byte
	for i := 0; i < 4; i++ {
		b, err := c.Next(r.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			if tok, err = c.Commit(r.ctx, b.Epoch, b.Step); err != nil {
				t.Fatal(err)
			}
		}
		b.Release()
	}
	r.drain(c)

	r = startFeedNode(t, append(common, "--batch-size", "8")...)
	c, err = r.dial(tok)
	if err != nil {
		t.Fatalf("resume with --batch-size 8: %v", err)
	}
	b, err := c.Next(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Epoch != 0 || b.Positions[0] != 16 {
		t.Errorf("resumed with --batch-size 8 at epoch %d position %d (step %d); the token is after sample 16 of epoch 0", b.Epoch, b.Positions[0], b.Step)
	}
	b.Release()
	r.drain(c)

	r = startFeedNode(t, "--dataset", root, "--epochs", "2", "--seed", "4", "--batch-size", "4")
	if c, err := r.dial(tok); err == nil || !strings.Contains(err.Error(), "seed 3 in the token, 4 in this run") {
		t.Errorf("another seed: %v, want bad_token naming the seed", err)
		if err == nil {
			c.Close()
		}
	}
	c, err = r.dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	r.drain(c)
}
