package storage

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// TestSpillStagingTunes: the automatic staging count follows Little's
// law, twice the chunks consumed a second times a buffer's hold time,
// measured over a period of the injected clock: a store far away raises
// it (and the fetches waiting get the new buffers at once), a slow
// consumer lowers it again (the buffers past it freed as they come
// back), and a fixed count never moves.
func TestSpillStagingTunes(t *testing.T) {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	s, err := newSpill(t.TempDir(), 0, clock)
	if err != nil {
		t.Fatal(err)
	}
	const members = 16
	ctx := context.Background()
	var took []time.Time
	for range DefaultSpillStaging {
		_, at, err := s.take(ctx, members)
		if err != nil {
			t.Fatal(err)
		}
		took = append(took, at)
	}
	// Two more fetches wait: every buffer is in use.
	got := make(chan time.Time, 2)
	for range 2 {
		go func() {
			_, at, err := s.take(ctx, members)
			if err != nil {
				t.Error(err)
			}
			got <- at
		}()
	}
	for s.waiting.Load() != 2 {
		runtime.Gosched() // until both have queued
	}
	// 250 ms in which 50 chunks' members were served, buffers held 20 ms
	// each: 200 chunks a second need 2 x 200 x 0.02 = 8 buffers.
	now = now.Add(20 * time.Millisecond)
	s.give(nil, took[0]) // a hold time of 20 ms; not a period yet: to a waiter
	<-got
	now = now.Add(spillTuneEvery)
	s.served(50 * members)
	if l := s.stagingLimit(); l != 8 {
		t.Fatalf("limit %d after 200 chunks/s held 20 ms; want 8", l)
	}
	<-got // the second waiter got one of the new buffers
	s.mu.Lock()
	circ := s.circ
	s.mu.Unlock()
	if circ != DefaultSpillStaging+1 {
		t.Errorf("%d buffers in circulation; want %d (one more for the waiter)", circ, DefaultSpillStaging+1)
	}
	// A slow consumer: one chunk in the next period. The limit falls to
	// the floor, and buffers given back past it are freed, not kept.
	now = now.Add(spillTuneEvery)
	s.served(members)
	if l := s.stagingLimit(); l != DefaultSpillStaging {
		t.Fatalf("limit %d after 4 chunks/s; want %d", l, DefaultSpillStaging)
	}
	for _, at := range took[1:] {
		s.give(nil, at)
	}
	s.give(nil, now)
	s.give(nil, now)
	s.mu.Lock()
	circ, idle := s.circ, len(s.idle)
	s.mu.Unlock()
	if circ != DefaultSpillStaging || idle != DefaultSpillStaging {
		t.Errorf("%d buffers in circulation, %d idle; want %d and %d", circ, idle, DefaultSpillStaging, DefaultSpillStaging)
	}
	// The ceiling: a store very far away.
	s.mu.Lock()
	s.hold = 10 * time.Second
	s.mu.Unlock()
	now = now.Add(spillTuneEvery)
	s.served(1000 * members)
	if l := s.stagingLimit(); l != maxSpillStaging {
		t.Errorf("limit %d for a 10 s round trip; want the ceiling %d", l, maxSpillStaging)
	}

	fixed, err := newSpill(t.TempDir(), 2, clock)
	if err != nil {
		t.Fatal(err)
	}
	_, at, _ := fixed.take(ctx, members)
	now = now.Add(time.Second)
	fixed.give(nil, at)
	now = now.Add(spillTuneEvery)
	fixed.served(1000 * members)
	if l := fixed.stagingLimit(); l != 2 {
		t.Errorf("fixed SpillStaging 2: limit %d", l)
	}
}
