package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/longshore/longshore/feed"
)

// feedRun is what a trainer saw of a standalone node's feed.
type feedRun struct {
	sizes     []int                  // every batch's length, in order
	committed map[int]map[string]int // epoch -> key -> unfilled deliveries in committed batches
	filled    map[int]int            // epoch -> filled rows
	failed    map[int]int            // epoch -> the batches' Failed
	bad       []string               // problems seen
	stats     map[string]any         // --stats-json
}

// runFeed runs a standalone node with --sink feed over root and reads
// every batch through the Go client, committing each one: a trainer
// that counts what it trained on as committed history (the samples its
// committed batches held, filled places left out).
func runFeed(t *testing.T, root string, extra ...string) feedRun {
	t.Helper()
	dir := t.TempDir()
	feedDir, statsPath := filepath.Join(dir, "feed"), filepath.Join(dir, "s.json")
	var out, errb bytes.Buffer
	code := make(chan int, 1)
	args := append([]string{"--standalone", "--dataset", root, "--epochs", "2", "--batch-size", "8", "--size", "32",
		"--sink", "feed", "--feed-dir", feedDir, "--stats-json", statsPath, "--progress", "never", "--max-failures", "10"}, extra...)
	go func() { code <- run(args, &out, &errb) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := feed.DialContext(ctx, filepath.Join(feedDir, feed.SocketName(0)), feed.DialConfig{})
	if err != nil {
		t.Fatalf("dial: %v\n%s", err, errb.String())
	}
	r := feedRun{committed: map[int]map[string]int{}, filled: map[int]int{}, failed: map[int]int{}}
	for {
		b, err := c.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n := b.Len()
		r.sizes = append(r.sizes, n)
		if b.Filled != nil && len(b.Filled) != n {
			r.bad = append(r.bad, "filled marks of another length than the batch")
		}
		sb := len(b.Images) / max(n, 1)
		if r.committed[b.Epoch] == nil {
			r.committed[b.Epoch] = map[string]int{}
		}
		keys := map[string]int{}
		for j := range n {
			if b.Filled != nil && b.Filled[j] {
				r.filled[b.Epoch]++
				src := j // the next unfilled row, wrapping
				for b.Filled[src] {
					src = (src + 1) % n
				}
				if !bytes.Equal(b.Images[j*sb:(j+1)*sb], b.Images[src*sb:(src+1)*sb]) || b.Keys[j] != b.Keys[src] || b.Labels[j] != b.Labels[src] {
					r.bad = append(r.bad, "a filled row is not a copy of the next unfilled row")
				}
				continue
			}
			keys[b.Keys[j]]++
		}
		r.failed[b.Epoch] += b.Failed
		if _, err := c.Commit(ctx, b.Epoch, b.Step); err != nil {
			t.Fatalf("commit e%d s%d: %v", b.Epoch, b.Step, err)
		}
		for k, v := range keys {
			r.committed[b.Epoch][k] += v
		}
		b.Release()
	}
	c.Close()
	waitExit(t, ctx, code, &errb)
	r.stats = readStats(t, statsPath)
	return r
}

// corruptDataset is 30 good JPEGs and 3 corrupt ones: 33 samples, 4
// full batches of 8 and a last one of 1 per epoch.
func corruptDataset(t *testing.T) (root string, good, bad []string) {
	root, good = makeDataset(t, 30)
	bad = []string{"c0/bad1.jpg", "c1/bad2.jpg", "c2/bad3.jpg"}
	os.WriteFile(filepath.Join(root, bad[0]), []byte("not an image"), 0o644)
	os.WriteFile(filepath.Join(root, bad[1]), []byte("\xff\xd8\xff\xe0 truncated"), 0o644)
	os.WriteFile(filepath.Join(root, bad[2]), nil, 0o644)
	return root, good, bad
}

// TestFeedFillsFailedSamples: through a standalone node's feed, a batch
// keeps its size when samples fail (only an epoch's last batch is
// short), the filled marks count exactly the failures, a filled row is
// byte for byte the row it copies, and the committed history holds every
// good sample exactly once per epoch and no failed one.
func TestFeedFillsFailedSamples(t *testing.T) {
	root, good, bad := corruptDataset(t)
	r := runFeed(t, root)
	for _, p := range r.bad {
		t.Error(p)
	}
	for i, n := range r.sizes {
		if want := 8; i%5 == 4 {
			if n > 1 { // 33 = 4*8 + 1: the last batch holds one sample (none if it failed)
				t.Errorf("batch %d: the epoch's last batch holds %d samples, want at most 1", i, n)
			}
		} else if n != want {
			t.Errorf("batch %d: %d samples, want %d (sizes %v)", i, n, want, r.sizes)
		}
	}
	checkCommittedHistory(t, r, good, bad)
	// A last batch whose one sample failed is empty: nothing to fill with.
	for e := 0; e < 2; e++ {
		if r.filled[e] > r.failed[e] || r.failed[e] != 3 {
			t.Errorf("epoch %d: %d rows filled, %d failed; want at most 3 filled of 3 failed", e, r.filled[e], r.failed[e])
		}
	}
	if got := r.stats["images"].(float64); got != 60 {
		t.Errorf("stats say %v images, want the 60 good samples (filled places are not samples)", got)
	}
}

// TestFeedShortBatches: --short-batches leaves failed samples out as
// before: the batches of an epoch hold 30 samples, no row is filled.
func TestFeedShortBatches(t *testing.T) {
	root, good, bad := corruptDataset(t)
	r := runFeed(t, root, "--short-batches")
	for _, p := range r.bad {
		t.Error(p)
	}
	total := 0
	for _, n := range r.sizes {
		total += n
	}
	if total != 60 || r.filled[0]+r.filled[1] != 0 {
		t.Errorf("%d samples in batches %v, %d filled; want 60, none filled", total, r.sizes, r.filled[0]+r.filled[1])
	}
	checkCommittedHistory(t, r, good, bad)
}

func checkCommittedHistory(t *testing.T, r feedRun, good, bad []string) {
	t.Helper()
	for e := 0; e < 2; e++ {
		h := r.committed[e]
		for _, k := range good {
			if h[k] != 1 {
				t.Errorf("epoch %d: good sample %s is in committed history %d times, want 1", e, k, h[k])
			}
		}
		for _, k := range bad {
			if h[k] != 0 {
				t.Errorf("epoch %d: failed sample %s is in committed history", e, k)
			}
		}
		if len(h) != len(good) {
			t.Errorf("epoch %d: %d samples in committed history, want %d", e, len(h), len(good))
		}
	}
}
