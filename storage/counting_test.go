package storage_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/longshore/longshore/storage"
)

// TestCountingStoreCounts: each call counts once, under its operation and
// outcome, and successful payloads count their bytes.
func TestCountingStoreCounts(t *testing.T) {
	ctx := context.Background()
	c := storage.NewCountingStore(storage.NewMemStore("t"))
	if _, err := c.Put(ctx, "a/1", []byte("hello"), storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "a/1", []byte("again"), storage.Cond{IfAbsent: true}); !errors.Is(err, storage.ErrPrecondition) {
		t.Fatalf("if-absent put over an object: %v", err)
	}
	if b, err := c.Get(ctx, "a/1", nil); err != nil || string(b) != "hello" {
		t.Fatalf("get: %q %v", b, err)
	}
	if _, err := c.Get(ctx, "a/2", nil); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	if b, err := c.GetRange(ctx, "a/1", 1, 3, nil); err != nil || string(b) != "ell" {
		t.Fatalf("get range: %q %v", b, err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, _ = c.Get(canceled, "a/1", nil)
	if _, err := storage.ListPrefixes(ctx, c, ""); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	for _, w := range []struct {
		op      storage.StoreOp
		outcome storage.Outcome
		n       int64
	}{
		{storage.OpPut, storage.OutcomeOK, 1}, {storage.OpPut, storage.OutcomePrecondition, 1},
		{storage.OpGet, storage.OutcomeOK, 1}, {storage.OpGet, storage.OutcomeNotFound, 1},
		{storage.OpGet, storage.OutcomeCanceled, 1}, {storage.OpGetRange, storage.OutcomeOK, 1},
		{storage.OpListPrefixes, storage.OutcomeOK, 1}, {storage.OpList, storage.OutcomeOK, 0},
	} {
		if got := st.Count(w.op, w.outcome); got != w.n {
			t.Errorf("%s/%s: %d calls, want %d", w.op, w.outcome, got, w.n)
		}
	}
	if st.BytesRead != 8 || st.BytesWritten != 5 {
		t.Errorf("bytes read %d written %d, want 8 and 5", st.BytesRead, st.BytesWritten)
	}
}

// TestRequestStatsAdd: two stores' counts summed by operation and
// outcome, in order, with the bytes.
func TestRequestStatsAdd(t *testing.T) {
	a := storage.RequestStats{Requests: []storage.RequestCount{{storage.OpGet, storage.OutcomeOK, 3}, {storage.OpStat, storage.OutcomeNotFound, 1}}, BytesRead: 10}
	b := storage.RequestStats{Requests: []storage.RequestCount{{storage.OpList, storage.OutcomeOK, 1}, {storage.OpGet, storage.OutcomeOK, 2}, {storage.OpGet, storage.OutcomeError, 1}}, BytesRead: 5, BytesWritten: 7}
	got := a.Add(b)
	want := storage.RequestStats{Requests: []storage.RequestCount{{storage.OpList, storage.OutcomeOK, 1}, {storage.OpGet, storage.OutcomeOK, 5}, {storage.OpGet, storage.OutcomeError, 1}, {storage.OpStat, storage.OutcomeNotFound, 1}},
		BytesRead: 15, BytesWritten: 7}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sum %+v; want %+v", got, want)
	}
}
