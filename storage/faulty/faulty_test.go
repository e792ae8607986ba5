package faulty_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/faulty"
	"github.com/longshore/longshore/storage/storetest"
)

// With no rules the wrapper is invisible.
func TestConformanceNoRules(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storage.Store { return faulty.Wrap(storage.NewMemStore(t.Name())) })
}

func seeded(t *testing.T, keys ...string) *storage.MemStore {
	m := storage.NewMemStore(t.Name())
	for _, k := range keys {
		if _, err := m.Put(context.Background(), k, []byte("data of "+k), storage.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func TestFirstNByOpAndKey(t *testing.T) {
	ctx := context.Background()
	s := faulty.Wrap(seeded(t, "a.jpg", "b.png"),
		faulty.Rule{Ops: faulty.OpGet, Key: faulty.HasSuffix(".jpg"), FirstN: 2, Err: storage.ErrNotFound})
	for i := range 4 {
		_, err := s.Get(ctx, "a.jpg", nil)
		if wantErr := i < 2; wantErr != (err != nil) {
			t.Fatalf("Get #%d: %v; want an error only for the first 2", i, err)
		}
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("injected %v, want it to wrap ErrNotFound", err)
		}
	}
	if _, err := s.Get(ctx, "b.png", nil); err != nil {
		t.Fatalf("other key disturbed: %v", err)
	}
	if _, err := s.Stat(ctx, "a.jpg"); err != nil {
		t.Fatalf("other op disturbed: %v", err)
	}
	if s.Injections() != 2 || s.RuleInjections(0) != 2 {
		t.Fatalf("Injections = %d, want 2", s.Injections())
	}
}

func TestProbabilityIsSeeded(t *testing.T) {
	ctx := context.Background()
	run := func(seed uint64) []int {
		s := faulty.Wrap(seeded(t, "k"), faulty.Rule{Ops: faulty.Reads, Prob: 0.2, Seed: seed})
		var failed []int
		for i := range 1000 {
			if _, err := s.Get(ctx, "k", nil); err != nil {
				if !errors.Is(err, faulty.ErrInjected) {
					t.Fatalf("unexpected %v", err)
				}
				failed = append(failed, i)
			}
		}
		if int64(len(failed)) != s.Injections() {
			t.Fatalf("%d failures but %d injections counted", len(failed), s.Injections())
		}
		return failed
	}
	a, b, c := run(7), run(7), run(8)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed injected into different calls")
	}
	if slices.Equal(a, c) {
		t.Fatal("different seeds injected into the same calls")
	}
	if len(a) < 150 || len(a) > 250 {
		t.Fatalf("Prob 0.2 over 1000 calls injected %d times", len(a))
	}
}

func TestAfterLosesTheAnswer(t *testing.T) {
	ctx := context.Background()
	inner := seeded(t)
	s := faulty.Wrap(inner, faulty.Rule{Ops: faulty.OpPut, FirstN: 1, After: true})
	if _, err := s.Put(ctx, "ckpt", []byte("v1"), storage.Cond{IfAbsent: true}); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("Put with an After rule: %v, want ErrInjected", err)
	}
	if got, err := inner.Get(ctx, "ckpt", nil); err != nil || string(got) != "v1" {
		t.Fatalf("the write should have landed: %q, %v", got, err)
	}
	// The retry meets its own write.
	if _, err := s.Put(ctx, "ckpt", []byte("v1"), storage.Cond{IfAbsent: true}); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("retry: %v, want ErrPrecondition", err)
	}
}

// TestDelayAndContext: a delayed call waits out Delay on the rule's clock
// (a fake one here: the call is held until the test advances it, so
// nothing depends on how fast the machine is), and ends early with its
// context.
func TestDelayAndContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a failure backstop only
	defer cancel()
	fc := clock.NewFake(time.Time{})
	s := faulty.Wrap(seeded(t, "k"), faulty.Rule{Ops: faulty.OpGet, Delay: 50 * time.Millisecond, NoError: true, Clock: fc})
	done := make(chan error, 1)
	go func() {
		_, err := s.Get(ctx, "k", nil)
		done <- err
	}()
	if err := fc.BlockUntil(ctx, 1); err != nil {
		t.Fatalf("the delayed Get is not waiting on the rule's clock: %v", err)
	}
	fc.Advance(50*time.Millisecond - time.Nanosecond)
	select {
	case err := <-done:
		t.Fatalf("Get returned (%v) before its Delay was up", err)
	default:
	}
	fc.Advance(time.Nanosecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// The real clock, with a context that ends first.
	short, cancelShort := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancelShort()
	s2 := faulty.Wrap(seeded(t, "k"), faulty.Rule{Delay: time.Hour})
	if _, err := s2.Get(short, "k", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a delayed call must end with its context: %v", err)
	}
	// On a fake clock too, and its timer is let go.
	s3 := faulty.Wrap(seeded(t, "k"), faulty.Rule{Delay: time.Hour, Clock: fc})
	gone, cancelGone := context.WithCancel(ctx)
	go func() {
		_, err := s3.Get(gone, "k", nil)
		done <- err
	}()
	if err := fc.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	cancelGone()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a delayed call must end with its context: %v", err)
	}
	if n := fc.Pending(); n != 0 {
		t.Errorf("%d timers left pending after the call ended", n)
	}
}

func TestFirstMatchingRuleDecidesAndDisable(t *testing.T) {
	ctx := context.Background()
	special := errors.New("special")
	s := faulty.Wrap(seeded(t, "x/1", "y/1"),
		faulty.Rule{Key: faulty.HasPrefix("x/"), Err: special},
		faulty.Rule{Ops: faulty.OpList},
	)
	if _, err := s.Get(ctx, "x/1", nil); !errors.Is(err, special) {
		t.Fatalf("Get x/1: %v, want the first rule's error", err)
	}
	if err := s.List(ctx, "y/", func(storage.ObjectInfo) error { return nil }); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("List: %v, want ErrInjected", err)
	}
	if _, err := s.ListPrefixes(ctx, ""); err != nil {
		t.Fatalf("ListPrefixes is not OpList: %v", err)
	}
	s.SetEnabled(false)
	if _, err := s.Get(ctx, "x/1", nil); err != nil {
		t.Fatalf("disabled wrapper injected: %v", err)
	}
	if got := fmt.Sprint(s.RuleInjections(0), s.RuleInjections(1)); got != "1 1" {
		t.Fatalf("per-rule counts %s, want 1 1", got)
	}
}
