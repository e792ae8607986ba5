package actors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/storage"
)

// rangedTwin is an ObjectDecoder that reads its whole object by one
// ranged read of the Object it is handed, then fills the fake decoder's
// pattern.
type rangedTwin struct{}

func (rangedTwin) Decode([]byte, uint64, []byte) error { return errors.New("twin: read whole") }
func (rangedTwin) DecodeWindow([]byte, uint64, []byte) (bool, error) {
	return false, errors.New("twin: read whole")
}

func (rangedTwin) DecodeObject(ctx context.Context, obj Object, seed uint64, dst []byte) (bool, error) {
	b, err := obj.Ranges.GetRange(ctx, obj.Key, 0, obj.Size, nil)
	if err != nil {
		return false, WithFailureClass(err, "read")
	}
	if int64(len(b)) != obj.Size {
		return false, fmt.Errorf("twin: %d of %d bytes", len(b), obj.Size)
	}
	fillPattern(dst, b)
	return false, nil
}
func (rangedTwin) Close() error { return nil }

// flakyStore refuses the first stats and ranged gets of every key (a
// connection refused: the store, not the object) and counts whole Gets.
type flakyStore struct {
	storage.Store
	statFails, rangeFails int
	mu                    sync.Mutex
	stats, ranges         map[string]int
	gets                  int
}

func (s *flakyStore) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	s.mu.Lock()
	s.stats[key]++
	n := s.stats[key]
	s.mu.Unlock()
	if n <= s.statFails {
		return storage.ObjectInfo{}, fmt.Errorf("stat %s: dial tcp: connection refused", key)
	}
	return s.Store.Stat(ctx, key)
}

func (s *flakyStore) GetRange(ctx context.Context, key string, off, length int64, dst []byte) ([]byte, error) {
	s.mu.Lock()
	s.ranges[key]++
	n := s.ranges[key]
	s.mu.Unlock()
	if n <= s.rangeFails {
		return dst[:0], fmt.Errorf("get %s: dial tcp: connection refused", key)
	}
	return s.Store.GetRange(ctx, key, off, length, dst)
}

func (s *flakyStore) Get(ctx context.Context, key string, dst []byte) ([]byte, error) {
	s.mu.Lock()
	s.gets++
	s.mu.Unlock()
	return s.Store.Get(ctx, key, dst)
}

// Ranged reads are a fetch mode: the fetch stage states each object
// (nothing is read whole) and the decoders' ranged reads retry through a
// store outage as whole reads do; every sample arrives and the retries
// are counted.
func TestRangedFetchRetriesTheStore(t *testing.T) {
	checkNoLeaks(t)
	mem, ds := makeDataset(t, 30, 3, 64)
	st := &flakyStore{Store: mem, statFails: 1, rangeFails: 2, stats: map[string]int{}, ranges: map[string]int{}}
	cfg := smallConfig()
	cfg.StoreOutage = time.Minute
	fc := clock.NewFake(time.Time{})
	stop := driveClock(fc, time.Second)
	defer stop()
	deps := testDeps(st, func() (SampleDecoder, error) { return rangedTwin{}, nil })
	deps.Clock = fc
	p, err := NewLoader(cfg, ds, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	recs, err := drainAll(t, mem, cfg, p)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("run: %v (failures %v)", err, p.Failures())
	}
	n := 0
	for _, r := range recs {
		n += r.samples()
	}
	if n != 30 || p.Failures().Failed != 0 {
		t.Errorf("%d samples delivered, failures %v; want 30 and none", n, p.Failures())
	}
	if r := p.Stats().StoreRetries; r != 30*3 {
		t.Errorf("%d store retries, want 90 (a stat and two ranged reads of each of 30 objects)", r)
	}
	if st.gets != 0 {
		t.Errorf("%d whole-object reads in a ranged pipeline", st.gets)
	}
}

// A decode waiting on the store (its ranged read's retries) is not
// decoding: the decode deadline does not fire during the wait, however
// long, and the sample arrives.
func TestRangedStoreWaitIsNotDecodeTime(t *testing.T) {
	checkNoLeaks(t)
	mem, ds := makeDataset(t, 1, 1, 64)
	st := &flakyStore{Store: mem, rangeFails: 1, stats: map[string]int{}, ranges: map[string]int{}}
	cfg := smallConfig()
	cfg.Decoders, cfg.DecodeDeadline, cfg.StoreOutage = 1, time.Second, time.Minute
	fc, deadlines := clock.NewFake(time.Time{}), clock.NewFake(time.Time{})
	deps := testDeps(st, func() (SampleDecoder, error) { return rangedTwin{}, nil })
	deps.Clock, deps.DeadlineClock = fc, deadlines
	p, err := NewLoader(cfg, ds, deps)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The decode's ranged read failed and waits on the pipeline's clock
	// for its retry; its deadline is armed. Ten deadlines pass.
	if err := fc.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := deadlines.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	deadlines.Advance(10 * time.Second)
	fc.Advance(time.Second) // the store answers the retry
	b, err := p.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	if b.Len() != 1 || b.Failed != 0 {
		t.Fatalf("batch of %d, %d failed: %v", b.Len(), b.Failed, p.Failures())
	}
}
