package journal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/internal/clock"
	"github.com/longshore/longshore/storage"
	"github.com/longshore/longshore/storage/faulty"
)

func randState(rng *rand.Rand) cluster.State {
	s := cluster.State{
		Incarnation: rng.Uint64N(1 << 40), Seq: rng.Uint64N(1 << 40),
		Samples: rng.Int64N(1 << 34), Seed: rng.Uint64(), Block: 1 + rng.IntN(1000), Window: 1 + rng.IntN(300),
	}
	for range rng.IntN(4) {
		var es cluster.EpochState
		es.Complete = rng.IntN(3) == 0
		p := int64(0)
		for range rng.IntN(20) {
			p += rng.Int64N(1000)
			l := 1 + rng.Int64N(1000)
			es.Committed = append(es.Committed, cluster.Range{Start: p, End: p + l})
			p += l
		}
		if rng.IntN(2) == 0 {
			es.Dropped = []cluster.Range{{Start: p + 1, End: p + 1 + rng.Int64N(5) + 1}}
		}
		for k := range rng.IntN(4) {
			es.Commits = append(es.Commits, cluster.RankCommit{
				Rank: fmt.Sprintf("node-%d/%d", rng.IntN(100), k), Epoch: len(s.Epochs),
				Session: cluster.Fence{Incarnation: rng.Uint64N(1 << 40), Seq: rng.Uint64N(1 << 40)},
				Step:    rng.Int64N(1 << 20), Offset: 1 + rng.Int64N(1<<30), Gen: 1 + rng.Uint64N(1<<40),
			})
		}
		for k := range rng.IntN(4) {
			t := cluster.Trail{Rank: fmt.Sprintf("node-%d/%d", rng.IntN(100), k),
				Session: cluster.Fence{Incarnation: rng.Uint64N(1 << 40), Seq: rng.Uint64N(1 << 40)}}
			for range 1 + rng.IntN(5) { // in stream order: any order of positions
				a := rng.Int64N(1 << 30)
				t.Segs = append(t.Segs, cluster.Range{Start: a, End: a + 1 + rng.Int64N(300)})
			}
			var step, off, end int64
			for range 1 + rng.IntN(5) {
				step += 1 + rng.Int64N(9)
				off += 1 + rng.Int64N(900)
				t.Commits = append(t.Commits, cluster.TrailCommit{Step: step, Offset: off})
			}
			for range rng.IntN(3) {
				end += 1 + rng.Int64N(900)
				t.Ends = append(t.Ends, end)
			}
			if rng.IntN(3) != 0 { // a node that tells its cuts
				t.CutsTold = true
				var cut int64
				for range rng.IntN(3) {
					cut += 1 + rng.Int64N(900)
					t.Cuts = append(t.Cuts, cut)
				}
			}
			es.Trails = append(es.Trails, t)
		}
		s.Epochs = append(s.Epochs, es)
	}
	return s
}

func TestEncodeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		e := Entry{Gen: 1 + rng.Uint64N(1<<50), Job: rng.Uint64(), Written: time.Unix(0, rng.Int64()), State: randState(rng)}
		for range rng.IntN(3) {
			e.Peers = append(e.Peers, "127.0.0.1:7946")
		}
		b := Encode(nil, e)
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%d: decode: %v", i, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("%d: round trip:\n got %+v\nwant %+v", i, got, e)
		}
		// Every truncation and every single-bit flip is detected.
		for k := range len(b) {
			if _, err := Decode(b[:k]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%d: truncated to %d bytes: err %v, want ErrCorrupt", i, k, err)
			}
		}
		c := append([]byte(nil), b...)
		bit := rng.IntN(8 * len(c))
		c[bit/8] ^= 1 << (bit % 8)
		if _, err := Decode(c); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%d: bit %d flipped: err %v, want ErrCorrupt", i, bit, err)
		}
	}
}

