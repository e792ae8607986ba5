package storage

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
)

// StoreOp names a Store operation in request counts.
type StoreOp uint8

// Store operations, as CountingStore counts them.
const (
	OpList StoreOp = iota
	OpListPrefixes
	OpGet
	OpGetRange
	OpStat
	OpPut
	OpDelete
	numStoreOps
)

var storeOpNames = [numStoreOps]string{"list", "list_prefixes", "get", "get_range", "stat", "put", "delete"}

func (o StoreOp) String() string {
	if o < numStoreOps {
		return storeOpNames[o]
	}
	return "unknown"
}

// Outcome is how a Store call ended, in request counts.
type Outcome uint8

// Outcomes: an answer (ok, not found, a lost precondition, a range outside
// the object), the caller giving up, or a failure.
const (
	OutcomeOK Outcome = iota
	OutcomeNotFound
	OutcomePrecondition
	OutcomeRange
	OutcomeCanceled
	OutcomeError
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "not_found", "precondition", "range", "canceled", "error"}

func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return "unknown"
}

// OutcomeOf classifies a Store call's error.
func OutcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, ErrNotFound):
		return OutcomeNotFound
	case errors.Is(err, ErrPrecondition):
		return OutcomePrecondition
	case errors.Is(err, ErrRange):
		return OutcomeRange
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return OutcomeCanceled
	}
	return OutcomeError
}

// RequestCount is how many calls of one operation ended one way.
type RequestCount struct {
	Op      StoreOp
	Outcome Outcome
	Count   int64
}

// RequestStats are a CountingStore's counts so far.
type RequestStats struct {
	// Requests lists the calls by operation and outcome (only those that
	// happened), in operation then outcome order.
	Requests []RequestCount
	// BytesRead and BytesWritten count payload bytes of Get, GetRange and
	// Put calls that succeeded.
	BytesRead, BytesWritten int64
}

// Count returns how many calls of op ended with outcome.
func (s RequestStats) Count(op StoreOp, outcome Outcome) int64 {
	for _, r := range s.Requests {
		if r.Op == op && r.Outcome == outcome {
			return r.Count
		}
	}
	return 0
}

// Add is s's counts and o's summed: the calls of each operation and
// outcome, and the bytes (a node reading through several counting
// stores: a mixture's sources), in operation then outcome order.
func (s RequestStats) Add(o RequestStats) RequestStats {
	var n [numStoreOps][numOutcomes]int64
	for _, rs := range [][]RequestCount{s.Requests, o.Requests} {
		for _, r := range rs {
			if r.Op < numStoreOps && r.Outcome < numOutcomes {
				n[r.Op][r.Outcome] += r.Count
			}
		}
	}
	out := RequestStats{BytesRead: s.BytesRead + o.BytesRead, BytesWritten: s.BytesWritten + o.BytesWritten}
	for op := range n {
		for oc, c := range n[op] {
			if c > 0 {
				out.Requests = append(out.Requests, RequestCount{Op: StoreOp(op), Outcome: Outcome(oc), Count: c})
			}
		}
	}
	return out
}

// CountingStore wraps a Store and counts its calls by operation and
// outcome, and the payload bytes moved: the node's store requests as the
// metrics show them. Under a PackedStore it counts the requests the
// object store sees (a chunk's ranged GET), not the samples served.
// Close closes the wrapped store. Safe for concurrent use; counting costs
// an atomic add per call.
type CountingStore struct {
	s             Store
	n             [numStoreOps][numOutcomes]atomic.Int64
	read, written atomic.Int64
}

var (
	_ Store        = (*CountingStore)(nil)
	_ PrefixLister = (*CountingStore)(nil)
	_ io.Closer    = (*CountingStore)(nil)
)

// NewCountingStore wraps s.
func NewCountingStore(s Store) *CountingStore { return &CountingStore{s: s} }

// Unwrap returns the wrapped store.
func (c *CountingStore) Unwrap() Store { return c.s }

func (c *CountingStore) count(op StoreOp, err error) {
	c.n[op][OutcomeOf(err)].Add(1)
}

// Stats returns the counts so far.
func (c *CountingStore) Stats() RequestStats {
	out := RequestStats{BytesRead: c.read.Load(), BytesWritten: c.written.Load()}
	for op := range c.n {
		for o := range c.n[op] {
			if n := c.n[op][o].Load(); n > 0 {
				out.Requests = append(out.Requests, RequestCount{Op: StoreOp(op), Outcome: Outcome(o), Count: n})
			}
		}
	}
	return out
}

// List implements Store.
func (c *CountingStore) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	err := c.s.List(ctx, prefix, fn)
	c.count(OpList, err)
	return err
}

// ListPrefixes implements PrefixLister with the wrapped store's
// (or a full listing, see the ListPrefixes function).
func (c *CountingStore) ListPrefixes(ctx context.Context, prefix string) ([]string, error) {
	out, err := ListPrefixes(ctx, c.s, prefix)
	c.count(OpListPrefixes, err)
	return out, err
}

// Get implements Store.
func (c *CountingStore) Get(ctx context.Context, key string, dst []byte) ([]byte, error) {
	out, err := c.s.Get(ctx, key, dst)
	c.count(OpGet, err)
	if err == nil {
		c.read.Add(int64(len(out)))
	}
	return out, err
}

// GetRange implements Store.
func (c *CountingStore) GetRange(ctx context.Context, key string, off, length int64, dst []byte) ([]byte, error) {
	out, err := c.s.GetRange(ctx, key, off, length, dst)
	c.count(OpGetRange, err)
	if err == nil {
		c.read.Add(int64(len(out)))
	}
	return out, err
}

// Stat implements Store.
func (c *CountingStore) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	info, err := c.s.Stat(ctx, key)
	c.count(OpStat, err)
	return info, err
}

// Put implements Store.
func (c *CountingStore) Put(ctx context.Context, key string, data []byte, cond Cond) (string, error) {
	etag, err := c.s.Put(ctx, key, data, cond)
	c.count(OpPut, err)
	if err == nil {
		c.written.Add(int64(len(data)))
	}
	return etag, err
}

// Delete implements Store.
func (c *CountingStore) Delete(ctx context.Context, key string) error {
	err := c.s.Delete(ctx, key)
	c.count(OpDelete, err)
	return err
}

// String implements Store: the wrapped store's name.
func (c *CountingStore) String() string { return c.s.String() }

// Close closes the wrapped store, if it is an io.Closer.
func (c *CountingStore) Close() error { return Close(c.s) }
