package journal

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"log/slog"
	"strings"
	"testing"

	"github.com/longshore/longshore/storage"
)

var testIdent = Identity{Digest: "1000:0123456789abcdef", Seed: 5, Block: 1, Window: 128, BatchSize: 32, Epochs: 3}

// Every generation records the job's identity, and reads it back.
func TestEntryIdentity(t *testing.T) {
	e := Entry{Gen: 3, Job: 9, State: state(1, 10), Digest: testIdent.Digest, BatchSize: 32, Epochs: 3}
	e.State.Window = 128
	got, err := Decode(Encode(nil, e))
	if err != nil {
		t.Fatal(err)
	}
	if got.Identity() != testIdent {
		t.Fatalf("identity %+v, want %+v", got.Identity(), testIdent)
	}
}

// Entries written before identities (version 3) still load, without one.
func TestDecodeVersion3(t *testing.T) {
	// magic, version 3, job, gen 2, incarnation 1, seq 3, time 0,
	// samples 10, seed, block 16, window 4, no epochs, no peers, CRC-32C.
	b := []byte("LSJ\x03")
	b = append(b, make([]byte, 8)...)
	b = append(b, 2, 1, 3, 0, 20)
	b = append(b, make([]byte, 8)...)
	b = append(b, 16, 4, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	e, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if e.Gen != 2 || e.State.Block != 16 || e.State.Window != 4 || e.Identity().Known() {
		t.Fatalf("decoded %+v", e)
	}
}

// TestIdentify: a restart whose identity differs from the journal's is
// refused naming each difference; force accepts what the order survives
// (and logs it), never another order; a journal from before identities
// is accepted with a warning and records the identity on the next write.
func TestIdentify(t *testing.T) {
	ctx := context.Background()
	store := storage.NewMemStore("j")
	j, _ := open(t, quick(store), StartOptions{})
	if err := j.Identify(testIdent, false); err != nil {
		t.Fatal(err)
	}
	s := state(1, 10)
	s.Window = 128
	if _, err := j.Write(ctx, s, nil); err != nil {
		t.Fatal(err)
	}
	restart := func(id Identity, force bool) (error, string) {
		var logged strings.Builder
		cfg := quick(store)
		cfg.Logger = slog.New(slog.NewTextHandler(&logged, nil))
		j, _ := open(t, cfg, StartOptions{})
		return j.Identify(id, force), logged.String()
	}
	if err, _ := restart(testIdent, false); err != nil {
		t.Fatalf("same job refused: %v", err)
	}
	other := testIdent
	other.Digest = "1000:fedcba9876543210"
	other.BatchSize = 64
	err, _ := restart(other, false)
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "dataset digest 1000:0123456789abcdef in the journal, 1000:fedcba9876543210 now") ||
		!strings.Contains(err.Error(), "batch size 32 in the journal, 64 now") || !strings.Contains(err.Error(), "--force-resume") {
		t.Fatalf("other dataset and batch size: %v", err)
	}
	if err, log := restart(other, true); err != nil || !strings.Contains(log, "--force-resume") || !strings.Contains(log, "field=\"batch size\"") {
		t.Fatalf("forced: %v, log %s", err, log)
	}
	seed := testIdent
	seed.Seed = 6
	if err, _ := restart(seed, true); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "seed 5 in the journal, 6 now") {
		t.Fatalf("another seed, forced: %v (want refused: another order)", err)
	}
	bigger := testIdent
	bigger.Digest = "2000:0123456789abcdef"
	if err, _ := restart(bigger, true); !errors.Is(err, ErrMismatch) {
		t.Fatalf("another sample count, forced: %v (want refused)", err)
	}

	// A version 3 generation (no identity): accepted with a warning; the
	// next write records the identity.
	old := storage.NewMemStore("old")
	v3 := encodeV3(Entry{Gen: 1, Job: 4, State: s})
	if _, err := old.Put(ctx, genKey(1), v3, storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	cfg := quick(old)
	cfg.Logger = slog.New(slog.NewTextHandler(&logged, nil))
	jo, e := open(t, cfg, StartOptions{})
	if e == nil || e.Identity().Known() {
		t.Fatalf("restored %+v", e)
	}
	if err := jo.Identify(testIdent, false); err != nil {
		t.Fatalf("journal without identity refused: %v", err)
	}
	if !strings.Contains(logged.String(), "before journals recorded the dataset digest") {
		t.Errorf("no warning: %s", logged.String())
	}
	g, err := jo.Write(ctx, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := jo.Load(ctx, g); err != nil || e.Identity() != testIdent {
		t.Fatalf("next write: %+v %v, want identity %+v", e.Identity(), err, testIdent)
	}
	if tok := jo.Token(g, 0, 1); tok.Ident != testIdent || !strings.HasPrefix(tok.String(), "lsr2.") {
		t.Fatalf("token %+v %s", tok, tok)
	}
}

// encodeV3 is Encode as version 3 wrote it: no identity.
func encodeV3(e Entry) []byte {
	e.Digest, e.BatchSize, e.Epochs = "", 0, 0
	b := encodeVersion(nil, e, 4)
	b = b[:len(b)-4]
	b[3] = 3
	// Version 4's identity after the window is three zero bytes (an empty
	// digest, batch size 0, epochs 0): cut them.
	at := len("LSJ") + 1 + 8
	d := &decoder{b: b[at:]}
	d.uvarint("")
	d.uvarint("")
	d.uvarint("")
	d.varint("")
	d.varint("")
	d.u64("")
	d.uvarint("")
	d.uvarint("")
	cut := len(b) - len(d.b)
	b = append(b[:cut:cut], b[cut+3:]...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// Tokens of version 2 carry the identity; CheckToken names what differs
// from a job; version 1 tokens still parse, without one.
func TestTokenIdentity(t *testing.T) {
	tok := Token{Job: 7, Gen: 3, Epoch: 1, Step: 9, Ident: testIdent}
	s := tok.String()
	if !strings.HasPrefix(s, "lsr2.") {
		t.Fatalf("token %s", s)
	}
	got, err := ParseToken(s)
	if err != nil || got != tok {
		t.Fatalf("parsed %+v %v, want %+v", got, err, tok)
	}
	if err := CheckToken(got, testIdent); err != nil {
		t.Fatal(err)
	}
	other := testIdent
	other.Seed = 99
	err = CheckToken(got, other)
	if !errors.Is(err, ErrBadToken) || !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "seed 5 in the token, 99 in this job") {
		t.Fatalf("another job's token: %v", err)
	}
	v1 := Token{Job: 7, Gen: 3, Epoch: 1, Step: 9}
	if p, err := ParseToken(v1.String()); err != nil || p != v1 || CheckToken(p, other) != nil {
		t.Fatalf("version 1: %+v %v", p, err)
	}
	// Damage anywhere is caught.
	for i := len("lsr2."); i < len(s); i++ {
		b := []byte(s)
		b[i] ^= 1
		if p, err := ParseToken(string(b)); err == nil && p == tok {
			t.Fatalf("damaged at %d parsed as the original", i)
		}
	}
}