// Entries written before trails carried their cuts (version 5) still
// load: their trails say nothing of cuts (CutsTold false), the rest is
// as written. So do lineage archives of version 1.
func TestDecodeVersion5(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 200 {
		e := Entry{Gen: 1 + rng.Uint64N(1<<50), Job: rng.Uint64(), Written: time.Unix(0, rng.Int64()), State: randState(rng)}
		want := e
		want.State.Epochs = nil
		for _, es := range e.State.Epochs {
			es.Trails = append([]cluster.Trail(nil), es.Trails...)
			for k := range es.Trails {
				es.Trails[k].Cuts, es.Trails[k].CutsTold = nil, false
			}
			want.State.Epochs = append(want.State.Epochs, es)
		}
		got, err := Decode(encodeVersion(nil, e, 5))
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%d: version 5:\n got %+v\nwant %+v", i, got, want)
		}
		for n, es := range e.State.Epochs {
			job, epoch, gen, ts, err := decodeArchive(encodeArchiveVersion(e.Job, n, e.Gen, 0, es.Trails, 1))
			if err != nil || job != e.Job || epoch != n || gen != e.Gen || !reflect.DeepEqual(ts, want.State.Epochs[n].Trails) {
				t.Fatalf("%d: archive version 1 of epoch %d: %x %d %d %+v, %v; want %+v", i, n, job, epoch, gen, ts, err, want.State.Epochs[n].Trails)
			}
			if _, _, _, ts, err := decodeArchive(encodeArchive(e.Job, n, e.Gen, 0, es.Trails)); err != nil || !reflect.DeepEqual(ts, es.Trails) {
				t.Fatalf("%d: archive of epoch %d: %+v, %v; want %+v", i, n, ts, err, es.Trails)
			}
		}
	}
}

// A commit record written without a generation is made durable by the
// entry that carries it: it decodes with the entry's generation, which is
// what resume tokens for it name.
func TestEncodeStampsCommitGeneration(t *testing.T) {
	s := cluster.State{Samples: 10, Block: 1, Epochs: []cluster.EpochState{{
		Committed: []cluster.Range{{Start: 0, End: 4}},
		Commits: []cluster.RankCommit{
			{Rank: "a/0", Session: cluster.Fence{Incarnation: 3, Seq: 9}, Step: 1, Offset: 4},
			{Rank: "b/0", Session: cluster.Fence{Incarnation: 3, Seq: 10}, Step: 0, Offset: 2, Gen: 5},
		},
	}}}
	got, err := Decode(Encode(nil, Entry{Gen: 7, State: s}))
	if err != nil {
		t.Fatal(err)
	}
	if g := got.State.Epochs[0].Commits; g[0].Gen != 7 || g[1].Gen != 5 {
		t.Fatalf("generations %d, %d; want 7 (this entry's), 5 (kept)", g[0].Gen, g[1].Gen)
	}
}

