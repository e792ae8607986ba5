package dataset

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
	for s.queued() != 2 {
		runtime.Gosched() // until both have queued
	}
	// A buffer given back ends a period once spillTuneEvery has passed:
	// tune serves hits members in it, then gives back a buffer held d.
	tune := func(hits int, d time.Duration) {
		now = now.Add(spillTuneEvery)
		s.served(hits)
		s.give(nil, now.Add(-d))
	}
	buffers := func() (circ, idle int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.circ, len(s.idle)
	}
	now = now.Add(20 * time.Millisecond)
	s.give(nil, took[0]) // held 20 ms; no period yet: to the first waiter
	<-got
	// 50 chunks' members served in the period, buffers held 20 ms: 185
	// chunks a second need 2 x 185 x 0.02 = 7.4, so 8 buffers; the second
	// waiter gets a new one at once.
	tune(50*members, 20*time.Millisecond)
	if l := s.stagingLimit(); l != 8 {
		t.Fatalf("limit %d after 185 chunks/s held 20 ms; want 8", l)
	}
	<-got
	if circ, idle := buffers(); circ != DefaultSpillStaging+1 || idle != 1 {
		t.Errorf("%d buffers in circulation, %d idle; want %d, 1", circ, idle, DefaultSpillStaging+1)
	}
	// A slow consumer: one chunk in the next period. The limit falls to
	// the floor; the idle buffer past it is freed at once, and buffers
	// in use are kept only up to it as they come back.
	tune(members, 20*time.Millisecond)
	if l := s.stagingLimit(); l != DefaultSpillStaging {
		t.Fatalf("limit %d after 4 chunks/s; want %d", l, DefaultSpillStaging)
	}
	if circ, _ := buffers(); circ != DefaultSpillStaging {
		t.Errorf("%d buffers in circulation after the limit fell; want %d", circ, DefaultSpillStaging)
	}
	for range 3 { // the other buffers in use come back
		s.give(nil, now)
	}
	if circ, idle := buffers(); circ != DefaultSpillStaging || idle != DefaultSpillStaging {
		t.Errorf("%d buffers in circulation, %d idle; want %d and %d", circ, idle, DefaultSpillStaging, DefaultSpillStaging)
	}
	// The ceiling: a store ten seconds away.
	if _, _, err := s.take(ctx, members); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.hold = 10 * time.Second
	s.mu.Unlock()
	tune(1000*members, 10*time.Second)
	if l := s.stagingLimit(); l != maxSpillStaging {
		t.Errorf("limit %d for a 10 s round trip; want the ceiling %d", l, maxSpillStaging)
	}

	fixed, err := newSpill(t.TempDir(), 2, clock)
	if err != nil {
		t.Fatal(err)
	}
	_, at, _ := fixed.take(ctx, members)
	now = now.Add(spillTuneEvery)
	fixed.served(1000 * members)
	fixed.give(nil, at)
	if l := fixed.stagingLimit(); l != 2 {
		t.Errorf("fixed SpillStaging 2: limit %d", l)
	}
}

// TestSpillStagingStartsFast: the first tuning period is spillTuneFirst
// and each next one twice the last, so a store far away gets its buffers
// within a fraction of a second of the start, not one doubling each
// spillTuneEvery.
func TestSpillStagingStartsFast(t *testing.T) {
	now := time.Unix(0, 0)
	s, err := newSpill(t.TempDir(), 0, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	const members = 16
	for range DefaultSpillStaging {
		if _, _, err := s.take(context.Background(), members); err != nil {
			t.Fatal(err)
		}
	}
	const held = 20 * time.Millisecond
	back := func(at time.Duration, chunks int) int {
		now = time.Unix(0, 0).Add(at)
		s.served(chunks * members)
		s.give(nil, now.Add(-held))
		return s.stagingLimit()
	}
	if l := back(20*time.Millisecond, 4); l != DefaultSpillStaging {
		t.Fatalf("limit %d before the first period ended; want %d", l, DefaultSpillStaging)
	}
	// 5 chunks in the first 25 ms: 200 a second, held 20 ms: 2 x 200 x 0.02 = 8.
	if l := back(spillTuneFirst, 1); l != 8 {
		t.Fatalf("limit %d after the first %v at 200 chunks/s; want 8", l, spillTuneFirst)
	}
	// The second period is 50 ms: 20 ms into it, nothing is tuned.
	if l := back(45*time.Millisecond, 10); l != 8 {
		t.Fatalf("limit %d 20 ms into the second period; want 8", l)
	}
	// 20 chunks in those 50 ms: 400 a second, so 16.
	if l := back(75*time.Millisecond, 10); l != 16 {
		t.Fatalf("limit %d after the second period at 400 chunks/s; want 16", l)
	}
	s.mu.Lock()
	every := s.every
	s.mu.Unlock()
	if every != 4*spillTuneFirst {
		t.Errorf("third period %v; want %v", every, 4*spillTuneFirst)
	}
}
