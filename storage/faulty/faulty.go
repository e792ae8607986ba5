// Package faulty wraps a storage.Store to inject errors and latency, in the
// manner of pebble's vfs/errorfs: a Rule picks calls by operation and key,
// decides by a seeded random draw or by "the first N", and then fails the
// call, delays it, or lets it run and loses its answer. Tests of fetchers,
// checkpoints and the coordinator use it to reproduce what S3 does on a
// bad day, deterministically.
//
//	s := faulty.Wrap(storage.NewMemStore("t"),
//	    faulty.Rule{Ops: faulty.Reads, Key: faulty.HasSuffix(".jpg"), Prob: 0.01, Seed: 1},
//	    faulty.Rule{Ops: faulty.OpPut, FirstN: 1, After: true}, // the first put lands but reports failure
//	)
//
// A Store is safe for concurrent use. With concurrent callers the order in
// which calls reach a rule, and so which ones a random rule picks, follows
// the scheduler; a single caller gets the same injections for a seed.
package faulty

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/storage"
)

// ErrInjected is the error a Rule injects when its Err is nil.
var ErrInjected = errors.New("faulty: injected error")

// Op is a set of Store operations.
type Op uint16

// Operations a Rule can match.
const (
	OpList Op = 1 << iota
	OpListPrefixes
	OpGet
	OpGetRange
	OpStat
	OpPut
	OpDelete

	// Reads are the operations that do not change the store.
	Reads = OpList | OpListPrefixes | OpGet | OpGetRange | OpStat
	// Writes are the ones that do.
	Writes = OpPut | OpDelete
	// All matches every operation (a Rule's zero Ops means the same).
	All = Reads | Writes
)