// Entries written before commit records existed (version 1) still load.
func TestDecodeVersion1(t *testing.T) {
	// magic, version 1, job, gen 2, incarnation 1, seq 3, time 0,
	// samples 10, seed, block 1, one complete epoch without ranges, no
	// peers, CRC-32C.
	b := []byte("LSJ\x01")
	b = append(b, make([]byte, 8)...)
	b = append(b, 2, 1, 3, 0, 20)
	b = append(b, make([]byte, 8)...)
	b = append(b, 1, 1, 1, 0, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	e, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if e.Gen != 2 || e.State.Samples != 10 || len(e.State.Epochs) != 1 || !e.State.Epochs[0].Complete || e.State.Epochs[0].Commits != nil || e.State.Window != 1 {
		t.Fatalf("decoded %+v", e)
	}
}

// Entries written before windows existed (version 2) still load, with
// window 1: the order they were written for.
func TestDecodeVersion2(t *testing.T) {
	// magic, version 2, job, gen 2, incarnation 1, seq 3, time 0,
	// samples 10, seed, block 16, one open epoch committing [0, 4) with
	// one commit record, no peers, CRC-32C.
	b := []byte("LSJ\x02")
	b = append(b, make([]byte, 8)...)
	b = append(b, 2, 1, 3, 0, 20)
	b = append(b, make([]byte, 8)...)
	b = append(b, 16, 1, 0, 1, 0, 8, 0, 1)
	b = append(b, 3, 'a', '/', '0', 1, 4, 0, 8, 2) // rank, session 1.4, step 0, offset 4, gen 2
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	e, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	want := cluster.State{Incarnation: 1, Seq: 3, Samples: 10, Block: 16, Window: 1, Epochs: []cluster.EpochState{{
		Committed: []cluster.Range{{Start: 0, End: 4}},
		Commits:   []cluster.RankCommit{{Rank: "a/0", Session: cluster.Fence{Incarnation: 1, Seq: 4}, Offset: 4, Gen: 2}},
	}}}
	if e.Gen != 2 || !reflect.DeepEqual(e.State, want) {
		t.Fatalf("decoded %+v\nwant state %+v", e, want)
	}
}

func FuzzDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 4 {
		f.Add(Encode(nil, Entry{Gen: 7, Job: 9, State: randState(rng), Peers: []string{"a:1"}, Digest: "12:00ff", BatchSize: 3, Epochs: 2}))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if _, err := Decode(Encode(nil, e)); err != nil {
			t.Fatalf("re-encoding a decoded entry: %v", err)
		}
	})
}

func FuzzParseToken(f *testing.F) {
	f.Add(Token{Job: 1, Gen: 2, Epoch: 3, Step: 4}.String())
	f.Add(Token{Job: 1, Gen: 2, Epoch: 3, Step: 4, Ident: Identity{Digest: "9:00ff", Seed: 5, Block: 6, Window: 7, BatchSize: 8, Epochs: 9}}.String())
	f.Add("lsr1.")
	f.Add("lsr2.")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseToken(s)
		if err != nil {
			if !errors.Is(err, ErrBadToken) {
				t.Fatalf("error %v does not wrap ErrBadToken", err)
			}
			return
		}
		if back, err := ParseToken(tok.String()); err != nil || back != tok {
			t.Fatalf("round trip %+v: %+v, %v", tok, back, err)
		}
	})
}

func TestToken(t *testing.T) {
	tok := Token{Job: 0xfeedface12345678, Gen: 123456, Epoch: 7, Step: 98765}
	s := tok.String()
	if len(s) > 40 {
		t.Errorf("token %q is %d characters; want a small one", s, len(s))
	}
	got, err := ParseToken(s)
	if err != nil || got != tok {
		t.Fatalf("ParseToken(%q) = %+v, %v", s, got, err)
	}
	bad := []byte(s)
	bad[len(bad)-3] ^= 1
	for _, b := range []string{"", "lsr1.", "hello", string(bad), s[:len(s)-2]} {
		if _, err := ParseToken(b); !errors.Is(err, ErrBadToken) {
			t.Errorf("ParseToken(%q): err %v, want ErrBadToken", b, err)
		}
	}
}

func quick(s storage.Store) Config {
	c := DefaultConfig()
	c.Store = s
	c.Backoff = time.Millisecond
	return c
}

func open(t *testing.T, cfg Config, o StartOptions) (*Journal, *Entry) {
	t.Helper()
	j, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e, err := j.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return j, e
}

func state(inc uint64, committed int64) cluster.State {
	s := cluster.State{Incarnation: inc, Samples: 1000, Seed: 5, Block: 1, Epochs: []cluster.EpochState{{}}}
	if committed > 0 {
		s.Epochs[0].Committed = []cluster.Range{{Start: 0, End: committed}}
	}
	return s
}

