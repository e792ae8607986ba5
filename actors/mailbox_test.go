package actors

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// mailboxWatch counts, per actor, the task messages posted and not yet
// processed, and keeps the maximum per role.
type mailboxWatch struct {
	mu  sync.Mutex
	max map[string]int64
}

type mailboxCounter struct {
	w     *mailboxWatch
	role  string
	depth atomic.Int64
}

func isTask(m any) bool {
	switch m.(type) {
	case *fetchMsg, *decodeMsg, *uploadMsg, *readyMsg:
		return true
	}
	return false
}

func (c *mailboxCounter) MailboxStarted() {}
func (c *mailboxCounter) MessagePosted(m any) {
	if !isTask(m) {
		return
	}
	d := c.depth.Add(1)
	c.w.mu.Lock()
	c.w.max[c.role] = max(c.w.max[c.role], d)
	c.w.mu.Unlock()
}
func (c *mailboxCounter) MessageReceived(m any) {
	if isTask(m) {
		c.depth.Add(-1)
	}
}
func (c *mailboxCounter) MailboxEmpty() {}

// TestMailboxesStayWithinCredits runs a pipeline with slow, jittery reads
// and decodes and a slow consumer, and checks that no worker's mailbox ever
// held more tasks than the credit it grants. protoactor reports a message
// as received only after the handler returns, while the handler's reply may
// already have earned the next task, so a mailbox may read one over.
func TestMailboxesStayWithinCredits(t *testing.T) {
	w := &mailboxWatch{max: map[string]int64{}}
	testMailboxMiddleware = func(role string) actor.MailboxMiddleware { return &mailboxCounter{w: w, role: role} }
	defer func() { testMailboxMiddleware = nil }()

	mem, ds := makeDataset(t, 600, 3, 64)
	cfg := smallConfig()
	cfg.FetchConcurrency, cfg.Decoders, cfg.DecodeQueue, cfg.Slots = 5, 3, 2, 4
	p, err := NewLoader(cfg, ds, testDeps(&faultStore{Store: mem, delay: time.Millisecond, rng: seededRand(3)}, fakeDecoders(time.Millisecond, 3)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := 0; ; i++ {
		b, err := p.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i%5 == 0 {
			time.Sleep(3 * time.Millisecond)
		}
		b.Release()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("deepest mailboxes: %v", w.max)
	limits := map[string]int64{"fetcher": 1 + 1, "decoder": int64(cfg.DecodeQueue) + 1,
		"uploader": int64(cfg.Slots), "feed": int64(cfg.Slots)}
	for role, lim := range limits {
		if w.max[role] > lim {
			t.Errorf("%s mailbox held %d tasks; its credit allows %d", role, w.max[role], lim)
		}
		if w.max[role] == 0 {
			t.Errorf("no %s task seen", role)
		}
	}
}