func (o Op) String() string {
	names := []string{"list", "list-prefixes", "get", "get-range", "stat", "put", "delete"}
	var out []string
	for i, n := range names {
		if o&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return strings.Join(out, "|")
}

// Rule says which calls to disturb and how. The zero Rule fails every call
// with ErrInjected.
type Rule struct {
	// Ops the rule applies to; 0 means All.
	Ops Op
	// Key picks calls by key (the prefix, for List and ListPrefixes); nil
	// means every key.
	Key func(key string) bool
	// Prob is the chance a matching call is disturbed, drawn from a PCG
	// generator seeded with Seed; 0 (or 1) means always.
	Prob float64
	Seed uint64
	// FirstN disturbs only the first N calls that match and win the draw;
	// 0 means no limit.
	FirstN int
	// Delay is added before the call (or before the error); it ends early,
	// with the context's error, if the context ends.
	Delay time.Duration
	// Clock times Delay; nil: the system clock. With a clock.Fake a test
	// holds delayed calls until it advances the clock, and knows from
	// BlockUntil that they are waiting.
	Clock clock.Clock
	// Err is the error to return; nil means ErrInjected. The Store wraps it
	// with the operation and key, so errors.Is sees it. To fake a missing
	// object use storage.ErrNotFound, to fake throttling any error you
	// like.
	Err error
	// NoError makes the rule only add Delay, letting the call run.
	NoError bool
	// After runs the call on the inner store first and then returns the
	// error: a write that landed but whose answer was lost.
	After bool
}

type rule struct {
	Rule
	mu    sync.Mutex
	rng   *rand.Rand
	fired atomic.Int64
}

// pick reports whether the rule disturbs this call.
func (r *rule) pick(op Op, key string) bool {
	if r.Ops != 0 && r.Ops&op == 0 {
		return false
	}
	if r.Key != nil && !r.Key(key) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Prob > 0 && r.Prob < 1 && r.rng.Float64() >= r.Prob {
		return false
	}
	if r.FirstN > 0 && r.fired.Load() >= int64(r.FirstN) {
		return false
	}
	r.fired.Add(1)
	return true
}

// Store is a storage.Store that consults its rules before (or after) each
// call to the inner store. It implements storage.PrefixLister whatever the
// inner store does.
type Store struct {
	inner    storage.Store
	rules    []*rule
	disabled atomic.Bool
	total    atomic.Int64
}

var (
	_ storage.Store        = (*Store)(nil)
	_ storage.PrefixLister = (*Store)(nil)
)

// Wrap returns inner behind rules. The first rule that picks a call
// decides its fate; later rules are not consulted for that call.
func Wrap(inner storage.Store, rules ...Rule) *Store {
	s := &Store{inner: inner}
	for _, r := range rules {
		s.rules = append(s.rules, &rule{Rule: r, rng: rand.New(rand.NewPCG(r.Seed, r.Seed^0x9e3779b97f4a7c15))})
	}
	return s
}

// Inner returns the wrapped store.
func (s *Store) Inner() storage.Store { return s.inner }

// SetEnabled turns injection on (the initial state) or off; while off,
// calls go straight through and rules are not consulted.
func (s *Store) SetEnabled(on bool) { s.disabled.Store(!on) }

// Injections returns how many calls the rules have disturbed.
func (s *Store) Injections() int64 { return s.total.Load() }

// RuleInjections returns how many calls rule i (in Wrap's order) disturbed.
func (s *Store) RuleInjections(i int) int64 { return s.rules[i].fired.Load() }

// String names the inner store.
func (s *Store) String() string { return s.inner.String() }

// before picks the rule for a call, sleeps its Delay, and returns the
// error to fail with now (before the call), or the rule to apply after.
func (s *Store) before(ctx context.Context, op Op, key string) (now error, after *rule) {
	if s.disabled.Load() {
		return nil, nil
	}
	for _, r := range s.rules {
		if !r.pick(op, key) {
			continue
		}
		s.total.Add(1)
		if r.Delay > 0 {
			t, fire := clock.Or(r.Clock).NewTimer(r.Delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err(), nil
			case <-fire:
			}
		}
		switch {
		case r.NoError:
			return nil, nil
		case r.After:
			return nil, r
		}
		return r.err(op, key), nil
	}
	return nil, nil
}

func (r *rule) err(op Op, key string) error {
	err := r.Err
	if err == nil {
		err = ErrInjected
	}
	return fmt.Errorf("%s %q (injected): %w", op, key, err)
}

// afterErr turns the inner call's outcome into the injected error when an
// After rule fired.
func afterErr(r *rule, op Op, key string, err error) error {
	if r == nil || err != nil {
		return err
	}
	return r.err(op, key)
}

// List implements storage.Store; the rule's key is the prefix.
func (s *Store) List(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	now, after := s.before(ctx, OpList, prefix)
	if now != nil {
		return now
	}
	return afterErr(after, OpList, prefix, s.inner.List(ctx, prefix, fn))
}

// ListPrefixes implements storage.PrefixLister; the rule's key is the
// prefix.
func (s *Store) ListPrefixes(ctx context.Context, prefix string) ([]string, error) {
	now, after := s.before(ctx, OpListPrefixes, prefix)
	if now != nil {
		return nil, now
	}
	out, err := storage.ListPrefixes(ctx, s.inner, prefix)
	if err = afterErr(after, OpListPrefixes, prefix, err); err != nil {
		return nil, err
	}
	return out, nil
}

// Get implements storage.Store.
func (s *Store) Get(ctx context.Context, key string, dst []byte) ([]byte, error) {
	now, after := s.before(ctx, OpGet, key)
	if now != nil {
		return dst[:0], now
	}
	out, err := s.inner.Get(ctx, key, dst)
	if err = afterErr(after, OpGet, key, err); err != nil {
		return dst[:0], err
	}
	return out, nil
}

// GetRange implements storage.Store.
func (s *Store) GetRange(ctx context.Context, key string, off, length int64, dst []byte) ([]byte, error) {
	now, after := s.before(ctx, OpGetRange, key)
	if now != nil {
		return dst[:0], now
	}
	out, err := s.inner.GetRange(ctx, key, off, length, dst)
	if err = afterErr(after, OpGetRange, key, err); err != nil {
		return dst[:0], err
	}
	return out, nil
}

// Stat implements storage.Store.
func (s *Store) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	now, after := s.before(ctx, OpStat, key)
	if now != nil {
		return storage.ObjectInfo{}, now
	}
	info, err := s.inner.Stat(ctx, key)
	if err = afterErr(after, OpStat, key, err); err != nil {
		return storage.ObjectInfo{}, err
	}
	return info, nil
}

// Put implements storage.Store. With an After rule the object is written
// and the caller still sees an error, as when a response is lost.
func (s *Store) Put(ctx context.Context, key string, data []byte, c storage.Cond) (string, error) {
	now, after := s.before(ctx, OpPut, key)
	if now != nil {
		return "", now
	}
	etag, err := s.inner.Put(ctx, key, data, c)
	if err = afterErr(after, OpPut, key, err); err != nil {
		return "", err
	}
	return etag, nil
}

// Delete implements storage.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	now, after := s.before(ctx, OpDelete, key)
	if now != nil {
		return now
	}
	return afterErr(after, OpDelete, key, s.inner.Delete(ctx, key))
}

// HasPrefix matches keys starting with p (HasSuffix and Equals are its
// siblings): ready-made Rule.Key predicates.
func HasPrefix(p string) func(string) bool {
	return func(k string) bool { return strings.HasPrefix(k, p) }
}

// HasSuffix matches keys ending in suffix.
func HasSuffix(suffix string) func(string) bool {
	return func(k string) bool { return strings.HasSuffix(k, suffix) }
}

// Equals matches exactly key.
func Equals(key string) func(string) bool { return func(k string) bool { return k == key } }