func TestStartFreshThenRestore(t *testing.T) {
	ctx := context.Background()
	store := storage.NewMemStore("j")
	j, e := open(t, quick(store), StartOptions{})
	if e != nil {
		t.Fatalf("empty location: got entry %+v, want a fresh start", e)
	}
	if j.Incarnation() != 1 {
		t.Fatalf("incarnation %d, want 1", j.Incarnation())
	}
	var toks []Token
	for k := range int64(5) {
		g, err := j.Write(ctx, state(1, k*10), []string{"10.0.0.1:7946"})
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, j.Token(g, 0, k))
	}
	// Restart: the newest generation, and a larger incarnation.
	j2, e := open(t, quick(store), StartOptions{})
	if e == nil || e.Gen != 5 || e.State.Epochs[0].Committed[0].End != 40 || e.Peers[0] != "10.0.0.1:7946" {
		t.Fatalf("restart: entry %+v", e)
	}
	if j2.Incarnation() != 6 || j2.Job() != j.Job() {
		t.Fatalf("restart: incarnation %d job %x, want 6 and %x", j2.Incarnation(), j2.Job(), j.Job())
	}
	// An older token rewinds.
	j3, e := open(t, quick(store), StartOptions{Resume: toks[2].String()})
	if e.Gen != toks[2].Gen || e.State.Epochs[0].Committed[0].End != 20 {
		t.Fatalf("resume %+v: entry %+v", toks[2], e)
	}
	if j3.Incarnation() != 6 {
		t.Fatalf("resume: incarnation %d, want 6 (above every writer)", j3.Incarnation())
	}
	// Fresh over an existing journal: a new job, numbering continues.
	j4, e := open(t, quick(store), StartOptions{Fresh: true})
	if e != nil || j4.Job() == j.Job() || j4.Incarnation() != 6 {
		t.Fatalf("fresh: entry %v job %x incarnation %d", e, j4.Job(), j4.Incarnation())
	}
	if _, err := j4.Write(ctx, state(6, 0), nil); err != nil {
		t.Fatal(err)
	}
	// The old job's token is refused now.
	j5, err := Open(ctx, quick(store))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j5.Start(ctx, StartOptions{Resume: Token{Job: 42, Gen: 6}.String()}); !errors.Is(err, ErrBadToken) {
		t.Fatalf("another job's token: err %v, want ErrBadToken", err)
	}
	j5, _ = Open(ctx, quick(store))
	if _, err := j5.Start(ctx, StartOptions{Fresh: true, Resume: toks[0].String()}); err == nil {
		t.Fatal("--fresh with --resume: no error")
	}
}

func TestTokenWithoutJournal(t *testing.T) {
	j, err := Open(context.Background(), quick(storage.NewMemStore("j")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Start(context.Background(), StartOptions{Resume: Token{Job: 1, Gen: 3}.String()}); !errors.Is(err, ErrNoJournal) {
		t.Fatalf("err %v, want ErrNoJournal", err)
	}
}

func TestPruneAndPrunedToken(t *testing.T) {
	ctx := context.Background()
	store := storage.NewMemStore("j")
	cfg := quick(store)
	cfg.Keep = 3
	j, _ := open(t, cfg, StartOptions{})
	var first Token
	for k := range int64(10) {
		g, err := j.Write(ctx, state(1, k+1), nil)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			first = j.Token(g, 0, 0)
		}
	}
	j2, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := j2.Generations(); !reflect.DeepEqual(got, []uint64{8, 9, 10}) {
		t.Fatalf("kept %v, want [8 9 10]", got)
	}
	if _, err := j2.Start(ctx, StartOptions{Resume: first.String()}); !errors.Is(err, ErrPruned) {
		t.Fatalf("pruned token: err %v, want ErrPruned", err)
	}
}

// TestCorruptFallsBack: a torn or damaged newest generation is detected and
// the previous good one used; with none good, Start refuses (no silent
// fresh start) unless Fresh.
// TestCorruptNewest: a corrupt newest generation stops the start, naming
// the object and the cause (continuing from the previous one would issue
// again the commits acknowledged after it); StartOptions.Fallback (the
// coordinator's --journal-fallback) falls back past it and says so.
func TestCorruptNewest(t *testing.T) {
	ctx := context.Background()
	store := storage.NewMemStore("j")
	j, _ := open(t, quick(store), StartOptions{})
	for k := range int64(3) {
		if _, err := j.Write(ctx, state(1, 10*(k+1)), nil); err != nil {
			t.Fatal(err)
		}
	}
	good, _ := store.Get(ctx, genKey(3), nil)
	// Torn: the first half of the object.
	if _, err := store.Put(ctx, genKey(3), good[:len(good)/2], storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	jr, _ := Open(ctx, quick(store))
	_, err := jr.Start(ctx, StartOptions{})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), genKey(3)) || !strings.Contains(err.Error(), "checksum") ||
		!strings.Contains(err.Error(), "--journal-fallback") {
		t.Fatalf("corrupt newest generation: err %v, want ErrCorrupt naming %s, the cause and --journal-fallback", err, genKey(3))
	}
	var logged strings.Builder
	cfg := quick(store)
	cfg.Logger = slog.New(slog.NewTextHandler(&logged, nil))
	j2, e := open(t, cfg, StartOptions{Fallback: true})
	if !strings.Contains(logged.String(), "--journal-fallback") || !strings.Contains(logged.String(), "to=2") {
		t.Errorf("fallback not logged: %s", logged.String())
	}
	if e.Gen != 2 || e.State.Epochs[0].Committed[0].End != 20 {
		t.Fatalf("fell back to %+v, want generation 2", e)
	}
	if j2.Incarnation() != 4 {
		t.Fatalf("incarnation %d, want 4: past the corrupt generation too", j2.Incarnation())
	}
	// A token naming the corrupt generation is an error, not a fallback.
	j3, _ := Open(ctx, quick(store))
	if _, err := j3.Start(ctx, StartOptions{Resume: j.Token(3, 0, 0).String()}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("token of a corrupt generation: err %v, want ErrCorrupt", err)
	}
	// Every generation damaged: refuse.
	for g := uint64(1); g <= 2; g++ {
		b, _ := store.Get(ctx, genKey(g), nil)
		b[len(b)/2] ^= 0x40
		if _, err := store.Put(ctx, genKey(g), b, storage.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	j4, _ := Open(ctx, quick(store))
	if _, err := j4.Start(ctx, StartOptions{Fallback: true}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("all corrupt: err %v, want ErrCorrupt", err)
	}
	j5, _ := Open(ctx, quick(store))
	if e, err := j5.Start(ctx, StartOptions{Fresh: true}); err != nil || e != nil {
		t.Fatalf("all corrupt, --fresh: %v, %v", e, err)
	}
}

// TestLandedButFailed: a put that lands but reports failure is retried;
// the retry finds its own bytes and counts the write as done.
func TestLandedButFailed(t *testing.T) {
	ctx := context.Background()
	mem := storage.NewMemStore("j")
	store := faulty.Wrap(mem, faulty.Rule{Ops: faulty.OpPut, FirstN: 1, After: true})
	j, _ := open(t, quick(store), StartOptions{})
	g, err := j.Write(ctx, state(1, 5), nil)
	if err != nil || g != 1 {
		t.Fatalf("Write = %d, %v; want 1, nil", g, err)
	}
	if g, err := j.Write(ctx, state(1, 6), nil); err != nil || g != 2 {
		t.Fatalf("second Write = %d, %v; want 2, nil", g, err)
	}
}

// TestWriteFails: a store that keeps failing makes Write fail (the
// coordinator must not ack), after its retries.
func TestWriteFails(t *testing.T) {
	store := faulty.Wrap(storage.NewMemStore("j"), faulty.Rule{Ops: faulty.OpPut})
	j, _ := open(t, quick(store), StartOptions{})
	if _, err := j.Write(context.Background(), state(1, 5), nil); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("err %v, want the store's error", err)
	}
}

// TestRetryBackoffOnTheClock: a put that fails is tried again after
// Backoff, doubling, on the journal's clock; the entry carries the
// clock's time. With a fake clock the test sees each wait and ends it.
func TestRetryBackoffOnTheClock(t *testing.T) {
	mem := storage.NewMemStore("j")
	store := faulty.Wrap(mem, faulty.Rule{Ops: faulty.OpPut, FirstN: 2})
	fc := clock.NewFake(time.Time{})
	cfg := quick(store)
	cfg.Backoff, cfg.Clock = time.Second, fc
	j, _ := open(t, cfg, StartOptions{})
	written := fc.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a failure backstop only
	defer cancel()
	type result struct {
		gen uint64
		err error
	}
	done := make(chan result, 1)
	go func() {
		g, err := j.Write(ctx, state(1, 5), nil)
		done <- result{g, err}
	}()
	for _, wait := range []time.Duration{time.Second, 2 * time.Second} {
		if err := fc.BlockUntil(ctx, 1); err != nil {
			t.Fatalf("no retry waiting on the clock: %v", err)
		}
		fc.Advance(wait - time.Nanosecond)
		select {
		case r := <-done:
			t.Fatalf("Write returned %+v before its %v backoff ended", r, wait)
		default:
		}
		fc.Advance(time.Nanosecond)
	}
	r := <-done
	if r.err != nil || r.gen != 1 || store.Injections() != 2 {
		t.Fatalf("Write = %d, %v after %d injected failures; want 1, nil after 2", r.gen, r.err, store.Injections())
	}
	b, err := mem.Get(ctx, genKey(1), nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !e.Written.Equal(written) {
		t.Errorf("entry written at %v, want the clock's %v", e.Written, written)
	}
}

// TestRace: two coordinators that both restored the same generation write
// at once; exactly one wins, the other gets ErrSuperseded, and then the
// loser's Check says so too.
func TestRace(t *testing.T) {
	testRace(t, func(t *testing.T) storage.Store { return storage.NewMemStore("j") }, 200)
}

func testRace(t *testing.T, newStore func(*testing.T) storage.Store, rounds int) {
	ctx := context.Background()
	for round := range rounds {
		store := newStore(t)
		j0, _ := open(t, quick(store), StartOptions{})
		if _, err := j0.Write(ctx, state(1, 1), nil); err != nil {
			t.Fatal(err)
		}
		a, _ := open(t, quick(store), StartOptions{})
		b, _ := open(t, quick(store), StartOptions{})
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, j := range []*Journal{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = j.Write(ctx, state(j.Incarnation(), int64(10+i)), nil)
			}()
		}
		wg.Wait()
		won := 0
		var loser *Journal
		for i, err := range errs {
			switch {
			case err == nil:
				won++
			case errors.Is(err, ErrSuperseded):
				loser = []*Journal{a, b}[i]
			default:
				t.Fatalf("round %d: writer %d: %v", round, i, err)
			}
		}
		if won != 1 || loser == nil {
			t.Fatalf("round %d: %d writers won (errors %v), want exactly one", round, won, errs)
		}
		// A stale one (j0, never told) finds out on its interval check.
		if err := j0.Check(ctx); !errors.Is(err, ErrSuperseded) {
			t.Fatalf("round %d: stale Check: %v", round, err)
		}
		if _, err := j0.Write(ctx, state(1, 2), nil); !errors.Is(err, ErrSuperseded) {
			t.Fatalf("round %d: stale Write: %v", round, err)
		}
	}
}

func TestDirStore(t *testing.T) {
	testRace(t, func(t *testing.T) storage.Store {
		s, err := storage.NewDirStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, 20)
}
